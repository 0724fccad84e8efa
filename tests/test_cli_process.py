"""The ``agentguard`` command as a newcomer runs it: a real process, their own project, a shell pipe."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import spec_text
from tests.server.support import start, wait_for

AGENTGUARD = shutil.which("agentguard", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(AGENTGUARD is None, reason="the agentguard script is not installed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: a package ``myapp`` with a runner, and a directory of agent specs, nothing installed."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "agents.py").write_text(
        textwrap.dedent(
            """
            def lookup_order(order_id):
                return {"order_id": order_id, "status": "shipped", "from": "myapp"}

            def run(guard, engagement, input):
                return guard.call("lookup-order", {"order_id": input["order_id"]}, lookup_order)
            """
        )
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "shop.yaml").write_text(
        spec_text("capabilities:\n  lookup-order:\n", name="shop-agent")
    )
    return tmp_path


@pytest.fixture
def serving(project: Path) -> Iterator[str]:
    """``agentguard serve --runner myapp.agents:run`` started in the project directory; its base URL."""
    port = _free_port()
    assert AGENTGUARD is not None
    process = subprocess.Popen(
        [AGENTGUARD, "serve", "--spec-dir", "agents", "--runner", "myapp.agents:run", "--port", str(port)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                httpx.get(f"{url}/agents", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "agentguard serve did not start listening"
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()


def test_serve_imports_the_runner_from_the_current_directory(serving: str) -> None:
    with httpx.Client(base_url=serving) as http:
        state = wait_for(http, start(http, "shop-agent", {"order_id": "A-7"}))
    assert state["status"] == "completed", state
    assert state["output"] == {"order_id": "A-7", "status": "shipped", "from": "myapp"}


@pytest.mark.parametrize(
    "command", [["serve", "--spec-dir", "agents", "--runner", "m:f"], ["guardian", "--rules", "r"]]
)
def test_a_missing_server_extra_prints_the_pip_command(command: list[str]) -> None:
    # uvicorn hidden from the process, as in a core-only install
    code = "import sys; sys.modules['uvicorn'] = None; from agentguard.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, *command], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"agentguard {command[0]} needs the 'server' extra (uvicorn not installed): pip install 'agentguard[server]'"
    )


@pytest.fixture
def many_problems(tmp_path: Path) -> Path:
    """A spec with 2,000 invalid capability names: far more output than a pipe holds (about 400 kB)."""
    path = tmp_path / "bad.yaml"
    path.write_text(spec_text("capabilities:\n" + "".join(f"  Bad_Name_{i}:\n" for i in range(2000))))
    return path


def test_output_piped_into_head_ends_quietly(many_problems: Path) -> None:
    result = subprocess.run(
        ["sh", "-c", f"'{AGENTGUARD}' validate --format json '{many_problems}' | head -n 2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stderr == ""
    assert result.stdout == "[\n  {\n"


def test_a_broken_pipe_exits_with_the_sigpipe_status(many_problems: Path) -> None:
    assert AGENTGUARD is not None
    process = subprocess.Popen(
        [AGENTGUARD, "validate", str(many_problems)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline().startswith(f"{many_problems}:7:3: capabilities.Bad_Name_0: ".encode())
    process.stdout.close()  # the reader goes away mid-output
    assert process.wait(60) == 128 + 13
    assert process.stderr.read() == b""
    process.stderr.close()
