"""A server the guard does not trust to answer, nor to answer within reason: on each side (``GuardedClient``,
``GuardMiddleware``, the proxy in a subprocess in front of the hostile server in another), a call the server
never answers (or answers with a line no parser reads) is a recorded denial at ``call_timeout`` and its request
is cancelled; an answer larger than ``max_result_bytes``, a listing of more than ``max_tools`` tools or an offered
tool's entry larger than ``max_tool_bytes`` is refused whole; and what an offered tool's description hides
(control, bidi, zero-width characters, lone surrogates) is shown as escapes.

Before: the call waited for ever, the whole answer or listing went on, and the description reached the model
as the server wrote it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from agentguard_mcp import GuardedClient, GuardMiddleware, guard_server
from agentguard_mcp._calls import MAX_RESULT_BYTES, MAX_TOOL_BYTES, MAX_TOOLS
from mcp import Client, MCPError, StdioServerParameters
from mcp_types import CallToolResult, ListToolsResult

from agentguard import Engagement, Guard, Outcome, Rule

from . import hostile_server
from .conftest import eventually
from .hostile_server import POISONED, SHOWN, make_server

HERE = Path(__file__).resolve().parent
SPEC = HERE / "hostile-agent.yaml"
PROXY = shutil.which("agentguard-mcp-proxy", path=str(Path(sys.executable).parent))
SIDES = ["client", "server", "proxy"]


class Side:
    """One guarded side's ``list_tools`` and ``call_tool``, and the engagement it records in (``None`` behind the
    proxy, in another process)."""

    def __init__(self, tools: Any, engagement: Callable[[], Engagement | None]) -> None:
        self.list_tools: Callable[[], Awaitable[ListToolsResult]] = tools.list_tools
        self.call_tool: Callable[..., Awaitable[CallToolResult]] = tools.call_tool
        self.engagement = engagement


@contextlib.asynccontextmanager
async def guarded(
    side: str, *, fillers: int = 0, description: str = POISONED, log: Path | None = None, **bounds: Any
) -> AsyncIterator[Side]:
    """The hostile server through one guarded side; ``bounds`` (``call_timeout``, ...) are that side's options
    (the proxy's ``--call-timeout``, ...), ``log`` notes the calls the server saw cancelled (the proxy's)."""
    guard = Guard.from_file(SPEC)
    if side == "client":
        async with Client(make_server(fillers=fillers, description=description)) as client:
            with guard.engagement() as eng:
                yield Side(GuardedClient(client, guard, **bounds), lambda: eng)
    elif side == "server":
        server = make_server(fillers=fillers, description=description)
        middleware: GuardMiddleware = guard_server(server, guard, **bounds)
        async with Client(server) as client:
            yield Side(client, lambda: middleware.engagements.get("anonymous"))
    else:
        assert PROXY is not None, "agentguard-mcp-proxy is not installed (pip install -e integrations/mcp)"
        assert description.startswith(POISONED), "the subprocess pads the poisoned description, nothing else"
        upstream = [sys.executable, str(HERE / "hostile_server.py"), "--fillers", str(fillers)]
        upstream += ["--description-size", str(len(description))] + (["--log", str(log)] if log else [])
        options = [f"--{name.replace('_', '-')}={value}" for name, value in bounds.items()]
        proxy = StdioServerParameters(command=PROXY, args=["--spec", str(SPEC), *options, "--", *upstream])
        async with Client(proxy) as client:
            yield Side(client, lambda: None)


def text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def cancelled(log: Path | None) -> list[str]:
    """The calls the hostile server saw cancelled: in process, or as a subprocess writing ``log``."""
    return [*hostile_server.CANCELLED, *(log.read_text().split() if log is not None and log.exists() else [])]


def messages(eng: Engagement) -> list[dict[str, Any]]:
    """The JSON-RPC messages recorded as ``protocols/MCP`` steps."""
    return [s.aos[0]["params"]["message"] for s in eng.steps if s.kind == "protocols/MCP"]


# -- call_timeout ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("side", "tool"),
    # ``garbled`` writes to its process's stdout: only as a subprocess
    [("client", "hang"), ("server", "hang"), ("proxy", "hang"), ("proxy", "garbled")],
)
async def test_a_call_the_server_does_not_answer_is_denied_at_call_timeout_and_cancelled(
    side: str, tool: str, tmp_path: Path
) -> None:
    log = tmp_path / "cancelled"
    hostile_server.CANCELLED.clear()
    seconds = 3 if side == "proxy" else 0.5  # the proxy starts its upstream within the first call's time
    async with guarded(side, log=log, call_timeout=seconds) as tools:
        with anyio.fail_after(30):  # before: no answer, ever
            result = await tools.call_tool(tool, {})
            after = await tools.call_tool("poisoned", {})  # the connection and the engagement go on
        eng = tools.engagement()
        if tool == "hang":  # the server was told (notifications/cancelled), or its handler cancelled
            assert await anyio.to_thread.run_sync(eventually, lambda: "hang" in cancelled(log))
    assert result.is_error
    denied = f"agentguard denied this tool call: {tool!r} did not finish within {seconds * 1000:g} ms (call_timeout)"
    assert denied in text(result)
    assert text(after) == "poisoned ran"
    if eng is not None:
        decisions = [(d.rule, d.outcome, d.capability) for d in eng.decisions]
        assert (Rule.RUN, Outcome.DENY, tool) in decisions
        assert eng.view()["recent"][tool]["outputs"] is None


@pytest.mark.parametrize("side", ["client", "server"])
async def test_a_caller_that_cancels_a_call_cancels_the_servers_request(side: str) -> None:
    """Under ``call_timeout`` the pipeline runs the call in a task of its own, which cancelling the caller does
    not cancel: the guard does, as the SDK did when the call ran in the caller's task."""
    hostile_server.CANCELLED.clear()
    async with guarded(side) as tools:
        with anyio.move_on_after(0.5):
            await tools.call_tool("hang", {})
        assert await anyio.to_thread.run_sync(eventually, lambda: "hang" in cancelled(None))


@pytest.mark.parametrize(
    "option",
    [
        {"call_timeout": 0},
        {"call_timeout": float("inf")},
        {"call_timeout": float("nan")},
        {"max_result_bytes": 0},
        {"max_tools": -1},
        {"max_tool_bytes": 2.5},
    ],
)
def test_a_bound_that_bounds_nothing_is_refused(option: dict[str, float]) -> None:
    guard = Guard.from_file(SPEC)
    with pytest.raises(ValueError, match="must be"):
        GuardedClient(Client(make_server()), guard, **option)
    with pytest.raises(ValueError, match="must be"):
        GuardMiddleware(guard, **option)


@pytest.mark.parametrize(
    "option",
    [["--call-timeout", "0"], ["--call-timeout", "inf"], ["--max-result-bytes", "0"], ["--max-tools", "-1"]],
)
def test_the_proxy_refuses_a_bound_that_bounds_nothing(option: list[str]) -> None:
    assert PROXY is not None
    argv = [PROXY, "--spec", str(SPEC), *option, "--", sys.executable, str(HERE / "hostile_server.py")]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert f"{option[0]} must be positive and finite" in run.stderr


# -- max_result_bytes, max_tools ------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
async def test_an_answer_larger_than_max_result_bytes_is_refused_whole_and_recorded(side: str) -> None:
    async with guarded(side) as tools:
        with pytest.raises(MCPError) as refused:
            await tools.call_tool("huge", {})
        after = await tools.call_tool("poisoned", {})
        eng = tools.engagement()
    assert refused.value.code == -32603
    assert re.search(r"is 5,24\d,\d{3} bytes of JSON", refused.value.message)  # a few more than its text
    assert f"more than max_result_bytes ({MAX_RESULT_BYTES:,}) lets through" in refused.value.message
    assert "xxx" not in refused.value.message
    assert text(after) == "poisoned ran"
    if eng is not None:  # a failed call, its reason agentguard's; the answer itself kept nowhere
        (step,) = [s for s in eng.steps if s.kind == "steps/toolCallRequest" and s.name == "huge"]
        assert "max_result_bytes" in step.payload["error"]
        assert eng.view()["recent"]["huge"]["outputs"] is None
        listings = {m["id"] for m in messages(eng) if m.get("method") == "tools/list"}  # the SDK client's own
        calls = [m for m in messages(eng) if m["id"] not in listings]
        kinds = [m.get("method") or ("result" if "result" in m else "error") for m in calls]
        assert kinds == [
            "tools/call",
            "tools/call",
            "result",
        ]  # huge's request; poisoned's request and result


@pytest.mark.parametrize("side", SIDES)
async def test_a_listing_of_more_than_max_tools_is_refused_and_places_no_call(side: str) -> None:
    async with guarded(side, fillers=MAX_TOOLS) as tools:  # the hostile tools and 10,000 more
        with pytest.raises(MCPError) as refused:
            await tools.list_tools()
        call = await tools.call_tool("poisoned", {})  # the guard's own listing is refused too
        eng = tools.engagement()
    assert f"its tool list holds more than max_tools ({MAX_TOOLS:,}) tools" in refused.value.message
    assert call.is_error
    assert "the server's tool list could not be read" in text(call)
    assert f"more than max_tools ({MAX_TOOLS:,})" in text(call)
    if eng is not None:  # the listing recorded as the error the host got
        listing = [m for m in messages(eng) if m.get("method") == "tools/list" or "error" in m]
        assert listing[0]["method"] == "tools/list"
        assert listing[1]["error"] == {"code": -32603, "message": refused.value.message}
        assert [(d.rule, d.outcome, d.capability) for d in eng.decisions if d.outcome is Outcome.DENY] == [
            (Rule.CAPABILITY, Outcome.DENY, "mcp:poisoned")
        ]


@pytest.mark.parametrize("side", SIDES)
async def test_a_listing_page_larger_than_max_result_bytes_is_refused(side: str) -> None:
    async with guarded(side, fillers=1_000, max_result_bytes=20_000) as tools:
        with pytest.raises(MCPError) as refused:
            await tools.list_tools()
    assert "its answer to this tools/list is" in refused.value.message
    assert "more than max_result_bytes (20,000) lets through" in refused.value.message


# -- descriptions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
async def test_an_offered_description_shows_what_it_hides(side: str) -> None:
    async with guarded(side) as tools:
        listed = await tools.list_tools()
    (poisoned,) = [tool for tool in listed.tools if tool.name == "poisoned"]
    assert poisoned.description == SHOWN  # before: the conceal sequence, the bidi override, as written
    assert poisoned.input_schema["properties"]["city"]["description"] == SHOWN
    assert "filler_0" not in {tool.name for tool in listed.tools}


@pytest.mark.parametrize("side", ["client", "server"])  # no UTF-8 transport carries one to the proxy
async def test_a_lone_surrogate_in_a_description_is_shown_as_its_escape(side: str) -> None:
    async with guarded(side, description=POISONED + "\ud800") as tools:
        with anyio.fail_after(30):
            listed = await tools.list_tools()
    (poisoned,) = [tool for tool in listed.tools if tool.name == "poisoned"]
    assert poisoned.description == SHOWN + "\\ud800"


@pytest.mark.parametrize("side", SIDES)
async def test_an_offered_tool_larger_than_max_tool_bytes_is_refused_whole(side: str) -> None:
    long = POISONED.ljust(MAX_TOOL_BYTES // 2, ".")  # twice in its entry: the tool's and its argument's
    async with guarded(side, description=long) as tools:
        with pytest.raises(MCPError) as refused:
            await tools.list_tools()
    assert "the entry of its tool for capability 'poisoned' is" in refused.value.message
    assert f"more than max_tool_bytes ({MAX_TOOL_BYTES:,}) lets through" in refused.value.message
    assert "Ignore previous" not in refused.value.message
