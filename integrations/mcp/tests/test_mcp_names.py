"""A server's tool stands for a capability only unambiguously, and only if the server lists it: tool names that
map to one capability (``send_email``, ``SEND-EMAIL``) are not run under it unless the ``names`` mapping, or
the spelling of the capability itself, says which one the spec means. On each side: ``GuardedClient``,
``GuardMiddleware``, and the proxy in a subprocess."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from agentguard_mcp import GuardedClient, Names, guard_server
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from agentguard import Guard, Outcome, Rule

from .names_server import UNLISTED, make_server

HERE = Path(__file__).resolve().parent
SPEC = HERE / "names-agent.yaml"
PROXY = shutil.which("agentguard-mcp-proxy", path=str(Path(sys.executable).parent))
SIDES = ["client", "server", "proxy"]

COLLIDING = ["send_email", "SEND-EMAIL", "send-note", "send_note"]
"""Two tools for ``send-email``, neither spelled as it; two for ``send-note``, one spelled as it."""


class Side:
    """One guarded side's ``list_tools`` and ``call_tool``."""

    def __init__(self, tools: Any) -> None:
        self.list_tools: Callable[[], Awaitable[Any]] = tools.list_tools
        self.call_tool: Callable[..., Awaitable[CallToolResult]] = tools.call_tool


@contextlib.asynccontextmanager
async def guarded(
    side: str, listed: list[str], names: Mapping[str, str] | None = None, **options: Any
) -> AsyncIterator[Side]:
    """``options`` (``relist_interval``) go to the client or server side."""
    guard = Guard.from_file(SPEC)
    if side == "client":
        async with Client(make_server(listed)) as client, guard.engagement():
            yield Side(GuardedClient(client, guard, names=names, **options))
    elif side == "server":
        server = make_server(listed)
        guard_server(server, guard, names=names, **options)
        async with Client(server) as client:
            yield Side(client)
    else:
        assert PROXY is not None, "agentguard-mcp-proxy is not installed (pip install -e integrations/mcp)"
        mapped = [f"--name={tool}={capability}" for tool, capability in (names or {}).items()]
        upstream = [sys.executable, str(HERE / "names_server.py"), *listed]
        proxy = StdioServerParameters(command=PROXY, args=["--spec", str(SPEC), *mapped, "--", *upstream])
        async with Client(proxy) as client:
            yield Side(client)


def text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.parametrize("side", SIDES)
async def test_tools_whose_names_map_to_one_capability_are_neither_offered_nor_run(side: str) -> None:
    async with guarded(side, COLLIDING) as tools:
        listed = await tools.list_tools()
        offered = sorted(tool.name for tool in listed.tools)
        refused = [await tools.call_tool(name, {}) for name in ("send_email", "SEND-EMAIL", "send_note")]
        chosen = await tools.call_tool("send-note", {})
    assert offered == ["send-note"]  # spelled as its capability; the others stand for nothing
    for result in refused:
        assert result.is_error
        assert "ran" not in text(result)
        assert "map to capability" in text(result)
    assert "['SEND-EMAIL', 'send_email']" in text(refused[0])  # the listing's tools, sorted
    assert not chosen.is_error
    assert text(chosen) == "ran send-note"


@pytest.mark.parametrize("side", SIDES)
async def test_the_names_mapping_says_which_tool_stands_for_a_capability(side: str) -> None:
    async with guarded(side, COLLIDING, names={"send_email": "send-email"}) as tools:
        offered = sorted(tool.name for tool in (await tools.list_tools()).tools)
        mapped = await tools.call_tool("send_email", {})
        other = await tools.call_tool("SEND-EMAIL", {})
    assert offered == ["send-note", "send_email"]
    assert text(mapped) == "ran send_email"
    assert other.is_error
    assert "ran" not in text(other)


@pytest.mark.parametrize("side", SIDES)
async def test_a_tool_the_server_serves_but_does_not_list_is_not_run(side: str) -> None:
    async with guarded(side, ["send_email"]) as tools:
        result = await tools.call_tool(UNLISTED, {})  # "wipe" is a capability of the spec
    assert result.is_error
    assert text(result).startswith("agentguard denied this tool call")
    assert f"the server does not list a tool {UNLISTED!r}" in text(result)


@pytest.mark.parametrize("side", ["client", "server"])
async def test_a_call_before_any_listing_is_placed_against_a_fresh_one(side: str) -> None:
    listed = ["send_email"]
    async with guarded(side, listed, relist_interval=0.01) as tools:
        first = await tools.call_tool("send_email", {})  # never listed by the host: the guard lists
        listed.append("SEND-EMAIL")  # the server adds a tool with the same capability name
        await anyio.sleep(0.02)  # past relist_interval: the guard reads the list again for a name not in it
        added = await tools.call_tool("SEND-EMAIL", {})
        again = await tools.call_tool("send_email", {})
    assert text(first) == "ran send_email"
    assert added.is_error
    assert "ran" not in text(added)
    assert again.is_error
    assert "ran" not in text(again)


async def test_a_refused_call_is_recorded_as_a_capability_denial() -> None:
    guard = Guard.from_file(SPEC)
    async with Client(make_server(COLLIDING)) as client:
        with guard.engagement() as eng:
            await GuardedClient(client, guard).call_tool("SEND-EMAIL", {"to": "eve@evil.test"})
    denial = eng.decisions[-1]
    assert (denial.rule, denial.outcome, denial.capability) == (
        Rule.CAPABILITY,
        Outcome.DENY,
        "mcp:SEND-EMAIL",
    )
    assert eng.view()["history"]["_total"] == 0  # nothing ran


@pytest.mark.parametrize("side", ["client", "server"])
async def test_a_tool_list_that_pages_without_end_is_read_only_so_far(side: str) -> None:
    guard = Guard.from_file(SPEC)
    server = make_server(["send_email"], endless=True)
    if side == "server":
        guard_server(server, guard)
    async with Client(server) as client:
        with guard.engagement():
            call = GuardedClient(client, guard).call_tool if side == "client" else client.call_tool
            result = await call(UNLISTED, {})
    assert result.is_error
    assert "more than 100 pages" in text(result)


_raw = st.text(alphabet="aeAE_-. ", min_size=1, max_size=6)


@given(tools=st.lists(_raw, max_size=8), mapped=st.dictionaries(_raw, st.sampled_from(["a", "e", "a-e"])))
def test_a_capability_is_stood_for_by_one_tool_unless_the_mapping_names_more(
    tools: list[str], mapped: dict[str, str]
) -> None:
    names = Names("p.", mapped)
    resolved = names.resolve(tools)
    assert set(resolved) <= set(tools)
    for capability in set(resolved.values()):
        holders = [tool for tool, held in resolved.items() if held == capability]
        if len(holders) > 1:  # only the mapping may give one capability to several tools
            assert all(mapped.get(tool) == capability for tool in holders)
    for tool in tools:
        if tool in mapped:
            assert resolved[tool] == mapped[tool]  # the mapping always wins
        elif names.prefix + tool == names.spec_name(tool):
            assert resolved.get(tool) == names.spec_name(tool) or any(
                mapped.get(other) == names.spec_name(tool) for other in tools
            )
