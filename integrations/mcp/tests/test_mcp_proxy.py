"""The proxy, and real MCP servers in subprocesses: over stdio and streamable HTTP on 127.0.0.1, the shop
server written here and the third-party ``mcp-server-time``, driven by the SDK's client."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters

from .conftest import SHOP_SERVER, SPEC, free_port, start_http, stop

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
        async with Client(url) as client:
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
