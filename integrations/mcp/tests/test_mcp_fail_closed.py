"""Fail-closed at the MCP boundary: nothing of a tool's answer the checks did not see reaches the host, on
each side (``GuardedClient``, ``GuardMiddleware``, the proxy in a subprocess), whatever part of the answer
holds it."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from agentguard_mcp import GuardedClient, guard_server
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError, StdioServerParameters
from mcp.server import Server, ServerRequestContext
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, Tool

from agentguard import Guard, RuleContext
from agentguard.cel import available_backends, get_backend

from .hostile_server import SECRETS, make_server

HERE = Path(__file__).resolve().parent
SPEC = HERE / "hostile-agent.yaml"
PROXY = shutil.which("agentguard-mcp-proxy", path=str(Path(sys.executable).parent))

Call = Callable[..., Awaitable[CallToolResult]]


@contextlib.asynccontextmanager
async def _calling(side: str) -> AsyncIterator[Call]:
    """``call_tool`` of the hostile server through one guarded side (the proxy: in front of it in a
    subprocess, the server in another)."""
    guard = Guard.from_file(SPEC)
    if side == "client":
        async with Client(make_server()) as client, guard.engagement():
            yield GuardedClient(client, guard).call_tool
    elif side == "server":
        server = make_server()
        guard_server(server, guard)
        async with Client(server) as client:
            yield client.call_tool
    else:
        assert PROXY is not None, "agentguard-mcp-proxy is not installed (pip install -e integrations/mcp)"
        upstream = [sys.executable, str(HERE / "hostile_server.py")]
        proxy = StdioServerParameters(command=PROXY, args=["--spec", str(SPEC), "--", *upstream])
        async with Client(proxy) as client:
            yield client.call_tool


def _seen(result: CallToolResult) -> str:
    """Everything of a result the host gets, as JSON."""
    return result.model_dump_json(by_alias=True)


SIDES = ["client", "server", "proxy"]


@pytest.mark.parametrize("side", SIDES)
async def test_json_text_with_a_key_twice_is_checked_as_the_model_reads_it(side: str) -> None:
    async with _calling(side) as call:
        result = await call("twice", {})
    assert result.is_error  # the text is what is checked: it is not two results or fewer
    assert "SECRET" not in _seen(result)


@pytest.mark.parametrize("side", SIDES)
async def test_json_text_nested_too_deep_to_parse_is_checked_as_text(side: str) -> None:
    """The parser's RecursionError escaped the call (the call failed unchecked, the run with it); such a
    text is checked as the text the model would read."""
    async with _calling(side) as call:
        result = await call("deep", {})
    assert result.is_error
    assert not any(secret in _seen(result) for secret in SECRETS)  # the assertion quoted says "SECRET"
    assert "[restriction output] deep" in _seen(result)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("tool", ["meta", "meta_text"])
async def test_meta_beside_a_checked_result_never_reaches_the_host(side: str, tool: str) -> None:
    async with _calling(side) as call:
        result = await call(tool, {})
    assert not result.is_error  # what was checked (no results) is let out...
    assert "SECRET" not in _seen(result)  # ...and nothing else
    assert result.structured_content in ({"results": []}, None)


@pytest.mark.parametrize("side", SIDES)
async def test_the_data_of_a_json_rpc_error_is_not_handed_on_unchecked(side: str) -> None:
    async with _calling(side) as call:
        with pytest.raises(MCPError) as failed:
            await call("error_data", {})
    assert failed.value.message == "the search failed"  # its message passed the output check
    assert failed.value.data is None


async def test_a_json_rpc_error_answer_is_recorded_as_received() -> None:
    guard = Guard.from_file(SPEC)
    async with Client(make_server()) as client, guard.engagement() as eng:
        with pytest.raises(MCPError):
            await GuardedClient(client, guard).call_tool("error_data", {})
    messages = [s.aos[0]["params"]["message"] for s in eng.steps if s.kind == "protocols/MCP"]
    assert [m.get("method") for m in messages] == ["tools/call", None]
    assert messages[1]["error"] == {
        "code": -32001,
        "message": "the search failed",
        "data": {"results": SECRETS},
    }


@pytest.mark.parametrize("side", ["client", "proxy"])
async def test_a_progress_message_does_not_reach_the_host_before_the_result_is_checked(side: str) -> None:
    told: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        told.append((done, total, message))

    async with _calling(side) as call:
        result = await call("progress", {}, progress_callback=progress)
    assert result.is_error  # five results: withheld
    assert "SECRET" not in _seen(result)
    assert all(message is None for _, _, message in told)  # how far it got, not what it found
    assert told == ([(1, 2, None)] if side == "client" else [])  # the proxy asks the upstream for none


@pytest.mark.parametrize(
    ("side", "tool"),
    # the SDK's client session takes an extension's shape only with the extension: the server side here
    [("client", "input_required"), ("server", "input_required"), ("server", "deferred")],
)
async def test_an_answer_that_is_not_the_tools_result_is_refused_not_checked_as_empty(
    side: str, tool: str
) -> None:
    """A server may answer ``tools/call`` with what is not the tool's result yet (``input_required`` on the
    2026-07-28 protocol; an extension's shape, to fetch later by another method). It was checked as the
    empty text the guard found in it, recorded as the call's output, and handed on without what it held."""
    guard = Guard.from_file(SPEC)
    server = make_server()
    middleware = guard_server(server, guard) if side == "server" else None
    async with Client(server) as client, guard.engagement() as eng:
        session = client.session
        call = GuardedClient(session, guard).call_tool if side == "client" else session.call_tool
        with pytest.raises(MCPError) as refused:  # the session hands such answers on when asked to
            await call(tool, {}, allow_input_required=True, allow_claimed=True)
    assert "not the tool's complete result" in refused.value.message
    assert "SECRET" not in str(refused.value.error)
    kept = middleware.engagements["anonymous"] if middleware is not None else eng
    assert kept.view()["recent"][tool.replace("_", "-")]["outputs"] is None  # no output was checked


# -- any answer, any side -------------------------------------------------------------------------------

for _backend in available_backends():
    get_backend(_backend)  # made now, not in an example: cel-python raises the recursion limit, once

MARK = "SECRET"
"""A value the checks refuse wherever it is in an output; so it must be nowhere in what the host gets."""

ECHO_SPEC = """
kind: openagentspec:v1/agent
name: echo-agent
description: Reads whatever an MCP server answers.
intent: You read answers that hold no secret.
owner: shop-team@corp.com
capabilities:
  echo:
    output_restriction:
      assertion: type(recent["echo"].outputs) != string || !recent["echo"].outputs.contains("SEC" + "RET")
"""


class Pairs(list[tuple[str, Any]]):
    """A JSON object as written: its keys in order, a key perhaps twice."""


def _written(value: Any) -> str:
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{json.dumps(k)}: {_written(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_written(v) for v in value) + "]"
    return json.dumps(value)


_words = st.one_of(
    st.text(max_size=6), st.builds(lambda a, b: a + MARK + b, st.text(max_size=3), st.text(max_size=3))
)
_leaves = st.none() | st.booleans() | st.integers() | _words
_plain = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner, max_size=2),
    max_leaves=6,
)
_objects = st.lists(st.tuples(st.sampled_from("ab"), _plain), min_size=1, max_size=3).map(Pairs)
_json = st.recursive(_leaves | _objects, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
_text = st.one_of(_words, _objects.map(_written), _json.map(_written))
_meta = st.dictionaries(st.sampled_from("ab"), _plain, max_size=2)


def _block(kind: str, extra: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just(kind), **extra},
        optional={"_meta": _meta, "annotations": st.fixed_dictionaries({"lastModified": _words})},
    )


_text_blocks = _block("text", {"text": _text})
_blocks = st.one_of(
    _text_blocks,
    _block("image", {"data": _words, "mimeType": st.just("image/png")}),
    _block("resource_link", {"uri": st.just("file:///r"), "name": _words, "description": _words}),
    _block("resource", {"resource": st.fixed_dictionaries({"uri": st.just("file:///r"), "text": _words})}),
)
_envelope = {"_meta": _meta, "isError": st.booleans()}
_answers = st.one_of(
    st.fixed_dictionaries({"content": st.lists(_text_blocks, min_size=1, max_size=2)}, optional=_envelope),
    st.fixed_dictionaries(
        {"content": st.lists(_blocks, max_size=3)},
        optional={
            **_envelope,
            "structuredContent": st.dictionaries(st.sampled_from("ab"), _plain, max_size=2),
        },
    ),
    st.tuples(
        st.integers(-32099, -32000), _words, st.none() | _plain
    ),  # a JSON-RPC error: code, message, data
)


def _echo(answer: dict[str, Any] | tuple[int, str, Any]) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="echo", input_schema={"type": "object"})])

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        if isinstance(answer, tuple):
            raise MCPError(*answer)
        return CallToolResult.model_validate(answer)

    return Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)


def _echo_guard() -> Guard:
    guard = Guard.from_yaml(ECHO_SPEC)

    @guard.rules.rule("no-mark", phase="output", capabilities={"echo"})
    def no_mark(ctx: RuleContext) -> bool:
        return MARK not in json.dumps(ctx.outputs)

    return guard


async def _delivered(side: str, answer: dict[str, Any] | tuple[int, str, Any]) -> str:
    """What the host gets of ``answer`` through ``side``, as JSON (a JSON-RPC error: its message and data)."""
    guard, server = _echo_guard(), _echo(answer)
    if side == "server":
        guard_server(server, guard)
    engagement = guard.engagement() if side == "client" else contextlib.nullcontext()
    async with Client(server) as client:
        call = GuardedClient(client, guard).call_tool if side == "client" else client.call_tool
        with engagement:
            try:
                result = await call("echo", {})
            except MCPError as exc:
                return json.dumps([exc.message, exc.data])
    return _seen(result)


@pytest.mark.parametrize("side", ["client", "server"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=_answers)
@example(answer={"content": [{"type": "text", "text": '{"a": "SECRET", "a": 1}'}]})
@example(answer={"content": [{"type": "text", "text": "1", "_meta": {"a": "SECRET"}}]})
@example(answer={"content": [{"type": "text", "text": "1", "annotations": {"lastModified": "SECRET"}}]})
@example(answer={"content": [], "structuredContent": {}, "_meta": {"a": "SECRET"}})
@example(answer=(-32001, "failed", {"a": "SECRET"}))
def test_nothing_the_checks_refuse_reaches_the_host_whatever_the_server_answers(
    side: str, answer: dict[str, Any] | tuple[int, str, Any]
) -> None:
    assert MARK not in anyio.run(_delivered, side, answer)
