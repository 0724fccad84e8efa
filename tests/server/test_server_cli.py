"""``agentguard serve``: checks everything before serving; uvicorn is replaced by a recorder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentguard import serving
from agentguard.cli import main
from agentguard.server import serve_in_thread
from agentguard.serving import BoundedConfig
from tests.conftest import ROOT, spec_text
from tests.server.support import start, wait_for, write_shop_dir

RUNNER = "tests.server.support:shop_runner"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the server was asked to serve (nothing is served)."""
    seen: dict[str, Any] = {}

    def serve(config: BoundedConfig) -> None:
        seen.update(
            app=config.app,
            host=config.host,
            port=config.port,
            ssl_certfile=config.ssl_certfile,
            config=config,
        )

    monkeypatch.setattr(serving, "serve", serve, raising=False)
    return seen


def test_serve_is_a_subcommand_and_its_help_needs_no_server_extra() -> None:
    code = (
        "import sys; from agentguard.cli import main\n"
        "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.startswith(('starlette', 'uvicorn'))], 'imported a web server'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "--spec-dir DIR" in result.stdout
    assert "--runner MODULE:CALLABLE" in result.stdout


def test_serve_runs_the_app_it_built(
    tmp_path: Path, served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", "s3cret")
    args = ["serve", "--spec-dir", str(write_shop_dir(tmp_path)), "--runner", RUNNER, "--port", "9911"]
    args += ["--setup", "tests.server.support:shop_setup"]
    assert main([*args, "--token-env", "API_TOKEN", "--max-concurrency", "2"]) == 0
    assert (served["host"], served["port"], served["ssl_certfile"]) == ("127.0.0.1", 9911, None)
    with serve_in_thread(served["app"]) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/agents").status_code == 401
        http.headers["Authorization"] = "Bearer s3cret"
        assert wait_for(http, start(http, "shop-agent", {}))["output"]["status"] == "shipped"


def test_serve_without_setup_lists_what_the_agents_need(
    tmp_path: Path, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--spec-dir", str(write_shop_dir(tmp_path)), "--runner", RUNNER]) == 1
    err = capsys.readouterr().err
    assert "guardrail tool 'pii-check'" in err
    assert "reviewer 'supervisor'" in err
    assert "--setup" in err
    assert "app" not in served


@pytest.mark.parametrize(
    ("extra", "status", "message"),
    [
        (["--setup", "no_such_module:setup"], 1, "cannot load the setup no_such_module:setup"),
        (["--runner", "no_such_module:run"], 1, "cannot load the runner no_such_module:run"),
        (["--runner", "tests.server.support"], 1, "must be MODULE:CALLABLE"),
        (["--runner", "tests.server.support:nothing_here"], 1, "cannot load the runner"),
        (["--runner", "tests.server.support:GATES"], 1, "is not callable"),
        (["--token-env", "AGENTGUARD_TEST_UNSET"], 2, "$AGENTGUARD_TEST_UNSET is not set or empty"),
        (["--remote-token", "no-equals"], 2, "must be HOST=VAR"),
        (["--ssl-certfile", "cert.pem"], 2, "--ssl-certfile and --ssl-keyfile go together"),
        (["--max-concurrency", "0"], 2, "must be positive"),
    ],
)
def test_serve_refuses_a_bad_setup(
    tmp_path: Path,
    served: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    status: int,
    message: str,
) -> None:
    setup = ["--setup", "tests.server.support:shop_setup"]
    args = ["serve", "--spec-dir", str(write_shop_dir(tmp_path)), "--runner", RUNNER, *setup, *extra]
    assert main(args) == status
    assert message in capsys.readouterr().err
    assert "app" not in served


def test_serve_lists_every_spec_problem(
    tmp_path: Path, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.yaml").write_text("kind: [unclosed")
    (tmp_path / "b.yaml").write_text(spec_text("capabilities: {}\n", name="Bad_Name"))
    assert main(["serve", "--spec-dir", str(tmp_path), "--runner", RUNNER]) == 1
    err = capsys.readouterr().err
    assert "2 problems in spec" in err
    assert "a.yaml" in err
    assert "b.yaml" in err
    assert "app" not in served


def test_serve_attaches_remote_agents_of_allowed_hosts(
    tmp_path: Path,
    served: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "front.yaml").write_text(
        spec_text("capabilities:\n  oagent://agents.corp.com/agents/billing-agent:\n", name="front-desk")
    )
    args = ["serve", "--spec-dir", str(tmp_path), "--runner", RUNNER]
    assert main(args) == 1
    assert "not in allow_hosts" in capsys.readouterr().err
    monkeypatch.setenv("BILLING_TOKEN", "t")
    remote = ["--allow-remote-host", "agents.corp.com", "--remote-token", "agents.corp.com=BILLING_TOKEN"]
    assert main([*args, *remote]) == 0
    assert "app" in served
