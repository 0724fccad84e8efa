"""The checks a flow runs on a step, each recording its decision: restriction assertions, Python rules,
the guardian, reviews; and how a failed check becomes a recorded denial (or, in shadow mode, a warning).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from agentguard.cel import CelEvaluationError
from agentguard.errors import (
    EngagementClosed,
    GuardianDenied,
    GuardrailViolation,
    Phase,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    Rule,
    RuleViolation,
    ShortCircuitViolation,
)
from agentguard.observers import Observer, Observers
from agentguard.pipeline._effects import AskGuardian, AskReviewer, CallUser, Effect, Flow, Observe, T
from agentguard.pipeline._runtime import NO_LOOP, Runtime
from agentguard.policy._policy import Assertion
from agentguard.policy._review import (
    Approval,
    ReviewRequest,
    approval_tally,
    coerce_approval,
)
from agentguard.policy._rules import RuleContext
from agentguard.record import (
    CallRecord,
    Decision,
    EngagementState,
    EngagementStatus,
    Outcome,
    StepRecord,
    StepRef,
    to_plain,
)

if TYPE_CHECKING:
    from agentguard.guardian import GuardianVerdict


def deny(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
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


def blocks(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
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
        deny(ctx, state, step, error, data=data)
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


def closed_error(state: EngagementState, capability: str | None, phase: Phase) -> PolicyViolation:
    reason = f"engagement is {state.status.value}: {state.status_reason or 'no reason given'}"
    if state.status is EngagementStatus.STOPPED:
        return ShortCircuitViolation(reason, capability=capability, phase=phase)
    if state.status is EngagementStatus.FAILED:
        return GuardrailViolation(reason, capability=capability, phase=phase)
    return EngagementClosed(reason, capability=capability, phase=phase)


def check(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
    assertion: Assertion,
    capability: str,
    phase: Phase,
    allowed: Decision | None = None,
    asked: bool | Exception = False,
) -> None:
    """Check ``assertion`` on the record as it is now; its shared allow decision is ``allowed`` when the
    caller has it at hand (:meth:`Runtime.allows`).

    ``asked``: what the assertion's quick closure answered when a direct call asked it (under the lock). A
    :class:`~agentguard.cel.CelEvaluationError` it raised (a bound of the evaluation budget hit) is the
    answer, judged as it is: evaluating again would raise it again from the same closure, the bound hit
    twice. Anything else is evaluated from scratch, once: the reason shown to the caller (with the values
    compared) is read from the same answer.
    """
    variables = state.bindings(assertion.plan, step if isinstance(step, CallRecord) else step.call)
    answer = asked if isinstance(asked, CelEvaluationError) else assertion.answer(variables)
    passed, reason = assertion.judge(answer, variables)
    if not passed:
        error = RestrictionViolation(reason, capability=capability, phase=phase, expression=assertion.source)
        if blocks(ctx, state, step, error):
            if phase is Phase.INPUT:
                # The caller is told the input values the failing clause compared; the record, and so the
                # telemetry, keeps the reason without them (they are content). An output restriction that
                # fails withholds the output: its values are shown to nobody.
                shown = assertion.judge(answer, variables, values=True)[1]
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
    if allowed is None:
        allowed = ctx.allowed(Rule.RESTRICTION, phase, reason, capability, assertion.source)
    ctx.allow(state, step, allowed)


def run_rules(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    capability: str,
    phase: Phase,
    inputs: Mapping[str, Any],
    outputs: Any = None,
) -> Flow[None]:
    """The Python rules registered for this capability and phase (see ``guard.rules``), each called by the
    driver (an async rule is awaited); one that raises has failed."""
    rules = ctx.rules.for_call(capability, phase)
    if not rules:
        return
    context = RuleContext(capability, phase, inputs, to_plain(outputs), state, step.call)
    for rule in rules:
        try:
            answer = yield CallUser(rule.fn, (context,), f"rule {rule.name!r}")
            if inspect.isgenerator(answer):
                answer = yield from _rule_flow(rule.name, answer)
        except Exception as exc:
            result = rule.raised(exc)
        else:
            result = rule.verdict(answer)
        if result.passed:
            decision = Decision(
                rule.kind, Outcome.ALLOW, phase, result.message, capability, data=result.metadata
            )
            ctx.decide(state, step, decision)
            continue
        error = RuleViolation(
            result.message, rule_name=rule.name, kind=rule.kind, capability=capability, phase=phase
        )
        if blocks(ctx, state, step, error, name=rule.name):
            raise error


def _rule_flow(name: str, flow: Generator[Any, Any, Any]) -> Flow[Any]:
    """A rule that is a flow: its ``AskReviewer`` and ``CallUser`` effects are performed by the driver like the
    pipeline's own (timeouts, async reviewers and callables); any other effect is refused, and the rule has
    failed."""
    try:
        effect = next(flow)
        while True:
            if not isinstance(effect, AskReviewer | CallUser):
                flow.close()
                raise TypeError(
                    f"rule {name!r} yielded {type(effect).__name__}: a rule may only ask reviewers and call"
                )
            try:
                value = yield effect
            except Exception as exc:
                effect = flow.throw(exc)
            else:
                effect = flow.send(value)
    except StopIteration as stop:
        return stop.value


_RESULT_KEPT_ELSEWHERE = [
    {"kind": "text", "text": "[the tool's output: in the engagement's history once its checks let it out]"}
]


def _as_recorded(request: dict[str, Any]) -> dict[str, Any]:
    """What the step keeps of a request it sent the guardian: a ``steps/toolCallResult``'s outputs only once
    every check let them out (:func:`let_out`). Steps are readable (``Engagement.steps``, audit reports) while
    later checks still judge the output, and after one withheld it or the guardian replaced it."""
    params = request.get("params")
    if request.get("method") != "steps/toolCallResult" or not isinstance(params, dict):
        return request
    result = params.get("result")
    if not isinstance(result, dict):
        return request
    return {**request, "params": {**params, "result": {**result, "outputs": _RESULT_KEPT_ELSEWHERE}}}


def let_out(step: StepRecord, request: dict[str, Any]) -> None:
    """Every check let out the result ``request`` carries: the step keeps it whole (:func:`_as_recorded`)."""
    aos = step.aos
    for index in range(len(aos) - 1, -1, -1):
        if aos[index].get("id") == request.get("id"):
            aos[index] = request
            return


def ask_guardian(
    ctx: Runtime,
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
    step.aos.append(_as_recorded(request))
    if client.mode == "observe":
        yield Observe(client, request)
        return None
    try:
        verdict: GuardianVerdict = yield AskGuardian(client, request)
    except ctx.passthrough:
        raise
    except Exception as exc:  # the client decides every failure it knows of; anything else is undecided too
        undecided(ctx, state, step, f"the guardian client failed: {type(exc).__name__}", capability, phase)
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
        undecided(ctx, state, step, "guardian answered modify without a modifiedRequest", capability, phase)
        return None
    if outcome == "deny":
        code = verdict.reason_codes[0] if verdict.reason_codes else None
        raise deny(
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
    raise deny(
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


def undecided(
    ctx: Runtime,
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
    raise deny(ctx, state, step, error)


def review(
    ctx: Runtime,
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
        except Exception as exc:  # its type only: its text may quote what it was shown (a withheld output)
            approval = Approval(False, f"reviewer failed: {type(exc).__name__}", rid)
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
        raise deny(ctx, state, step, error, outcome=Outcome.REVIEW_REJECTED, data=data)
    ctx.decide(
        state, step, Decision(Rule.REVIEW, Outcome.REVIEW_APPROVED, phase, reason, capability, data=data)
    )


def observed(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    flow: Flow[T],
    watchers: tuple[Observer, ...] | None = None,
) -> Flow[T]:
    """``flow`` for ``step``, between the observers' ``step_started`` and ``step_ended`` when any watch it.

    A plain function, not a generator: an unwatched step (the common case) runs its flow with no extra
    frame on the per-call path. ``watchers``: who watches, when the caller already asked.
    """
    if watchers is None:
        watchers = ctx.observers.stepping() if ctx.observers else ()
    step.observed_by = watchers
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


UNKNOWN_NAME = "<a name the spec does not know>"
"""How a short-circuit reason shows a tool or agent name that is no capability of the spec."""


def short_circuit(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    name: str,
    *,
    refused: bool,
    allowed: Decision | None = None,
) -> bool:
    """Decision 5: stop the engagement when this attempt repeats a block of attempts ``short_circuit`` times.

    Checked for attempts another rule refuses too, so that an agent retrying a refused call is stopped.
    ``allowed``: the rule's shared allow decision for ``name``, when the caller has it at hand. ``True``
    when the attempt repeats a block and the rule's severity let it through (a warning).
    """
    k = ctx.policy.short_circuit
    if k is None:
        return False
    block = state.would_short_circuit(name, k, ctx.short_circuit_max_block)
    if block is None:
        if not refused:
            if allowed is None:
                allowed = ctx.allowed(Rule.SHORT_CIRCUIT, Phase.INPUT, NO_LOOP, name)
            ctx.allow(state, step, allowed)
        return False
    # The reason becomes the engagement's, quoted by every later step's denial and recorded with content
    # capture off: a name the spec does not know is the model's text (any length, any characters), shown so.
    knows = ctx.policy.knows
    loop = " -> ".join(n if knows(n) else UNKNOWN_NAME for n in [*state.attempts(block - 1), name])
    reason = (
        f"calling {repr(name) if knows(name) else UNKNOWN_NAME} would repeat [{loop}] {k} times in a row "
        f"(lifespan.short_circuit: {k}); the engagement is stopped"
    )
    error = ShortCircuitViolation(reason, capability=name, phase=Phase.INPUT)
    if blocks(ctx, state, step, error):
        state.stop(EngagementStatus.STOPPED, reason)
        raise error
    return True
