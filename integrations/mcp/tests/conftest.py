"""Fixtures for the agentguard-mcp tests: the shop spec, its MCP server (in process, or a real subprocess),
free loopback ports, an ASGI app served in a thread, and the real reference guardian on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentguard import Guard
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.guardian_server.support import SHOP_GUARDIAN_RULES

HERE = Path(__file__).resolve().parent
SPEC = HERE / "shop-agent.yaml"
SHOP_SERVER = HERE / "shop_server.py"


def make_guard(**options: Any) -> Guard:
    """The shop guard; its supervisor approves unless ``reviewers`` says otherwise."""
    options.setdefault("reviewers", {"supervisor": lambda request: True})
    return Guard.from_file(SPEC, **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Wait until something answers HTTP at ``url`` (any status), or fail with the process's output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"nothing answered at {url}")


def start_http(args: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_http(url, proc)
    except BaseException:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serving(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app (lifespan on: an MCP app runs its session manager there) on 127.0.0.1 in a thread of
    this process; yields its MCP URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(30)


def eventually(condition: Callable[[], bool], timeout: float = 10) -> bool:
    """Whether ``condition()`` holds within ``timeout`` seconds (a server thread finishes on its own time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(scope="session")
def guardian() -> Iterator[RunningServer]:
    """The real reference guardian on 127.0.0.1, with rules that deny and modify."""
    with serve_in_thread(create_app(parse_rules(SHOP_GUARDIAN_RULES))) as server:
        yield server


@pytest.fixture
def shop_http(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The unguarded shop server as a subprocess on streamable HTTP: (its URL, its run log)."""
    port, log = free_port(), tmp_path / "ran.jsonl"
    url = f"http://127.0.0.1:{port}/mcp"
    proc = start_http(
        [sys.executable, str(SHOP_SERVER), "--listen", f"127.0.0.1:{port}", "--log", str(log)], url
    )
    yield url, log
    stop(proc)
