"""The flows of steps other than tool calls: guardrails on user input and model output, reports of
other steps (retrieval, memory, A2A, MCP, messages), and calls a host observed after the fact.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentguard.errors import (
    GuardrailViolation,
    Phase,
    PolicyViolation,
    Rule,
    ShortCircuitViolation,
)
from agentguard.pipeline._checks import (
    ask_guardian,
    blocks,
    closed_error,
    deny,
    observed,
    short_circuit,
    undecided,
)
from agentguard.pipeline._effects import Flow, Invoke, Observe
from agentguard.pipeline._runtime import Runtime
from agentguard.pipeline._shared import shared
from agentguard.pipeline._steps import new_step
from agentguard.pipeline._tool import ToolCall, controlled_invoke
from agentguard.policy._policy import GuardrailRule
from agentguard.record import (
    Decision,
    EngagementState,
    EngagementStatus,
    Outcome,
    StepRecord,
    ValueLimits,
    ValueTooComplex,
    to_plain,
)
from agentguard.runs import ToolTimeout


def message_text(params: Mapping[str, Any]) -> str | None:
    """The text of the message in ``steps/message`` params (``None`` when it has no text part)."""
    message = params.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return None
    texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return "".join(texts) if texts else None


def answers_checked(ctx: Runtime) -> bool:
    """Whether :func:`guardrail_flow` may withhold or replace a model answer (a guardian asked about it, an
    output guardrail), so that a host streaming answers must hold each until the flow has let it out."""
    return ctx.guardian is not None or ctx.policy.output_guardrail is not None


def guardrail_flow(ctx: Runtime, state: EngagementState, phase: Phase, text: str) -> Flow[str]:
    """Run the input or output guardrail on ``text``; report the message step; return the text to use.

    The spec: the guardrail tool is invoked on every user input (before any model sees it) and every model
    answer (before the user sees it); its output is the only input of the assertion; a failure fails the
    execution and no more tools run in it.
    """
    role = "user" if phase is Phase.INPUT else "agent"
    step = new_step(state, "steps/message", name=role)
    step.payload["role"] = role
    return observed(
        ctx, state, step, shared(ctx, state, step, _guardrail(ctx, state, step, phase, role, text))
    )


def _guardrail(
    ctx: Runtime, state: EngagementState, step: StepRecord, phase: Phase, role: str, text: str
) -> Flow[str]:
    if not state.active:
        raise deny(ctx, state, step, closed_error(state, None, phase))
    rule = ctx.policy.input_guardrail if phase is Phase.INPUT else ctx.policy.output_guardrail
    if ctx.guardian is not None:
        request = ctx.steps.message(state, step, role, text)
        params = yield from ask_guardian(ctx, state, step, request, None, phase)
        if params is not None:
            new_text = message_text(params)
            if new_text is None:
                undecided(ctx, state, step, "modifiedRequest carries no message text", None, phase)
            else:
                text = new_text
    if rule is None:
        return text
    judged = yield from _judged(ctx, state, step, rule, phase, text)
    if isinstance(judged, str):
        ctx.decide(
            state,
            step,
            Decision(Rule.GUARDRAIL, Outcome.ALLOW, phase, judged, rule.tool_name, rule.assertion.source),
        )
        return text
    if blocks(ctx, state, step, judged):
        raise _failed(state, phase, judged)
    return text


def _failed(state: EngagementState, phase: Phase, failure: PolicyViolation) -> PolicyViolation:
    """Fail the engagement with a guardrail failure already recorded on its step (the spec: the execution
    fails and no more tools run in it); the error to raise."""
    state.stop(EngagementStatus.FAILED, f"{phase.value} guardrail failed: {failure.reason}")
    return failure


def _judged(
    ctx: Runtime, state: EngagementState, step: StepRecord, rule: GuardrailRule, phase: Phase, text: str
) -> Flow[GuardrailViolation | str]:
    """Run the guardrail tool on ``text`` and judge its answer: the failure, or the passing assertion's reason.

    The only place a registered guardrail tool runs. It runs as a tool does, under the ``timeout`` and
    ``retry`` it was registered with (:func:`~agentguard.pipeline._tool.controlled_invoke`, which records each
    timeout and retry as a ``run`` decision), so a slow guardrail cannot hold a check past its bound.
    Every way of failing to judge is a failure, never an exception past the caller's check (which left the
    engagement running and nothing recorded): the tool missing or raising, its answer beyond the Guard's
    ValueLimits (nested too deep, holding itself) or failing to convert, the assertion false or failing.

    A reason names the bound or the error's type, never an error's text: it may quote the text being
    checked, which a failure withholds, while the reason reaches the stop reason, decisions and spans.

    The answer is converted where the tool ran, within its Timeout (:func:`_converting`): a conversion that
    took longer (a model's slow ``model_dump``) held the check past its bound, and its late answer was judged.

    A timeout is recorded and raised here: like every ``run`` timeout it blocks whatever the guardrail's
    severity (decision 15), and the late answer is never judged. So is a cancellation of the check itself
    (the task running it is being cancelled): the denial recorded, the engagement failed, the cancellation
    raised on. A ``CancelledError`` the tool raised of its own while nothing cancels the check (an inner task
    of its client was cancelled) is a failure like any error: let through, it left the engagement running
    with nothing recorded, and a caller that carried on ran its next tool.
    """
    name = rule.tool_name
    registered = ctx.tools.get(name)
    if registered is None:
        return _violation(name, phase, "is not registered with the guard")
    call = ToolCall.of(registered, {}, None, None)
    invoke = Invoke(_converting(registered.fn, ctx.value_limits), (text,), {})
    try:
        answer = yield from controlled_invoke(ctx, state, step, call, invoke)
    except ctx.passthrough:
        raise
    except ToolTimeout as exc:
        if exc.capability != name:  # a guarded call the guardrail tool made itself timed out
            return _violation(name, phase, f"failed: {type(exc).__name__}")
        timed_out = _violation(name, phase, f"did not answer within {exc.ms} ms (its Timeout)")
        raise _failed(state, phase, deny(ctx, state, step, timed_out)) from None
    except asyncio.CancelledError:
        if not _being_cancelled():
            return _violation(name, phase, "failed: CancelledError")
        _failed(state, phase, deny(ctx, state, step, _violation(name, phase, "was cancelled with its check")))
        raise
    except Exception as exc:
        return _violation(name, phase, f"failed: {type(exc).__name__}")
    if isinstance(answer, _Unconverted):
        return _violation(name, phase, answer.problem)
    passed, reason = rule.assertion.check({"output": answer})
    if passed:
        return reason
    return GuardrailViolation(reason, capability=name, phase=phase, expression=rule.assertion.source)


class _Unconverted:
    """A guardrail tool's answer that :func:`_converted` could not convert: ``problem`` says why (the bound, or
    the error's type). Returned, not raised, so that the tool's ``Retry`` does not run it again for it."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _converted(answer: Any, limits: ValueLimits) -> Any:
    """A guardrail tool's ``answer`` as the JSON-like value its assertion sees, or :class:`_Unconverted`."""
    try:
        return to_plain(answer, limits=limits)
    except ValueTooComplex as exc:  # its text names the bound, never the value
        return _Unconverted(f"answered with a value that {exc}")
    except Exception as exc:  # the answer's own conversion raised (a model's dump, a __str__)
        return _Unconverted(f"answered with a value that could not be converted: {type(exc).__name__}")


def _converting(fn: Callable[..., Any], limits: ValueLimits) -> Callable[[str], Any]:
    """``fn`` answering :func:`_converted` of its answer, so that the driver runs the conversion with the tool:
    in its worker thread or task, under its Timeout. The same kind of callable as ``fn`` (the driver runs a
    coroutine function as a task, anything else in a thread); an awaitable that a sync ``fn`` returns is
    converted once the driver has awaited it."""
    if inspect.iscoroutinefunction(fn):

        async def converting_async(text: str) -> Any:
            return _converted(await fn(text), limits)

        return converting_async

    def converting(text: str) -> Any:
        answer = fn(text)
        if inspect.isawaitable(answer):
            return _converted_once_awaited(answer, limits)
        return _converted(answer, limits)

    return converting


async def _converted_once_awaited(answer: Awaitable[Any], limits: ValueLimits) -> Any:
    return _converted(await answer, limits)


def _being_cancelled() -> bool:
    """Whether the task running this check is being cancelled (not merely met a ``CancelledError``)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread: a sync check
        return False
    return task is not None and task.cancelling() > 0


def _violation(name: str, phase: Phase, problem: str) -> GuardrailViolation:
    return GuardrailViolation(f"guardrail tool {name!r} {problem}", capability=name, phase=phase)


def report_flow(
    ctx: Runtime,
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
    return observed(ctx, state, step, shared(ctx, state, step, _report(ctx, state, step, build, name, phase)))


def _report(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    build: Callable[[StepRecord], dict[str, Any]],
    name: str | None,
    phase: Phase,
) -> Flow[dict[str, Any] | None]:
    if not state.active:
        raise deny(ctx, state, step, closed_error(state, name, phase))
    request = build(step)
    if ctx.guardian is None:
        step.aos.append(request)
        ctx.decide(state, step, Decision(Rule.ENGAGEMENT, Outcome.ALLOW, phase, "recorded", name))
        return None
    return (yield from ask_guardian(ctx, state, step, request, name, phase))


def record_flow(
    ctx: Runtime,
    state: EngagementState,
    name: str,
    inputs: dict[str, Any],
    outputs: Any,
    error: BaseException | str | None,
    call_id: str | None,
    kind: str,
) -> Flow[StepRecord]:
    """Record a call a host observed after the fact (no checks: it already happened); an observe-mode
    guardian is handed its requests (the driver's :class:`Observe` effects).

    Its inputs and outputs are converted first: beyond the Guard's ValueLimits, nothing is recorded, and
    :class:`~agentguard.record.ValueTooComplex` says why. The output is kept as its capability says
    (``collect_results``). What the record says of the call is said once it is recorded: a call that
    repeats a block of calls ``short_circuit`` times stops the engagement (raised, so that a host that can
    still stop its run does), and a call recorded in an engagement no longer active is recorded and refused.
    """
    kept_inputs = to_plain(inputs, limits=ctx.value_limits)
    kept_outputs = None if error is not None else to_plain(outputs, limits=ctx.value_limits)
    step = new_step(state, "steps/toolCallRequest", name=name, call_id=call_id)
    recorded = _recorded(ctx, state, step, name, kept_inputs, kept_outputs, error, call_id, kind)
    return observed(ctx, state, step, shared(ctx, state, step, recorded))


def _recorded(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    name: str,
    inputs: dict[str, Any],
    outputs: Any,
    error: BaseException | str | None,
    call_id: str | None,
    kind: str,
) -> Flow[StepRecord]:
    refused: PolicyViolation | None = None
    if not state.active:
        refused = closed_error(state, name, Phase.INPUT)
    else:
        try:
            short_circuit(ctx, state, step, name, refused=True)
        except ShortCircuitViolation as loop:  # recorded on the step, the engagement stopped
            refused = loop
    record = state.begin_call(name, inputs, kind=kind, call_id=call_id, after_the_fact=True)
    step.call = record
    failed = error is not None
    if failed:
        step.payload["error"] = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        state.withhold_call(record, reason=step.payload["error"], status="failed")
    else:
        rule = ctx.policy.capability_for(name, kind, ctx.tools)
        state.complete_call(record, outputs, collect=rule.collect_results if rule is not None else True)
    reason = "observed after the fact: recorded, not checked"
    ctx.decide(state, step, Decision(Rule.ENGAGEMENT, Outcome.ALLOW, Phase.OUTPUT, reason, name))
    step.aos.append(ctx.steps.tool_call_request(state, step, name, record.inputs, None))
    step.aos.append(ctx.steps.tool_call_result(state, step, None if failed else outputs, is_error=failed))
    if ctx.guardian is not None and ctx.guardian.mode == "observe":
        for request in step.aos:
            yield Observe(ctx.guardian, request)
    if isinstance(refused, ShortCircuitViolation):
        raise refused
    if refused is not None:
        raise deny(ctx, state, step, refused)
    return step
