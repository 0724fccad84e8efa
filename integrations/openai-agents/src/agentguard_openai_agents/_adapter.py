"""``AgentGuard``: one OpenAgentSpec guard wrapped around OpenAI Agents SDK agents.

::

    from agents import Runner, SQLiteSession
    from agentguard import Guard, User
    from agentguard_openai_agents import AgentGuard

    guarded = AgentGuard(Guard.from_file("agent.yaml"))
    agent = guarded.wrap(agent)                       # tools, handoffs, guardrails: one call
    async with guarded.session(SQLiteSession("c-1"), user=User(id="u-42")) as session:
        result = await Runner.run(agent, "Where is A-1?", session=session, hooks=guarded.hooks)

What goes where: every function tool's ``on_invoke_tool`` runs through ``guard.acall`` (see
:mod:`agentguard_openai_agents._tools`); the spec's guardrails are the agent's blocking input guardrail and
its output guardrail; the agent's model holds a streamed answer until it is checked, and checks the text a
response shows beside its tool calls before the SDK sees it (see :mod:`agentguard_openai_agents._streaming`);
handoffs and agents-as-tools are agent capabilities, an agent tool's own run guarded in the same engagement;
:attr:`AgentGuard.hooks` records the model's messages (checking the text beside tool calls of a model the adapter
does not hold) and settles rejected reviews. What the adapter cannot guard is refused (:class:`UnguardedTool`):
at ``wrap``, and again at each run's start and model call, for what was added since; a response showing that the
model's provider ran a tool ends the run. The engagement is the one current in the calling context: a
:meth:`AgentGuard.session` block, or any ``with guard.engagement(...)`` block.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from agentguard import Engagement, EngagementStatus, Guard, GuardrailViolation, Phase, PolicyViolation, User
from agentguard_openai_agents._host import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    Handoff,
    InputGuardrail,
    Model,
    ModelResponse,
    OutputGuardrail,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    RunContextWrapper,
    RunHooks,
    Session,
    Tool,
    TResponseInputItem,
    handoff,
)
from agentguard_openai_agents._messages import (
    Shown,
    beside_answer,
    item_field,
    message_text,
    provider_run,
    with_text,
)
from agentguard_openai_agents._sessions import GuardedSession
from agentguard_openai_agents._streaming import CheckedModel
from agentguard_openai_agents._tools import (
    CallKey,
    GuardedHandoff,
    GuardedTool,
    Pending,
    ReviewPending,
    UnguardedTool,
    calling,
    sdk_reviewer,
    spec_name,
    stopping,
)
from agentguard_openai_agents._withheld import OutputWithheld

__all__ = ["AgentGuard", "GuardHooks"]

_lock = threading.Lock()


class AgentGuard:
    """Guards OpenAI Agents SDK agents with one :class:`~agentguard.Guard`.

    ``names`` maps SDK tool and agent names to spec names where the default (lowercase, ``_`` and spaces
    turned into ``-``) does not fit. Reviewer ids the spec names and nobody answers on the Guard are answered
    through the SDK's approvals (``result.interruptions`` → ``RunState.approve`` / ``reject``).
    """

    def __init__(self, guard: Guard, *, names: Mapping[str, str] | None = None) -> None:
        self.guard = guard
        self.names = dict(names or {})
        self.prerun: dict[CallKey, tuple[str, Any]] = {}
        """Outcomes of calls the pipeline decided in ``needs_approval``, by engagement id, SDK tool name and
        call id, until the SDK invokes: each with the inputs it was decided for (see ``_tools._asked``)."""
        self.pending: dict[CallKey, Pending] = {}
        """Calls paused for the SDK's approval, by engagement id, SDK tool name and call id."""
        self._engagements: dict[str, Engagement] = {}
        self._inputs_passed: weakref.WeakKeyDictionary[Engagement, set[str]] = weakref.WeakKeyDictionary()
        """The user messages the input guardrail passed, by engagement: a session's history is not checked again."""
        self._answered: weakref.WeakKeyDictionary[Engagement, str] = weakref.WeakKeyDictionary()
        """The answer a streamed response was checked with, by engagement, until the output guardrail sees it."""
        self._checked: weakref.WeakValueDictionary[int, Shown] = weakref.WeakValueDictionary()
        """Messages :meth:`check_message` passed, by ``id`` while they live: the hooks do not check them again."""
        self._reviews = _review_map(guard)
        guard.add_passthrough_exceptions(ReviewPending)
        with _lock:  # idempotent: a second AgentGuard on the same Guard reuses the SDK reviewers
            for reviewer_id in sorted(guard.required_reviewers()):
                existing, _ = guard.reviewer_for(reviewer_id)
                if existing is None:
                    guard.add_reviewer(reviewer_id, sdk_reviewer(reviewer_id))
        self.input_guardrail: InputGuardrail[Any] = InputGuardrail(
            guardrail_function=self._check_input, name="agentguard-input", run_in_parallel=False
        )
        """The spec's input guardrail, blocking: the model never sees input that fails it."""
        self.output_guardrail: OutputGuardrail[Any] = OutputGuardrail(
            guardrail_function=self._check_output, name="agentguard-output"
        )
        self.hooks = GuardHooks(self)
        """Pass as ``Runner.run(..., hooks=guarded.hooks)``: model messages and handoffs recorded, rejected
        reviews settled before the model runs again."""

    # -- what the spec asks for --------------------------------------------------------------------------

    def reviewed(self, name: str) -> bool:
        """May a call of ``name`` need review? (Then the SDK asks ``needs_approval`` before running it.)"""
        return name in self._reviews or "*" in self._reviews

    def reviews_output(self, name: str) -> bool:
        return any(phase is Phase.OUTPUT for phase, _ in self._reviews.get(name, ()))

    def asks_sdk(self, name: str) -> bool:
        """May a review of a call of ``name`` be answered through the SDK's approvals (a reviewer id nobody answers
        on the Guard, now)? Only then must ``needs_approval`` run the call's pipeline, to learn whether the run
        pauses; a review the Guard answers is asked when the SDK invokes the tool."""
        for _, reviewer_id in (*self._reviews.get(name, ()), *self._reviews.get("*", ())):
            reviewer, _ = self.guard.reviewer_for(reviewer_id)
            if reviewer is None or hasattr(reviewer, "__agentguard_sdk_review__"):
                return True
        return False

    # -- wrapping ----------------------------------------------------------------------------------------

    def wrap(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose function tools, agents-as-tools and handoffs go through the guard, with
        the spec's guardrails. Idempotent; handoff targets are wrapped too (cycles included). A model object
        (not a model name) is wrapped in a :class:`CheckedModel`, so that ``Runner.run_streamed`` holds each
        answer until it is checked.

        Refuses (:class:`UnguardedTool`, a ``ValueError``) what it cannot guard: hosted tools (run by the model's
        provider, which hands their results to the model), MCP servers (their tools are listed at run time), an
        agent tool (``Agent.as_tool``) made of an agent it did not wrap (that agent's own tools would run
        unguarded), and an agent it wrapped whose tools or handoffs changed since.
        """
        return self._wrap(agent, {})

    def _wrap(self, agent: Agent[Any], done: dict[int, Agent[Any]]) -> Agent[Any]:
        """``wrap`` with ``done``: the agents wrapped in this call so far, by id (handoff cycles end there)."""
        if id(agent) in done:
            return done[id(agent)]
        if self._wrapped(agent):
            self.check_reach(agent)
            return agent
        if agent.mcp_servers:
            _refuse(_mcp_servers(agent))
        tools = [self._guarded_tool(agent, tool) for tool in agent.tools]
        self._one_to_one(agent.name, tools)
        clone = agent.clone(
            tools=tools,
            input_guardrails=[*agent.input_guardrails, self.input_guardrail],
            output_guardrails=[*agent.output_guardrails, self.output_guardrail],
        )
        done[id(agent)] = clone
        if isinstance(agent.model, Model):
            clone.model = CheckedModel(self, agent.model, clone)
        elif self.guard.checks_answers:
            # A model named by a string is resolved per run by the run's provider, out of the adapter's reach:
            # a streamed run of this agent would hand out tokens before the check. Said now, not found later.
            warnings.warn(
                f"agent {agent.name!r} names its model ({agent.model or 'the SDK default'!r}): "
                "Runner.run_streamed hands out its answers' tokens before agentguard checks them, and text "
                "beside its tool calls is checked only in runs given hooks=guarded.hooks; give the agent a "
                "model object to hold each response until checked",
                UncheckedStreamWarning,
                stacklevel=3,
            )
        clone.handoffs = [self._handoff(h, done) for h in agent.handoffs]
        return clone

    def _guarded_tool(self, agent: Agent[Any], tool: Tool) -> FunctionTool:
        """The guarded copy of one of ``agent``'s tools (refused if it cannot be guarded)."""
        if not isinstance(tool, FunctionTool):
            _refuse(f"agent {agent.name!r}: {_unguardable(tool)}")
        if not _runs_agent(tool):
            return GuardedTool(self, tool, "tool").build(tool)
        # The tool runs its agent (``Agent.as_tool`` keeps it in a private attribute, 0.24) in a run of its own:
        # guarded only if that agent is one this adapter wrapped, its calls then checked in the same engagement.
        inner = getattr(tool, "_agent_instance", None)
        if not (isinstance(inner, Agent) and self._wrapped(inner)):
            _refuse(f"agent {agent.name!r}: {_unguardable(tool)}")
        self.check_reach(inner)
        return GuardedTool(self, tool, "agent").build(tool)

    def _one_to_one(self, owner: str, tools: Iterable[FunctionTool]) -> None:
        """Refuse two tools of one agent that stand for one capability (``send_email`` and ``Send Email`` both
        ``send-email``): the second would run with the first's permission and restrictions, and share its loop
        count and history. A name of ``names`` tells them apart (decision 29)."""
        seen: dict[str, str] = {}
        for tool in tools:
            capability = spec_name(tool.name, self.names)
            other = seen.setdefault(capability, tool.name)
            if other != tool.name:
                raise ValueError(
                    f"agent {owner!r}: tools {other!r} and {tool.name!r} both stand for capability {capability!r}; "
                    "map one of them to another spec name (AgentGuard(..., names={...})) or rename it"
                )

    def _wrapped(self, agent: Agent[Any]) -> bool:
        """Did this adapter wrap ``agent`` (it has the adapter's input guardrail)?"""
        return any(g is self.input_guardrail for g in agent.input_guardrails)

    def check_reach(self, agent: Agent[Any]) -> None:
        """Refuse (:class:`UnguardedTool`) an agent this adapter wrapped whose tools, handoffs or MCP servers changed
        since (``agent.tools.append(...)``, ``agent.clone(tools=...)``): what was added would run unguarded.
        Asked by :meth:`wrap`, by the input guardrail when a run starts, and by the hooks before each model call."""
        if agent.mcp_servers:
            _refuse(_mcp_servers(agent))
        self.check_tools(agent.name, agent.tools, agent.handoffs)

    def check_tools(
        self, owner: str, tools: Iterable[Tool], handoffs: Iterable[Agent[Any] | Handoff[Any, Any]]
    ) -> None:
        """Refuse (:class:`UnguardedTool`) a tool or handoff of agent ``owner`` that this adapter does not guard.
        :class:`CheckedModel` asks it with what the SDK offers the model on each call (MCP tools included)."""
        for tool in tools:
            if _adapter_of(getattr(tool, "on_invoke_tool", None)) is not self:
                _refuse(f"agent {owner!r}: {_unguardable(tool)}")
        for target in handoffs:
            if not isinstance(target, Handoff) or _adapter_of(target.on_invoke_handoff) is not self:
                name = target.name if isinstance(target, Agent) else target.agent_name
                _refuse(
                    f"agent {owner!r}: the handoff to {name!r} was added after wrap and would run that agent "
                    "unguarded; wrap the agent once its handoffs are set"
                )

    def check_provider_run(self, agent: Agent[Any], output: Iterable[Any]) -> None:
        """Refuse (:class:`UnguardedTool`) a model response of ``agent`` showing that the model's provider ran a
        tool itself: a hosted tool the agent got elsewhere than its tools (a stored prompt), whose call nobody
        checked. The run ends there, before the SDK or the caller sees the call's result."""
        called = provider_run(output)
        if called is not None:
            _refuse(
                f"agent {agent.name!r}: the model's provider ran a hosted tool ({called}) that the agent was given "
                "outside its tools (a stored prompt?): agentguard never checked the call and withholds its result; "
                "remove that tool"
            )

    def _handoff(
        self, target: Agent[Any] | Handoff[Any, Any], done: dict[int, Agent[Any]]
    ) -> Handoff[Any, Any]:
        spec = handoff(self._wrap(target, done)) if isinstance(target, Agent) else target
        return dataclasses.replace(spec, on_invoke_handoff=GuardedHandoff(self, spec).on_invoke_handoff)

    # -- engagements -------------------------------------------------------------------------------------

    def session(self, session: Session | None = None, *, user: User | None = None) -> GuardedSession:
        """The engagement of one SDK session, current for a ``with`` / ``async with`` block (one per run).

        The same session id gets the same engagement across runs, unless the spec says
        ``retain_memory: false``: then every block is a fresh engagement, and the session the block yields
        returns only what was added inside it, so the model never sees earlier runs. Pass the yielded object
        as ``Runner.run(..., session=...)``. Without a session, each block is a fresh engagement.

        An engagement the guard stopped (a loop) or failed (a guardrail) stays the session's, refusing every
        later run: a fresh one would hand the model a clean record (loop detector, ``history``) just for having
        tripped a rule. Only one the app closed (:meth:`close_session`) gives way to a new one.
        """
        key = session.session_id if session is not None else None
        with _lock:
            eng = self._engagements.get(key) if key is not None and self.guard.retain_memory else None
            if eng is None or eng.status is EngagementStatus.CLOSED:
                eng = self.guard.engagement(user, metadata={"session_id": key} if key else None)
                if key is not None and self.guard.retain_memory:
                    self._engagements[key] = eng
        return GuardedSession(eng, session, keep=self.guard.retain_memory)

    def engagement_for(self, session_id: str) -> Engagement | None:
        """The engagement kept for an SDK session id (``None`` before its first run, or without memory)."""
        return self._engagements.get(session_id)

    def close_session(self, session_id: str) -> None:
        """End the engagement kept for ``session_id`` and let the session's next block start a fresh one: the app's
        way to go on with a session the guard stopped (a loop) or failed (a guardrail). Closing the engagement
        itself does not do it: a stopped or failed engagement keeps that status when closed, so the session would
        go on refusing."""
        with _lock:
            eng = self._engagements.pop(session_id, None)
        if eng is not None:
            eng.close()

    def _engagement(self) -> Engagement:
        eng = self.guard.current_engagement()
        if eng is None:
            raise RuntimeError(
                "the guarded agent ran outside an engagement: run it inside `with guarded.session(...)` or "
                "`with guard.engagement(...)`"
            )
        return eng

    # -- guardrails --------------------------------------------------------------------------------------

    async def _check_input(
        self, ctx: RunContextWrapper[Any], agent: Agent[Any], data: str | list[TResponseInputItem]
    ) -> GuardrailFunctionOutput:
        """The input guardrail, blocking: run first, before any model call. It refuses an agent changed since
        :meth:`wrap` (whatever the model), and checks the user's input, which starts a turn: every user message the
        model will read, the newest and the earlier ones this engagement has not passed. An agent tool's own
        run (inside a guarded call) is no user input: its input is the call's arguments, checked as the agent
        capability's inputs."""
        eng = self._engagement()
        self.check_reach(agent)
        if calling():
            return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)
        eng.new_turn()
        texts = _user_texts(data)
        newest = texts.pop() if texts else ""
        passed = self._inputs_passed.setdefault(eng, set())
        # Earlier user messages of the input (a session's history, a list the app built) reach the model too: each
        # is checked unless this engagement's guardrail passed that very text before. The newest starts the turn and
        # is always checked.
        for text in [*(t for t in dict.fromkeys(texts) if t not in passed), newest]:
            violation = await _guardrail(eng, text, Phase.INPUT)
            if violation is not None:
                return GuardrailFunctionOutput(output_info=violation, tripwire_triggered=True)
            passed.add(text)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)

    async def _check_output(
        self, ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any
    ) -> GuardrailFunctionOutput:
        """The output guardrail: the final output, unless the agent's model already had it checked (then it is
        passed on without a second check and record). A stopped output raises :class:`OutputWithheld` from here
        rather than tripping the SDK's tripwire, whose exception would carry the output."""
        eng = self._engagement()
        text = _answer_text(output)
        if self._answered.pop(eng, None) != text:
            await self._withhold(eng, agent, text)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)

    async def check_answer(self, agent: Agent[Any], output: Any) -> None:
        """The output guardrail's check of a final output, run by :class:`CheckedModel` before the SDK sees the
        response (raises :class:`OutputWithheld`). A passed answer is remembered, so the output guardrail does not
        check (and record) it twice."""
        eng = self._engagement()
        text = _answer_text(output)
        await self._withhold(eng, agent, text)
        self._answered[eng] = text

    async def _withhold(self, eng: Engagement, agent: Agent[Any], text: str) -> None:
        """Check a final answer; raise :class:`OutputWithheld` if it is stopped.

        A guardian's denial is a stop like a failed guardrail: raised as itself from an output guardrail, the SDK
        would take it for a broken guardrail and save the answer to the run's session before re-raising it.
        """
        violation: PolicyViolation | None
        try:
            violation = await _guardrail(eng, text, Phase.OUTPUT)
        except PolicyViolation as exc:
            violation = exc
        if violation is not None:
            raise self.tripwire(agent, violation) from violation

    async def check_message(self, agent: Agent[Any], message: Shown) -> Shown:
        """Check a model message the output guardrail will not see (text beside tool calls, a message before the
        answer, a refusal, a reasoning item: see :mod:`agentguard_openai_agents._messages`) as the spec checks any
        model response before the user sees it. Returns the message to pass on: itself, or a copy saying what a
        guardian's ``modify`` put instead. A failed guardrail raises :class:`OutputWithheld` (the SDK's
        ``OutputGuardrailTripwireTriggered``, as for the final answer), a guardian's denial
        :class:`~agentguard.GuardianDenied`: the run ends there, before any tool of the response runs."""
        eng = self._engagement()
        text = message_text(message)
        try:
            checked = await eng.acheck_output(text)
        except GuardrailViolation as exc:
            raise self.tripwire(agent, exc) from exc
        passed = message if checked == text else with_text(message, checked)
        self._checked[id(passed)] = passed
        return passed

    def tripwire(self, agent: Agent[Any], violation: PolicyViolation) -> OutputWithheld:
        """The SDK's error for an output of ``agent`` the guard stopped, as its output guardrail raises it,
        without the output (see :mod:`agentguard_openai_agents._withheld`)."""
        return stopping(OutputWithheld(self.output_guardrail, agent, violation))

    def was_checked(self, message: Shown) -> bool:
        """Did :meth:`check_message` pass this very message (the model's response was checked on its way)?"""
        return self._checked.get(id(message)) is message

    def forget_answer(self) -> None:
        """Drop a streamed answer the output guardrail never saw (the run ended first): each model call starts
        clean, so an earlier pass never excuses a later answer from its check."""
        eng = self.guard.current_engagement()
        if eng is not None:
            self._answered.pop(eng, None)


class UncheckedStreamWarning(UserWarning):
    """:meth:`AgentGuard.wrap` was given an agent whose model is a name while the guard checks answers: its
    streamed runs hand out tokens before the check (its non-streamed runs are checked as usual, the text beside
    tool calls when the run is given ``hooks=guarded.hooks``)."""


def _runs_agent(tool: FunctionTool) -> bool:
    """Is ``tool`` an agent tool? ``Agent.as_tool`` marks its tools with this private flag; no public accessor
    says so (0.24)."""
    return bool(getattr(tool, "_is_agent_tool", False))


def _adapter_of(method: object) -> AgentGuard | None:
    """The adapter whose guarded tool or handoff ``method`` is a method of (``None``: not one of them)."""
    owner = getattr(method, "__self__", None)
    return owner.adapter if isinstance(owner, GuardedTool | GuardedHandoff) else None


def _unguardable(tool: Tool) -> str:
    """Why ``tool`` cannot be in a guarded agent's reach, and what to do."""
    name = getattr(tool, "name", "")
    if not isinstance(tool, FunctionTool):
        return (
            f"{type(tool).__name__} {name!r} runs outside this process and cannot be guarded (a hosted tool runs "
            "at the model's provider, which hands its results straight to the model: agentguard could neither "
            "check its calls nor withhold its results); remove it"
        )
    if _runs_agent(tool):
        inner = getattr(getattr(tool, "_agent_instance", None), "name", None)
        return (
            f"tool {name!r} runs agent {inner!r} in a run of its own, whose tools agentguard guards only if that "
            "agent is wrapped: make the tool of the wrapped agent, guarded.wrap(agent).as_tool(...)"
        )
    return (
        f"function tool {name!r} was added after wrap (or listed by an MCP server) and would run unguarded; wrap "
        "the agent once its tools are set"
    )


def _refuse(reason: str) -> NoReturn:
    """Raise :class:`UnguardedTool` (noted for the agent tool call this runs in, if any: see :func:`stopping`)."""
    raise stopping(UnguardedTool(reason))


def _mcp_servers(agent: Agent[Any]) -> str:
    return (
        f"agent {agent.name!r} has MCP servers: their tools are listed at run time and would bypass agentguard; "
        "convert them to function tools or guard the MCP client"
    )


def _answer_text(output: Any) -> str:
    """A final output as the text the output guardrail checks (structured output as JSON)."""
    return output if isinstance(output, str) else json.dumps(output, default=str, ensure_ascii=False)


async def _guardrail(eng: Engagement, text: str, phase: Phase) -> GuardrailViolation | None:
    """Run one guardrail: the violation that stops the message, if any.

    The SDK's guardrails cannot rewrite text, so a guardian ``modify`` of the message fails closed.
    """
    try:
        checked = await (eng.acheck_input(text) if phase is Phase.INPUT else eng.acheck_output(text))
    except GuardrailViolation as exc:
        return exc
    if checked != text:
        reason = (
            "the guardian rewrote the message and an OpenAI Agents SDK guardrail cannot pass a rewrite on"
        )
        return GuardrailViolation(reason, phase=phase)
    return None


def _user_texts(data: str | list[TResponseInputItem]) -> list[str]:
    """The user messages of a run's input, oldest first, as text (what the input guardrail checks). The SDK takes
    items and their parts as mappings or as the OpenAI client's models: a message read as neither would be checked
    as empty while the model reads it."""
    if isinstance(data, str):
        return [data]
    texts: list[str] = []
    for item in data:
        if item_field(item, "role") == "user":
            content = item_field(item, "content")
            parts = content if isinstance(content, list) else ()
            texts.append(
                content
                if isinstance(content, str)
                else "\n".join(str(item_field(p, "text") or "") for p in parts)
            )
    return texts


def _review_map(guard: Guard) -> dict[str, frozenset[tuple[Phase, str]]]:
    """Capability → the (phase, reviewer id) reviews the spec asks; ``"*"`` for review gates added outside the spec
    (the Guard does not say which capability a gate is on, so every call may need review)."""
    reviews: dict[str, frozenset[tuple[Phase, str]]] = {}
    named: set[str] = set()
    for name, cap in guard.spec.capabilities.items():
        if cap is None:
            continue
        asked = {
            (phase, restriction.require_review)
            for phase, restriction in (
                (Phase.INPUT, cap.input_restriction),
                (Phase.OUTPUT, cap.output_restriction),
            )
            if restriction is not None and restriction.require_review
        }
        named.update(reviewer_id for _, reviewer_id in asked)
        if asked:
            reviews[name] = frozenset(asked)
    if gated := guard.required_reviewers() - named:
        reviews["*"] = frozenset((Phase.INPUT, reviewer_id) for reviewer_id in gated)
    return reviews


class GuardHooks(RunHooks[Any]):
    """Run hooks for what the guardrails and tools do not see: the model's messages.

    Each model answer that asks for tools is recorded as a ``steps/message`` (the final answer goes through
    the output guardrail instead). When the guard checks answers, the text a response shows beside its tool
    calls (or before its answer, or as a refusal) is checked: :class:`CheckedModel` has done so on the way
    when the agent's model object made the response; for a model the adapter does not hold (a model name,
    ``RunConfig.model``) it is done here, still before any tool of the response runs; so is the refusal of a
    response showing that the provider ran a tool. Before each model call, the agent is checked for tools or
    handoffs added since ``wrap``, and reviews the SDK rejected are recorded as rejections (the SDK never
    invokes a rejected tool, so nothing else would).
    """

    def __init__(self, adapter: AgentGuard) -> None:
        self.adapter = adapter

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        self.adapter.check_reach(agent)
        pending = self.adapter.pending
        eng = self.adapter.guard.current_engagement()
        for key, paused in list(pending.items()):
            engagement_id, name, call_id = key
            if eng is None or engagement_id != eng.id or paused.answered:
                continue  # another engagement's call, which this run's approvals do not answer
            if context.is_tool_approved(name, call_id) is False:
                del pending[key]
                await paused.tool.settle(context, call_id, paused)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.adapter.check_provider_run(agent, response.output)
        eng = self.adapter.guard.current_engagement()
        if eng is None:
            return
        if self.adapter.guard.checks_answers:
            beside = beside_answer(response.output)
            for _, message in beside:
                if self.adapter.was_checked(message):
                    continue
                # Not made by a CheckedModel: checked now, before the SDK runs a tool or hands out the run's
                # result. Its items hold this very message, so a guardian's replacement is put into it.
                passed = await self.adapter.check_message(agent, message)
                for name in type(passed).model_fields if passed is not message else ():
                    setattr(message, name, getattr(passed, name))
            if any(isinstance(item, ResponseOutputMessage) for _, item in beside):
                return  # each check recorded its message
        calls = [item.name for item in response.output if isinstance(item, ResponseFunctionToolCall)]
        if calls:
            text = "".join(
                getattr(part, "text", "")
                for item in response.output
                if isinstance(item, ResponseOutputMessage)
                for part in item.content
            )
            await eng.areport_message("agent", text or json.dumps(calls))
