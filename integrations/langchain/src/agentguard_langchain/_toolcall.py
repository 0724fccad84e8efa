"""One LangChain tool call translated into one ``guard.call``, and the verdict translated back.

The pipeline decides; this module only maps names, hands the pipeline a function that runs LangChain's own
tool handler (so inputs a guardian rewrote reach the tool and inner middleware still runs), converts the
``ToolMessage`` into the tool's output and back, and turns a denial into what the model or the caller sees.

A tool may also return a LangGraph ``Command`` (ToolNode: a list of them). One that carries nothing but the
call's ``ToolMessage`` is that message. Anything more it would put into the graph -- other state keys, other
messages, a ``goto``, an update of the parent graph -- no check could see, so such a result is withheld
(:class:`UncheckedResult`). Of the message itself, what no check sees is not delivered either (see
:func:`_checked_fields`).

A message that may end the run (a ``return_direct`` tool's: :meth:`ToolCallTranslation.ends_run`) is the
agent's answer to the user; the middleware puts it through the output guardrail as it does a model's.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, cast

from agentguard import (
    Phase,
    PolicyViolation,
    RestrictionViolation,
)
from agentguard_langchain._content import encode_output, message_text, tool_output, with_output
from agentguard_langchain._host import (
    CONFIG_KEY_RUNTIME,
    TAG_NOSTREAM,
    AIMessage,
    BaseStore,
    BaseTool,
    Command,
    JsonPlusSerializer,
    ParentCommand,
    ToolCallRequest,
    ToolMessage,
)
from agentguard_langchain._scope import Scope
from agentguard_langchain._sessions import HeldResult, Session

__all__ = [
    "HeldWrites",
    "OnDenied",
    "StoredResult",
    "ToolCallTranslation",
    "ToolFailed",
    "ToolResolver",
    "UncheckedResult",
]

log = logging.getLogger("agentguard_langchain")

OnDenied = Literal["message", "raise"]

ToolResult = ToolMessage | Command[Any]


class ToolFailed(Exception):
    """The tool itself failed and LangChain made that an error ``ToolMessage``: the pipeline checks its text as
    the error of a tool that raised, and the message is passed on, without an artifact (no check saw one)."""

    def __init__(self, message: ToolMessage) -> None:
        self.message = message if message.artifact is None else message.model_copy(update={"artifact": None})
        super().__init__(str(message.content))


class UncheckedResult(Exception):
    """The tool's result would put more into the graph than the call's ``ToolMessage``: it is withheld.

    Raised where the pipeline runs the tool, so the engagement records the call as failed, with this reason
    (and a guardian hears of it); :meth:`ToolCallTranslation.fail` then tells the model, or ends the run with
    :attr:`violation` under ``on_denied="raise"``.
    """

    def __init__(self, violation: RestrictionViolation) -> None:
        self.violation = violation
        super().__init__(violation.reason)


class ToolResolver:
    """Maps LangChain tool names to spec names, and unwraps tools whose function is a ``@guard.tool``.

    A ``@guard.tool`` function wrapped by LangChain's ``@tool`` would be checked twice (once here, once by its
    own wrapper). The middleware runs a copy of the LangChain tool that calls the undecorated function, under
    the spec name the decorator registered. Both answers are kept per tool name (and tool object, which the
    same name may change to in another agent), since every call asks.
    """

    def __init__(self, tool_names: Mapping[str, str] | None) -> None:
        self._names = dict(tool_names or {})
        self._resolved: dict[str, tuple[BaseTool | None, str, BaseTool | None]] = {}

    def resolve(self, lc_name: str, tool: BaseTool | None) -> tuple[str, BaseTool | None]:
        """(spec name, replacement tool or ``None`` to run the tool as is)."""
        cached = self._resolved.get(lc_name)
        if cached is None or cached[0] is not tool:
            replacement, marked = _unwrap(tool) if tool is not None else (None, None)
            name = self._names.get(lc_name) or marked or lc_name.replace("_", "-")
            cached = self._resolved[lc_name] = (tool, name, replacement)
        return cached[1], cached[2]


def _unwrap(tool: BaseTool) -> tuple[BaseTool | None, str | None]:
    update: dict[str, Any] = {}
    name: str | None = None
    for attr in ("func", "coroutine"):
        fn = getattr(tool, attr, None)
        marker = getattr(fn, "__agentguard__", None)
        inner = getattr(fn, "__wrapped__", None)
        if marker is not None and inner is not None:
            update[attr] = inner
            name = getattr(marker, "name", None)
    if not update:
        return None, None
    return tool.model_copy(update=update), name


class StoredResult:
    """The result of one tool call that ran before its run paused for output review, kept in the graph's
    LangGraph store (``create_agent(..., store=...)``) until the review is over.

    A resume may be handled by another worker than the one that paused (LangGraph Platform, any deployment
    with a shared checkpointer): there the call is not in memory, and without this record the tool would run
    a second time. Results are serialized as LangGraph's checkpointers serialize them.

    With a Guard whose store is shared (:class:`~agentguard_langchain.GraphStore`, ``RedisStore``) the
    engagement's record itself keeps the paused call's output, and the pipeline resumes it without asking
    for the tool at all: the stored result then only gives back the tool's own message (its artifact)
    instead of one rebuilt from the output, and is deleted once the call is over either way.
    """

    NAMESPACE = "agentguard-held-results"
    _serde = JsonPlusSerializer()

    def __init__(
        self, store: BaseStore, thread: str, call_id: str, call: tuple[str, Mapping[str, Any]]
    ) -> None:
        """``call``: the tool's name and the inputs the model gave it. A result is the one of that call only:
        a call id comes from the model's provider, and one that numbers the calls of each response gives a
        later call the id of one whose run was left paused (its result still stored), which would otherwise
        get that result instead of running: another tool's, or the same tool's on other inputs."""
        self._store = store
        self._namespace = (self.NAMESPACE, thread)
        self._key = call_id
        self._call = hashlib.sha256(
            json.dumps([call[0], call[1]], sort_keys=True, default=repr).encode("utf-8", "surrogatepass")
        ).hexdigest()

    def _load(self, value: Mapping[str, Any] | None) -> ToolResult | None:
        if value is None:
            return None
        if value.get("call") != self._call:
            log.warning(
                "agentguard: the result stored under tool call id %s is another call's; not used", self._key
            )
            return None
        result: ToolResult = self._serde.loads_typed((value["type"], base64.b64decode(value["data"])))
        log.info("agentguard: tool call %s ran before the run paused; its stored result is used", self._key)
        return result

    def _dump(self, result: ToolResult) -> dict[str, str]:
        kind, data = self._serde.dumps_typed(result)
        return {"type": kind, "data": base64.b64encode(data).decode(), "call": self._call}

    def get(self) -> ToolResult | None:
        item = self._store.get(self._namespace, self._key)
        return self._load(item.value if item is not None else None)

    async def aget(self) -> ToolResult | None:
        item = await self._store.aget(self._namespace, self._key)
        return self._load(item.value if item is not None else None)

    def put(self, result: ToolResult) -> None:
        self._store.put(self._namespace, self._key, self._dump(result))

    async def aput(self, result: ToolResult) -> None:
        await self._store.aput(self._namespace, self._key, self._dump(result))

    def delete(self) -> None:
        self._store.delete(self._namespace, self._key)

    async def adelete(self) -> None:
        await self._store.adelete(self._namespace, self._key)


class ToolCallTranslation(Scope):
    """Everything about one tool call the middleware needs before and after ``guard.call``, and the call's
    :class:`~agentguard_langchain._scope.Scope` while it runs (``name`` is LangChain's tool name,
    ``capability`` the spec's).

    Built for every tool call, so it only reads the request: the inputs are not copied (``Guard.call`` copies
    them), and the tool's result stays here while the pipeline decides about it; only a run that pauses
    leaves it in the session, for the node's re-run (:meth:`persist`).
    """

    __slots__ = (
        "_done",
        "_held",
        "_let_out",
        "_ran",
        "_writes",
        "capability",
        "inputs",
        "request",
        "session",
        "stored",
        "tool",
    )

    def __init__(
        self,
        request: ToolCallRequest,
        session: Session,
        resolver: ToolResolver,
        output_reviewed: frozenset[str] = frozenset(),
        *,
        unstreamed: bool = False,
    ) -> None:
        """``unstreamed``: the run streams chat models' tokens (``stream_mode="messages"``); see below."""
        tool_call = request.tool_call
        call_id: str | None = tool_call.get("id") or None
        name: str = tool_call["name"]
        super().__init__(name, call_id)
        self.request = request
        self.session = session
        self.inputs: Mapping[str, Any] = tool_call.get("args") or {}
        self.capability, self.tool = resolver.resolve(name, request.tool)
        if unstreamed and (tool := self.tool or request.tool) is not None:
            # The tokens of a model the tool calls (a summariser, an agent as a tool) are its output in the
            # making: streamed, they reached the caller before the checks of that output, which may withhold
            # it. The tool runs with LangGraph's nostream tag, which the model's run inherits.
            self.tool = cast(BaseTool, tool.with_config(tags=[TAG_NOSTREAM]))
        self._writes: HeldWrites | None = None
        writer = getattr(request.runtime, "stream_writer", None)
        # Unless the writer writes nothing: a function without a closure whose body is empty, as LangGraph's
        # writer is when the run does not stream "custom". Anything else (LangGraph's writer for that mode, a
        # wrapper of it, a writer this check does not know) is held. Written out: a frame less per call.
        code = getattr(writer, "__code__", None)
        silent = code is not None and getattr(writer, "__closure__", None) is None and code.co_code == _EMPTY
        if writer is not None and not silent and dataclasses.is_dataclass(request.runtime):
            # The run streams "custom": what the tool writes to the stream is its output in the making too.
            self._writes = HeldWrites(writer)
            runtime = dataclasses.replace(request.runtime, stream_writer=self._writes.write)
            self.request = request = dataclasses.replace(request, runtime=runtime)
        self._let_out: ToolMessage | None = None
        """The message of the tool's output as the pipeline let it out unchanged (see :meth:`release_writes`)."""
        self._held: HeldResult | None = None
        """The tool's result, once the pipeline has asked for it here."""
        self._done: HeldResult | None = None
        """The result the call ended with (see :meth:`_pop`)."""
        self._ran = False
        """The pipeline asked for the tool's result here (the tool ran, or its stored result was used)."""
        self.stored: StoredResult | None = None
        """Where the result waits across workers, for a call whose output review may pause the run."""
        if self.capability in output_reviewed:
            store = request.runtime.store
            if store is not None and session.thread is not None and call_id is not None:
                self.stored = StoredResult(store, session.thread, call_id, (name, self.inputs))

    def reasoning(self) -> str | None:
        """The request's AOS ``reasoning`` (see :func:`_reasoning`), which ``guard.call`` asks for only when
        it asks a guardian: most calls never need the search through the conversation."""
        return _reasoning(self.request.state, self.call_id)

    # -- the function the pipeline invokes -------------------------------------------------------------

    def _request(self, inputs: Mapping[str, Any]) -> ToolCallRequest:
        if self.tool is None and inputs == self.inputs:
            return self.request
        tool_call = self.request.tool_call.copy()
        tool_call["args"] = dict(inputs)
        if self.tool is not None:
            return self.request.override(tool_call=tool_call, tool=self.tool)
        return self.request.override(tool_call=tool_call)

    def runner(self, handler: Callable[[ToolCallRequest], ToolResult]) -> Callable[..., Any]:
        """The function ``guard.call`` runs: LangChain's handler (whose result :meth:`accept` translates)."""

        def run(**inputs: Any) -> Any:
            self._ran = True
            result = self.stored.get() if self.stored is not None else None
            if result is not None:  # the tool ran on another worker before the run paused
                return self.accept(result, stored=True)
            if self._writes is None:  # the run does not stream "custom": nothing to hold
                return self.accept(self._returned(handler, inputs))
            with self._holding_writes():
                return self.accept(self._returned(handler, inputs))

        return run

    def _returned(
        self, handler: Callable[[ToolCallRequest], ToolResult], inputs: Mapping[str, Any]
    ) -> object:
        """What the tool's run gave: its result, or the ``Command`` it raised for the parent graph."""
        try:
            return handler(self._request(inputs))
        except ParentCommand as raised:
            return _raised_command(raised)

    async def _areturned(
        self, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]], inputs: Mapping[str, Any]
    ) -> object:
        try:
            return await handler(self._request(inputs))
        except ParentCommand as raised:
            return _raised_command(raised)

    def arunner(
        self, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> Callable[..., Awaitable[Any]]:
        async def run(**inputs: Any) -> Any:
            self._ran = True
            result = await self.stored.aget() if self.stored is not None else None
            if result is not None:
                return self.accept(result, stored=True)
            if self._writes is None:
                return self.accept(await self._areturned(handler, inputs))
            with self._holding_writes():
                return self.accept(await self._areturned(handler, inputs))

        return run

    @contextmanager
    def _holding_writes(self) -> Iterator[None]:
        """While the tool runs: ``get_stream_writer()`` in it gives the writer that holds what it writes.

        The tool is invoked with the config of its ``ToolRuntime`` (one dict per tool call), and LangGraph's
        ``get_stream_writer()`` reads the writer from that config's runtime: the dict gets the held writer's
        runtime for the while. A ``ToolRuntime`` argument already has it (see ``__init__``).
        """
        writes = self._writes
        config = getattr(self.request.runtime, "config", None)
        configurable = config.get("configurable") if isinstance(config, dict) else None
        runtime = configurable.get(CONFIG_KEY_RUNTIME) if isinstance(configurable, dict) else None
        if writes is None or config is None or configurable is None or runtime is None:
            yield
            return
        config["configurable"] = {
            **configurable,
            CONFIG_KEY_RUNTIME: runtime.override(stream_writer=writes.write),
        }
        try:
            yield
        finally:
            config["configurable"] = configurable

    def release_writes(self, delivered: ToolMessage) -> None:
        """The call's message is ``delivered``: when that is the message of the tool's output as the pipeline
        let it out unchanged, what the tool wrote to the "custom" stream goes out now; else (withheld,
        replaced, an error, an answer the output guardrail rewrote, a run paused for review) it never does, as
        it may hold what the checks kept back."""
        writes = self._writes
        if writes is not None and self._let_out is not None and delivered is self._let_out:
            writes.release()

    def accept(self, result: object, *, stored: bool = False) -> Any:
        """The tool's output for the pipeline (:func:`~agentguard_langchain._content.tool_output` of the call's
        message); the message (:func:`_checked_fields`) is held until the pipeline lets the output out, with the
        number of interrupts answered before the tool ran (see :meth:`interrupts_to_replay`).

        ``result`` is what LangChain's handler returned: typed as a message or a ``Command``, a list of them
        at run time too (ToolNode's). A result that is more than the call's message is refused here.
        """
        message = _own_message(result, self.call_id)
        if message is None:
            reason = (
                f"the tool returned {_shape(result)}; agentguard checks a tool's own ToolMessage (its content "
                "and artifact), and a result that would put anything else into the graph (other state, other "
                "messages, a goto, the parent graph) is withheld"
            )
            engagement = self.session.engagement.id
            violation = RestrictionViolation(
                reason, capability=self.capability, phase=Phase.OUTPUT, engagement_id=engagement
            )
            raise UncheckedResult(violation)
        if message.id is not None:  # ToolNode's own messages have none
            message = self._new_id(message)
        if message.status == "error":
            raise ToolFailed(message)
        output = tool_output(message)
        self._held = HeldResult(message, output, stored, self.interrupts)
        return output

    # -- a run paused for review ------------------------------------------------------------------------

    def _pause(self) -> HeldResult | None:
        """The run pauses (LangGraph re-runs the node when it resumes): the result the tool gave, if it ran,
        waits in the session for the re-run, where the pipeline resumes the call without running the tool."""
        call_id = self.call_id
        if call_id is None:
            return None
        held = self._held
        if held is None:  # a re-run that paused again: the result of the run that ran the tool
            return self.session.held.get(call_id)
        self.session.held[call_id] = held
        return held

    def persist(self) -> None:
        """The run pauses: the held result waits in the session, and one held for output review goes to the
        graph's store too, for any worker to resume."""
        held = self._pause()
        if held is not None and self.stored is not None and not held.stored:
            self.stored.put(held.result)
            held.stored = True

    async def apersist(self) -> None:
        held = self._pause()
        if held is not None and self.stored is not None and not held.stored:
            await self.stored.aput(held.result)
            held.stored = True

    def _resumed_elsewhere(self) -> bool:
        """The pipeline finished this call without asking for the tool (a shared record resumed the call
        paused in output review, perhaps on another worker): a result may wait in the graph's store."""
        return self.stored is not None and not self._ran and self._done is None

    def adopt(self) -> None:
        """Before :meth:`finish`: a call resumed from the shared record takes the tool's own result from the
        graph's store, where the worker that paused it kept it (else one is rebuilt from the output)."""
        if self._resumed_elsewhere() and self.stored is not None:
            self._adopt(self.stored.get())

    async def aadopt(self) -> None:
        if self._resumed_elsewhere() and self.stored is not None:
            self._adopt(await self.stored.aget())

    def _adopt(self, result: ToolResult | None) -> None:
        if result is None or self.call_id is None:
            return
        message = _own_message(result, self.call_id)
        if message is not None:
            self._held = HeldResult(message, tool_output(message), True)

    def _to_release(self) -> bool:
        if self.stored is None:
            return False
        if self._done is not None:
            return self._done.stored
        return not self._ran  # ended without the tool: a result resumed elsewhere may still be stored

    def release(self) -> None:
        """The call is over: its stored result, if any, is deleted (only a result kept in the graph's store
        has anything to release: the middleware calls this only for a call that has ``stored``)."""
        if self._to_release() and self.stored is not None:
            self.stored.delete()

    async def arelease(self) -> None:
        if self._to_release() and self.stored is not None:
            await self.stored.adelete()

    # -- after the pipeline ----------------------------------------------------------------------------

    def interrupts_to_replay(self) -> int:
        """How many interrupts were answered before this call's tool ran in an earlier run of the node (the
        middleware asks only when the session holds results of an earlier run)."""
        earlier = self.session.held.get(self.call_id) if self.call_id is not None else None
        return earlier.interrupts if earlier is not None else 0

    def finish(self, output: Any) -> ToolMessage:
        """The result the pipeline let out: the tool's own message, or one carrying the replaced output."""
        held = self._pop()
        if held is None:
            return ToolMessage(content=encode_output(output), name=self.name, tool_call_id=self.call_id or "")
        # The pipeline gives back a copy of what it checked (decision 22): the tool's own message stands for
        # it when the two read alike, and only a replaced output is a message of its own (encoded anew).
        # Whether it let the output out unchanged, written out: a frame less per call.
        same = output is held.output
        if not same:
            try:
                same = bool(output == held.output)
            except Exception:  # an output whose comparison fails (an array's) is not known to be the same
                same = False
        message = held.result if same else with_output(held.result, output)
        self._let_out = message if same else None
        return message

    def fail(self, exc: Exception, on_denied: OnDenied) -> ToolMessage | Exception:
        """Translate an exception out of the pipeline: an error message for the model, or the error that ends
        the run. The caller raises it once the call's stored result is released (:meth:`release`): raised
        here, it skipped the release, and a result withheld under ``on_denied="raise"`` stayed in the graph's
        store for good.

        Not for LangGraph's control flow (an interrupt): a paused call keeps its held result for the re-run.
        """
        self._pop()
        if isinstance(exc, ToolFailed):
            return exc.message
        if isinstance(exc, UncheckedResult):
            exc = exc.violation
        if on_denied == "message" and isinstance(exc, PolicyViolation) and exc.recoverable:
            return self.denial(exc)
        return exc

    def _new_id(self, message: ToolMessage) -> ToolMessage:
        """``message``, which has an id, without it when a message of the conversation already has it.

        LangGraph's ``add_messages`` merges by id: a tool's message carrying another message's id would replace
        it (the user's question, an earlier answer, a notice that a result was withheld) in what the model reads
        from then on. Such a message loses its id and is given a new one when it is added.
        """
        state = self.request.state
        existing = state.get("messages") if isinstance(state, Mapping) else None
        if any(getattr(other, "id", None) == message.id for other in existing or ()):
            return message.model_copy(update={"id": None})
        return message

    def ends_run(self, message: ToolMessage) -> bool:
        """Whether ``message`` may end the run as (part of) the agent's answer.

        ``create_agent`` ends the run after the tools, with no model call (so no output guardrail) after it,
        when every tool the step ran has ``return_direct``. It takes the tool a message ran from the message's
        name when that names one of the agent's tools, else from the call. A message is an answer to check
        when that tool has ``return_direct``, and when it is no tool of the agent (an unknown tool's denial
        joins the answer of the tools beside it) while some tool does. Which messages do end the run is known
        only once every call of the step is done, when the tools node has already handed them to the state
        and the stream: so a message that may end it is checked, also in a step that goes back to the model.
        """
        tool, called = self.request.tool, self.request.tool_call["name"]
        name = message.name or called
        if tool is not None and name == tool.name:  # the message of the tool that was called: almost always
            return tool.return_direct
        tools = {t.name: t for t in self.request.runtime.tools}
        named = tools.get(name)
        if named is not None:
            return named.return_direct
        if name != called:
            # A name that is no tool of the agent: create_agent also ends the run on a message named for a
            # structured output tool, whose names the tool call does not show.
            return True
        return not tools or any(t.return_direct for t in tools.values())

    def denial(self, exc: PolicyViolation) -> ToolMessage:
        after = (
            "The tool ran, but its result was withheld."
            if exc.phase is Phase.OUTPUT
            else "The tool was not run."
        )
        return ToolMessage(
            content=f"agentguard denied this tool call: {exc}. {after}",
            name=self.name,
            tool_call_id=self.call_id or "",
            status="error",
        )

    def _pop(self) -> HeldResult | None:
        """The call is over: the result it holds, else the one an earlier run of the node left in the session
        (which is forgotten either way)."""
        done = self._held
        if self.call_id is not None and self.session.held:
            earlier = self.session.held.pop(self.call_id, None)
            if done is None:
                done = earlier
        self._done = done
        return done


class HeldWrites:
    """What a tool writes to LangGraph's "custom" stream (``get_stream_writer()``, a ``ToolRuntime``'s
    ``stream_writer``) while it runs, held until the checks let its output out.

    Streamed as written, it reached the caller before the checks of the output it is part of (the rows of
    an export, the results of a search), which may withhold that output.
    """

    __slots__ = ("chunks", "writer")

    def __init__(self, writer: Callable[[Any], None]) -> None:
        self.writer = writer
        self.chunks: list[Any] = []

    def write(self, chunk: Any) -> None:
        self.chunks.append(chunk)

    def release(self) -> None:
        chunks, self.chunks = self.chunks, []
        for chunk in chunks:
            self.writer(chunk)


def _nothing(_: object) -> None:
    pass


_EMPTY = _nothing.__code__.co_code
"""The code of a function whose body is empty (see :class:`ToolCallTranslation`: a silent stream writer)."""


def _own_message(result: object, call_id: str | None) -> ToolMessage | None:
    """The call's ``ToolMessage`` when that is all ``result`` would put into the graph, else ``None``.

    Only a ``Command`` whose one update is the call's message (an object: LangGraph also takes a dict, which
    the checks would not see as the message) is the same as that message. Its other updates would reach the
    graph state, and through it the model (a prompt that reads a key, an AI message no output guardrail saw)
    or the caller (``structured_response``), and a ``goto`` could run a node out of turn (this middleware's
    ``after_agent``, ending a thread-less engagement mid-run). A message, returned or in a ``Command``, is the
    call's only when it answers this call's id.
    """
    if isinstance(result, list) and len(result) == 1:  # ToolNode takes a list of results from one tool
        result = result[0]
    message = result if isinstance(result, ToolMessage) else _commanded_message(result)
    if message is None or (call_id is not None and message.tool_call_id != call_id):
        # A message for another call would answer it: a call the guard denied would read as a success to the
        # model, and this call would go unanswered.
        return None
    # Nothing but what the checks see of the message (content, artifact) and what LangGraph routes it by
    # (tool_call_id, name, status, id): the message itself, else a copy of only that (_checked_fields).
    if not (message.additional_kwargs or message.response_metadata or message.model_extra):
        return message
    return _checked_fields(message)


def _commanded_message(result: object) -> ToolMessage | None:
    """The one ``ToolMessage`` a ``Command`` carries when that is all it does."""
    if not isinstance(result, Command) or result.goto or result.graph is not None:
        return None
    update = result.update
    if not isinstance(update, Mapping) or update.keys() != {"messages"}:
        return None
    messages = update["messages"]
    if not isinstance(messages, list | tuple) or len(messages) != 1:
        return None
    (message,) = messages
    return message if isinstance(message, ToolMessage) else None


def _checked_fields(message: ToolMessage) -> ToolMessage:
    """A copy of ``message`` with only what the checks see of it (content, artifact) and what LangGraph routes
    it by (``tool_call_id``, ``name``, ``status``, ``id``), for a message with more (see :func:`_own_message`).

    A tool that returns its own message may also set ``additional_kwargs``, ``response_metadata`` or any extra
    field (messages take them). They would stay in the graph state, reach the caller, and some chat model
    integrations send ``additional_kwargs`` to the model. They are dropped rather than checked: a tool's output
    in LangChain is its content and artifact (ToolNode's own messages set nothing else), and an output
    restriction reads exactly that shape (``outputs``, or ``outputs.content`` / ``outputs.artifact``), which a
    tool that adds metadata now and then would change under it.
    """
    return ToolMessage(
        content=message.content,
        artifact=message.artifact,
        tool_call_id=message.tool_call_id,
        name=message.name,
        status=message.status,
        id=message.id,
    )


def _raised_command(raised: ParentCommand) -> object:
    """The ``Command`` a tool raised for the parent graph (LangGraph's ``ParentCommand``): a result like the
    one it could return, refused alike (:meth:`ToolCallTranslation.accept`). Raised on, the guard would hand
    it on as control flow (it is a ``GraphBubbleUp``, which pauses pass through), and LangGraph would apply
    its update -- messages no check saw -- to the parent graph."""
    return raised.args[0] if raised.args else raised


def _shape(result: object) -> str:
    """What a refused result is, named without any of its content (the model reads the denial)."""
    if isinstance(result, list):
        return f"a list of {len(result)} results"
    if isinstance(result, ToolMessage):
        return "a ToolMessage for another tool call"
    if not isinstance(result, Command):
        return f"a {type(result).__name__}"
    update = result.update
    parts = []
    if isinstance(update, Mapping):
        parts.append(f"update={sorted(str(key) for key in update)}")
    elif update is not None:
        parts.append(f"update={type(update).__name__}")
    if result.goto:
        parts.append("goto")
    if result.graph is not None:
        parts.append(f"graph={result.graph}")
    return f"Command({', '.join(parts)})"


def _reasoning(state: object, call_id: str | None) -> str | None:
    """The text of the model message that asked for this call: the AOS ``reasoning`` of the request.

    That is the last AI message of the state (the one the tool node is running), if it asked for the call.
    """
    messages = state.get("messages") if isinstance(state, dict) else None  # a dict, a list or a model
    for message in reversed(messages or ()):
        if isinstance(message, AIMessage):
            if call_id is not None:
                for tool_call in message.tool_calls:
                    if tool_call.get("id") == call_id:
                        break
                else:
                    return None
            return message_text(message) or None
    return None
