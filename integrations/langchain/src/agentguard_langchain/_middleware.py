"""``AgentGuardMiddleware``: a LangChain v1 agent middleware that puts every step through an agentguard Guard.

::

    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from agentguard import Guard
    from agentguard_langchain import AgentGuardMiddleware

    guard = Guard.from_file("agent.yaml")
    agent = create_agent(model, tools=[send_email, search], middleware=[AgentGuardMiddleware(guard)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [{"role": "user", "content": "..."}]},
                 config={"configurable": {"thread_id": "t1"}}, context={"user_id": "u1"})

What each hook does (the Guard decides; this module only translates):

``before_agent``   opens or continues the thread's engagement (a fresh one per run under ``retain_memory:
                   false``, hiding earlier runs' messages from the model).
``wrap_model_call`` input guardrail on each message the run did not produce itself, whatever its role (a
                   client that sends a whole message list sends its system, assistant and tool messages
                   too), reading all the text a model may be sent of it (its tool calls and
                   ``additional_kwargs`` too); output guardrail on each final answer; AI messages that call
                   tools are reported as ``steps/message``. A message the input guardrail rewrote is its
                   guarded text alone.
``wrap_tool_call`` ``guard.call`` around LangChain's tool handler. A denial the model can recover from
                   becomes an error ``ToolMessage``; a loop or failed guardrail ends the run with its error.
                   A result that would put more than its ``ToolMessage`` into the graph (a ``Command``'s
                   other updates, a ``goto``) is withheld (see :mod:`agentguard_langchain._toolcall`). A
                   message that may end the run (``return_direct``) is the agent's answer: the output
                   guardrail checks it as it does a final answer of the model.

Reviews: ``require_review`` ids with no reviewer on the Guard are answered through LangGraph ``interrupt()``
(see :mod:`agentguard_langchain._review`); they need a checkpointer.

A guardian that denies a model answer makes the user see "The response was blocked by agentguard: ..."
instead (AOS: the agent answers that the response was blocked); ``on_denied="raise"`` ends the run instead.

Limits worth knowing:

- Put the middleware first in ``middleware=[...]`` (outermost), so retries or edits of inner middleware are
  guarded too.
- ``stream_mode="messages"`` streams model tokens as they are generated only when nothing checks answers (no
  output guardrail, no guardian); otherwise each answer comes whole, once the checks let it out.
- By default engagements live in this process: a run resumed after a restart, or by another worker, starts a
  new Engagement record for its thread. A tool that ran before its run paused for output review does not run
  again there when the graph has a store (``create_agent(..., store=...)``): its result waits in the store
  until the review is over. Without a store it runs again.
- With a Guard whose store is shared by the workers (``Guard(spec, store=GraphStore(graph_store))``, or
  :class:`agentguard.stores.RedisStore`), every worker continues the thread's one engagement: its history,
  loop detector and paused reviews. Each run starts by applying what other workers changed; an engagement
  evicted from this worker's memory is only released, not closed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any, NotRequired

from pydantic_core import PydanticUndefined

from agentguard import (
    ConfigurationError,
    Engagement,
    Guard,
    GuardianDenied,
    StoreUnavailable,
    User,
    ValueLimits,
)
from agentguard.stores import MemoryStore
from agentguard_langchain._content import (
    canonical_json,
    input_text,
    is_role,
    is_user_message,
    message_text,
    model_fields,
    reply_ids,
    structured_text,
    with_text,
)
from agentguard_langchain._host import (
    TAG_NOSTREAM,
    AgentMiddleware,
    AgentState,
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    Command,
    ExtendedModelResponse,
    GraphBubbleUp,
    HumanMessage,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    RunnableConfig,
    Runtime,
    ToolCallRequest,
    ToolMessage,
    get_config,
    langsmith_tracing,
    streamed,
    var_child_runnable_config,
)
from agentguard_langchain._review import install_interrupt_reviewers, replay_interrupts
from agentguard_langchain._scope import CURRENT, Scope
from agentguard_langchain._sessions import (
    Checked,
    EngagementKey,
    Session,
    Sessions,
    Unreadable,
    UserResolver,
    aclose_quietly,
    checked_limits,
    close_quietly,
    known_as,
    read_input,
    thread_of,
    unchanged,
    unread,
    user_from_context,
)
from agentguard_langchain._toolcall import OnDenied, ToolCallTranslation, ToolResolver

__all__ = ["AgentGuardMiddleware", "AgentGuardState"]

log = logging.getLogger("agentguard_langchain")

ENGAGEMENT_KEY = "agentguard_engagement"
HIDDEN_KEY = "agentguard_hidden"
INPUTS_KEY = "agentguard_inputs"


def _engagement_id(state: Mapping[str, Any]) -> str | None:
    value = state.get(ENGAGEMENT_KEY)
    return value if isinstance(value, str) else None


def _hidden(state: Mapping[str, Any]) -> list[str]:
    value = state.get(HIDDEN_KEY)
    return value if isinstance(value, list) else []


_NOTHING: AbstractContextManager[None] = nullcontext()
"""What :meth:`AgentGuardMiddleware._chat_span` and :meth:`~AgentGuardMiddleware._unstreamed` give when they
have nothing to do (``nullcontext`` is reusable)."""


class _Unstreamed(AbstractContextManager[None]):
    """The runnable config of this thread or task, with LangGraph's ``nostream`` tag added: the chat model
    run started inside inherits it, and LangGraph's "messages" stream then skips its tokens and its end."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        config = var_child_runnable_config.get() or RunnableConfig()
        tags = [*(config.get("tags") or ()), TAG_NOSTREAM]
        self._token = var_child_runnable_config.set(RunnableConfig(**{**config, "tags": tags}))

    def __exit__(self, *exc: object) -> None:
        var_child_runnable_config.reset(self._token)


ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]
ToolResult = ToolMessage | Command[Any]


class AgentGuardState(AgentState[Any]):
    """Agent state plus two private keys (not part of the graph's input or output schema)."""

    agentguard_engagement: NotRequired[Annotated[str, PrivateStateAttr]]
    """Id of the engagement the run belongs to (for runs without a thread id)."""
    agentguard_hidden: NotRequired[Annotated[list[str], PrivateStateAttr]]
    """Ids of messages from earlier engagements the model must not see (``retain_memory: false``); kept in
    the checkpoint so a resumed run hides them too."""
    agentguard_inputs: NotRequired[Annotated[dict[str, list[str | None]], PrivateStateAttr]]
    """Message id -> [digest of the message (all of it a model may be sent, see
    :func:`~agentguard_langchain._sessions.digest`) as the input guardrail checked it or a guarded run
    produced it, the text the guardrail put in its place or ``None``], written as each run ends
    (and with a shared store, by each model call). The checkpoint is where a worker finds what the thread's
    other workers checked, or this one before a restart (see :func:`_adopt_inputs`)."""


class AgentGuardMiddleware(AgentMiddleware[AgentGuardState, Any, Any]):
    """Guard a ``create_agent`` agent with an agentguard :class:`~agentguard.Guard`.

    Options:

    ``tool_names``
        LangChain tool name -> spec capability name, where the default (``_`` turned into ``-``, or the name a
        ``@guard.tool`` registered) is not the one the spec uses.
    ``on_denied``
        ``"message"`` (default): a denied call or restriction becomes an error ``ToolMessage`` naming the rule
        and the reason, and the model carries on; ``"raise"``: the run ends with the typed error.
    ``engagement_key``
        which conversation a run belongs to, from its ``RunnableConfig`` (default:
        ``configurable.thread_id``).
    ``user``
        who the engagement acts for, from the run's ``context`` (default: a ``User`` in it, or its
        ``user_id`` / ``user_email`` attribute or key).
    ``interrupt_reviews``
        answer ``require_review`` ids that have no reviewer on the Guard through LangGraph ``interrupt()``.
    ``max_engagements``
        how many engagements stay open in memory; the least recently used beyond it are closed (released
        only, when the Guard's store is shared: another worker may be using them).
    ``record_key``
        a secret (bytes or text, the same on every worker of a thread) that seals the checkpoint's record of
        the messages the input guardrail checked or the runs produced: a client that can write the graph's
        state then cannot vouch for a message of its own (without it, the record is trusted as written).
    ``value_limits``
        how deep a message may nest and how many values it may hold for the input guardrail to read it whole
        (a :class:`~agentguard.ValueLimits`; default ``ValueLimits()``: 100 levels, 1,000,000 values, the
        Guard's own defaults for tool values). A message beyond them, or one whose reading fails, is a failed
        input guardrail: the engagement is cancelled with the reason (a recorded ``agentguard/cancel`` step)
        and the run ends with a :class:`~agentguard.GuardrailViolation`; no message of the request is taken
        for checked.
    """

    state_schema = AgentGuardState

    def __init__(
        self,
        guard: Guard,
        *,
        tool_names: Mapping[str, str] | None = None,
        on_denied: OnDenied = "message",
        engagement_key: EngagementKey | None = None,
        user: UserResolver | None = None,
        interrupt_reviews: bool = True,
        max_engagements: int = 1024,
        record_key: bytes | str | None = None,
        value_limits: ValueLimits | None = None,
    ) -> None:
        super().__init__()
        if on_denied not in ("message", "raise"):
            raise ValueError(f"on_denied must be 'message' or 'raise', not {on_denied!r}")
        self.guard = guard
        self.on_denied: OnDenied = on_denied
        self._key: EngagementKey = engagement_key or thread_of
        self._user: UserResolver = user or user_from_context
        self._resolver = ToolResolver(tool_names)
        self._shared = not isinstance(guard.store, MemoryStore)
        """The Guard keeps engagements in a store other workers share: continue them from it."""
        self._sessions = Sessions(max_engagements, shared=self._shared)
        self._retain = guard.retain_memory
        self._record_key = record_key.encode("utf-8") if isinstance(record_key, str) else record_key
        """Seals the checkpoint's record of known messages (:func:`_seal`): a client that can write the graph's
        state (``Command(update=...)`` as a run's input, the threads API's ``update_state``) cannot vouch
        for a message of its own. Every worker of a thread needs the same key."""
        self._limits = checked_limits(value_limits)
        """How deep and large a message may be for the input guardrail to read it (see the class docstring)."""
        self._last: Engagement | None = None
        guard.add_passthrough_exceptions(GraphBubbleUp)
        self.interrupt_reviewers: tuple[str, ...] = (
            install_interrupt_reviewers(guard) if interrupt_reviews else ()
        )
        # Capabilities whose output review pauses the graph after the tool ran: their results are also
        # kept in the graph's store (when it has one) while the review is pending.
        self._output_reviewed = frozenset(
            name
            for name, capability in guard.spec.capabilities.items()
            if capability is not None
            and capability.output_restriction is not None
            and capability.output_restriction.require_review in self.interrupt_reviewers
        )
        if not langsmith_tracing():
            self._skip_langsmith_thread_hops()

    def _skip_langsmith_thread_hops(self) -> None:
        """Hand ``create_agent`` the async wrap hooks as plain functions that return their coroutine.

        ``create_agent`` wraps every hook in LangSmith's ``traceable``. For a coroutine function that wrapper
        runs its setup and its teardown each in a worker thread, even with tracing off: about 180 µs per hook
        call, more than everything this middleware does for a tool call. For a plain function it costs about
        20 µs. ``create_agent`` reads the hooks from the instance, so an instance attribute is what it wraps;
        the class keeps the real ``async def`` hooks. Only done when LangSmith tracing is off as the middleware
        is built: with tracing on, the real hooks are wrapped so that their LangSmith runs nest properly.
        """
        tool_hook, model_hook = self.awrap_tool_call, self.awrap_model_call

        # No functools.wraps: LangSmith would find the coroutine function through ``__wrapped__``.
        def awrap_tool_call(
            request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
        ) -> Coroutine[Any, Any, ToolResult]:
            return tool_hook(request, handler)

        def awrap_model_call(
            request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
        ) -> Coroutine[Any, Any, ModelResult]:
            return model_hook(request, handler)

        self.awrap_tool_call = awrap_tool_call  # type: ignore[method-assign]
        self.awrap_model_call = awrap_model_call  # type: ignore[method-assign]

    @property
    def name(self) -> str:
        return "AgentGuardMiddleware"

    # -- engagements ----------------------------------------------------------------------------------

    def engagement_for(self, thread_id: str) -> Engagement | None:
        """The open engagement of a conversation thread, if any (its ``steps`` are the audit trail)."""
        session = self._sessions.for_thread(thread_id)
        return session.engagement if session is not None else None

    @property
    def last_engagement(self) -> Engagement | None:
        """The engagement most recently opened by this middleware (convenient in scripts and tests)."""
        return self._last

    def close_thread(self, thread_id: str) -> bool:
        """Close a thread's engagement; the thread's next run starts a new one. False if none was open here.

        With a shared store the engagement is closed for every worker."""
        return self._sessions.close_thread(thread_id)

    def close(self) -> None:
        """Close every engagement open in this worker (with a shared store: for every worker)."""
        self._sessions.close_all()

    def _thread(self) -> str | None:
        try:
            config: RunnableConfig = get_config()
        except RuntimeError:  # outside a runnable context: no thread
            return None
        return self._key(config)

    def _engagement_args(
        self, thread: str | None, context: object, previous: Session | None, engagement_id: str | None
    ) -> dict[str, Any]:
        # Random ids where the thread cannot name the engagement (``token_hex``: as random as a uuid4, without
        # building one).
        if engagement_id is None:
            if thread is None:
                engagement_id = secrets.token_hex(16)
            elif self._retain and previous is None:
                engagement_id = thread
            else:
                engagement_id = f"{thread}:{secrets.token_hex(6)}"
        user: User | None = self._user(context)
        return {
            "user": user,
            "engagement_id": engagement_id,
            "metadata": {"thread_id": thread} if thread else None,
        }

    def _opened(self, engagement: Engagement, thread: str | None) -> tuple[Session, list[Session]]:
        """The new session, and the sessions it displaced that must be closed."""
        session = Session(engagement, thread)
        closing = self._sessions.add(session)
        self._last = engagement
        return session, closing

    def _open(
        self, thread: str | None, context: object, previous: Session | None, engagement_id: str | None = None
    ) -> Session:
        """Open (or, by id, continue) an engagement for the thread, and keep it as the thread's session."""
        args = self._engagement_args(thread, context, previous, engagement_id)
        session, closing = self._opened(self.guard.engagement(**args), thread)
        for old in closing:
            close_quietly(old)
        return session

    async def _aopen(
        self, thread: str | None, context: object, previous: Session | None, engagement_id: str | None = None
    ) -> Session:
        args = self._engagement_args(thread, context, previous, engagement_id)
        session, closing = self._opened(await self.guard.aengagement(**args), thread)
        for old in closing:
            await aclose_quietly(old)
        return session

    def _known(self, state: Mapping[str, Any]) -> tuple[Session | None, str | None, str | None]:
        """The run's session if this worker has it; else the thread, and the engagement id to continue."""
        engagement_id = _engagement_id(state)
        session = self._sessions.get(engagement_id)
        if session is not None:
            return session, None, None
        thread = self._thread()
        if self._shared and engagement_id is not None:
            # The run names its engagement: continue exactly that one from the store (this worker's session
            # for the thread, if any, may be an older engagement of it under ``retain_memory: false``).
            log.debug("agentguard: continuing engagement %s from the store", engagement_id)
            return None, thread, engagement_id
        session = self._sessions.for_thread(thread)
        if session is None and not self._shared:
            log.warning(
                "agentguard: no open engagement for this run (evicted, the process restarted, or "
                "another worker paused it): starting a new one; calls made before are not in its record, "
                "and without a graph store a tool paused in output review runs again"
            )
        return session, thread, None

    def _session(self, state: Mapping[str, Any], context: object) -> Session:
        session, thread, engagement_id = self._known(state)
        if session is None:
            session = self._open(thread, context, None, engagement_id)
            self._continued_mid_run(session, state)
        return session

    def _open_session(self, state: Mapping[str, Any]) -> Session | None:
        """The run's session when this worker has it open, as at almost every tool call: the rest of
        :meth:`_session` is for the other cases (two calls more on every tool call, and under asyncio
        awaiting :meth:`_asession` costs a coroutine)."""
        return self._sessions.get(_engagement_id(state))

    async def _asession(self, state: Mapping[str, Any], context: object) -> Session:
        session, thread, engagement_id = self._known(state)
        if session is None:
            session = await self._aopen(thread, context, None, engagement_id)
            self._continued_mid_run(session, state)
        return session

    def _continued_mid_run(self, session: Session, state: Mapping[str, Any]) -> None:
        """A run this worker did not start, or no longer knows (resumed after an interrupt): the thread's
        messages went through the input guardrail, or were produced, where the checkpoint says."""
        _adopt_inputs(session, state, self._record_key)

    def _start_run(
        self, state: AgentGuardState, session: Session, previous: Session | None
    ) -> dict[str, Any] | None:
        """The run's new turn, and the private state it needs (``retain_memory: false`` always opened a fresh
        engagement, with ``previous`` the thread's one before)."""
        hidden: list[str] | None = None
        thread = session.thread
        if thread is not None:
            if not self._retain:
                hidden = [m.id for m in _earlier_messages(state["messages"], previous) if m.id]
            elif self._shared or previous is None:
                # The thread's earlier messages went through the input guardrail (or were produced) on
                # whichever worker ran them, this one before a restart too; only this run's new input is new
                # to the engagement.
                _adopt_inputs(session, state, self._record_key)
        session.engagement.new_turn()
        update: dict[str, Any] = {}
        if _engagement_id(state) != session.engagement.id:
            update[ENGAGEMENT_KEY] = session.engagement.id
        if hidden is not None and hidden != _hidden(state):
            update[HIDDEN_KEY] = hidden
        return update or None

    def before_agent(self, state: AgentGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Open the run's engagement: the thread's ongoing one, or a fresh one (``retain_memory: false``).

        Each run is a new turn of the engagement (one user input and what the agent does about it). With a
        shared store, an engagement this worker already had first applies what other workers changed.
        """
        thread = self._thread()
        previous = self._sessions.for_thread(thread)
        if previous is not None and self._retain:
            session = previous
            if self._shared:
                try:
                    session.engagement.refresh()
                except StoreUnavailable as exc:  # the run's guarded calls apply the store's on_failure
                    log.warning("agentguard: engagement %s not refreshed: %s", session.engagement.id, exc)
        else:
            session = self._open(thread, runtime.context, previous)
        return self._start_run(state, session, previous)

    async def abefore_agent(self, state: AgentGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        thread = self._thread()
        previous = self._sessions.for_thread(thread)
        if previous is not None and self._retain:
            session = previous
            if self._shared:
                try:
                    await session.engagement.arefresh()
                except StoreUnavailable as exc:
                    log.warning("agentguard: engagement %s not refreshed: %s", session.engagement.id, exc)
        else:
            session = await self._aopen(thread, runtime.context, previous)
        return self._start_run(state, session, previous)

    def after_agent(self, state: AgentGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The run is over, and so is its turn (its ``invoke_agent`` span ends now, not when the thread's next
        run begins). A run without a thread cannot be continued: its engagement is closed.

        A run paused by ``interrupt()`` does not get here: its turn goes on when it is resumed.
        """
        update, threadless = self._end_run(state)
        if threadless is not None:
            self._sessions.discard(threadless)
        return update

    async def aafter_agent(self, state: AgentGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        update, threadless = self._end_run(state)
        if threadless is not None:
            await self._sessions.adiscard(threadless)
        return update

    def _end_run(self, state: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Session | None]:
        """End the run's turn: the state update to make, and the session to close if the run had no thread.

        The update is what the session knows of the thread's messages (:data:`INPUTS_KEY`), for a worker
        that does not know it: this one after a restart, or an eviction (``max_engagements``), takes no
        earlier answer for input either. With a shared store the model calls wrote it: what is left is a
        tool's message that ended the run (``return_direct``), which no model call followed.
        """
        session = self._sessions.get(_engagement_id(state))
        if session is None or session.thread is None:
            return None, session
        session.engagement.end_turn()
        if self._shared and not session.produced:
            return None, None
        _learn_produced(session)
        return {INPUTS_KEY: _record(session, self._record_key)}, None

    # -- model calls ----------------------------------------------------------------------------------

    def _chat_span(self, eng: Engagement, request: ModelRequest[Any]) -> AbstractContextManager[None]:
        """The GenAI ``chat {model}`` span around the model call, when the guard's telemetry records spans."""
        telemetry = self.guard.telemetry
        if telemetry is None or not telemetry.tracing:
            return _NOTHING
        model = request.model
        name = getattr(model, "model_name", None) or getattr(model, "model", None) or model._llm_type
        return telemetry.chat_span(eng.state, str(name), provider=getattr(model, "_llm_type", None))

    def _unstreamed(self) -> AbstractContextManager[None]:
        """While the model runs, when the guard checks its answer before the user sees it
        (:attr:`~agentguard.Guard.checks_answers`): LangGraph's ``stream_mode="messages"`` leaves the model's
        tokens alone, and streams the answer whole when the model's node ends, as the checks let it out (or not
        at all, when they stop the run). Otherwise the tokens reach the stream as the model makes them, before
        any check has seen them.
        """
        return _Unstreamed() if self.guard.checks_answers else _NOTHING

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        """Input guardrail on the messages that are input to the run (:meth:`_visible`), then the model, then
        the output guardrail on every text it returns: a final answer, and text beside tool calls alike (the
        spec guards "any generative model response" before the user sees it)."""
        session = self._session(request.state, request.runtime.context)
        eng = session.engagement
        try:
            messages, pending = self._visible(request, session)
        except Unreadable as exc:
            cancel, error = unread(eng, exc)
            eng.cancel(cancel)
            raise error from exc
        if pending or session.replaced or messages is not request.messages:
            checked: list[str] = []
            try:
                for _, text in pending:
                    checked.append(eng.check_input(text))
            except Exception as exc:
                _stopped_inputs(session, messages, pending, len(checked), exc)
                raise
            request = self._with_inputs(request, session, messages, pending, checked)
        with Scope(), self._chat_span(eng, request), self._unstreamed():
            result: ModelResult = handler(request)
        answers, structured = _answers(result), _structured(result)
        if not answers and structured is None:  # only tool calls: nothing reaches the user
            return self._delivered(result, session)
        # Text beside tool calls reaches the user too: it is guarded alike.
        guarded = [self._check_answer(eng, text) for _, text in answers]
        delivered = _with_answers(result, answers, guarded)
        if structured is not None:
            delivered = _with_structured(
                delivered,
                result,
                _rewritten(answers, guarded),
                structured,
                self._check_answer(eng, structured),
            )
        return self._delivered(delivered, session)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        session = self._open_session(request.state) or await self._asession(
            request.state, request.runtime.context
        )
        eng = session.engagement
        try:
            messages, pending = self._visible(request, session)
        except Unreadable as exc:
            cancel, error = unread(eng, exc)
            await eng.acancel(cancel)
            raise error from exc
        if pending or session.replaced or messages is not request.messages:
            checked: list[str] = []
            try:
                for _, text in pending:
                    checked.append(await eng.acheck_input(text))
            except Exception as exc:
                _stopped_inputs(session, messages, pending, len(checked), exc)
                raise
            request = self._with_inputs(request, session, messages, pending, checked)
        with Scope(), self._chat_span(eng, request), self._unstreamed():
            result: ModelResult = await handler(request)
        answers, structured = _answers(result), _structured(result)
        if not answers and structured is None:
            return self._delivered(result, session)
        guarded = [await self._acheck_answer(eng, text) for _, text in answers]
        delivered = _with_answers(result, answers, guarded)
        if structured is not None:
            delivered = _with_structured(
                delivered,
                result,
                _rewritten(answers, guarded),
                structured,
                await self._acheck_answer(eng, structured),
            )
        return self._delivered(delivered, session)

    def _delivered(self, result: ModelResult, session: Session) -> ModelResult:
        """``result``, its messages known to the session as the guarded run's own (:func:`_produced`); with a
        shared store, what the session knows also in the graph's state (:data:`INPUTS_KEY`), written as the
        model's node ends: the other workers of the thread read it there, and check as input any message
        whose kind or text is not the one known.
        """
        _produced(session, _ai_messages(result))
        if not self._shared:
            return result
        command: Command[Any] = Command(update={INPUTS_KEY: _record(session, self._record_key)})
        if isinstance(result, AIMessage):
            return ExtendedModelResponse(model_response=ModelResponse(result=[result]), command=command)
        if isinstance(result, ExtendedModelResponse) and result.command is not None:
            return result  # not from create_agent's handler, which gives a plain response; re-checked instead
        return ExtendedModelResponse(model_response=_unwrapped(result), command=command)

    def _check_answer(self, eng: Engagement, text: str) -> str | GuardianDenied:
        """The output guardrail (and the guardian) on text the user gets as the agent's answer: the text to
        deliver, or the guardian's denial, to deliver a notice that the answer was blocked (AOS) in its place.

        A failed guardrail raises, and so does a denial under ``on_denied="raise"``: the run ends, and the
        hook's result, the answer, goes nowhere (neither into the graph state nor into a stream).
        """
        try:
            return eng.check_output(text)
        except GuardianDenied as exc:
            if self.on_denied == "raise":
                raise
            return exc

    async def _acheck_answer(self, eng: Engagement, text: str) -> str | GuardianDenied:
        try:
            return await eng.acheck_output(text)
        except GuardianDenied as exc:
            if self.on_denied == "raise":
                raise
            return exc

    def _visible(
        self, request: ModelRequest[Any], session: Session
    ) -> tuple[list[AnyMessage], list[tuple[int, str]]]:
        """The messages the model may see, and those among them that are input, with the text the guardrail
        reads of each (:func:`~agentguard_langchain._content.input_text`: all it may be sent, tool calls and
        ``additional_kwargs`` too): not yet through the guardrail and not produced by a guarded run
        (:attr:`Session.checked`), whatever their role.

        A user message is not the only input: a client that sends the whole message list can put a system
        message, or an assistant or tool message the model never wrote, in it (or in place of an earlier one,
        under its id), and the model reads each. Inputs are marked as checked once all of them were read, before
        the guardrail runs: if it fails, the engagement fails with it, and a later engagement of the thread
        knows the message was not new to it. A message that cannot be read whole (beyond the middleware's
        ``value_limits``, or its reading failing) raises :class:`~agentguard_langchain._sessions.Unreadable`
        before any mark: the run's hook fails the guardrail, and no message of the request passes for checked
        (a mark left by a read that failed halfway let the next run send an earlier message unchecked).
        """
        hidden = _hidden(request.state)
        messages = request.messages
        if hidden:
            hidden_ids = set(hidden)
            messages = [m for m in messages if m.id not in hidden_ids]
        _learn_produced(session)
        checked = session.checked
        pending: list[tuple[int, str]] = []
        read: list[tuple[str, Checked]] = []
        for index, message in enumerate(messages):
            if not _was_checked(checked, message):
                text, known = read_input(message, self._limits)
                pending.append((index, text))
                if message.id is not None:
                    read.append((message.id, known))
        checked.update(read)
        return messages, pending

    def _with_inputs(
        self,
        request: ModelRequest[Any],
        session: Session,
        messages: list[AnyMessage],
        pending: Sequence[tuple[int, str]],
        guarded: Sequence[str],
    ) -> ModelRequest[Any]:
        """The request with guarded input text in place of the original (now and at every later model call):
        a rewritten message is its new text alone (:func:`_rewritten_input`), and the tool results that
        answered its tool calls are left out with them: the ``ToolMessage`` s after it, up to the next assistant
        message, that answer one of its call ids (:func:`~agentguard_langchain._content.reply_ids`); a result
        under the same id after that answers a later call, and stays.

        Needed only when there were new inputs, a guardrail replaced text before, or messages are
        hidden: the model hooks skip it otherwise (most model calls of a run).
        """
        replaced = session.replaced
        edits: dict[int, str] = {}
        for (index, text), new_text in zip(pending, guarded, strict=True):
            message_id = messages[index].id
            if new_text != text:
                edits[index] = new_text
                if message_id is not None:
                    replaced[message_id] = new_text
            elif message_id is not None:  # new text under an earlier message's id: an old rewrite is void
                replaced.pop(message_id, None)
        changed = messages is not request.messages
        if edits or replaced:
            sent: list[AnyMessage] = []
            unanswered: set[str] = set()  # the calls of a rewritten message, until the next assistant message
            for index, message in enumerate(messages):
                if unanswered:
                    if isinstance(message, ToolMessage) and message.tool_call_id in unanswered:
                        changed = True
                        continue
                    if _speaks_for_the_model(message):
                        unanswered = set()
                edit = edits.get(index)
                if edit is None and message.id is not None:
                    edit = replaced.get(message.id)
                if edit is not None and input_text(message) != edit:
                    sent.append(_rewritten_input(message, edit))
                    unanswered |= reply_ids(message)
                    changed = True
                else:
                    sent.append(message)
            messages = sent
        return request.override(messages=messages) if changed else request

    # -- tool calls -----------------------------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Run the call through ``guard.call``; LangChain's handler is what runs the tool.

        Only a call that may wait in the graph's store (``call.stored``: output review by interrupt, with a
        store and a thread) has a stored result to adopt or release: the others skip those calls (under
        asyncio, each would cost a coroutine).
        """
        tool_results, tokens = streamed()
        if tool_results:
            raise _streamed_tool_results()
        session = self._open_session(request.state) or self._session(request.state, request.runtime.context)
        call = ToolCallTranslation(request, session, self._resolver, self._output_reviewed, unstreamed=tokens)
        with session.engagement.activate():
            scoped = CURRENT.set(call)  # ``with call`` (its Scope), written out: two frames less per call
            try:
                if session.held:  # an earlier run of the node paused: answers to replay, maybe
                    replay_interrupts(call.interrupts_to_replay())
                try:
                    output = self.guard.call(
                        call.capability,
                        call.inputs,
                        call.runner(handler),
                        call_id=call.call_id,
                        reasoning=call.reasoning,
                    )
                except GraphBubbleUp:
                    call.persist()  # paused for review: the held result waits for the re-run, on any worker
                    raise
                except Exception as exc:
                    result = call.fail(exc, self.on_denied)
                else:
                    if call.stored is not None:  # resumed from the shared record: the tool's own result
                        call.adopt()
                    result = call.finish(output)
            finally:
                CURRENT.reset(scoped)
        if call.stored is not None:  # only a result kept in the graph's store has anything to release
            call.release()  # before an error ends the run too: a withheld output must not stay stored
        if not isinstance(result, ToolMessage):  # the denial ends the run (on_denied="raise")
            raise result
        if call.ends_run(result):  # the run's answer (return_direct): no model call, no guardrail after it
            text = message_text(result)
            result = _guarded_tool_answer(result, text, self._check_answer(session.engagement, text))
        call.release_writes(result)  # what the tool wrote to the "custom" stream, if its message is let out
        session.produced.append(result)  # not input to the model calls after it
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        tool_results, tokens = streamed()
        if tool_results:
            raise _streamed_tool_results()
        session = self._open_session(request.state) or await self._asession(
            request.state, request.runtime.context
        )
        call = ToolCallTranslation(request, session, self._resolver, self._output_reviewed, unstreamed=tokens)
        with session.engagement.activate():
            scoped = CURRENT.set(call)
            try:
                if session.held:  # an earlier run of the node paused: answers to replay, maybe
                    replay_interrupts(call.interrupts_to_replay())
                try:
                    output = await self.guard.acall(
                        call.capability,
                        call.inputs,
                        call.arunner(handler),
                        call_id=call.call_id,
                        reasoning=call.reasoning,
                    )
                except GraphBubbleUp:
                    await call.apersist()
                    raise
                except Exception as exc:
                    result = call.fail(exc, self.on_denied)
                else:
                    if call.stored is not None:
                        await call.aadopt()
                    result = call.finish(output)
            finally:
                CURRENT.reset(scoped)
        if call.stored is not None:
            await call.arelease()
        if not isinstance(result, ToolMessage):
            raise result
        if call.ends_run(result):
            text = message_text(result)
            result = _guarded_tool_answer(result, text, await self._acheck_answer(session.engagement, text))
        call.release_writes(result)
        session.produced.append(result)
        return result


def _stopped_inputs(
    session: Session,
    messages: Sequence[BaseMessage],
    pending: Sequence[tuple[int, str]],
    stopped: int,
    exc: Exception,
) -> None:
    """The input guardrail stopped the run at the input message ``pending[stopped]``.

    The messages after it went through no check: they are no longer marked as checked, so the thread's next
    run checks them. A message a guardian denied stays in the thread's state, and the engagement goes on:
    the model reads a notice in its place from then on (it read the message itself at the next run).
    """
    for index, _ in pending[stopped + 1 :]:
        message_id = messages[index].id
        if message_id is not None:
            session.checked.pop(message_id, None)
    denied = messages[pending[stopped][0]].id
    if isinstance(exc, GuardianDenied) and denied is not None:
        session.replaced[denied] = f"The user's message was blocked by agentguard: {exc}"


def _record(session: Session, key: bytes | None) -> dict[str, list[str | None]]:
    """What the session knows of the thread's messages, as :data:`INPUTS_KEY` keeps it in the checkpoint."""
    record: dict[str, list[str | None]] = {}
    for message_id, known in session.checked.items():
        replaced = session.replaced.get(message_id)
        record[message_id] = [_seal(key, session.thread, message_id, known.digest, replaced), replaced]
    return record


SEAL_VERSION = "agentguard-langchain/seal/2"
"""The first field a record entry's seal covers (:func:`_seal`)."""


def _seal(key: bytes | None, thread: str | None, message_id: str, digest: str, replaced: str | None) -> str:
    """A record entry's first item: the message's digest (:func:`~agentguard_langchain._sessions.digest`), or
    with a ``record_key`` an HMAC of it bound to the thread, the message id and the text put in its place --
    which a client that can write the graph's state cannot make, nor move to another message or thread.
    Without a key the record is as trustworthy as whoever can write the state (see the README).

    The fields are sealed as one JSON array (:data:`SEAL_VERSION` first), which no choice of id or text can
    make read as other fields: joined with NULs, as the seals before :data:`SEAL_VERSION` 2 were, an id
    holding NULs took the seal of another message's entry."""
    if key is None:
        return digest
    sealed = canonical_json([SEAL_VERSION, thread, message_id, digest, replaced])
    return "hmac:" + hmac.new(key, sealed.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def _produced(session: Session, messages: Sequence[BaseMessage]) -> None:
    """Enter the model's ``messages``, as the checks let them out, in :attr:`Session.checked`: the thread's
    later model calls read them as the guarded run's own, not as input. A message without an id is given one
    (LangGraph would give it a random one as it adds it to the state). One that cannot be read is not known
    (:func:`~agentguard_langchain._sessions.known_as`): input to the next model call."""
    for message in messages:
        if message.id is None:
            message.id = str(uuid.uuid4())
        _enter(session, message.id, message)


def _enter(session: Session, message_id: str, message: BaseMessage) -> None:
    """Know ``message`` under ``message_id`` as it is now, or, when it cannot be read whole, not at all."""
    known = known_as(message)
    if known is None:
        session.checked.pop(message_id, None)
    else:
        session.checked[message_id] = known


def _learn_produced(session: Session) -> None:
    """Enter the tools' messages since the last model call in :attr:`Session.checked`, under the ids LangGraph
    gave them as it added them to the state (the objects the state holds: only LangGraph's nodes have touched
    them since). One still without an id never reached the state as it was returned (the run failed first):
    it is forgotten, and a copy of it in the state is input."""
    produced = session.produced
    if produced:
        session.produced = []
        for message in produced:
            if message.id is not None:
                _enter(session, message.id, message)


def _adopt_inputs(session: Session, state: Mapping[str, Any], key: bytes | None) -> None:
    """Take into ``session`` the messages of ``state`` that the input guardrail checked, or that guarded runs
    produced, on another worker or on this one before it lost the session, as they read now (and the text the
    guardrail put in their place), as the checkpoint records them.

    Not every message that precedes the run's new input: LangGraph puts a message sent under an earlier
    message's id in that message's place, and its new text (or kind) has been through no guardrail. A message
    the record does not name, or names with another digest (another kind, text, tool calls, ...), is checked
    as input; so is one named by a record an earlier version of this adapter wrote, whose digests covered less
    (:data:`~agentguard_langchain._sessions.DIGEST_VERSION`), or one sealed before :data:`SEAL_VERSION` 2
    (with a ``record_key``), or one that cannot be read (the guardrail then fails on it).
    """
    recorded = state.get(INPUTS_KEY)
    if not isinstance(recorded, Mapping):
        return
    for message in state.get("messages") or ():
        entry = recorded.get(message.id) if message.id else None
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            continue
        known = known_as(message)
        if known is None:
            continue
        replaced = entry[1] if isinstance(entry[1], str) else None
        expected = _seal(key, session.thread, message.id, known.digest, replaced)
        if isinstance(entry[0], str) and hmac.compare_digest(
            entry[0].encode("utf-8", "surrogatepass"), expected.encode("utf-8")
        ):
            session.checked[message.id] = known
            if isinstance(entry[1], str):
                session.replaced[message.id] = entry[1]
            else:
                session.replaced.pop(message.id, None)


def _was_checked(checked: Mapping[str, Checked], message: BaseMessage) -> bool:
    """Whether ``message`` is known to the session as it is now (``Session.checked``): all of it a model may be
    sent (:func:`~agentguard_langchain._sessions.unchanged`)."""
    message_id = message.id
    if message_id is None:
        return False
    entry = checked.get(message_id)
    return entry is not None and unchanged(entry, message)


_KEPT_ON_REWRITE = frozenset({"role", "tool_call_id", "status"})
"""What a rewritten input message keeps besides its new text: where it stands in the conversation (a
``ChatMessage``'s role, the call a ``ToolMessage`` answers and whether it failed), which the guardrail read no
text of (:func:`~agentguard_langchain._content.input_text`). A ``ChatMessage`` role that is no provider role
was read as text: it is not kept (:func:`_rewritten_input`)."""


def _rewritten_input(message: AnyMessage, text: str) -> AnyMessage:
    """``message`` as the input guardrail rewrote it: ``text`` alone, every other field a model may be sent
    back to its default (no name, no tool calls, no ``additional_kwargs``; no blocks, so no image or file,
    which went through no check and may show what the guardrail took out of the text).

    The guardrail read all of the message as one text (its tool calls' arguments too) and gave back one text:
    there is no telling which part of it is which field, so none of the old fields is kept -- a tool call the
    guardrail asked to change is not sent as it was. An assistant message that called tools is then an
    assistant message that did not, and :meth:`AgentGuardMiddleware._with_inputs` leaves the tool results
    that answered it out of the request too: every provider refuses a tool result without its call. The
    model reads the calls as the text the guardrail let through, without their results (fail closed).

    A ``ChatMessage`` whose role is no provider role (``customer 4111...``: a chat template writes it out, and
    the guardrail read it as part of the text) becomes a ``HumanMessage`` of the new text: its role would give
    the model what the guardrail took out.
    """
    if isinstance(message, ChatMessage) and not is_role(message.role):
        return HumanMessage(content=text, id=message.id)
    fields = type(message).model_fields
    update: dict[str, Any] = {"content": text}
    for name in model_fields(type(message)):
        default = fields[name].get_default(call_default_factory=True)
        if name not in _KEPT_ON_REWRITE and default is not PydanticUndefined:
            update[name] = default
    return message.model_copy(update=update)


def _speaks_for_the_model(message: BaseMessage) -> bool:
    """An assistant message: the tool results after it answer its calls, not an earlier message's."""
    return isinstance(message, AIMessage) or (
        isinstance(message, ChatMessage) and message.role.strip().casefold() in ("assistant", "ai", "model")
    )


def _earlier_messages(messages: Sequence[BaseMessage], previous: Session | None) -> Sequence[BaseMessage]:
    """The messages that precede this run's input: the new input is the trailing user messages that no
    earlier engagement of the thread has given to the model as they read now."""
    seen = previous.checked if previous is not None else {}
    start = len(messages)
    while start > 0 and is_user_message(messages[start - 1]) and not _was_checked(seen, messages[start - 1]):
        start -= 1
    return messages[:start]


def _ai_messages(result: ModelResult) -> list[BaseMessage]:
    return [result] if isinstance(result, AIMessage) else _unwrapped(result).result


def _unwrapped(result: ModelResponse[Any] | ExtendedModelResponse[Any]) -> ModelResponse[Any]:
    """The model response a result that is not a bare ``AIMessage`` holds."""
    return result.model_response if isinstance(result, ExtendedModelResponse) else result


def _rewrapped(result: ModelResult, response: ModelResponse[Any]) -> ModelResult:
    """``response`` in place of ``result``'s, keeping the command an extended response carries."""
    if isinstance(result, ExtendedModelResponse):
        return ExtendedModelResponse(model_response=response, command=result.command)
    return response


def _structured(result: ModelResult) -> str | None:
    """The text of the result's structured response (``response_format``), if it has one.

    It is the run's answer, delivered to the caller as ``structured_response``, and with a ``ToolStrategy``
    the model gives it as the arguments of a tool call, which the text answers do not include.
    """
    if isinstance(result, AIMessage):
        return None
    structured = _unwrapped(result).structured_response
    return None if structured is None else structured_text(structured)


def _with_structured(
    delivered: ModelResult, result: ModelResult, rewritten: bool, text: str, new: str | GuardianDenied
) -> ModelResult:
    """``delivered`` (the result as the checks of its text answers let it out) when its structured response
    (its text ``text``) passed the output guardrail as it is and none of its answers was ``rewritten``; else
    one message with the text the checks let out (``new``), or the notice of a denial, and no structured
    response.

    A structured response cannot carry rewritten text, and one the model gave as text (``ProviderStrategy``)
    was parsed from what the checks rewrote. A message without tool calls also ends the run.
    """
    if new == text and not rewritten:
        return delivered
    first = next((m for m in _ai_messages(result) if isinstance(m, AIMessage)), None)
    content = _notice(new) if isinstance(new, GuardianDenied) else new
    return _rewrapped(
        result, ModelResponse(result=[AIMessage(content=content, id=first.id if first else None)])
    )


def _rewritten(answers: Sequence[tuple[int, str]], guarded: Sequence[str | GuardianDenied]) -> bool:
    return any(new != text for (_, text), new in zip(answers, guarded, strict=True))


def _answers(result: ModelResult) -> list[tuple[int, str]]:
    """(index, text) of each AI message in a model result that reaches the user: a final answer (even an
    empty one), or text beside tool calls."""
    out: list[tuple[int, str]] = []
    for index, message in enumerate(_ai_messages(result)):
        if isinstance(message, AIMessage):
            text = message_text(message)
            if text or not message.tool_calls:
                out.append((index, text))
    return out


def _streamed_tool_results() -> ConfigurationError:
    """Why a run that streams with ``stream_mode="tools"`` is refused at its first tool call, before the tool
    runs: LangGraph would stream the tool's result as it ends, before the guard checked it (a withheld output
    would reach the stream whole)."""
    return ConfigurationError(
        'stream_mode="tools" streams each tool\'s result before agentguard has checked it, so a withheld '
        'output would be streamed; stream "updates", "values" or "messages" instead'
    )


def _notice(denial: GuardianDenied) -> str:
    """What the user reads in place of an answer a guardian denied."""
    return f"The response was blocked by agentguard: {denial}"


_PLAIN_METADATA = frozenset(
    {"finish_reason", "model", "model_name", "model_provider", "stop_reason", "system_fingerprint"}
)
"""What a rewritten answer keeps of the provider's ``response_metadata``: what names the model and why it
stopped, nothing that holds the text (``logprobs`` lists its tokens)."""


def _guarded_answer(message: AIMessage, new: str | GuardianDenied) -> AIMessage:
    """The message with its guarded text; a denied one is replaced by a notice without tool calls.

    A final answer the checks rewrote is its new text alone: its other blocks (reasoning, images), the
    provider's extra fields (a refusal, audio, parsed output) and the tokens' logprobs may hold what the
    checks took out of the text, which they never saw (as a rewritten tool answer keeps no artifact). Text
    beside tool calls keeps the rest of its message: providers need a turn's reasoning sent back with its
    calls.
    """
    if isinstance(new, GuardianDenied):
        return AIMessage(content=_notice(new), id=message.id)
    if message.tool_calls:
        return with_text(message, new)
    metadata = {key: value for key, value in message.response_metadata.items() if key in _PLAIN_METADATA}
    return AIMessage(
        content=new,
        id=message.id,
        name=message.name,
        response_metadata=metadata,
        usage_metadata=message.usage_metadata,
    )


def _guarded_tool_answer(message: ToolMessage, text: str, new: str | GuardianDenied) -> ToolMessage:
    """A tool's message that ends the run (its text ``text``), as the output guardrail let it out (``new``).

    It stays the answer to the model's tool call (a chat model rejects a tool call left without one, at the
    thread's next run). A denied one becomes a notice (status ``error``, as a withheld tool result). A
    rewritten one is its new text alone, as a rewritten answer of the model is: the guardrail saw the text
    only, and the artifact or another block (an image) may hold what it took out of it.
    """
    if isinstance(new, GuardianDenied):
        return ToolMessage(
            content=_notice(new),
            tool_call_id=message.tool_call_id,
            name=message.name,
            id=message.id,
            status="error",
        )
    if new == text:
        return message
    return message.model_copy(update={"content": new, "artifact": None})


def _unchecked(message: AIMessage) -> bool:
    """Whether a final answer carries more than the text the checks read: a reasoning or thinking block (which
    some hosts show the user), an image, a text block's annotations, a provider's extra field (a refusal,
    audio, reasoning content), a tool call whose arguments did not parse (their raw text)."""
    if message.invalid_tool_calls or any(message.additional_kwargs.values()):
        return True
    content = message.content
    return not isinstance(content, str) and not all(
        isinstance(block, str)
        or (
            isinstance(block, dict)
            and block.get("type") == "text"
            and not any(value for key, value in block.items() if key not in _PLAIN_BLOCK)
        )
        for block in content
    )


_PLAIN_BLOCK = frozenset({"type", "text", "id", "index"})
"""The fields of a text block that hold nothing but its text, and the text itself."""


def _with_answers(
    result: ModelResult, answers: Sequence[tuple[int, str]], guarded: Sequence[str | GuardianDenied]
) -> ModelResult:
    """``result`` with each answer as the checks let it out. A final answer they passed is delivered as it
    came only when its text is all it carries; else as its text alone, as a rewritten one is: its reasoning,
    images and extra fields went through no check. Text beside tool calls keeps the rest of its message."""
    messages = _ai_messages(result)
    changes = {
        index: new
        for (index, text), new in zip(answers, guarded, strict=True)
        if new != text or (isinstance(m := messages[index], AIMessage) and not m.tool_calls and _unchecked(m))
    }
    if not changes:
        return result
    if isinstance(result, AIMessage):
        return _guarded_answer(result, changes[0])
    response = _unwrapped(result)
    messages = [
        _guarded_answer(m, changes[i]) if i in changes and isinstance(m, AIMessage) else m
        for i, m in enumerate(response.result)
    ]
    return _rewrapped(
        result, ModelResponse(result=messages, structured_response=response.structured_response)
    )
