"""The proxy, and real MCP servers in subprocesses: over stdio and streamable HTTP on 127.0.0.1, the shop
server written here and the third-party ``mcp-server-time``, driven by the SDK's client."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from agentguard_mcp import FULL
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from .conftest import SHOP_SERVER, SPEC, eventually, free_port, start_http, stop

PROXY = shutil.which("agentguard-mcp-proxy", path=str(Path(sys.executable).parent))


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def _proxy(*args: str) -> list[str]:
    """The proxy's command line for the shop spec, whose ``require_review`` the client's user answers."""
    assert PROXY is not None, "agentguard-mcp-proxy is not installed (pip install -e integrations/mcp)"
    return [PROXY, "--spec", str(SPEC), "--elicit-reviews", *args]


def _ran(log: Path) -> list[list[Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _stdio(argv: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=argv[1:])


async def test_stdio_proxy_guards_a_server_it_starts(tmp_path: Path) -> None:
    log = tmp_path / "ran.jsonl"
    argv = _proxy("--", sys.executable, str(SHOP_SERVER), "--log", str(log))
    async with Client(_stdio(argv)) as client:
        listed = await client.list_tools()
        refused = await client.call_tool("send_email", {"to": "eve@evil.test", "body": "hi"})
        sent = await client.call_tool("send_email", {"to": "bob@corp.com", "body": "hi"})
        for _ in range(2):
            await client.call_tool("lookup_order", {"order_id": "A-1"})
        with pytest.raises(MCPError, match="short-circuit"):
            await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert "delete_everything" not in {t.name for t in listed.tools}
    assert refused.is_error
    assert "[restriction input] send-email" in _text(refused)
    assert _text(sent) == "sent to bob@corp.com"
    assert [name for name, _ in _ran(log)] == ["send_email", "lookup_order", "lookup_order"]


async def test_http_proxy_guards_the_third_party_time_server() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    time_server = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
    proc = start_http(_proxy("--listen", f"127.0.0.1:{port}", "--", *time_server), url)
    try:
        async with Client(url, mode="legacy") as client:  # the 2025 protocol: an MCP session
            listed = await client.list_tools()
            converted = await client.call_tool(
                "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            )
    finally:
        stop(proc)
    assert {t.name for t in listed.tools} == {"get_current_time", "convert_time"}
    assert not converted.is_error
    assert converted.structured_content["target"]["datetime"].endswith("21:00:00+09:00")


async def test_stdio_proxy_with_a_prefix_refuses_what_the_spec_does_not_name() -> None:
    time_server = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
    async with Client(_stdio(_proxy("--prefix", "time.", "--", *time_server))) as client:
        listed = await client.list_tools()
        refused = await client.call_tool("get_current_time", {"timezone": "UTC"})
    assert listed.tools == []  # time.get-current-time is not a capability of the shop agent
    assert refused.is_error
    assert "'time.get-current-time'" in _text(refused)


async def test_proxy_guards_a_remote_http_server(shop_http: tuple[str, Path]) -> None:
    url, log = shop_http
    async with Client(_stdio(_proxy("--upstream", url))) as client:
        withheld = await client.call_tool("web_search", {"query": "many"})
        found = await client.call_tool("web_search", {"query": "one"})
    assert withheld.is_error
    assert "SECRET" not in _text(withheld)
    assert found.structured_content == {"results": ["SECRET-one-0"]}
    assert [name for name, _ in _ran(log)] == ["web_search", "web_search"]  # it ran; its output was withheld


async def test_a_server_guarding_itself_in_a_subprocess(tmp_path: Path) -> None:
    log = tmp_path / "ran.jsonl"
    argv = [sys.executable, str(SHOP_SERVER), "--spec", str(SPEC), "--log", str(log)]
    async with Client(_stdio(argv)) as client:
        refused = await client.call_tool("delete_everything", {})
        refunded = await client.call_tool("refund", {"order_id": "A-1", "amount": 30})
    assert refused.is_error
    assert not refunded.is_error
    assert _ran(log) == [["refund", {"order_id": "A-1", "amount": 30.0}]]


def test_the_proxy_needs_exactly_one_upstream() -> None:
    from agentguard_mcp.proxy import main

    assert main(["--spec", str(SPEC)]) == 2
    assert main(["--spec", str(SPEC), "--upstream", "http://127.0.0.1:1/mcp", "--", "server"]) == 2


def test_a_spec_with_reviews_is_refused_without_a_reviewer(capsys: pytest.CaptureFixture[str]) -> None:
    """The proxy has no reviewer of its own: the client's user answers only when the operator says so."""
    from agentguard_mcp.proxy import main

    assert main(["--spec", str(SPEC), "--", sys.executable, str(SHOP_SERVER)]) == 2
    err = capsys.readouterr().err
    assert "reviewer 'supervisor'" in err
    assert "--elicit-reviews" in err


async def test_agentguard_mcp_proxy_is_the_same_proxy(tmp_path: Path) -> None:
    """``agentguard mcp-proxy ...`` (the core command line) hands its whole command line to this proxy."""
    agentguard = shutil.which("agentguard", path=str(Path(sys.executable).parent))
    assert agentguard is not None
    log = tmp_path / "ran.jsonl"
    argv = [
        agentguard,
        "mcp-proxy",
        "--spec",
        str(SPEC),
        "--elicit-reviews",
        "--",
        sys.executable,
        str(SHOP_SERVER),
        "--log",
        str(log),
    ]
    async with Client(_stdio(argv)) as client:
        refused = await client.call_tool("send_email", {"to": "eve@evil.test", "body": "hi"})
        sent = await client.call_tool("send_email", {"to": "bob@corp.com", "body": "hi"})
    assert refused.is_error
    assert _text(sent) == "sent to bob@corp.com"
    assert [name for name, _ in _ran(log)] == ["send_email"]


# -- over HTTP: one engagement per MCP session, and a token beyond loopback ---------------------------

SESSION_SPEC = """
kind: openagentspec:v1/agent
name: session-agent
description: Looks an order up before it writes about it.
intent: You answer a customer about their order.
owner: shop-team@corp.com
capabilities:
  lookup-order:
  send-email:
    input_restriction:
      assertion: '"lookup-order" in recent'
lifespan:
  short_circuit: 3
"""


def _session_proxy(tmp_path: Path, *args: str) -> tuple[list[str], Path]:
    """The proxy's command line for SESSION_SPEC in front of the shop server, and the shop's run log."""
    assert PROXY is not None
    spec, log = tmp_path / "session-agent.yaml", tmp_path / "ran.jsonl"
    spec.write_text(SESSION_SPEC)
    return [PROXY, "--spec", str(spec), *args, "--", sys.executable, str(SHOP_SERVER), "--log", str(log)], log


async def test_http_proxy_checks_each_client_against_its_own_history(tmp_path: Path) -> None:
    """Two clients of one proxy: B may not send an email because A looked an order up, and a loop in A's
    session is stopped there while B goes on."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv, log = _session_proxy(tmp_path, "--listen", f"127.0.0.1:{port}")
    email = {"to": "bob@corp.com", "body": "hi"}
    proc = start_http(argv, url)
    try:
        async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
            await a.call_tool("lookup_order", {"order_id": "A-1"})
            b_first = await b.call_tool("send_email", email)  # B has looked nothing up
            a_sends = await a.call_tool("send_email", email)
            await a.call_tool("lookup_order", {"order_id": "A-1"})
            await a.call_tool("lookup_order", {"order_id": "A-1"})
            await b.call_tool("lookup_order", {"order_id": "B-7"})
            with pytest.raises(MCPError, match="short-circuit"):  # A's third lookup in a row
                await a.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(MCPError):  # A's engagement is over
                await a.call_tool("send_email", email)
            b_sends = await b.call_tool("send_email", email)  # B's engagement is not
    finally:
        stop(proc)
    assert b_first.is_error
    assert "[restriction input] send-email" in _text(b_first)
    assert not a_sends.is_error
    assert not b_sends.is_error
    assert [name for name, _ in _ran(log)] == [
        "lookup_order",
        "send_email",
        "lookup_order",
        "lookup_order",
        "lookup_order",
        "send_email",
    ]


async def test_http_proxy_refuses_a_client_without_a_session_unless_told_it_has_one_client(
    tmp_path: Path,
) -> None:
    """A 2026-07-28 client over HTTP has no session: refused, unless the operator says every request is one
    client's (``--shared-engagement``)."""
    for shared in (False, True):
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        argv, log = _session_proxy(
            tmp_path, "--listen", f"127.0.0.1:{port}", *(["--shared-engagement"] * shared)
        )
        proc = start_http(argv, url)
        try:
            async with Client(url) as client:  # auto: the stateless protocol
                if shared:
                    found = await client.call_tool("lookup_order", {"order_id": "A-1"})
                    assert not found.is_error
                else:
                    with pytest.raises(MCPError, match="no MCP session"):
                        await client.call_tool("lookup_order", {"order_id": "A-1"})
                    assert _ran(log) == []
        finally:
            stop(proc)
    assert [name for name, _ in _ran(log)] == ["lookup_order"]


def test_the_proxy_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    argv, _ = _session_proxy(tmp_path, "--listen", f"0.0.0.0:{free_port()}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in done.stderr
    assert "--token-env" in done.stderr


def test_a_token_variable_that_is_not_set_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOP_PROXY_TOKEN", raising=False)
    argv, _ = _session_proxy(
        tmp_path, "--listen", f"127.0.0.1:{free_port()}", "--token-env", "SHOP_PROXY_TOKEN"
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "$SHOP_PROXY_TOKEN is not set" in done.stderr


def test_serve_refuses_beyond_loopback_without_a_token_from_python_too() -> None:
    import anyio
    from agentguard_mcp.proxy import build_proxy, serve

    from .conftest import make_guard

    server = build_proxy(make_guard(), "http://127.0.0.1:1/mcp")  # connects only once served
    with pytest.raises(ValueError, match=r"refusing to listen on 0\.0\.0\.0 without a token"):
        anyio.run(serve, server, "0.0.0.0:8765")


def test_http_options_need_listen(capsys: pytest.CaptureFixture[str]) -> None:
    """On stdio there is nothing to protect with a token, and one client: a flag there is a mistake."""
    from agentguard_mcp.proxy import main

    for flag in ("--shared-engagement", "--insecure-open"):
        assert main(["--spec", str(SPEC), flag, "--", sys.executable, str(SHOP_SERVER)]) == 2
        assert "apply to --listen only" in capsys.readouterr().err
    for limit, why in [
        (
            ["--header-timeout", "3"],
            "the limits (--header-timeout, --max-body-bytes, ...) apply to --listen only",
        ),
        (["--max-body-bytes", "10"], "apply to --listen only"),
        (["--max-connections", "0"], "max_connections must be positive"),
    ]:
        assert main(["--spec", str(SPEC), *limit, "--", sys.executable, str(SHOP_SERVER)]) == 2
        assert why in capsys.readouterr().err


async def test_with_a_token_every_http_request_must_carry_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond loopback with ``--token-env``: no or a wrong bearer token is a 401 before the MCP app sees the
    request; the right one works."""
    monkeypatch.setenv("SHOP_PROXY_TOKEN", "s3cret-token")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv, log = _session_proxy(tmp_path, "--listen", f"0.0.0.0:{port}", "--token-env", "SHOP_PROXY_TOKEN")
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    proc = start_http(argv, url)
    try:
        async with httpx.AsyncClient() as raw:
            missing = await raw.post(url, json=initialize, headers=headers)
            wrong = await raw.post(
                url, json=initialize, headers={**headers, "Authorization": "Bearer s3cret-tokem"}
            )
            basic = await raw.post(
                url, json=initialize, headers={**headers, "Authorization": "Basic czNjcmV0"}
            )
            deleted = await raw.delete(url)
        http = create_mcp_http_client({"Authorization": "Bearer s3cret-token"})
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            found = await client.call_tool("lookup_order", {"order_id": "A-1"})
    finally:
        stop(proc)
    for refused in (missing, wrong, basic, deleted):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer ")
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert not found.is_error
    assert [name for name, _ in _ran(log)] == ["lookup_order"]


STATE_SPEC = """
kind: openagentspec:v1/agent
name: state-agent
description: Keeps notes on a server that remembers them.
intent: You keep notes.
owner: shop-team@corp.com
capabilities:
  note: {}
  notes: {}
"""


def _state_proxy(tmp_path: Path, port: int, *args: str) -> tuple[list[str], Path]:
    """The proxy's command line over HTTP in front of ``state_server.py``, and the servers' start/stop log."""
    assert PROXY is not None
    spec, log = tmp_path / "state-agent.yaml", tmp_path / "upstreams.log"
    spec.write_text(STATE_SPEC)
    server = [sys.executable, str(Path(__file__).parent / "state_server.py"), str(log)]
    return [PROXY, "--spec", str(spec), "--listen", f"127.0.0.1:{port}", *args, "--", *server], log


@pytest.mark.parametrize("shared", [False, True])
async def test_each_http_session_has_its_own_upstream_connection(tmp_path: Path, shared: bool) -> None:
    """An upstream server that keeps state per connection: B never reads what A left there (unless the operator
    says the upstream keeps none, --shared-upstream), and a session's upstream ends with the session."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv, log = _state_proxy(tmp_path, port, *(["--shared-upstream"] * shared))
    proc = start_http(argv, url)
    try:
        async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
            await a.call_tool("note", {"text": "A-SECRET"})
            seen_by_b = _text(await b.call_tool("notes", {}))
            seen_by_a = _text(await a.call_tool("notes", {}))
        ended = eventually(lambda: log.read_text().count("stop") == (0 if shared else 2))
    finally:
        stop(proc)
    assert seen_by_a == "A-SECRET"
    assert ("A-SECRET" in seen_by_b) is shared
    assert log.read_text().count("start") == (1 if shared else 2)
    assert ended  # each session's upstream server stopped when the session ended


async def test_a_session_that_would_open_one_upstream_too_many_is_refused(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv, log = _state_proxy(tmp_path, port, "--max-upstreams", "1")
    proc = start_http(argv, url)
    try:
        async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
            await a.call_tool("note", {"text": "A-1"})
            with pytest.raises(MCPError, match="1 upstream connections are open") as refused:
                await b.call_tool("notes", {})
    finally:
        stop(proc)
    assert refused.value.code == FULL
    assert log.read_text().count("start") == 1
