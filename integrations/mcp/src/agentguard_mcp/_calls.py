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
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentguard import (
    Guard,
    GuardianDenied,
    Phase,
    PolicyViolation,
    serving,
)
from agentguard.aos import unique_keys
from agentguard.runs import Timeout, ToolTimeout
from agentguard.steps import MCP
from agentguard.timeline import visible
from agentguard_mcp._host import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_TIMEOUT, MCPError

__all__ = [
    "CALL_TIMEOUT",
    "MAX_LISTING_PAGES",
    "MAX_RESULT_BYTES",
    "MAX_TOOLS",
    "MAX_TOOL_BYTES",
    "RELIST_INTERVAL",
    "Beyond",
    "Catalog",
    "Names",
    "denial_result",
    "guarded_call",
    "guarded_listing",
    "report_message",
    "wire",
]

"""Denials of one call the model can recover from: they come back as a tool result with ``isError: true``.
Everything else (a loop stop, a failed guardrail, a stopped engagement) ends the exchange with an error."""

Wire = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[Wire]]


@dataclass(frozen=True)
class Names:
    """How MCP tool names become spec capability names: an explicit mapping wins; otherwise ``prefix`` plus
    the name lowercased, with runs of characters a spec name cannot hold turned into ``-``
    (``get_current_time`` with prefix ``time.`` → ``time.get-current-time``).

    That default maps many names to one (``send_email``, ``SEND-EMAIL`` and ``send-email`` all become
    ``send-email``), so a server's tools are mapped as a whole (:meth:`resolve`): of the tools that map to one
    capability, only the ones the mapping names, else the one already spelled as the capability, stand for
    it; any other would be run under permissions written for a different tool.
    """

    prefix: str = ""
    mapping: Mapping[str, str] = field(default_factory=dict)

    def spec_name(self, tool: str) -> str:
        mapped = self.mapping.get(tool)
        if mapped is not None:
            return mapped
        return self.prefix + re.sub(r"[^a-z0-9.-]+", "-", tool.lower()).strip("-")

    def resolve(self, tools: Iterable[str]) -> dict[str, str]:
        """The capability of each of a server's ``tools`` that stands for one unambiguously; a tool left out
        shares its capability name with another tool and is not the one the spec means."""
        claims: dict[str, list[str]] = {}
        for tool in dict.fromkeys(tools):
            claims.setdefault(self.spec_name(tool), []).append(tool)
        resolved: dict[str, str] = {}
        for capability, claimants in claims.items():
            chosen = (
                claimants
                if len(claimants) == 1
                else [t for t in claimants if t in self.mapping]
                or [t for t in claimants if self.prefix + t == capability]
            )
            resolved.update((tool, capability) for tool in chosen)
        return resolved


MAX_LISTING_PAGES = 100
"""How many ``tools/list`` pages the guard reads to learn a server's tools before it gives up (and refuses the
calls it could not place); ``max_listing_pages``, the proxy's ``--max-listing-pages``."""

RELIST_INTERVAL = 10.0
"""Seconds after a complete listing of a server's tools during which a call to a tool not in it is refused
against it rather than read again (``relist_interval``, the proxy's ``--relist-interval``). Without such a
bound, a model that calls made-up tool names makes the guard list the server's tools (every page) once per
call."""

CALL_TIMEOUT = 60.0
"""Seconds the guard waits for the server's answer to one ``tools/call`` (``call_timeout``, the proxy's
``--call-timeout``), and for a ``tools/list`` (all its pages, when the guard reads them itself). The MCP
TypeScript SDK's default request timeout; the Python SDK has none, so a server that never answers (or answers
with a line its transport cannot parse, which leaves the request pending) held the call, and the host, for
ever. A call past it is a recorded denial (an OS Protocol :class:`~agentguard.runs.Timeout`, rule ``run``),
and the server's request is cancelled (``notifications/cancelled``)."""

MAX_RESULT_BYTES = 4 * 1024 * 1024
"""The largest answer of the server the guard takes, as UTF-8 JSON: a ``tools/call`` result or JSON-RPC error,
a ``tools/list`` page (``max_result_bytes``, the proxy's ``--max-result-bytes``; 4 MiB, the MCP SDK's largest
request body). Beyond it the answer is refused, never cut: the checks, the engagement's record and the guardian
would each hold a copy of it, and the model the rest."""

MAX_TOOLS = 10_000
"""The most tools the guard takes from one listing, all its pages (``max_tools``, the proxy's ``--max-tools``):
a server listing millions would have the guard hold and resolve every name."""

MAX_TOOL_BYTES = 32 * 1024
"""The largest entry of one offered tool, as UTF-8 JSON once its descriptions are made visible (``max_tool_bytes``,
the proxy's ``--max-tool-bytes``): its name, title, description and schemas reach the model as the server wrote
them, and no spec rule reads them (tool poisoning, see the README)."""

List = Callable[[str | None], Awaitable[Wire]]
"""One ``tools/list`` page, as its JSON wire dict, given a cursor."""


class Beyond(MCPError):
    """An answer of the server beyond one of the guard's bounds, refused with a JSON-RPC error whose message
    agentguard wrote: it quotes nothing of the server's answer (the server wrote all of it)."""

    def __init__(self, message: str, code: int = INTERNAL_ERROR) -> None:
        super().__init__(code, f"agentguard refused the server's answer: {message}")


def _measure(value: Any) -> tuple[int, bool]:
    """How many bytes ``value`` takes as UTF-8 JSON, and whether its text is valid Unicode: not so with a lone
    surrogate, which JSON's ``\\ud800`` escape carries and no UTF-8 message can hold (the SDK's transports fail to
    write a message with one: the request it belongs to is never sent or never answered). One serialization
    answers both. A host's own objects (a datetime) count as their ``str``; a value JSON cannot write (one that
    holds itself, or nested deeper than it recurses) counts as nothing here: the core's
    :class:`~agentguard.ValueLimits` refuse it."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return 0, True
    try:
        return len(text.encode("utf-8")), True
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass")), False


def _not_unicode(value: Any) -> bool:
    """Does ``value`` hold a string that is not valid Unicode (see :func:`_measure`)? Such a call is refused before
    it is run, and such an answer withheld: the host would wait for ever."""
    return not _measure(value)[1]


_SHOWN = frozenset({"description", "title"})
"""The keys of a tool's listing entry whose text is written for the model, at any depth (the tool's own, its
annotations', its schemas' and their properties')."""


def _shown(value: Any, key: str | None = None) -> Any:
    """A tool's listing entry with each text written for the model (:data:`_SHOWN`) made visible: every character
    that is not printable written as its escape (:func:`agentguard.timeline.visible`; line feeds stay), so a
    terminal control sequence, a bidi override, a zero-width or tag character cannot hide instructions in a
    description that reads as harmless, and a lone surrogate cannot stop the listing from being written."""
    if isinstance(value, str):
        return "\n".join(visible(line) for line in value.split("\n")) if key in _SHOWN else value
    if isinstance(value, Mapping):
        return {name: _shown(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


def _listed(page: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tools = page.get("tools")
    return [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []


def _names(page: Mapping[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in _listed(page)]


def _whole(**bounds: int) -> None:
    """``ValueError`` unless each of ``bounds`` (already positive and finite) is a whole number."""
    for name, value in bounds.items():
        if not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, not {value!r}")


class Catalog:
    """The tools a server lists, each with the capability it stands for (see :meth:`Names.resolve`), and the
    bounds on what the guard takes from the server.

    A call is placed only against what the server lists: a tool name not seen in a listing makes the guard
    list the server's tools itself (every page, at most ``max_listing_pages``) before it decides, so a tool
    added since, or one the server serves without listing it, is never run under another tool's capability.
    It does so at most once every ``relist_interval`` seconds (a listing of the host's own counts too): within
    that, such a call is refused against the latest listing, so calls to made-up names cannot make the guard
    flood the server with listings. One catalog serves every session of a client or server; a listing that
    differs by session makes the catalog the latest one's.

    What the guard waits for and reads is bounded: ``call_timeout`` seconds for an answer, ``max_result_bytes``
    for one answer, ``max_tools`` for one listing, ``max_tool_bytes`` for each offered tool's entry (see the
    constants of the same names). Past any of them the answer is refused, never cut short.
    """

    def __init__(
        self,
        names: Names,
        *,
        relist_interval: float = RELIST_INTERVAL,
        max_listing_pages: int = MAX_LISTING_PAGES,
        call_timeout: float = CALL_TIMEOUT,
        max_result_bytes: int = MAX_RESULT_BYTES,
        max_tools: int = MAX_TOOLS,
        max_tool_bytes: int = MAX_TOOL_BYTES,
    ) -> None:
        whole = {
            "max_listing_pages": max_listing_pages,
            "max_result_bytes": max_result_bytes,
            "max_tools": max_tools,
            "max_tool_bytes": max_tool_bytes,
        }
        serving.require_bounds(relist_interval=relist_interval, call_timeout=call_timeout, **whole)
        _whole(**whole)
        self.names = names
        self.relist_interval = relist_interval
        self.max_listing_pages = max_listing_pages
        self.call_timeout = call_timeout
        self.max_result_bytes = max_result_bytes
        self.max_tools = max_tools
        self.max_tool_bytes = max_tool_bytes
        self.timeout = Timeout(ms=max(1, round(call_timeout * 1000)))
        self._listed: set[str] = set()
        self._resolved: dict[str, str] = {}
        self._incomplete = False
        self._read_at: float | None = None  # monotonic time of the latest complete listing, or attempt
        self._relisting: anyio.Lock | None = None  # one listing at a time: concurrent calls wait for it
        self._unread: str | None = None  # why the latest listing the guard asked for failed

    def learn(self, tools: Iterable[str], *, complete: bool) -> None:
        """Add the tools of one listing page; a ``complete`` listing (every page) replaces what was known."""
        listed = set(tools) if complete else self._listed.union(tools)
        self._listed = listed
        self._resolved = self.names.resolve(sorted(listed))
        if complete:
            self._incomplete = False
            self._unread = None
            self._read_at = time.monotonic()

    def _fresh(self) -> bool:
        """Was the server's list read (or an attempt made) within the last ``relist_interval`` seconds?"""
        return self._read_at is not None and time.monotonic() - self._read_at < self.relist_interval

    async def listing(self, asked: Awaitable[Wire]) -> Wire:
        """The server's ``tools/list`` page, awaited at most ``call_timeout`` seconds (:class:`Beyond`, code
        ``REQUEST_TIMEOUT``, past them: the request is cancelled) and refused when it is larger than
        ``max_result_bytes``."""
        try:
            with anyio.fail_after(self.call_timeout):
                page = await asked
        except TimeoutError:
            raise Beyond(
                f"no answer to this tools/list within {self.call_timeout:g} s (call_timeout)", REQUEST_TIMEOUT
            ) from None
        self.admit(page, "tools/list", whole=False)
        return page

    def admit(self, answer: Any, method: str, *, whole: bool = True) -> None:
        """:class:`Beyond` unless ``answer`` is at most ``max_result_bytes`` of UTF-8 JSON and, when it is handed
        on ``whole`` (not a listing, whose offered entries are checked each), valid Unicode."""
        size, unicode = _measure(answer)
        if whole and not unicode:
            raise Beyond(
                f"its answer to this {method} holds text that is not valid Unicode (a lone surrogate, which a JSON "
                "escape can carry), which no MCP message can pass on"
            )
        if size > self.max_result_bytes:
            raise Beyond(
                f"its answer to this {method} is {size:,} bytes of JSON, more than max_result_bytes "
                f"({self.max_result_bytes:,}) lets through"
            )

    def _count(self, tools: int) -> None:
        if tools > self.max_tools:
            raise Beyond(f"its tool list holds more than max_tools ({self.max_tools:,}) tools")

    def offer(self, guard: Guard, page: Wire, *, first: bool) -> list[Wire]:
        """The entries of a ``tools/list`` page the host asked for that it may see, once their tools are learnt:
        those that stand for a capability of ``guard``'s spec (:meth:`offered`), each text written for the model
        made visible (:func:`_shown`). :class:`Beyond` when the listing holds more than ``max_tools`` tools (this
        page with the earlier ones, unless it is the ``first``), or an offered entry is larger than
        ``max_tool_bytes`` or not valid Unicode: refused whole, never handed on in part."""
        names = _names(page)
        self._count(len(names) + (0 if first else len(self._listed)))
        self.learn(names, complete=first and page.get("nextCursor") is None)
        offered: list[Wire] = []
        for tool in _listed(page):
            if not self.offered(guard, str(tool.get("name"))):
                continue
            capability = self._capability(str(tool.get("name")))
            try:
                shown: Wire = _shown(tool)
            except RecursionError:  # a server's own schema, in process: the SDK's parser stops far sooner
                raise Beyond(
                    f"the entry of its tool for capability {capability!r} is nested too deep"
                ) from None
            size, unicode = _measure(shown)
            if not unicode:
                raise Beyond(
                    f"the entry of its tool for capability {capability!r} holds text that is not valid Unicode "
                    "(a lone surrogate), which no MCP message can pass on"
                )
            if size > self.max_tool_bytes:
                raise Beyond(
                    f"the entry of its tool for capability {capability!r} is {size:,} bytes of JSON, more than "
                    f"max_tool_bytes ({self.max_tool_bytes:,}) lets through"
                )
            offered.append(shown)
        return offered

    async def relist(self, list_page: List) -> None:
        """List every page of the server's tools (at most ``max_listing_pages``, within ``call_timeout`` seconds
        in all, each page within ``max_result_bytes`` and all of them within ``max_tools``) and learn them. The
        attempt counts as a reading even when a page fails: a server that answers ``tools/list`` with an error
        (or not at all) is not asked again for every call."""
        self._read_at = time.monotonic()
        tools: list[str] = []
        cursor: str | None = None
        with anyio.fail_after(self.call_timeout):
            for _ in range(self.max_listing_pages):
                page = await list_page(cursor)
                self.admit(page, "tools/list", whole=False)
                tools.extend(_names(page))
                self._count(len(tools))
                following = page.get("nextCursor")
                cursor = following if isinstance(following, str) else None
                if cursor is None:
                    self.learn(tools, complete=True)
                    return
        self.learn(tools, complete=False)
        self._incomplete = True

    def _capability(self, tool: str) -> str | None:
        return self.names.mapping.get(tool) or self._resolved.get(tool)

    def offered(self, guard: Guard, tool: str) -> bool:
        """Is the tool offered to the model: does it stand for a capability of ``guard``'s spec?"""
        capability = self._capability(tool)
        return capability is not None and capability in guard.spec.capabilities

    async def place(self, tool: str, list_page: List) -> str | None:
        """The capability ``tool`` stands for (the mapping's, listed or not), after listing the server's tools
        when ``tool`` was never listed and the list was not read within ``relist_interval`` seconds;
        ``None``: the call is refused (:meth:`refusal` says why)."""
        if tool not in self._listed and tool not in self.names.mapping and not self._fresh():
            if self._relisting is None:
                self._relisting = anyio.Lock()
            async with self._relisting:
                if tool not in self._listed and not self._fresh():  # not read while this call waited
                    try:
                        await self.relist(list_page)
                    except Beyond as exc:  # agentguard's own words
                        self._unread = f"the server's tool list could not be read ({exc.message})"
                    except TimeoutError:
                        self._unread = (
                            f"the server's tool list could not be read (no answer within {self.call_timeout:g} s, "
                            "call_timeout)"
                        )
                    except Exception as exc:  # the call is refused, and recorded, as one it cannot place
                        self._unread = f"the server's tool list could not be read ({type(exc).__name__})"
        return self._capability(tool)

    def refusal(self, tool: str) -> str:
        """Why ``tool`` stands for no capability (for a tool :meth:`place` gave ``None``)."""
        if tool not in self._listed:
            if self._unread is not None:  # the type only: the server wrote the error's text
                return self._unread
            if self._incomplete:
                return (
                    f"the server's tool list has more than {self.max_listing_pages} pages and {tool!r} is not "
                    "in those read"
                )
            return (
                f"the server does not list a tool {tool!r} (its list is read again at most every "
                f"{self.relist_interval:g} s)"
            )
        capability = self.names.spec_name(tool)
        sharing = sorted(t for t in self._listed if self.names.spec_name(t) == capability)
        return (
            f"the server's tools {sharing!r} all map to capability {capability!r}; only a tool the "
            "`names` mapping names, or one spelled as the capability, stands for it"
        )


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


_decode_json = json.JSONDecoder(object_pairs_hook=unique_keys).decode
"""JSON with each key once in an object: with a key twice a parser keeps one of its values while the model
reads both in the text, so such a text is not taken as JSON (nor one nested too deep to parse): the checks
see the text itself."""


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
        return _decode_json(text)
    except (ValueError, RecursionError):  # AmbiguousJSON (a key twice) is a ValueError
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


def _error_result(text: str, *, modern: bool) -> Wire:
    result: Wire = {"content": [_text(text)], "isError": True}
    if modern:
        result["resultType"] = "complete"
    return result


def denial_result(exc: PolicyViolation, *, modern: bool, why: str | None = None) -> Wire:
    """What the model reads instead of the tool's result: an ``isError`` result naming the rule (and ``why``
    the call stood for no capability, when that was the reason)."""
    after = (
        "The tool ran, but its result was withheld." if exc.phase is Phase.OUTPUT else "The tool was not run."
    )
    return _error_result(
        f"agentguard denied this tool call: {exc}. {why + '. ' if why else ''}{after}", modern=modern
    )


def timeout_result(exc: ToolTimeout, *, modern: bool) -> Wire:
    """What the model reads when the server did not answer within ``call_timeout``: an ``isError`` result, as
    for a denial it can recover from (it may try again, or do without)."""
    return _error_result(
        f"agentguard denied this tool call: {exc} (call_timeout). The request to the server was cancelled; "
        "the tool may have run in part.",
        modern=modern,
    )


NOT_A_RESULT = (
    "agentguard withheld the server's answer to this tools/call: it is not the tool's complete result (its "
    "resultType is not 'complete': on the 2026-07-28 protocol 'input_required' asks the client for input "
    "first; another type is an extension's, answered later by another method), so the guard cannot check it"
)
"""Why an answer that is not yet the tool's result is refused. It quotes nothing of the answer: the server
wrote all of it."""


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


async def guarded_listing(
    guard: Guard, catalog: Catalog, request: Wire, fetch: Callable[[], Awaitable[Wire]], *, first: bool
) -> Wire:
    """Run one ``tools/list`` the host asked for (``request``, the JSON-RPC message; ``fetch()`` asks the server
    for the page, the ``first`` or one after it); returns the result the host may see: the page with only the
    tools :meth:`Catalog.offer` offers.

    The request and the server's answer are recorded as AOS ``protocols/MCP`` steps. An answer beyond the
    catalog's bounds (no answer within ``call_timeout``, more than ``max_result_bytes``, a listing of more than
    ``max_tools``, an offered entry over ``max_tool_bytes``) is refused with :class:`Beyond`, recorded as the
    error the host gets in place of the server's answer, which is not kept.
    """
    await report_message(guard, request)
    try:
        result = await catalog.listing(fetch())
        offered = catalog.offer(guard, result, first=first)
    except Beyond as refused:
        error = {"code": refused.code, "message": refused.message}
        await report_message(guard, {"jsonrpc": "2.0", "id": request["id"], "error": error})
        raise
    await report_message(guard, {"jsonrpc": "2.0", "id": request["id"], "result": result})
    return {**result, "tools": offered}


async def guarded_call(
    guard: Guard,
    catalog: Catalog,
    tool: str,
    arguments: Mapping[str, Any],
    send: Send,
    message_id: str | int,
    *,
    list_page: List,
    modern: bool = False,
) -> Wire:
    """Run one ``tools/call`` through the pipeline; returns the wire result the host may see.

    ``send(arguments)`` performs the call (to the server, or down the server's handler chain) and returns
    the wire result; ``list_page`` reads the server's tool list, when ``catalog`` has not seen ``tool`` in it.
    A recoverable denial becomes an ``isError`` result; a loop stop or failed guardrail raises the typed
    :class:`~agentguard.PolicyViolation` for the caller to turn into its own error.
    """
    if _not_unicode(tool) or _not_unicode(arguments):
        raise MCPError(
            INVALID_PARAMS,
            "agentguard refused this tools/call: its tool name or arguments hold text that is not valid Unicode "
            "(a lone surrogate), which no MCP message can carry; nothing was run",
        )
    capability = await catalog.place(tool, list_page)
    why = None if capability is not None else catalog.refusal(tool)
    received: list[tuple[Wire, Any]] = []

    async def run(**inputs: Any) -> Any:
        # No capability: the pipeline denies before this; nothing is sent whatever it does.
        if why is not None:
            raise RuntimeError(f"agentguard refused MCP tool {tool!r}: {why}")
        await report_message(
            guard,
            {
                "jsonrpc": "2.0",
                "id": message_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": inputs},
            },
        )
        # An answer beyond max_result_bytes, or not valid Unicode, is refused before it is recorded: as a call
        # that failed (Beyond), its text agentguard's.
        try:
            result = await send(inputs)
        except MCPError as exc:  # a JSON-RPC error: recorded as received, handed on as far as it is checked
            error = wire(exc.error)
            catalog.admit(error, "tools/call")  # its data too: no check reads it, but the record keeps it
            await report_message(guard, {"jsonrpc": "2.0", "id": message_id, "error": error})
            raise MCPError(exc.code, exc.message) from None  # the checks read its message, not its data
        catalog.admit(result, "tools/call")
        await report_message(guard, {"jsonrpc": "2.0", "id": message_id, "result": result})
        if result.get("resultType", "complete") != "complete":
            # Checked as the (empty) text found in it, a question or a handle passed as the tool's output, and
            # the real output, delivered later, was never checked: refused, as a call that failed.
            raise MCPError(INTERNAL_ERROR, NOT_A_RESULT)
        if result.get("isError"):
            raise ToolFailed(result)
        received.append((result, tool_output(result)))
        return received[-1][1]

    try:
        # A tool that stands for no capability goes under a name no capability can have (a spec name holds no
        # ":"), so it is denied and recorded as any call outside the spec is, and answered with ``why``. The
        # call runs under an OS Protocol Timeout of call_timeout: past it the pipeline records a denial (rule
        # ``run``) and cancels the task ``run`` runs in (as it does when the caller is cancelled: the client
        # cancelled the request, its session ended), and the SDK tells the server (notifications/cancelled).
        output = await guard.acall(capability or f"mcp:{tool}", arguments, run, timeout=catalog.timeout)
    except ToolFailed as failed:  # its text passed the output checks
        return {**_envelope(failed.result), "content": [_text(str(failed))], "isError": True}
    except ToolTimeout as exc:
        return timeout_result(exc, modern=modern)
    except PolicyViolation as exc:
        if not exc.recoverable:
            raise
        return denial_result(exc, modern=modern, why=why)
    return delivered(output, *received[-1])
