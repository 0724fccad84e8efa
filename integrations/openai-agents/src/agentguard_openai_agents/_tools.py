"""One SDK function tool (or handoff) call translated into one ``guard.acall``, and the verdict translated back.

The pipeline decides; this module maps names, hands the pipeline a function that runs the SDK's own invoker
with the arguments the pipeline lets through (so a guardian ``modify`` reaches the tool), and turns a denial
into tool output the model can recover from, or a loop stop / failed guardrail into :class:`RunStopped`.

Review (``require_review``) goes through the SDK's human-in-the-loop. A reviewed tool gets a ``needs_approval``
callable that runs the call through the pipeline *before* the SDK would invoke it:

- the local checks (capability, loop, restrictions, guardian) run first, so a denied call is never sent for
  approval; its denial is kept by call id and handed to the model when the SDK invokes the tool;
- an input review with no decision yet pauses: ``needs_approval`` answers ``True`` and the run ends with
  ``result.interruptions``;
- an output review runs the tool first; the result is held by the core (keyed by call id) and the run pauses
  the same way, so the model has not seen it. On resume after ``RunState.approve`` the SDK invokes the tool,
  the core hands back the held result: the tool does not run again.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agentguard import (
    Approval,
    Phase,
    PolicyViolation,
    ReviewRequest,
)
from agentguard_openai_agents._host import (
    Agent,
    AgentsException,
    FunctionTool,
    Handoff,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    ToolContext,
    invoke_function_tool,
)
from agentguard_openai_agents._withheld import OutputWithheld

if TYPE_CHECKING:
    from agentguard_openai_agents._adapter import AgentGuard

__all__ = [
    "GuardedHandoff",
    "GuardedTool",
    "ReviewPending",
    "RunStopped",
    "UnguardedTool",
    "calling",
    "sdk_reviewer",
    "spec_name",
    "stopping",
    "violation_of",
]


class RunStopped(AgentsException):
    """The run ended because agentguard stopped it inside a tool call or handoff (loop, closed engagement).

    An :class:`agents.AgentsException`, so the SDK passes it through unchanged; ``violation`` (also the
    ``__cause__``) is agentguard's typed error, e.g. :class:`~agentguard.ShortCircuitViolation`.
    """

    def __init__(self, violation: PolicyViolation) -> None:
        super().__init__(str(violation))
        self.violation = violation
        self.__cause__ = violation


class UnguardedTool(AgentsException, ValueError):
    """A tool or handoff agentguard does not guard is within a guarded agent's reach, and is refused rather than
    run unguarded: by :meth:`AgentGuard.wrap <agentguard_openai_agents.AgentGuard.wrap>`, when a run starts or a
    model is called with it, or when a model's response shows that its provider ran one (a hosted tool).

    A ``ValueError``, for it is the agent's setup that must change; an :class:`agents.AgentsException`, so the
    SDK passes it through a run unchanged.
    """


class ReviewPending(Exception):
    """The SDK has no decision yet on a reviewed call: the run must pause (a host control-flow exception)."""


def violation_of(error: BaseException) -> PolicyViolation | None:
    """agentguard's typed error inside an exception a guarded run ended with (``None`` if there is none).

    Covers :class:`RunStopped` and the SDK's input / output guardrail tripwires raised by the guard's
    guardrails (their ``output_info`` is the violation; an output tripwire also keeps it as ``violation``, for
    the SDK replaces the guardrail result of a stopped tool result with one without it).
    """
    if isinstance(error, PolicyViolation):
        return error
    if isinstance(error, RunStopped | OutputWithheld):
        return error.violation
    if isinstance(error, InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered):
        info = error.guardrail_result.output.output_info
        return info if isinstance(info, PolicyViolation) else None
    return None


def spec_name(sdk_name: str, names: Mapping[str, str]) -> str:
    """The spec name of an SDK tool or agent: an explicit mapping, else lowercase with runs of other
    characters than letters, digits, ``.`` and ``-`` turned into ``-`` (``lookup_order`` → ``lookup-order``,
    ``"Billing agent"`` → ``billing-agent``)."""
    mapped = names.get(sdk_name)
    return mapped if mapped is not None else re.sub(r"[^a-z0-9.-]+", "-", sdk_name.lower()).strip("-")


def denial_text(exc: PolicyViolation) -> str:
    """What the model reads instead of the tool's output when agentguard denied the call."""
    after = (
        "The tool ran, but its result was withheld." if exc.phase is Phase.OUTPUT else "The tool was not run."
    )
    return f"agentguard denied this tool call: {exc}. {after}"


# -- review through the SDK's approvals ---------------------------------------------------------------


CallKey = tuple[str | None, str, str]
"""(engagement id, SDK tool name, call id): where a call the pipeline decided in ``needs_approval``, or a call
paused for the SDK's approval, waits. A call id is the model's (or its provider's: some number calls ``call_0``,
``call_1`` in every conversation) to write, so it names a call only within one engagement and tool."""


@dataclass
class Pending:
    """A reviewed call the SDK was asked to approve: the phase it was asked for, and how to settle it."""

    tool: GuardedTool
    inputs: dict[str, Any]
    phase: Phase
    answered: bool = False


@dataclass(frozen=True)
class _Scope:
    """The SDK call the pipeline is deciding right now: where its reviewer reads the SDK's decision."""

    adapter: AgentGuard
    context: RunContextWrapper[Any]
    tool: GuardedTool
    call_id: str
    inputs: dict[str, Any]
    stops: list[AgentsException] = field(default_factory=list)
    """What agentguard raised to end the agent's own run, when the call is an agent tool's (see :func:`stopping`)."""


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("agentguard_oa_scope", default=None)

_Stop = TypeVar("_Stop", bound=AgentsException)


def calling() -> bool:
    """Is a guarded call running in this context? (Then a run starting here is an agent tool's own run.)"""
    return _scope.get() is not None


def stopping(error: _Stop) -> _Stop:
    """``error``, which agentguard is about to raise to end a run, noted for the agent tool call this run runs in,
    if any. The SDK turns an error of an agent tool's own run into the tool's output for the outer model, which
    would carry on; the call raises the noted error instead (:meth:`GuardedTool.guarded`)."""
    scope = _scope.get()
    if scope is not None:
        scope.stops.append(error)
    return error


def sdk_reviewer(reviewer_id: str) -> Callable[[ReviewRequest], Approval]:
    """A reviewer answered by ``RunState.approve`` / ``reject``: no decision yet raises :class:`ReviewPending`.

    The SDK approves a *call*, once. A call with both an input and an output review is asked once (input);
    its output review then fails closed rather than reusing that answer for a result nobody saw. An approval
    counts only for a call this engagement paused, with the arguments it paused with: the SDK's approvals live
    in a run state an app may carry anywhere (``to_json``), and a call approved "always" was never shown.
    """

    def review(request: ReviewRequest) -> Approval:
        scope = _scope.get()
        if scope is None:
            return Approval(False, "no OpenAI Agents SDK run is asking for this review", reviewer_id)
        status = scope.context.is_tool_approved(scope.tool.sdk_name, scope.call_id)
        key = scope.tool.key(scope.call_id)
        pending = scope.adapter.pending.get(key)
        if status is None:
            scope.adapter.pending[key] = Pending(scope.tool, scope.inputs, request.phase)
            raise ReviewPending(f"{request.capability!r} awaits approval by {reviewer_id!r}")
        if not status:
            return Approval(False, "rejected through the SDK", reviewer_id)
        if pending is None or pending.inputs != scope.inputs:
            reason = (
                f"approved through the SDK, but this engagement did not pause this call of {request.capability!r} "
                "with these arguments (a run state from another engagement or process, changed since, or "
                "approve(..., always_approve=True) for later calls): each call is approved on its own"
            )
            return Approval(False, reason, reviewer_id)
        if pending.phase is not request.phase or pending.answered:
            reason = (
                f"the SDK approves a call once; it was asked about the {pending.phase.value} of "
                f"{request.capability!r}, not its {request.phase.value}"
            )
            return Approval(False, reason, reviewer_id)
        pending.answered = True
        return Approval(True, None, reviewer_id)

    review.__agentguard_sdk_review__ = reviewer_id  # type: ignore[attr-defined]
    return review


# -- function tools -----------------------------------------------------------------------------------


class GuardedTool:
    """The guarded ``on_invoke_tool`` (and, for reviewed tools, ``needs_approval``) of one function tool."""

    def __init__(self, adapter: AgentGuard, tool: FunctionTool, kind: Literal["tool", "agent"]) -> None:
        self.adapter = adapter
        self.sdk_name = tool.name
        self.name = spec_name(tool.name, adapter.names)
        self.kind = kind
        self._invoke = tool.on_invoke_tool
        self._tool = tool
        """The unwrapped tool: its invoker with its own timeout settings (see :meth:`guarded`)."""
        self.output_reviewed = adapter.reviews_output(self.name)

    def build(self, tool: FunctionTool) -> FunctionTool:
        """The wrapped copy of ``tool`` (the original is left as it was)."""
        if not self.adapter.reviewed(self.name):
            return dataclasses.replace(tool, on_invoke_tool=self.on_invoke_tool)
        if tool.needs_approval is not False:
            raise ValueError(
                f"tool {tool.name!r} sets needs_approval and the spec requires review of {self.name!r}: "
                "let the spec decide (remove needs_approval) so the call is asked about once"
            )
        if tool.tool_input_guardrails:
            # The SDK asks needs_approval before it runs the tool's input guardrails, and the pipeline runs the
            # call there unless it must pause first: a call they reject would already have run.
            raise ValueError(
                f"tool {tool.name!r} has tool_input_guardrails and the spec requires review of {self.name!r}: the "
                "review runs the call before the SDK runs those guardrails; put the check in the spec's "
                "input_restriction"
            )
        return dataclasses.replace(
            tool, on_invoke_tool=self.on_invoke_tool, needs_approval=self.needs_approval
        )

    async def on_invoke_tool(self, ctx: ToolContext[Any], arguments: str) -> Any:
        """The SDK invokes the tool: hand over a decided pre-run outcome, or run the call through the guard."""
        decided = self.adapter.prerun.pop(self.key(ctx.tool_call_id), None)
        if decided is not None and decided[0] == _asked(_inputs(arguments)):
            return decided[1]
        # Another call under the same id (ids are the model's to write), or none: this one is checked and run.
        if self.output_reviewed and self._lost_review(ctx):
            return (
                "agentguard denied this tool call: it was approved in output review, but the held result is "
                "not in this process (the engagement that ran the tool is gone). The tool was not run again."
            )
        try:
            return await self.guarded(ctx, _inputs(arguments))
        finally:
            self.adapter.pending.pop(self.key(ctx.tool_call_id), None)

    async def needs_approval(
        self, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """``True`` when a review must pause the run. Only a review the SDK may answer needs to know here, so
        only then is the call run through the pipeline before the SDK invokes it (a review the Guard answers is
        asked when the SDK invokes the tool: within the tool's timeout, after the run's ``on_tool_start`` hooks).
        A call the pipeline runs here (an output review, or nothing to review after all) runs under the tool's
        own timeout, as the SDK would invoke it."""
        if not self.adapter.asks_sdk(self.name):
            return False
        ctx = ToolContext.from_agent_context(
            context, call_id, tool_name=self.sdk_name, tool_arguments=json.dumps(params)
        )
        try:
            outcome = await self.guarded(ctx, dict(params), timed=True)
        except ReviewPending:
            return True
        self.adapter.prerun[self.key(call_id)] = (_asked(params), outcome)
        return False

    def key(self, call_id: str) -> CallKey:
        """Where a call's pre-run outcome waits for the SDK to invoke it, or the call waits for the SDK's approval:
        the engagement, the tool and the call id. An outcome the SDK never came to collect must not answer a call
        of the same id in another engagement (another user's output) or of another tool, unchecked; nor may a call
        paused in one engagement take the place of (or settle) one of the same id paused in another."""
        engagement = self.adapter.guard.current_engagement()
        return (engagement.id if engagement is not None else None, self.sdk_name, call_id)

    def _lost_review(self, ctx: ToolContext[Any]) -> bool:
        status = ctx.is_tool_approved(self.sdk_name, ctx.tool_call_id)
        return status is not None and self.key(ctx.tool_call_id) not in self.adapter.pending

    async def guarded(self, ctx: ToolContext[Any], inputs: dict[str, Any], *, timed: bool = False) -> Any:
        """``guard.acall`` with the SDK's invoker as the tool; denials become output, stops :class:`RunStopped`.
        The error that stopped a run made inside the call (an agent tool's own run), which the SDK hands back as
        the call's output, is raised again here. ``timed``: the SDK is not timing this invocation (it runs in
        ``needs_approval``), so the tool's own ``timeout_seconds`` is applied here, as the SDK applies it."""

        async def run(**arguments: Any) -> Any:
            if timed:
                return await invoke_function_tool(
                    function_tool=self._tool, context=ctx, arguments=json.dumps(arguments)
                )
            return await self._invoke(ctx, json.dumps(arguments))

        scope = _Scope(self.adapter, ctx, self, ctx.tool_call_id, inputs)
        token = _scope.set(scope)
        stop: AgentsException
        try:
            output = await self.adapter.guard.acall(
                self.name, inputs, run, kind=self.kind, call_id=ctx.tool_call_id
            )
        except PolicyViolation as exc:  # one refused call is the tool's output; a stopped run ends here
            if exc.recoverable:
                return denial_text(exc)
            stop = RunStopped(exc)
        else:
            if not scope.stops:
                return output
            # A run inside the call (an agent tool's own) was stopped: the SDK made that the call's output.
            stop = scope.stops[0]
        finally:
            _scope.reset(token)
        raise stopping(stop)  # out of this call's scope: noted for the agent tool call around it, if any

    async def settle(self, context: RunContextWrapper[Any], call_id: str, pending: Pending) -> None:
        """Record the SDK's rejection of a paused call (the SDK never invokes a rejected tool)."""
        ctx = ToolContext.from_agent_context(
            context, call_id, tool_name=self.sdk_name, tool_arguments=json.dumps(pending.inputs)
        )
        await self.guarded(ctx, pending.inputs)


def _asked(inputs: Mapping[str, Any]) -> str:
    """``inputs`` as a pre-run outcome is bound to (:attr:`AgentGuard.prerun`): their JSON, keys sorted, so that
    ``1``, ``1.0`` and ``true`` (equal in Python) are three inputs. An outcome answers only the call it was
    decided for: a later call under the same id with other arguments (ids are the model's, and the SDK does not
    ask ``needs_approval`` again of a call it holds an approval for) is checked and run on its own."""
    return json.dumps(inputs, sort_keys=True, default=repr)


def _inputs(arguments: str) -> dict[str, Any]:
    """The model's JSON arguments as the inputs the pipeline checks (a non-object, or a text that is not JSON
    or is nested deeper than the parser recurses, is one ``input``)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


# -- handoffs -----------------------------------------------------------------------------------------


class GuardedHandoff:
    """A handoff as an agent capability: checked and recorded by the guard, then handed to the guarded agent."""

    def __init__(self, adapter: AgentGuard, handoff: Handoff[Any, Any]) -> None:
        self.adapter = adapter
        self.name = spec_name(handoff.agent_name, adapter.names)
        self._invoke: Callable[[RunContextWrapper[Any], str], Awaitable[Any]] = handoff.on_invoke_handoff

    async def on_invoke_handoff(self, ctx: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
        targets: list[Agent[Any]] = []

        asked = _inputs(arguments)

        async def run(**inputs: Any) -> dict[str, str]:
            # The inputs the guard let through, as JSON; the model's own text only when it asked for nothing and
            # nothing was put in its place (a handoff without input_type may be given none).
            target = await self._invoke(ctx, arguments if not (inputs or asked) else json.dumps(inputs))
            targets.append(self.adapter.wrap(target))
            return {"agent": target.name}  # the record names the agent; the Agent object stays out of it

        try:
            await self.adapter.guard.acall(self.name, asked, run, kind="agent")
        except PolicyViolation as exc:  # the SDK has no error output for a handoff: the run ends
            raise stopping(RunStopped(exc)) from exc
        return targets[0]
