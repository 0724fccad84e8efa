"""``agentguard guardian``: arguments, exit statuses, and the app it serves (uvicorn.run replaced)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentguard import serving
from agentguard.guardian.server._cli import add_parser
from agentguard.serving import BoundedConfig, ServerLimits
from tests.guardian_server.support import request_for


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentguard")
    add_parser(parser.add_subparsers())
    return parser.parse_args(["guardian", *argv])


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: no-mcp, methods: [protocols/MCP], decision: deny, message: No MCP}\n")
    return path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the server would have been run with (it is not really run)."""
    calls: dict[str, Any] = {}

    def fake_serve(config: BoundedConfig) -> None:
        calls.update(
            app=config.app, host=config.host, port=config.port, log_level=config.log_level, config=config
        )

    monkeypatch.setattr(serving, "serve", fake_serve, raising=False)
    return calls


def test_defaults() -> None:
    args = _parse("--rules", "rules.yaml")
    assert (args.rules, args.host, args.port, args.token_env, args.log_level) == (
        "rules.yaml",
        "127.0.0.1",
        8700,
        None,
        "info",
    )
    assert callable(args.run)


def test_rules_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _parse()
    assert caught.value.code == 2
    assert "--rules" in capsys.readouterr().err


async def test_it_serves_the_rules_with_the_token(
    rules_file: Path, served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARDIAN_TOKEN", "s3cret")
    args = _parse(
        "--rules", str(rules_file), "--port", "9001", "--token-env", "GUARDIAN_TOKEN", "--log-level", "debug"
    )
    assert args.run(args) == 0
    assert (served["host"], served["port"], served["log_level"]) == ("127.0.0.1", 9001, "debug")
    transport = httpx.ASGITransport(app=served["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://guardian") as client:
        assert (await client.post("/", json=request_for("protocols/MCP"))).status_code == 401
        answer = await client.post(
            "/", json=request_for("protocols/MCP"), headers={"Authorization": "Bearer s3cret"}
        )
    assert answer.json()["result"]["decision"] == "deny"


def test_a_missing_token_variable_is_a_usage_error(
    rules_file: Path,
    served: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    args = _parse("--rules", str(rules_file), "--token-env", "NO_SUCH_TOKEN_VAR")
    assert args.run(args) == 2
    assert "$NO_SUCH_TOKEN_VAR is not set or empty" in capsys.readouterr().err
    assert not served


def test_a_broken_rules_file_is_reported(
    tmp_path: Path, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("rules:\n  - name: x\n    when: params.a ==\n    decision: deny\n    message: m\n")
    args = _parse("--rules", str(broken))
    assert args.run(args) == 1
    err = capsys.readouterr().err
    assert f"{broken}:3:5: rules[0].when: rule 'x': CEL does not compile" in err
    assert not served


def test_an_unreadable_rules_file_is_reported(
    tmp_path: Path, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse("--rules", str(tmp_path / "missing.yaml"))
    assert args.run(args) == 1
    assert "cannot read" in capsys.readouterr().err
    assert not served


def test_serving_beyond_loopback_needs_a_token_or_insecure_open(
    rules_file: Path,
    served: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GUARDIAN_TOKEN", "s3cret")
    for host, open_ in (("0.0.0.0", False), ("::1", True), ("localhost", True), ("guardian.internal", False)):
        args = _parse("--rules", str(rules_file), "--host", host)
        assert args.run(args) == (0 if open_ else 2), host
        if not open_:
            assert "refusing to listen on" in capsys.readouterr().err
            for extra in (("--token-env", "GUARDIAN_TOKEN"), ("--insecure-open",)):
                caplog.clear()
                args = _parse("--rules", str(rules_file), "--host", host, *extra)
                with caplog.at_level(logging.WARNING, logger="agentguard.guardian.server"):
                    assert args.run(args) == 0
                assert ("without a token" in caplog.text) is (extra == ("--insecure-open",))


def test_every_limit_has_an_option(rules_file: Path, served: dict[str, Any]) -> None:
    args = _parse(
        "--rules", str(rules_file), "--header-timeout", "2.5", "--keep-alive-timeout", "3",
        "--max-connections", "7", "--max-header-bytes", "4096", "--graceful-shutdown-timeout", "1",
        "--max-body-bytes", "100", "--body-timeout", "4", "--rule-threads", "2", "--max-batch", "5",
    )  # fmt: skip
    assert args.run(args) == 0
    config = served["config"]
    assert config.limits == ServerLimits(
        header_timeout=2.5,
        keep_alive_timeout=3,
        max_connections=7,
        max_header_bytes=4096,
        graceful_shutdown_timeout=1,
    )
    assert (config.timeout_keep_alive, config.h11_max_incomplete_event_size, config.access_log) == (
        3,
        4096,
        False,
    )
    app = served["app"]
    assert (app.max_body_bytes, app.body_timeout, app.pool._threads) == (100, 4, 2)
    assert app.dispatcher.max_batch == 5
    assert _parse("--rules", str(rules_file)).max_batch == 100
    no_batch = _parse("--rules", str(rules_file), "--max-batch", "0")
    assert no_batch.run(no_batch) == 2
    assert (
        _parse("--rules", str(rules_file), "--max-connections", "0").run(
            _parse("--rules", str(rules_file), "--max-connections", "0")
        )
        == 2
    )


def test_workers_load_the_app_from_the_environment(
    rules_file: Path, served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTGUARD_GUARDIAN_SETTINGS", raising=False)
    args = _parse("--rules", str(rules_file), "--workers", "2", "--body-timeout", "3", "--max-batch", "7")
    assert args.run(args) == 0
    config = served["config"]
    assert (config.workers, config.factory, config.app) == (
        2,
        True,
        "agentguard.guardian.server._cli:app_from_environment",
    )
    from agentguard.guardian.server._cli import app_from_environment

    app = app_from_environment()
    assert (app.body_timeout, app.dispatcher.max_batch) == (3, 7)
