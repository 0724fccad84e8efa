"""The policy pipeline, written once as sans-I/O generators.

Each flow is a generator that makes every decision itself and *yields* an effect whenever something outside
has to happen — run the tool, ask a reviewer, ask the guardian — then receives the result (or the exception)
and carries on. :mod:`agentguard._drivers` runs the same flow synchronously or under asyncio, so the sync and
the async path cannot drift apart (the pattern of httpx's ``auth_flow``).

Order of checks for a tool or sub-agent call (ARCHITECTURE.md, "local first"):

1. engagement still active (a short-circuit, failed guardrail or cancel stops it for good)
2. capability allow-list (decision 6)
3. short-circuit (decision 5)
4. the call becomes the pending most-recent call (decision 2), then the input assertion
5. guardian ``steps/toolCallRequest`` (enforce: wait; ``modify`` is re-checked against step 4)
6. input review (people see the final inputs, after the machines agreed)
7. identity (decision 10)
8. invoke
9. output assertion (decision 3: a failure withholds the output), guardian ``steps/toolCallResult``, output
   review — only then does the output leave the pipeline

Anything that denies before step 8 rolls the call back out of ``recent``/``history``; after step 8 the call
stays in ``history`` with ``outputs: null``.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentguard._binding import Registered
from agentguard._steps import StepBuilder, new_step
from agentguard.engagement import (
    CallRecord,
    Decision,
    EngagementState,
    EngagementStatus,
    Outcome,
    StepRecord,
    is_plain,
    one_shot,
    to_plain,
)
from agentguard.errors import (
    CapabilityDenied,
    EngagementClosed,
    GuardianDenied,
    GuardrailViolation,
    IdentityError,
    Phase,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    Rule,
    RuleViolation,
    ShortCircuitViolation,
)
from agentguard.observers import Observer, Observers
from agentguard.policy._identity import CredentialRequest, CredentialResolver, Credentials, identity_for
from agentguard.policy._policy import Assertion, CapabilityRule, Policy, UnknownCapability
from agentguard.policy._review import (
    Approval,
    ApprovalConfig,
    Reviewer,
    ReviewRequest,
    approval_tally,
    coerce_approval,
)
from agentguard.policy._rules import RuleContext, Rules, SeverityMap
from agentguard.runs import Retry, Timeout, ToolTimeout

if TYPE_CHECKING:
    from agentguard.guardian import GuardianClient, GuardianVerdict

__all__ = [
    "AskGuardian",
    "AskReviewer",
    "AwaitLate",
    "Effect",
    "FlowContext",
    "Invoke",
    "InvokeTimedOut",
    "Sleep",
    "ToolCall",
    "guardrail_flow",
    "message_text",
    "record_flow",
    "report_flow",
    "tool_call_flow",
]


@dataclass(slots=True)
class Invoke:
    """Effect: run the tool (or guardrail tool) with these arguments and credentials.

    With ``timeout_ms`` the driver raises :class:`InvokeTimedOut` when the call overruns; it cancels an
    async call first unless ``keep_running``; ``on_late`` is told the outcome of a call that finishes after
    its caller stopped waiting (a sync tool in its worker thread).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    credentials: Credentials | None = None
    timeout_ms: int | None = None
    keep_running: bool = False
    on_late: Callable[[str], None] | None = None


class InvokeTimedOut(Exception):
    """Raised by a driver into the flow when an :class:`Invoke` overran; ``handle`` awaits the call."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        super().__init__("the call overran its timeout")


@dataclass(slots=True)
class AwaitLate:
    """Effect: keep waiting for a call that overran its timeout (``on_timeout: continue``)."""

    handle: Any


@dataclass(slots=True)
class Sleep:
    """Effect: wait ``ms`` milliseconds (between retries)."""

    ms: int


@dataclass(slots=True)
class AskReviewer:
    """Effect: ask one reviewer; the driver enforces ``timeout_ms`` and raises ``TimeoutError`` past it."""

    reviewer: Reviewer
    request: ReviewRequest
    timeout_ms: int | None


@dataclass(slots=True)
class AskGuardian:
    """Effect: send an AOS request to the guardian in enforce mode and wait for the verdict."""

    client: GuardianClient
    request: dict[str, Any]


Effect = Invoke | AskReviewer | AskGuardian | AwaitLate | Sleep
T = TypeVar("T")
Flow = Generator[Effect, Any, T]
"""A policy flow that yields effects and returns a ``T``."""


@dataclass(slots=True)
class ToolCall:
    """A call the host wants to make: which tool or agent, with which inputs (bound by parameter name)."""

    name: str
    kind: str
    inputs: dict[str, Any]
    fn: Callable[..., Any]
    to_args: Callable[[Mapping[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]
    call_id: str | None = None
    needs_credentials: bool = False
    reasoning: str | None = None
    timeout: Timeout | None = None
    retry: Retry | None = None


@dataclass
class FlowContext:
    """Everything a flow needs from its Guard, resolved once per Guard (not per call)."""

    policy: Policy
    steps: StepBuilder
    unknown_capability: UnknownCapability = "deny"
    short_circuit_max_block: int = 100
    reviewers: Mapping[str, Reviewer] = field(default_factory=dict)
    approval: ApprovalConfig = field(default_factory=ApprovalConfig)
    approvals: Mapping[str, ApprovalConfig] = field(default_factory=dict)
    credential_resolver: CredentialResolver | None = None
    guardian: GuardianClient | None = None
    passthrough: tuple[type[BaseException], ...] = ()
    # The guard's registered tools, live: capability lookups (tool-before-agent) and guardrail tools.
    tools: Mapping[str, Registered] = field(default_factory=dict)
    observers: Observers = field(default_factory=Observers)
    rules: Rules = field(default_factory=Rules)
    # Review gates that come from elsewhere than the spec (an Agent Spec tool's requires_confirmation, ...):
    # capability name -> reviewer id, applied before the call when the spec names no input reviewer.
    review_gates: dict[str, str] = field(default_factory=dict)
    severity: SeverityMap = field(default_factory=SeverityMap)

    def decide(self, state: EngagementState, step: StepRecord, decision: Decision) -> Decision:
        step.decisions.append(decision)
        if step.observed_by:
            Observers.decision(step.observed_by, state, step, decision)
        return decision


def _deny(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    error: PolicyViolation,
    *,
    outcome: Outcome = Outcome.DENY,
    data: Mapping[str, Any] | None = None,
) -> PolicyViolation:
    """Record the denial on the step and hand back the error to raise."""
    error.engagement_id = state.id
    if isinstance(error, GuardianDenied) and error.reason_code:
        data = {**(data or {}), "reason_code": error.reason_code}
    decision = Decision(
        error.rule, outcome, error.phase, error.reason, error.capability, error.expression, data=data
    )
    ctx.decide(state, step, decision)
    return error


def _blocks(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    error: PolicyViolation,
    *,
    name: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> bool:
    """Record a failed check at its severity; ``True`` when it blocks (severity ``error``).

    ``warning`` and ``info`` (shadow mode) record what would have been denied and let the step go on.
    """
    severity = ctx.severity.of(error.rule, error.capability, error.phase, name) if ctx.severity else "error"
    if severity == "error":
        _deny(ctx, state, step, error, data=data)
        return True
    reason = f"would deny ({severity}): {error.reason}"
    decision = Decision(
        error.rule,
        Outcome.WARN,
        error.phase,
        reason,
        error.capability,
        error.expression,
        data=data,
        severity=severity,
    )
    ctx.decide(state, step, decision)
    return False


def _closed_error(state: EngagementState, capability: str | None, phase: Phase) -> PolicyViolation:
    reason = f"engagement is {state.status.value}: {state.status_reason or 'no reason given'}"
    if state.status is EngagementStatus.STOPPED:
        return ShortCircuitViolation(reason, capability=capability, phase=phase)
    if state.status is EngagementStatus.FAILED:
        return GuardrailViolation(reason, capability=capability, phase=phase)
    return EngagementClosed(reason, capability=capability, phase=phase)


def _check(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    assertion: Assertion,
    capability: str,
    phase: Phase,
) -> None:
    variables = state.bindings(assertion.plan)
    passed, reason = assertion.check(variables)
    if not passed:
        error = RestrictionViolation(reason, capability=capability, phase=phase, expression=assertion.source)
        if _blocks(ctx, state, step, error):
            if phase is Phase.INPUT:
                # The caller is told the input values the failing clause compared; the record, and so the
                # telemetry, keeps the reason without them (they are content). An output restriction that
                # fails withholds the output: its values are shown to nobody.
                shown = assertion.check(variables, values=True)[1]
                if shown != reason:
                    error = RestrictionViolation(
                        shown,
                        capability=capability,
                        phase=phase,
                        expression=assertion.source,
                        engagement_id=state.id,
                    )
            raise error
        return
    ctx.decide(
        state, step, Decision(Rule.RESTRICTION, Outcome.ALLOW, phase, reason, capability, assertion.source)
    )


def _run_rules(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    capability: str,
    phase: Phase,
    inputs: Mapping[str, Any],
    outputs: Any = None,
) -> None:
    """The Python rules registered for this capability and phase (see ``guard.rules``)."""
    if not ctx.rules:  # no Python rules registered: the common case, without a lookup
        return
    rules = ctx.rules.for_call(capability, phase)
    if not rules:
        return
    context = RuleContext(capability, phase, inputs, to_plain(outputs), state)
    for rule in rules:
        result = rule.run(context)
        if result.passed:
            decision = Decision(
                rule.kind, Outcome.ALLOW, phase, result.message, capability, data=result.metadata
            )
            ctx.decide(state, step, decision)
            continue
        error = RuleViolation(
            result.message, rule_name=rule.name, kind=rule.kind, capability=capability, phase=phase
        )
        if _blocks(ctx, state, step, error, name=rule.name):
            raise error


def _guardian(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    request: dict[str, Any],
    capability: str | None,
    phase: Phase,
) -> Generator[Effect, Any, dict[str, Any] | None]:
    """Ask the guardian about ``request``. Returns the modified request's params on ``modify``, else None.

    Observe mode only enqueues. Enforce mode waits; ``deny`` and an undecided step under
    ``on_failure="deny"`` raise :class:`GuardianDenied`; an undecided step under ``on_failure="allow"``
    proceeds and is recorded as having proceeded without a guardian decision (decision 8).
    """
    client = ctx.guardian
    if client is None:
        return None
    step.aos.append(request)
    if client.mode == "observe":
        client.submit(request)
        return None
    try:
        verdict: GuardianVerdict = yield AskGuardian(client, request)
    except ctx.passthrough:
        raise
    except Exception as exc:  # the client decides every failure it knows of; anything else is undecided too
        _undecided(ctx, state, step, f"the guardian client failed: {type(exc).__name__}", capability, phase)
        return None
    outcome = verdict.outcome.value
    data = {"latency_ms": verdict.latency_ms, "attempts": verdict.attempts}
    if outcome == "allow":
        ctx.decide(
            state,
            step,
            Decision(Rule.GUARDIAN, Outcome.ALLOW, phase, verdict.message or "", capability, data=data),
        )
        return None
    if outcome == "modify":
        modified = verdict.modified_request or {}
        params = modified.get("params")
        if isinstance(params, dict):
            ctx.decide(
                state,
                step,
                Decision(Rule.GUARDIAN, Outcome.MODIFY, phase, verdict.message or "", capability, data=data),
            )
            return params
        _undecided(ctx, state, step, "guardian answered modify without a modifiedRequest", capability, phase)
        return None
    if outcome == "deny":
        code = verdict.reason_codes[0] if verdict.reason_codes else None
        raise _deny(
            ctx,
            state,
            step,
            GuardianDenied(
                verdict.message or "denied by guardian", reason_code=code, capability=capability, phase=phase
            ),
        )
    cause = verdict.failure or "no decision"
    if verdict.proceeded:
        ctx.decide(
            state,
            step,
            Decision(
                Rule.GUARDIAN,
                Outcome.NO_DECISION,
                phase,
                f"proceeded without guardian decision: {cause}",
                capability,
                data=data,
            ),
        )
        return None
    raise _deny(
        ctx,
        state,
        step,
        GuardianDenied(
            f"denied without guardian decision: {cause}",
            reason_code="guardian-unavailable",
            capability=capability,
            phase=phase,
        ),
    )


def _undecided(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    cause: str,
    capability: str | None,
    phase: Phase,
) -> None:
    """A guardian answer that cannot be applied follows the failure policy, like silence does."""
    client = ctx.guardian
    if client is not None and client.on_failure == "allow":
        reason = f"proceeded without guardian decision: {cause}"
        ctx.decide(state, step, Decision(Rule.GUARDIAN, Outcome.NO_DECISION, phase, reason, capability))
        return
    error = GuardianDenied(
        f"denied without guardian decision: {cause}",
        reason_code="guardian-unappliable",
        capability=capability,
        phase=phase,
    )
    raise _deny(ctx, state, step, error)


def _review(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    reviewer_id: str,
    capability: str,
    phase: Phase,
    record: CallRecord,
    outputs: Any,
) -> Generator[Effect, Any, None]:
    """Decision 7: ask the named reviewer (and configured approvers) until approved or rejected."""
    config = ctx.approvals.get(reviewer_id, ctx.approval)
    names = config.reviewers_for(reviewer_id)
    responses: list[Approval] = []
    view = state.view()
    what = "call" if phase is Phase.INPUT else "use the result of"
    # timeout_ms bounds the whole review, however many approvers it asks.
    deadline = None if config.timeout_ms is None else time.monotonic() + config.timeout_ms / 1000
    for index, rid in enumerate(names):
        if approval_tally(responses, len(names) - index, config.required_approvals) is not None:
            break
        left_ms = None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
        reviewer = ctx.reviewers.get(rid)
        if reviewer is None:
            responses.append(Approval(False, f"no reviewer registered as {rid!r}", rid))
            continue
        request = ReviewRequest(
            reviewer=rid,
            capability=capability,
            phase=phase,
            message=f"May agent {ctx.policy.name!r} {what} {capability!r}?",
            execution_id=state.id,
            inputs=record.inputs,
            outputs=outputs,
            engagement=view,
            call_id=record.call_id,
            timeout_ms=config.timeout_ms,
            responses=tuple(responses),
        )
        try:
            answer = yield AskReviewer(reviewer, request, left_ms)
            approval = coerce_approval(answer, rid)
        except ctx.passthrough:  # the host paused for the review (e.g. a LangGraph interrupt)
            reason = f"waiting for {rid!r}: the host paused the run for review"
            pending = Decision(
                Rule.REVIEW, Outcome.REVIEW_PENDING, phase, reason, capability, data={"reviewer": rid}
            )
            ctx.decide(state, step, pending)
            raise
        except TimeoutError:
            auto = config.auto_approve_on_timeout
            approval = Approval(
                auto, f"no answer within {config.timeout_ms} ms" + (" (auto-approved)" if auto else ""), rid
            )
        except Exception as exc:
            approval = Approval(False, f"reviewer failed: {type(exc).__name__}: {exc}", rid)
        responses.append(approval)
    approved = approval_tally(responses, 0, config.required_approvals) is True
    data = {"approvals": [r.as_dict() for r in responses], "reviewer": reviewer_id}
    reason = "; ".join(
        f"{r.approved_by}: {r.reason or ('approved' if r.approved else 'rejected')}" for r in responses
    )
    if not approved:
        error = ReviewDenied(
            f"review by {reviewer_id!r} did not approve ({reason})", capability=capability, phase=phase
        )
        raise _deny(ctx, state, step, error, outcome=Outcome.REVIEW_REJECTED, data=data)
    ctx.decide(
        state, step, Decision(Rule.REVIEW, Outcome.REVIEW_APPROVED, phase, reason, capability, data=data)
    )


def _inputs_from(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The new inputs in a guardian's modified ``steps/toolCallRequest`` (``None`` if it has none)."""
    tcr = params.get("toolCallRequest")
    if not isinstance(tcr, Mapping) or not isinstance(tcr.get("inputs"), list):
        return None
    out: dict[str, Any] = {}
    for item in tcr["inputs"]:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or "value" not in item:
            return None
        out[item["name"]] = item["value"]
    return out


def _unfit(call: ToolCall, inputs: dict[str, Any] | None) -> str | None:
    """Why a guardian's modified inputs cannot be given to the tool (decision 8: then the failure policy
    applies), or ``None`` when they can."""
    if inputs is None:
        return "modifiedRequest carries no tool inputs"
    try:
        args, kwargs = call.to_args(inputs)
        inspect.signature(call.fn).bind(*args, **kwargs)
    except TypeError as exc:
        return f"modifiedRequest's inputs do not fit the tool's parameters ({exc})"
    except ValueError:  # a callable without a signature: only calling it can tell
        return None
    return None


def _failed(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    record: CallRecord,
    rule: CapabilityRule | None,
    error: BaseException,
) -> Flow[None]:
    """The tool raised: its error goes back to the caller (and often to the model), so it is an output too.

    Its text passes the output restriction first, and the guardian hears of the failed call
    (``steps/toolCallResult`` with ``isError``). A failing check replaces the error by the denial, whose
    reason does not quote the withheld text. The record keeps ``outputs: null``, status ``failed``.
    """
    name = record.name
    if not isinstance(error, Exception) or isinstance(error, (PolicyViolation, *ctx.passthrough)):
        state.withhold_call(record, reason=type(error).__name__, status="failed")
        return
    text = str(error)
    try:
        if rule is not None and rule.output_assertion is not None:
            record.entry["outputs"] = text
            _check(ctx, state, step, rule.output_assertion, name, Phase.OUTPUT)
        if ctx.guardian is not None:
            request = ctx.steps.tool_call_result(state, step, text, is_error=True)
            params = yield from _guardian(ctx, state, step, request, name, Phase.OUTPUT)
            if params is not None:
                _undecided(ctx, state, step, "a failed call's error cannot be modified", name, Phase.OUTPUT)
    except PolicyViolation as violation:
        state.withhold_call(record, reason=violation.reason)
        raise violation from None
    described = f"{type(error).__name__}: {text}"
    state.withhold_call(record, reason=described, status="failed")
    step.payload["error"] = described


def _outputs_from(params: Mapping[str, Any], original: Any) -> tuple[bool, Any]:
    """The new output in a guardian's modified ``steps/toolCallResult``: (found, value)."""
    result = params.get("result")
    if not isinstance(result, Mapping):
        nested = params.get("toolCallResult")  # the published schema's shape (decision 9)
        result = nested.get("result") if isinstance(nested, Mapping) else None
    if not isinstance(result, Mapping) or not isinstance(result.get("outputs"), list):
        return False, None
    texts = [
        p.get("text") for p in result["outputs"] if isinstance(p, Mapping) and isinstance(p.get("text"), str)
    ]
    text = "".join(t for t in texts if t is not None)
    if isinstance(original, str):
        return True, text
    try:
        return True, json.loads(text)
    except ValueError:
        return True, text


def message_text(params: Mapping[str, Any]) -> str | None:
    """The text of the message in ``steps/message`` params (``None`` when it has no text part)."""
    message = params.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return None
    texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return "".join(texts) if texts else None


def _capability(
    ctx: FlowContext, state: EngagementState, step: StepRecord, name: str, kind: str
) -> CapabilityRule | None:
    policy = ctx.policy
    rule = policy.capability_for(name, kind, ctx.tools)
    if rule is not None:
        ctx.decide(
            state,
            step,
            Decision(Rule.CAPABILITY, Outcome.ALLOW, Phase.INPUT, rule.allow_reason, name),
        )
        return rule
    if name in policy.guardrail_tools:
        ctx.decide(state, step, Decision(Rule.CAPABILITY, Outcome.ALLOW, Phase.INPUT, "guardrail tool", name))
        return None
    if name[:1] == "_":  # would overwrite recent._name, history._list or history._total
        reason = f"{kind} name {name!r} is reserved: the Engagement's own members start with '_'"
        raise _deny(ctx, state, step, CapabilityDenied(reason, capability=name, phase=Phase.INPUT))
    mode = ctx.unknown_capability
    reason = f"{kind} {name!r} is not a capability of agent {policy.name!r}"
    if mode == "deny":
        error = CapabilityDenied(reason, capability=name, phase=Phase.INPUT)
        if _blocks(ctx, state, step, error):
            raise error
        return None
    observe = mode == "observe"
    decision = Decision(
        Rule.CAPABILITY,
        Outcome.WARN if observe else Outcome.ALLOW,
        Phase.INPUT,
        reason + f" (unknown_capability={mode})",
        name,
        severity="warning" if observe else "error",
    )
    ctx.decide(state, step, decision)
    return None


def _credentials(
    ctx: FlowContext, state: EngagementState, step: StepRecord, rule: CapabilityRule | None, call: ToolCall
) -> Credentials | None:
    ident = identity_for(
        user_identity=rule.user_identity if rule else True,
        static_identity=rule.static_identity if rule else None,
        user=state.user,
    )
    if ident is None:
        return None
    kind, subject = ident
    if ctx.credential_resolver is None:  # the identity itself: the same object for every call
        cached: Credentials | None = state.credentials.get(ident)
        if cached is None:
            cached = state.credentials[ident] = Credentials(
                kind, subject, user=state.user if kind == "user" else None
            )
        return cached
    request = CredentialRequest(call.name, kind, subject, state.user, state.id)
    try:
        resolved = ctx.credential_resolver(request)
    except Exception as exc:  # a resolver that fails must not let the call run, nor go unrecorded
        error = IdentityError(
            f"the credential resolver failed ({type(exc).__name__}) for {kind} {subject!r}",
            capability=call.name,
            phase=Phase.INPUT,
        )
        raise _deny(ctx, state, step, error) from exc
    if resolved is not None and not isinstance(resolved, Credentials):
        error = IdentityError(
            f"the credential resolver returned {type(resolved).__name__}, not Credentials or None",
            capability=call.name,
            phase=Phase.INPUT,
        )
        raise _deny(ctx, state, step, error)
    return resolved


def _observed(ctx: FlowContext, state: EngagementState, step: StepRecord, flow: Flow[T]) -> Flow[T]:
    """``flow`` for ``step``, between the observers' ``step_started`` and ``step_ended`` when any watch it.

    A plain function, not a generator: an unwatched step (the common case) runs its flow with no extra
    frame on the per-call path.
    """
    watchers = step.observed_by = ctx.observers.stepping() if ctx.observers else ()
    return _watched(watchers, state, step, flow) if watchers else flow


def _watched(
    watchers: tuple[Observer, ...], state: EngagementState, step: StepRecord, flow: Flow[T]
) -> Flow[T]:
    tokens = Observers.step_started(watchers, state, step)
    error: BaseException | None = None
    try:
        return (yield from flow)
    except BaseException as exc:
        error = exc
        raise
    finally:
        Observers.step_ended(watchers, state, step, tokens, error)


def tool_call_flow(ctx: FlowContext, state: EngagementState, call: ToolCall) -> Flow[Any]:
    """The whole life of one guarded tool or sub-agent call. Returns the output the caller may use."""
    resumed = state.awaiting_review.pop(call.call_id, None) if call.call_id else None
    if resumed is not None:  # the host re-ran a call paused in output review: do not run the tool again
        step, record, rule, output = resumed
        flow = _after_invoke(ctx, state, step, record, rule, call, output, resumed=True)
    else:
        step = new_step(state, "steps/toolCallRequest", name=call.name, call_id=call.call_id)
        flow = _tool_call(ctx, state, step, call)
    return _observed(ctx, state, step, flow)


_NO_LOOP = "no block of calls repeated short_circuit times"


def _short_circuit(
    ctx: FlowContext, state: EngagementState, step: StepRecord, name: str, *, refused: bool
) -> None:
    """Decision 5: stop the engagement when this attempt repeats a block of attempts ``short_circuit`` times.

    Checked for attempts another rule refuses too, so that an agent retrying a refused call is stopped.
    """
    k = ctx.policy.short_circuit
    if k is None:
        return
    block = state.would_short_circuit(name, k, ctx.short_circuit_max_block)
    if block is None:
        if not refused:
            ctx.decide(state, step, Decision(Rule.SHORT_CIRCUIT, Outcome.ALLOW, Phase.INPUT, _NO_LOOP, name))
        return
    loop = " -> ".join([*state.attempts(block - 1), name])
    reason = (
        f"calling {name!r} would repeat [{loop}] {k} times in a row "
        f"(lifespan.short_circuit: {k}); the engagement is stopped"
    )
    error = ShortCircuitViolation(reason, capability=name, phase=Phase.INPUT)
    if _blocks(ctx, state, step, error):
        state.stop(EngagementStatus.STOPPED, reason)
        raise error


def _tool_call(ctx: FlowContext, state: EngagementState, step: StepRecord, call: ToolCall) -> Flow[Any]:
    name = call.name
    if not state.active:
        raise _deny(ctx, state, step, _closed_error(state, name, Phase.INPUT))
    try:
        rule = _capability(ctx, state, step, name, call.kind)
    except PolicyViolation:
        _short_circuit(ctx, state, step, name, refused=True)  # a refused attempt is an attempt (decision 5)
        state.attempted(name)
        raise
    _short_circuit(ctx, state, step, name, refused=False)

    # The record holds JSON-like inputs for CEL and AOS; the tool gets the caller's own objects unless a
    # guardian rewrote them.
    # ``call.inputs`` was built for this call (by the binder, or copied by Guard.call): nobody else holds it.
    record = state.begin_call(name, to_plain(call.inputs, owned=True), kind=call.kind, call_id=call.call_id)
    call_inputs: Mapping[str, Any] = call.inputs
    step.call_id = record.call_id
    credentials: Credentials | None = None
    try:
        problem = one_shot(call_inputs)
        if problem is not None:
            error = RestrictionViolation(
                f"an input {problem}: what the checks would see is not what the tool would get",
                capability=name,
                phase=Phase.INPUT,
            )
            raise _deny(ctx, state, step, error)
        if rule is not None and rule.input_assertion is not None:
            _check(ctx, state, step, rule.input_assertion, name, Phase.INPUT)
        if ctx.guardian is not None:
            request = ctx.steps.tool_call_request(state, step, name, record.inputs, call.reasoning)
            params = yield from _guardian(ctx, state, step, request, name, Phase.INPUT)
            if params is not None:
                new_inputs = _inputs_from(params)
                unfit = _unfit(call, new_inputs)
                if unfit is not None:
                    _undecided(ctx, state, step, unfit, name, Phase.INPUT)
                elif new_inputs is not None:
                    record.entry["inputs"] = call_inputs = new_inputs
                    if rule is not None and rule.input_assertion is not None:
                        _check(ctx, state, step, rule.input_assertion, name, Phase.INPUT)
        _run_rules(ctx, state, step, name, Phase.INPUT, record.inputs)
        reviewer = (rule.input_review if rule is not None else None) or ctx.review_gates.get(name)
        if reviewer:
            yield from _review(ctx, state, step, reviewer, name, Phase.INPUT, record, None)
        credentials = _credentials(ctx, state, step, rule, call)
        if call.needs_credentials and credentials is None:
            raise _deny(
                ctx,
                state,
                step,
                IdentityError(
                    "the tool needs credentials and none could be resolved (no user identity, no static_identity)",
                    capability=name,
                    phase=Phase.INPUT,
                ),
            )
        args, kwargs = call.to_args(call_inputs)
    except BaseException as exc:
        reason = exc.reason if isinstance(exc, PolicyViolation) else type(exc).__name__
        state.rollback_call(record, reason=reason, attempted=not isinstance(exc, ctx.passthrough))
        raise
    invoke = Invoke(call.fn, args, kwargs, credentials)
    try:
        if call.retry is None and call.timeout is None:
            output = yield invoke  # the common case, without the run-control frames
        else:
            output = yield from _invoke(ctx, state, step, call, invoke)
    except BaseException as exc:
        yield from _failed(ctx, state, step, record, rule, exc)
        raise
    return (yield from _after_invoke(ctx, state, step, record, rule, call, output, resumed=False))


def _invoke(
    ctx: FlowContext, state: EngagementState, step: StepRecord, call: ToolCall, invoke: Invoke
) -> Flow[Any]:
    """Run the call under its ``Timeout`` and ``Retry`` (OS Protocol runs), recording each as a decision."""
    retry = call.retry
    attempt = 0
    while True:
        try:
            return (yield from _invoke_once(ctx, state, step, call, invoke))
        except Exception as exc:
            if retry is None or attempt >= retry.attempts or not state.active or not retry.retries(exc):
                raise
            attempt += 1
            if retry.on_retry is not None:
                retry.on_retry(exc, attempt)
            delay = retry.delay(attempt)
            reason = f"retry {attempt} of {retry.attempts} in {delay} ms after {type(exc).__name__}: {exc}"
            ctx.decide(state, step, Decision(Rule.RUN, Outcome.ALLOW, Phase.INPUT, reason, call.name))
            if delay:
                yield Sleep(delay)


def _invoke_once(
    ctx: FlowContext, state: EngagementState, step: StepRecord, call: ToolCall, invoke: Invoke
) -> Flow[Any]:
    timeout = call.timeout
    if timeout is None:
        return (yield invoke)

    def late(outcome: str) -> None:
        reason = f"late result discarded: the call finished after its {timeout.ms} ms timeout ({outcome})"
        ctx.decide(state, step, Decision(Rule.RUN, Outcome.WARN, Phase.OUTPUT, reason, call.name))

    invoke.timeout_ms = timeout.ms
    invoke.keep_running = timeout.on_timeout == "continue"
    invoke.on_late = late
    try:
        return (yield invoke)
    except InvokeTimedOut as overran:
        if timeout.on_timeout_callback is not None:
            timeout.on_timeout_callback()
        if timeout.on_timeout == "continue":
            reason = f"exceeded its {timeout.ms} ms timeout; still waiting (on_timeout: continue)"
            ctx.decide(state, step, Decision(Rule.RUN, Outcome.WARN, Phase.INPUT, reason, call.name))
            return (yield AwaitLate(overran.handle))
        reason = f"did not finish within {timeout.ms} ms (on_timeout: {timeout.on_timeout})"
        ctx.decide(state, step, Decision(Rule.RUN, Outcome.DENY, Phase.INPUT, reason, call.name))
        if timeout.on_timeout == "cancel":
            state.stop(EngagementStatus.CANCELLED, f"{call.name!r} {reason}")
        raise ToolTimeout(call.name, timeout.ms, engagement_id=state.id) from None


def _after_invoke(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    record: CallRecord,
    rule: CapabilityRule | None,
    call: ToolCall,
    output: Any,
    *,
    resumed: bool,
) -> Flow[Any]:
    name = record.name
    collect = rule.collect_results if rule is not None else True
    try:
        if state.status is EngagementStatus.CANCELLED and not state.cancel_graceful:
            error = EngagementClosed(
                f"engagement was cancelled while the call ran: {state.status_reason}", capability=name
            )
            raise _deny(ctx, state, step, error)
        if not resumed:
            output = _deliverable(ctx, state, step, name, output)
            state.complete_call(record, to_plain(output), collect=collect)
            if rule is not None and rule.output_assertion is not None:
                _check(ctx, state, step, rule.output_assertion, name, Phase.OUTPUT)
            if ctx.guardian is not None:
                request = ctx.steps.tool_call_result(state, step, output, is_error=False)
                params = yield from _guardian(ctx, state, step, request, name, Phase.OUTPUT)
                if params is not None:
                    found, new_output = _outputs_from(params, output)
                    if not found:
                        _undecided(
                            ctx, state, step, "modifiedRequest carries no tool result", name, Phase.OUTPUT
                        )
                    else:
                        output = new_output
                        state.complete_call(record, to_plain(output), collect=collect)
                        if rule is not None and rule.output_assertion is not None:
                            _check(ctx, state, step, rule.output_assertion, name, Phase.OUTPUT)
            _run_rules(ctx, state, step, name, Phase.OUTPUT, record.inputs, output)
        if rule is not None and rule.output_review:
            try:
                yield from _review(
                    ctx, state, step, rule.output_review, name, Phase.OUTPUT, record, to_plain(output)
                )
            except ctx.passthrough:
                if record.call_id:
                    state.awaiting_review[record.call_id] = (step, record, rule, output)
                raise
    except PolicyViolation as exc:
        state.withhold_call(record, reason=exc.reason)
        raise
    except BaseException as exc:
        if not (rule is not None and rule.output_review and record.call_id in state.awaiting_review):
            state.withhold_call(record, reason=f"{type(exc).__name__}: {exc}", status="failed")
        raise
    return output


def _deliverable(ctx: FlowContext, state: EngagementState, step: StepRecord, name: str, output: Any) -> Any:
    """What is checked is what is delivered: a JSON-like output as it is, anything else converted once and
    the converted value handed on. An output that can be consumed only once (a generator, an iterator) has no
    faithful form -- checks would see its ``str()``, the caller its items -- and is withheld."""
    if is_plain(output):
        return output
    problem = one_shot(output)
    if problem is not None:
        if hasattr(output, "close"):
            output.close()
        error = RestrictionViolation(
            f"the output {problem}: return a list or another JSON-like value",
            capability=name,
            phase=Phase.OUTPUT,
        )
        raise _deny(ctx, state, step, error)
    return to_plain(output)


def guardrail_flow(ctx: FlowContext, state: EngagementState, phase: Phase, text: str) -> Flow[str]:
    """Run the input or output guardrail on ``text``; report the message step; return the text to use.

    The spec: the guardrail tool is invoked on every user input (before any model sees it) and every model
    answer (before the user sees it); its output is the only input of the assertion; a failure fails the
    execution and no more tools run in it.
    """
    role = "user" if phase is Phase.INPUT else "agent"
    step = new_step(state, "steps/message", name=role)
    step.payload["role"] = role
    return _observed(ctx, state, step, _guardrail(ctx, state, step, phase, role, text))


def _guardrail(
    ctx: FlowContext, state: EngagementState, step: StepRecord, phase: Phase, role: str, text: str
) -> Flow[str]:
    if not state.active:
        raise _deny(ctx, state, step, _closed_error(state, None, phase))
    rule = ctx.policy.input_guardrail if phase is Phase.INPUT else ctx.policy.output_guardrail
    if ctx.guardian is not None:
        request = ctx.steps.message(state, step, role, text)
        params = yield from _guardian(ctx, state, step, request, None, phase)
        if params is not None:
            new_text = message_text(params)
            if new_text is None:
                _undecided(ctx, state, step, "modifiedRequest carries no message text", None, phase)
            else:
                text = new_text
    if rule is None:
        return text
    registered = ctx.tools.get(rule.tool_name)
    fn = registered.fn if registered is not None else None
    failure: GuardrailViolation | None = None
    if fn is None:
        reason = f"guardrail tool {rule.tool_name!r} is not registered with the guard"
        failure = GuardrailViolation(reason, capability=rule.tool_name, phase=phase)
    else:
        try:
            output = yield Invoke(fn, (text,), {})
        except ctx.passthrough:
            raise
        except Exception as exc:
            reason = f"guardrail tool {rule.tool_name!r} failed: {type(exc).__name__}: {exc}"
            failure = GuardrailViolation(reason, capability=rule.tool_name, phase=phase)
        else:
            passed, reason = rule.assertion.check({"output": to_plain(output)})
            if not passed:
                failure = GuardrailViolation(
                    reason, capability=rule.tool_name, phase=phase, expression=rule.assertion.source
                )
    if failure is not None:
        if _blocks(ctx, state, step, failure):
            state.stop(EngagementStatus.FAILED, f"{phase.value} guardrail failed: {failure.reason}")
            raise failure
        return text
    ctx.decide(
        state,
        step,
        Decision(Rule.GUARDRAIL, Outcome.ALLOW, phase, reason, rule.tool_name, rule.assertion.source),
    )
    return text


def report_flow(
    ctx: FlowContext,
    state: EngagementState,
    method: str,
    build: Callable[[StepRecord], dict[str, Any]],
    *,
    name: str | None = None,
    phase: Phase = Phase.INPUT,
) -> Flow[dict[str, Any] | None]:
    """Record a step that has no local rule of its own (retrieval, memory, trigger, A2A, MCP, messages).

    The step is refused in a stopped engagement, recorded, and put to the guardian when one is configured.
    Returns the params of the guardian's replacement request on ``modify``, else ``None``.
    """
    step = new_step(state, method, name=name)
    return _observed(ctx, state, step, _report(ctx, state, step, build, name, phase))


def _report(
    ctx: FlowContext,
    state: EngagementState,
    step: StepRecord,
    build: Callable[[StepRecord], dict[str, Any]],
    name: str | None,
    phase: Phase,
) -> Flow[dict[str, Any] | None]:
    if not state.active:
        raise _deny(ctx, state, step, _closed_error(state, name, phase))
    request = build(step)
    if ctx.guardian is None:
        step.aos.append(request)
        ctx.decide(state, step, Decision(Rule.ENGAGEMENT, Outcome.ALLOW, phase, "recorded", name))
        return None
    return (yield from _guardian(ctx, state, step, request, name, phase))


def record_flow(
    ctx: FlowContext,
    state: EngagementState,
    name: str,
    inputs: dict[str, Any],
    outputs: Any,
    error: BaseException | str | None,
    call_id: str | None,
    kind: str,
) -> StepRecord:
    """Record a call a host observed after the fact (no checks: it already happened)."""
    step = new_step(state, "steps/toolCallRequest", name=name, call_id=call_id)
    watchers = step.observed_by = ctx.observers.stepping() if ctx.observers else ()
    tokens = Observers.step_started(watchers, state, step)
    record = state.begin_call(name, to_plain(inputs), kind=kind, call_id=call_id)
    step.call_id = record.call_id
    failed = error is not None
    if failed:
        step.payload["error"] = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        state.withhold_call(record, reason=step.payload["error"], status="failed")
    else:
        state.complete_call(record, to_plain(outputs))
    reason = "observed after the fact: recorded, not checked"
    ctx.decide(state, step, Decision(Rule.ENGAGEMENT, Outcome.ALLOW, Phase.OUTPUT, reason, name))
    step.aos.append(ctx.steps.tool_call_request(state, step, name, record.inputs, None))
    step.aos.append(ctx.steps.tool_call_result(state, step, None if failed else outputs, is_error=failed))
    if ctx.guardian is not None and ctx.guardian.mode == "observe":
        for request in step.aos:
            ctx.guardian.submit(request)
    Observers.step_ended(watchers, state, step, tokens, None)
    return step
