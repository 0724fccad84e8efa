"""One MCP ``tools/call`` translated into one ``guard.acall``, and the verdict translated back; shared by the
client wrapper, the server middleware and the proxy, so the three cannot drift apart.

The pipeline decides. This module maps names, hands the pipeline a function that sends the call with the
arguments the pipeline lets through (so a guardian ``modify`` reaches the server), turns the MCP result into
the value the checks see, and builds the result the host gets *from that checked value*: what is checked is
what is delivered. The JSON-RPC messages are reported as AOS ``protocols/MCP`` steps on the way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentguard import (
    Guard,
    GuardianDenied,
    Phase,
    PolicyViolation,
)
from agentguard.steps import MCP
from agentguard_mcp._host import MCPError

__all__ = ["Names", "denial_result", "guarded_call", "report_message", "wire"]

"""Denials of one call the model can recover from: they come back as a tool result with ``isError: true``.
Everything else (a loop stop, a failed guardrail, a stopped engagement) ends the exchange with an error."""

Wire = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[Wire]]


@dataclass(frozen=True)
class Names:
    """How MCP tool names become spec capability names: an explicit mapping wins; otherwise ``prefix`` plus
    the name lowercased, with runs of characters a spec name cannot hold turned into ``-``
    (``get_current_time`` with prefix ``time.`` → ``time.get-current-time``)."""

    prefix: str = ""
    mapping: Mapping[str, str] = field(default_factory=dict)

    def spec_name(self, tool: str) -> str:
        mapped = self.mapping.get(tool)
        if mapped is not None:
            return mapped
        return self.prefix + re.sub(r"[^a-z0-9.-]+", "-", tool.lower()).strip("-")

    def offered(self, guard: Guard, tool: str) -> bool:
        """Is the tool offered to the model: is its spec name a capability of ``guard``'s spec?"""
        return self.spec_name(tool) in guard.spec.capabilities


def wire(model: Any) -> Wire:
    """An SDK result model as its JSON wire dict."""
    dumped: Wire = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _text(value: Any) -> Wire:
    return {"type": "text", "text": value if isinstance(value, str) else json.dumps(value)}


def _texts(result: Wire) -> list[str] | None:
    """The texts of a result's content blocks, ``None`` when it holds anything but text blocks."""
    blocks = result.get("content") or []
    if not all(isinstance(b, Mapping) and b.get("type") == "text" for b in blocks):
        return None
    return [str(b.get("text", "")) for b in blocks]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different. With a key twice, a parser keeps one of its values while
    the model reads both in the text, so such a text is not taken as JSON: the checks see the text itself."""
    parsed = dict(pairs)
    if len(parsed) != len(pairs):
        raise ValueError("a key appears twice in a JSON object")
    return parsed


def tool_output(result: Wire) -> Any:
    """The value the checks see as the tool's ``outputs``: the structured content when there is some, else
    the text parsed as JSON (or the text itself), else the content blocks. So a spec reads an MCP tool's
    output the way it reads a Python tool's return value (``recent["web-search"].outputs.results``)."""
    if "structuredContent" in result:
        return result["structuredContent"]
    texts = _texts(result)
    if texts is None:
        return list(result.get("content") or [])
    text = "".join(texts)
    try:
        return json.loads(text, object_pairs_hook=_object)
    except ValueError:
        return text


def _envelope(result: Wire) -> Wire:
    """What a delivered result keeps of the server's besides its content: its ``resultType``. Its ``_meta``
    is the server's too, but no check reads it, so it is not handed on."""
    return {"resultType": result["resultType"]} if "resultType" in result else {}


def delivered(output: Any, received: Wire, derived: Any) -> Wire:
    """The result the host gets, built from the checked ``output`` (``derived`` is what the server's result
    gave before any guardian ``modify``). A server's text beside structured content is replaced by the JSON
    of what was checked, and text blocks keep their text only (not their ``_meta`` or annotations), so
    nothing unchecked reaches the model."""
    if "structuredContent" in received:
        content = [_text(output)]
        return {**_envelope(received), "content": content, "structuredContent": output, "isError": False}
    texts = _texts(received)
    if output is not derived:
        content = [_text(output)]
    elif texts is None:  # the blocks themselves were checked
        content = output
    else:
        content = [_text(text) for text in texts]
    return {**_envelope(received), "content": content, "isError": False}


def denial_result(exc: PolicyViolation, *, modern: bool) -> Wire:
    """What the model reads instead of the tool's result: an ``isError`` result naming the rule."""
    after = (
        "The tool ran, but its result was withheld." if exc.phase is Phase.OUTPUT else "The tool was not run."
    )
    result: Wire = {"content": [_text(f"agentguard denied this tool call: {exc}. {after}")], "isError": True}
    if modern:
        result["resultType"] = "complete"
    return result


class ToolFailed(Exception):
    """The server answered ``isError: true``: to the pipeline a tool that raised, its text an output to check."""

    def __init__(self, result: Wire) -> None:
        super().__init__("".join(_texts(result) or ()) or json.dumps(result.get("content", [])))
        self.result = result


async def report_message(guard: Guard, message: Wire) -> None:
    """Record one JSON-RPC message as an AOS ``protocols/MCP`` step and put it to the guardian.

    A guardian ``deny`` raises :class:`~agentguard.GuardianDenied`. A ``modify`` of the raw message cannot be
    applied without bypassing the local re-checks (the tool call itself is modified through its
    ``steps/toolCallRequest``), so it is refused like a deny rather than ignored.
    """
    eng = guard.current_engagement()
    if eng is None:  # an auto_engagement call: the tool call is recorded in its own one-call engagement
        return
    if await eng.areport(MCP(message=message)) is not None:
        raise GuardianDenied(
            f"a guardian modify of the {message.get('method', 'response')} MCP message cannot be applied; "
            "modify the tool call instead",
            phase=Phase.INPUT if "method" in message else Phase.OUTPUT,
        )


async def guarded_call(
    guard: Guard,
    names: Names,
    tool: str,
    arguments: Mapping[str, Any],
    send: Send,
    message_id: str | int,
    *,
    modern: bool = False,
) -> Wire:
    """Run one ``tools/call`` through the pipeline; returns the wire result the host may see.

    ``send(arguments)`` performs the call (to the server, or down the server's handler chain) and returns
    the wire result. A recoverable denial becomes an ``isError`` result; a loop stop or failed guardrail
    raises the typed :class:`~agentguard.PolicyViolation` for the caller to turn into its own error.
    """
    received: list[tuple[Wire, Any]] = []

    async def run(**inputs: Any) -> Any:
        await report_message(
            guard,
            {
                "jsonrpc": "2.0",
                "id": message_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": inputs},
            },
        )
        try:
            result = await send(inputs)
        except MCPError as exc:  # a JSON-RPC error: recorded as received, handed on as far as it is checked
            await report_message(guard, {"jsonrpc": "2.0", "id": message_id, "error": wire(exc.error)})
            raise MCPError(exc.code, exc.message) from None  # the checks read its message, not its data
        await report_message(guard, {"jsonrpc": "2.0", "id": message_id, "result": result})
        if result.get("isError"):
            raise ToolFailed(result)
        received.append((result, tool_output(result)))
        return received[-1][1]

    try:
        output = await guard.acall(names.spec_name(tool), arguments, run)
    except ToolFailed as failed:  # its text passed the output checks
        return {**_envelope(failed.result), "content": [_text(str(failed))], "isError": True}
    except PolicyViolation as exc:
        if not exc.recoverable:
            raise
        return denial_result(exc, modern=modern)
    return delivered(output, *received[-1])
