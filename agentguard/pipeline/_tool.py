"""The policy pipeline, written once as sans-I/O generators.

Each flow is a generator that makes every decision itself and *yields* an effect whenever something outside
has to happen — run the tool, ask a reviewer, ask the guardian — then receives the result (or the exception)
and carries on. :mod:`agentguard.pipeline` runs the same flow synchronously or under asyncio, so the sync and
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

import asyncio
import inspect
import json
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentguard._binding import Registered
from agentguard.errors import (
    CapabilityDenied,
    EngagementClosed,
    GuardianDenied,
    IdentityError,
    Phase,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    Rule,
    ToolError,
)
from agentguard.observers import Observer
from agentguard.pipeline._checks import (
    ask_guardian,
    blocks,
    check,
    closed_error,
    deny,
    let_out,
    observed,
    review,
    run_rules,
    short_circuit,
    undecided,
)
from agentguard.pipeline._driver import NOT_AWAITABLE, call_async, resolve_sync, run_async, run_sync
from agentguard.pipeline._effects import AwaitLate, CallUser, Flow, Invoke, InvokeTimedOut, Sleep
from agentguard.pipeline._runtime import Allows, Runtime
from agentguard.pipeline._shared import begin_shared, claim_resume, flushed, shared
from agentguard.pipeline._steps import new_step
from agentguard.policy._identity import (
    CredentialRequest,
    Credentials,
    identity_for,
    reset_credentials,
    set_credentials,
)
from agentguard.policy._policy import CapabilityRule
from agentguard.record import (
    NOT_PLAIN,
    SCALARS,
    CallRecord,
    Decision,
    DirectCallRecord,
    EngagementState,
    EngagementStatus,
    Outcome,
    StepRecord,
    StepRef,
    ValueTooComplex,
    plain_copies,
    plain_copy,
    to_plain,
    unfaithful,
)
from agentguard.runs import Retry, Timeout, ToolTimeout

Reasoning = str | Callable[[], str | None] | Callable[[], Awaitable[str | None]] | None
"""The model's text that asked for a call (the AOS request's ``reasoning``), or a function that finds it (sync or
async): only a guardian reads it, so a host that must search its conversation for it can leave that until one
asks."""


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
    reasoning: Reasoning = None
    timeout: Timeout | None = None
    retry: Retry | None = None

    @classmethod
    def of(
        cls, reg: Registered, inputs: dict[str, Any], call_id: str | None, reasoning: Reasoning
    ) -> ToolCall:
        """A call of the registered tool or agent ``reg`` with ``inputs``."""
        return cls(
            reg.name,
            reg.kind,
            inputs,
            reg.fn,
            reg.binder.to_args,
            call_id,
            reg.needs_credentials,
            reasoning,
            reg.timeout,
            reg.retry,
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
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
    record: CallRecord,
    rule: CapabilityRule | None,
    error: BaseException,
) -> Flow[BaseException]:
    """The tool raised: its error goes back to the caller (and often to the model), so it is an output too
    (decision 23). Returns the exception to raise, outside any ``except`` block (raised in one, it would take
    the tool's error along as its ``__context__``).

    Its text passes the output restriction first, the guardian hears of the failed call
    (``steps/toolCallResult`` with ``isError``), then the output rules judge the text. Output review cannot
    hold an error for a reviewer (nothing is delivered to resume with), so under it the error is withheld. A
    failing check replaces the error by the denial, whose reason does not quote the withheld text; one that
    passes hands the error on carrying only that text (:func:`_as_checked`). A tool's ``PolicyViolation`` (a
    guarded call it made was denied: the reason may quote that call's inputs) is such an error too. Control
    flow (a cancellation, an interrupt, the host's own pass-through exceptions) is no output: it goes on as it
    is. The record keeps ``outputs: null``, status ``failed``.
    """
    name = record.name
    if isinstance(error, (*_CONTROL_FLOW, *ctx.passthrough)):
        state.withhold_call(record, reason=type(error).__name__, status="failed")
        return error
    try:
        text = str(error)
    except Exception:  # the tool's own __str__ failed: nothing of it is shown
        text = f"<{type(error).__name__}>"
    restriction = rule.output_assertion if rule is not None else None
    checked = restriction is not None or ctx.guardian is not None or bool(ctx.rules)
    sent: dict[str, Any] | None = None  # what the guardian was asked, which the step keeps if the text passes
    try:
        if restriction is not None:
            record.checking = text  # what the assertion sees as this call's outputs, and nobody else
            check(ctx, state, step, restriction, name, Phase.OUTPUT)
        if ctx.guardian is not None:
            held = state.step_of(step)
            request = ctx.steps.tool_call_result(state, held, text, is_error=True)
            params = yield from ask_guardian(ctx, state, held, request, name, Phase.OUTPUT)
            if params is not None:
                undecided(ctx, state, held, "a failed call's error cannot be modified", name, Phase.OUTPUT)
            sent = request
        if ctx.rules:
            yield from run_rules(ctx, state, state.step_of(step), name, Phase.OUTPUT, record.inputs, text)
        if rule is not None and rule.output_review:
            reason = (
                f"the call failed ({type(error).__name__}) and its error is withheld: output review "
                f"({rule.output_review!r}) did not see it"
            )
            raise deny(ctx, state, step, ReviewDenied(reason, capability=name, phase=Phase.OUTPUT))
    except PolicyViolation as violation:
        state.withhold_call(record, reason=violation.reason)
        violation.__context__ = None  # the tool's error, whose text the denial withholds
        violation.__suppress_context__ = True  # as `raise violation from None` says it
        return violation
    described = f"{type(error).__name__}: {text}"
    state.withhold_call(record, reason=described, status="failed")
    held = state.step_of(step)
    held.payload["error"] = described
    if sent is not None:
        let_out(held, sent)
    return _as_checked(error, text) if checked else error


_CONTROL_FLOW = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)
"""What a tool may raise that is not its output but control flow: handed on as it is (:func:`_failed`)."""


def _as_checked(error: BaseException, text: str) -> BaseException:
    """``error``, whose ``str()`` is the ``text`` its checks passed, as the caller gets it: carrying nothing
    else that a host shows of an error.

    A host shows an error's traceback, with its chained errors (``__cause__``, ``__context__``) and its notes,
    and its ``repr``, which is its ``args`` (LangGraph's ToolNode tells the model ``repr(error)``): a tool's
    ``raise LookupFailed("no match") from db_error`` would carry the row the database error quoted past an
    output restriction that judged "no match". So the same object goes on without its chain and notes, its
    ``args`` reduced to the checked text when they hold anything else; its attributes stay (a host's code may
    read them: nothing shows them; a library's own error keeps its class, which hosts catch it by). It goes on
    as a :class:`~agentguard.ToolError` instead when its class shows more than that: an exception group (a
    traceback prints each sub-exception), a ``SyntaxError`` (its source line), a class with notes of its own
    or a chain it will not give up, a ``__repr__`` of its own, a ``__str__`` that reads what was taken out.
    The frames of its traceback stay: they show the tool's code, not its data (their locals are cleared).
    """
    try:
        faithful = not isinstance(error, _SHOWS_MORE)
        if faithful:
            error.__cause__ = None
            error.__context__ = None
            vars(error).pop("__notes__", None)
            if not all(_shown_in(arg, text) for arg in error.args):
                error.args = (text,)
            faithful = (
                error.__cause__ is None
                and error.__context__ is None
                and getattr(error, "__notes__", None) is None
                and str(error) == text
                and repr(error) == BaseException.__repr__(error)
            )
    except Exception:  # a class that resists (a property in the way, a __str__ that fails on what is left)
        faithful = False
    # Its frames' local variables (what the tool read, and did not say) are data no check saw: a host that
    # reports locals would send them. The frames still running (the pipeline's, where it was caught) stay.
    traceback.clear_frames(error.__traceback__)
    if faithful:
        return error
    replacement = ToolError(text, error_type=type(error).__name__)
    replacement.__traceback__ = error.__traceback__
    return replacement


_SHOWS_MORE = (BaseExceptionGroup, SyntaxError)
"""Errors whose traceback shows more than their ``str()`` and ``args``: each sub-exception of a group, the
source line and file of a ``SyntaxError``."""


def _shown_in(arg: object, text: str) -> bool:
    """Whether an error's ``arg`` is a plain value that ``text`` already shows (``KeyError('x')``'s text is
    ``'x'``; ``OSError(2, 'No such file')``'s ``[Errno 2] No such file``)."""
    if type(arg) is str:
        return arg in text
    return type(arg) in (int, float, bool, type(None)) and repr(arg) in text


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


def _capability(
    ctx: Runtime, state: EngagementState, step: StepRecord, name: str, kind: str
) -> Allows | None:
    """Decision 6: the capability a call falls under, with its shared allow decisions (``None``: a guardrail
    tool, or an unknown capability that ``unknown_capability`` lets through)."""
    policy = ctx.policy
    rule = policy.capability_for(name, kind, ctx.tools)
    if rule is not None:
        allows = ctx.allows(rule, name)
        ctx.allow(state, step, allows.capability)
        return allows
    if name in policy.guardrail_tools:
        ctx.allow(
            state, step, ctx.allowed(Rule.CAPABILITY, Phase.INPUT, "guardrail tool", name, in_spec=True)
        )
        return None
    if name[:1] == "_":  # would overwrite recent._name, history._list or history._total
        reason = f"{kind} name {name!r} is reserved: the Engagement's own members start with '_'"
        raise deny(ctx, state, step, CapabilityDenied(reason, capability=name, phase=Phase.INPUT))
    if policy.two_rules(name, kind, ctx.tools):
        reason = (
            f"agent {name!r} has two capabilities in the spec, {name!r} and 'oagent://{name}' (no tool is named "
            f"{name!r}, so both refer to the agent); it is called under neither"
        )
        raise deny(ctx, state, step, CapabilityDenied(reason, capability=name, phase=Phase.INPUT))
    mode = ctx.unknown_capability
    reason = f"{kind} {name!r} is not a capability of agent {policy.name!r}"
    if mode == "deny":
        error = CapabilityDenied(reason, capability=name, phase=Phase.INPUT)
        if blocks(ctx, state, step, error):
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


_RULES_REMEMBERED = 1024
"""How many rules' credentials an engagement remembers: a guard's spec has a fixed set of rules, but what the
record keeps is bounded whatever calls it."""


def _identity(
    state: EngagementState, rule: CapabilityRule | None
) -> tuple[Literal["user", "static"], str] | None:
    """Decision 10: the identity a call runs under (the user's, else the static credential set), if any."""
    return identity_for(
        user_identity=rule.user_identity if rule else True,
        static_identity=rule.static_identity if rule else None,
        user=state.user,
    )


def _identity_credentials(state: EngagementState, rule: CapabilityRule | None) -> Credentials | None:
    """Without a resolver the credentials are the identity itself: one object per engagement and identity,
    found by the call's rule after the first call under it (a look-up, on every call, instead of deciding)."""
    held = state.rule_credentials.get(id(rule))
    if held is not None and held[0] is rule:  # an id is reused only once its rule is gone
        credentials: Credentials | None = held[1]
        return credentials
    credentials = None
    ident = _identity(state, rule)
    if ident is not None:
        credentials = state.credentials.get(ident)
        if credentials is None:
            kind, subject = ident
            credentials = state.credentials[ident] = Credentials(
                kind, subject, user=state.user if kind == "user" else None
            )
    if len(state.rule_credentials) < _RULES_REMEMBERED:
        state.rule_credentials[id(rule)] = (rule, credentials)
    return credentials


def _resolved_credentials(
    ctx: Runtime, state: EngagementState, step: StepRecord, rule: CapabilityRule | None, call: ToolCall
) -> Flow[Credentials | None]:
    """The credentials the resolver (called by the driver, awaited when async) turns the identity into; a
    resolver that fails or answers nonsense denies the call."""
    ident = _identity(state, rule)
    if ident is None or ctx.credential_resolver is None:
        return None
    kind, subject = ident
    request = CredentialRequest(call.name, kind, subject, state.user, state.id)
    try:
        resolved = yield CallUser(ctx.credential_resolver, (request,), "the credential resolver")
    except ctx.passthrough:
        raise
    except Exception as exc:  # a resolver that fails must not let the call run, nor go unrecorded
        error = IdentityError(
            f"the credential resolver failed ({type(exc).__name__}) for {kind} {subject!r}",
            capability=call.name,
            phase=Phase.INPUT,
        )
        raise deny(ctx, state, step, error) from exc
    if resolved is not None and not isinstance(resolved, Credentials):
        error = IdentityError(
            f"the credential resolver returned {type(resolved).__name__}, not Credentials or None",
            capability=call.name,
            phase=Phase.INPUT,
        )
        raise deny(ctx, state, step, error)
    return resolved


def _reasoning(ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall) -> Flow[str | None]:
    """The call's reasoning for the guardian's request: a function the host gave for it is called (by the
    driver) only now. One that fails or answers anything but text denies the call, which the guardian could
    not be asked about as the host meant."""
    reasoning = call.reasoning
    if reasoning is None or isinstance(reasoning, str):
        return reasoning
    cause: Exception | None = None
    if not callable(reasoning):
        why = f"the call's reasoning is {type(reasoning).__name__}, not text or a function"
    else:
        try:
            text = yield CallUser(reasoning, (), "the reasoning function")
        except ctx.passthrough:
            raise
        except Exception as exc:
            why, cause = f"the reasoning function failed ({type(exc).__name__})", exc
        else:
            if text is None or isinstance(text, str):
                return text
            why = f"the reasoning function returned {type(text).__name__}, not text or None"
    error = GuardianDenied(f"{why}: the guardian was not asked", capability=call.name, phase=Phase.INPUT)
    raise deny(ctx, state, step, error) from cause


def tool_call_flow(
    ctx: Runtime, state: EngagementState, call: ToolCall, watchers: tuple[Observer, ...]
) -> Flow[Any]:
    """The whole life of one guarded tool or sub-agent call. Returns the output the caller may use.

    ``watchers``: the observers watching the step (:func:`run_tool_call` asked them).
    """
    call_id = call.call_id
    if call_id is not None and call_id in state.awaiting_review:
        # The host re-ran a call paused in output review: do not run the tool again.
        if state.journal is not None:  # _resume_shared checks it is the paused call
            step = new_step(state, "steps/toolCallRequest", name=call.name, call_id=call_id)
            return observed(
                ctx,
                state,
                step,
                flushed(ctx, state, step, _resume_shared(ctx, state, step, call)),
                watchers,
            )
        other = _not_the_paused_call(state, call)
        if other is not None:
            step = new_step(state, "steps/toolCallRequest", name=call.name, call_id=call_id)
            return observed(ctx, state, step, _refuse(ctx, state, step, other), watchers)
        resumed = state.resume_review(call_id)
        if resumed is not None:
            step, record, rule, output, _ = resumed
            allows = ctx.allows(rule, record.name) if rule is not None else None
            return observed(
                ctx,
                state,
                step,
                _after_invoke(ctx, state, step, record, allows, call, output, resumed=True),
                watchers,
            )
    step = new_step(state, "steps/toolCallRequest", name=call.name, call_id=call_id)
    return observed(ctx, state, step, shared(ctx, state, step, _tool_call(ctx, state, step, call)), watchers)


def run_tool_call(
    ctx: Runtime,
    state: EngagementState,
    reg: Registered,
    inputs: dict[str, Any],
    call_id: str | None = None,
    reasoning: Reasoning = None,
) -> Any:
    """One guarded call of ``reg`` in this thread, with ``inputs`` (by parameter name, a dict built for this
    call): :func:`tool_call_flow` under the sync driver, or, when the flow would yield nothing but the tool's
    run (:func:`_direct`), the same checks with the tool called in place."""
    observers = ctx.observers
    watchers = () if observers.quiet else observers.stepping()
    direct = _direct(ctx, state, reg, inputs, call_id, watchers)
    if direct is None:
        try:
            return run_sync(
                tool_call_flow(ctx, state, ToolCall.of(reg, inputs, call_id, reasoning), watchers)
            )
        except PolicyViolation as denial:
            raise denial.with_traceback(None) from denial.__cause__  # see _bare
    allows, step, record, args, kwargs, credentials = direct
    token = set_credentials(credentials)  # call_sync, written out: the per-call path
    try:
        try:
            output = reg.fn(*args, **kwargs)
            if type(output) not in NOT_AWAITABLE:
                output = resolve_sync(output, "the tool")
        finally:
            reset_credentials(token)
    except BaseException as exc:
        error = run_sync(_failed(ctx, state, step, record, allows.rule, exc))  # no guardian: yields nothing
    else:
        try:
            return _settle(ctx, state, step, record, allows, output)
        except PolicyViolation as denial:
            del output  # withheld: out of this frame before the denial leaves through it
            raise denial.with_traceback(None) from denial.__cause__  # see _bare
    raise _bare(error)


async def arun_tool_call(
    ctx: Runtime,
    state: EngagementState,
    reg: Registered,
    inputs: dict[str, Any],
    call_id: str | None = None,
    reasoning: Reasoning = None,
) -> Any:
    """:func:`run_tool_call` under asyncio."""
    observers = ctx.observers
    watchers = () if observers.quiet else observers.stepping()
    direct = _direct(ctx, state, reg, inputs, call_id, watchers)
    if direct is None:
        call = ToolCall.of(reg, inputs, call_id, reasoning)
        try:
            return await run_async(tool_call_flow(ctx, state, call, watchers))
        except PolicyViolation as denial:
            raise denial.with_traceback(None) from denial.__cause__  # see _bare
    allows, step, record, args, kwargs, credentials = direct
    try:
        output = await call_async(reg.fn, args, kwargs, credentials)
    except BaseException as exc:
        error = run_sync(_failed(ctx, state, step, record, allows.rule, exc))
    else:
        try:
            return _settle(ctx, state, step, record, allows, output)
        except PolicyViolation as denial:
            del output  # as in run_tool_call
            raise denial.with_traceback(None) from denial.__cause__
    raise _bare(error)


def _bare(error: BaseException) -> BaseException:
    """``error`` as a tool call raises it: a denial without the frames it was raised through.

    They are the pipeline's, and their local variables hold what the checks withheld (the tool's output, an
    error's text), which a host that reports locals with an error (Sentry does by default) would send on. A
    denial says why in its reason; the traceback starts where the call raises it. Any other error (the tool's
    own, its checks passed) keeps its traceback, the tool's code, its frames' data cleared (:func:`_as_checked`).
    """
    return error.with_traceback(None) if isinstance(error, PolicyViolation) else error


_Begun = tuple[Allows, StepRef, CallRecord, tuple[Any, ...], dict[str, Any], Credentials | None]


def _direct(
    ctx: Runtime,
    state: EngagementState,
    reg: Registered,
    inputs: dict[str, Any],
    call_id: str | None,
    watchers: tuple[Observer, ...],
) -> _Begun | None:
    """Steps 1-4 and 7 of a call whose flow would yield no effect but the tool's run, which can then run it
    directly, without the trampoline: its capability's allow decisions, its step and record, and what to
    invoke the tool with. ``None``, with nothing recorded: run the flow.

    A call goes direct when no observer watches, no guardian, shared store, Python rule, credential resolver
    or reviewer is involved, the call has no run control and is not one paused in review, and its capability
    is in the spec: read live on every call (a rule or gate added later counts at once). One whose inputs are
    JSON-like already is begun in one go, its record standing for its step and its input restriction asked
    there (:meth:`~agentguard.record.EngagementState.begin_direct`); any other takes the checks one by one.
    """
    if (
        watchers
        or ctx.guardian is not None
        or state.journal is not None
        or ctx.rules.registered
        or ctx.credential_resolver is not None
        or reg.retry is not None
        or reg.timeout is not None
        or (call_id is not None and call_id in state.awaiting_review)
    ):
        return None
    name = reg.name
    allows = ctx.direct.get(name) if reg.kind == "tool" else None
    if allows is None:
        allows = ctx.direct_allows(name, reg.kind)
        if allows is None:
            return None
    rule = allows.rule
    limits = ctx.value_limits
    plain: Any = inputs  # plain_copy's flat dict, the common inputs, written out: the per-call path
    if type(inputs) is dict and len(inputs) <= limits.max_values:
        for key, item in inputs.items():
            if type(item) not in SCALARS or type(key) is not str:
                plain = plain_copy(inputs, True, limits)  # positional: keywords cost more, on every call
                break
    else:
        plain = plain_copy(inputs, True, limits)
    direct = (
        None
        if plain is NOT_PLAIN
        else state.begin_direct(
            name,
            plain,
            reg.kind,
            call_id,
            allows.begun,
            ctx.policy.short_circuit,
            ctx.short_circuit_max_block,
            rule.input_assertion,
            allows.checked_in,
        )
    )
    step: StepRef
    checked: bool | Exception
    if direct is None:
        step = new_step(state, "steps/toolCallRequest", name=name, call_id=call_id)
        record = _begin(ctx, state, step, ToolCall.of(reg, inputs, call_id, None), allows)[1]
        checked = False
    else:
        record, checked = direct
        step = record
    try:
        if checked is not True:  # an exception the quick closure raised is no pass
            _checked_inputs(ctx, state, step, allows, record, inputs, checked)
        held = state.rule_credentials.get(id(rule))  # _identity_credentials' look-up, without its frame
        credentials = held[1] if held is not None and held[0] is rule else _identity_credentials(state, rule)
        if reg.needs_credentials and credentials is None:
            raise _no_credentials(ctx, state, step, name)
        binder = reg.binder
        args, kwargs = ((), inputs) if binder.by_keyword else binder.to_args(inputs)
    except BaseException as exc:
        _roll_back(ctx, state, record, exc)
        raise
    return allows, step, record, args, kwargs, credentials


def _resume_shared(ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall) -> Flow[Any]:
    """A paused call resumed in a record kept in a store: claimed once across processes; paused in another
    process, it is finished here (the step and the rule are this process's)."""
    call_id = call.call_id or ""  # tool_call_flow came here only with one
    other = _not_the_paused_call(state, call)  # as the store has it now (begin_shared may have reloaded it)
    if other is not None:
        raise deny(ctx, state, step, other)
    yield from claim_resume(ctx, state, step, call.name, call_id)
    resumed = state.resume_review(call_id)
    if resumed is None:  # another thread of this process resumed it meanwhile
        reason = f"call {call_id!r} paused in output review was already resumed"
        raise deny(ctx, state, step, ReviewDenied(reason, capability=call.name, phase=Phase.OUTPUT))
    _, record, rule, output, _ = resumed
    step.call = record
    if rule is None:
        rule = ctx.policy.capability_for(record.name, record.kind, ctx.tools)
    allows = ctx.allows(rule, record.name) if rule is not None else None
    return (yield from _after_invoke(ctx, state, step, record, allows, call, output, resumed=True))


def _not_the_paused_call(state: EngagementState, call: ToolCall) -> ReviewDenied | None:
    """Why ``call`` may not resume the call paused in output review under its id (``None``: it may).

    A call id is the host's or the model's to write, and a model may give two calls one id (a provider that
    numbers the calls of each response gives a later call the id of one whose run was left paused): a call of
    another tool or agent, or of the same one with other inputs, under the paused call's id would be handed
    that call's held output, and its review, without its own inputs ever being checked. The inputs compared
    are the host's, as it made the paused call (:func:`_asked`): a guardian may have modified the recorded
    ones, and the host resends its own. The reason names no input (they may be content).
    """
    paused = state.awaiting_review.get(call.call_id or "")
    if paused is None:
        return None
    record = paused[1]
    if record.name != call.name or record.kind != call.kind:
        what = f"a call of {call.kind} {call.name!r}"
    elif paused[4] is None or _asked(call) != paused[4]:
        what = "a call of it with other inputs"
    else:
        return None
    reason = (
        f"call id {call.call_id!r} is paused in output review for {record.kind} {record.name!r}: {what} under "
        "the same id would take its held output"
    )
    return ReviewDenied(reason, capability=call.name, phase=Phase.INPUT)


def _asked(call: ToolCall) -> dict[str, Any] | None:
    """The host's inputs of ``call`` as a paused call keeps them to tell its resumption (JSON-like, as a store
    keeps them); ``None`` when they have no such form, which no resumption matches."""
    try:
        asked = to_plain(call.inputs)
    except Exception:
        return None
    return asked if isinstance(asked, dict) else None


def _refuse(ctx: Runtime, state: EngagementState, step: StepRecord, error: PolicyViolation) -> Flow[Any]:
    """A flow that only denies: driven like any other, so that observers see its step end, denied."""
    raise deny(ctx, state, step, error)
    yield  # unreachable: the yield makes this function a flow


def _begin(
    ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall, known: Allows | None = None
) -> tuple[Allows | None, CallRecord]:
    """The checks before a call becomes the pending most-recent one (steps 1-3), then step 4's beginning.

    ``known``: the capability, when the caller has already looked it up (a direct call).
    """
    name = call.name
    if not state.active:
        raise deny(ctx, state, step, closed_error(state, name, Phase.INPUT))
    if known is not None:
        allows: Allows | None = known
        ctx.allow(state, step, known.capability)
    else:
        try:
            allows = _capability(ctx, state, step, name, call.kind)
        except PolicyViolation:
            # A refused attempt is an attempt (decision 5).
            short_circuit(ctx, state, step, name, refused=True)
            state.attempted(name)
            raise
    warned = short_circuit(
        ctx, state, step, name, refused=False, allowed=allows.short_circuit if allows is not None else None
    )
    # The record holds JSON-like inputs for CEL and AOS; the tool gets the caller's own objects unless a
    # guardian rewrote them.
    # ``call.inputs`` was built for this call (by the binder, or copied by Guard.call): nobody else holds it;
    # checked again after a conflict, it is copied instead. Inputs beyond the Guard's ValueLimits cannot be
    # recorded: the call is denied before it begins, an attempt all the same (decision 5).
    try:
        inputs = to_plain(call.inputs, owned=step.call is None, limits=ctx.value_limits)
    except ValueTooComplex as exc:
        state.attempted(name)
        raise deny(ctx, state, step, _unfaithful(name, Phase.INPUT, str(exc))) from None
    record = state.begin_call(
        name,
        inputs,
        kind=call.kind,
        call_id=call.call_id,
        started_at=step.at,
        short_circuit=None if warned else ctx.policy.short_circuit,
        max_block=ctx.short_circuit_max_block,
    )
    if record is None:  # calls begun in parallel since the check above made this attempt repeat a block
        short_circuit(ctx, state, step, name, refused=True)  # raises, unless its severity is a warning
        record = state.begin_call(name, inputs, kind=call.kind, call_id=call.call_id, started_at=step.at)
    step.call = record
    return allows, record


def _checked_inputs(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
    allows: Allows | None,
    record: CallRecord,
    inputs: Mapping[str, Any],
    asked: bool | Exception = False,
) -> None:
    """The local checks of a call's inputs (step 4): faithfully recorded, then the input restriction (``asked``:
    what its quick closure answered, when a direct call asked it)."""
    name = record.name
    # A flat dict of primitives comes back from to_plain as itself: nothing to find there.
    problem = unfaithful(inputs, ctx.value_limits) if record.entry["inputs"] is not inputs else None
    if problem is not None:
        raise deny(ctx, state, step, _unfaithful(name, Phase.INPUT, problem))
    if allows is not None:
        assertion = allows.rule.input_assertion
        if assertion is not None:
            check(ctx, state, step, assertion, name, Phase.INPUT, allows.input, asked)


def _no_credentials(ctx: Runtime, state: EngagementState, step: StepRef, name: str) -> PolicyViolation:
    """Step 7: the tool needs credentials and there are none (recorded; the error to raise)."""
    error = IdentityError(
        "the tool needs credentials and none could be resolved (no user identity, no static_identity)",
        capability=name,
        phase=Phase.INPUT,
    )
    return deny(ctx, state, step, error)


def _roll_back(ctx: Runtime, state: EngagementState, record: CallRecord, exc: BaseException) -> None:
    """A call refused before it ran leaves ``recent``/``history`` (a host's pause is not an attempt)."""
    reason = exc.reason if isinstance(exc, PolicyViolation) else type(exc).__name__
    state.rollback_call(record, reason=reason, attempted=not isinstance(exc, ctx.passthrough))


def _tool_call(ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall) -> Flow[Any]:
    name = call.name
    if state.journal is None:
        allows, record = _begin(ctx, state, step, call)
    else:
        begun = yield from begin_shared(
            ctx, state, step, name, lambda: _begin(ctx, state, step, call), call.call_id
        )
        if begun is None:
            return (yield from _resume_shared(ctx, state, step, call))
        allows, record = begun
    rule = allows.rule if allows is not None else None
    call_inputs: Mapping[str, Any] = call.inputs
    credentials: Credentials | None = None
    try:
        _checked_inputs(ctx, state, step, allows, record, call_inputs)
        if ctx.guardian is not None:
            reasoning = yield from _reasoning(ctx, state, step, call)
            request = ctx.steps.tool_call_request(state, step, name, record.inputs, reasoning)
            params = yield from ask_guardian(ctx, state, step, request, name, Phase.INPUT)
            if params is not None:
                new_inputs = _inputs_from(params)
                unfit = _unfit(call, new_inputs)
                if unfit is not None:
                    undecided(ctx, state, step, unfit, name, Phase.INPUT)
                elif new_inputs is not None:
                    record.entry["inputs"] = call_inputs = new_inputs
                    if allows is not None and allows.rule.input_assertion is not None:
                        check(ctx, state, step, allows.rule.input_assertion, name, Phase.INPUT, allows.input)
        if ctx.rules:  # no Python rules registered: the common case, without a lookup
            yield from run_rules(ctx, state, step, name, Phase.INPUT, record.inputs)
        reviewer = (rule.input_review if rule is not None else None) or ctx.review_gates.get(name)
        if reviewer:
            yield from review(ctx, state, step, reviewer, name, Phase.INPUT, record, None)
        if ctx.credential_resolver is None:
            credentials = _identity_credentials(state, rule)
        else:
            credentials = yield from _resolved_credentials(ctx, state, step, rule, call)
        if call.needs_credentials and credentials is None:
            raise _no_credentials(ctx, state, step, name)
        args, kwargs = call.to_args(call_inputs)
        if not state.active:  # stopped or cancelled while the call waited (a guardian, a review, credentials)
            raise deny(ctx, state, step, closed_error(state, name, Phase.INPUT))
        if reviewer and _changed(ctx, call_inputs, record):
            reason = "the inputs changed while they were reviewed: the call runs only with what was approved"
            raise deny(ctx, state, step, ReviewDenied(reason, capability=name, phase=Phase.INPUT))
    except BaseException as exc:
        _roll_back(ctx, state, record, exc)
        raise
    invoke = Invoke(call.fn, args, kwargs, credentials)
    try:
        if call.retry is None and call.timeout is None:
            output = yield invoke  # the common case, without the run-control frames
        else:
            output = yield from controlled_invoke(ctx, state, step, call, invoke)
    except BaseException as exc:
        failure: BaseException | None = yield from _failed(ctx, state, step, record, rule, exc)
    else:
        failure = None
    if failure is not None:
        raise failure
    if ctx.guardian is None and not ctx.rules and (rule is None or not rule.output_review):
        return _settle(ctx, state, step, record, allows, output)  # nothing to wait for: no generator frame
    return (yield from _after_invoke(ctx, state, step, record, allows, call, output, resumed=False))


def _changed(ctx: Runtime, inputs: Mapping[str, Any], record: CallRecord) -> bool:
    """Do the caller's own ``inputs`` (which the tool gets, decision 11) no longer read as the record's copy,
    which the reviewer was shown? Code holding one of their lists or dicts may have changed it meanwhile."""
    try:
        now: object = to_plain(inputs, limits=ctx.value_limits)
        return now != record.inputs
    except ValueTooComplex:  # grown past the limits since they were recorded
        return True


def controlled_invoke(
    ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall, invoke: Invoke
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
                yield CallUser(retry.on_retry, (exc, attempt), "Retry.on_retry")
            delay = retry.delay(attempt)
            # The error's type, not its text: the text is the tool's output, which no check has seen (a retry
            # that fails for good has it checked then), and this reason is recorded and exported.
            reason = f"retry {attempt} of {retry.attempts} in {delay} ms after {type(exc).__name__}"
            ctx.decide(state, step, Decision(Rule.RUN, Outcome.ALLOW, Phase.INPUT, reason, call.name))
            if delay:
                yield Sleep(delay)


def _invoke_once(
    ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall, invoke: Invoke
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
        if timeout.on_timeout == "continue":
            reason = f"exceeded its {timeout.ms} ms timeout; still waiting (on_timeout: continue)"
            ctx.decide(state, step, Decision(Rule.RUN, Outcome.WARN, Phase.INPUT, reason, call.name))
            yield from _timeout_hook(ctx, state, step, call, timeout)
            return (yield AwaitLate(overran.handle))
        reason = f"did not finish within {timeout.ms} ms (on_timeout: {timeout.on_timeout})"
        ctx.decide(state, step, Decision(Rule.RUN, Outcome.DENY, Phase.INPUT, reason, call.name))
        if timeout.on_timeout == "cancel":
            state.stop(EngagementStatus.CANCELLED, f"{call.name!r} {reason}")
        yield from _timeout_hook(ctx, state, step, call, timeout)
        raise ToolTimeout(call.name, timeout.ms, engagement_id=state.id) from None


def _timeout_hook(
    ctx: Runtime, state: EngagementState, step: StepRecord, call: ToolCall, timeout: Timeout
) -> Flow[None]:
    """``Timeout.on_timeout_callback``, once the timeout is recorded and acted on: a hook that raises is a
    warning on the step, and changes neither (it ran first, and its exception left the engagement running,
    the timeout unrecorded, and a ``Retry`` running the timed-out tool again)."""
    if timeout.on_timeout_callback is None:
        return
    try:
        yield CallUser(timeout.on_timeout_callback, (), "Timeout.on_timeout_callback")
    except Exception as exc:
        reason = f"Timeout.on_timeout_callback raised {type(exc).__name__}: {exc}"
        ctx.decide(state, step, Decision(Rule.RUN, Outcome.WARN, Phase.INPUT, reason, call.name))


def _cancelled(ctx: Runtime, state: EngagementState, step: StepRef, name: str) -> PolicyViolation:
    """The denial of an output that came back after the engagement was cancelled (not gracefully): its
    callers test ``state.status is CANCELLED and not state.cancel_graceful`` themselves, on the per-call path."""
    error = EngagementClosed(
        f"engagement was cancelled while the call ran: {state.status_reason}", capability=name
    )
    return deny(ctx, state, step, error)


def _record_output(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
    record: CallRecord,
    allows: Allows | None,
    output: Any,
    kept: Any = NOT_PLAIN,
    *,
    release: bool,
) -> None:
    """Keep the output in the record (``null`` unless ``collect_results``) and check the output restriction.

    ``kept``: the record's copy of ``output``, when the caller has made it. ``release``: nothing else judges
    the output: it is let out into the view once the restriction passes (until then only the call's own checks
    see it: :meth:`~agentguard.record.EngagementState.complete_call`).
    """
    if kept is NOT_PLAIN:
        kept = _deliverable(ctx, state, step, record.name, output)
    if allows is None:
        state.complete_call(record, kept, release=release)
        return
    rule = allows.rule
    restriction = rule.output_assertion
    state.complete_call(record, kept, collect=rule.collect_results, release=release and restriction is None)
    if restriction is not None:
        check(ctx, state, step, restriction, record.name, Phase.OUTPUT, allows.output)
        if release:
            state.release_call(record)


def _withhold(
    state: EngagementState, record: CallRecord, rule: CapabilityRule | None, exc: BaseException
) -> None:
    """A check after the call failed: the call stays in ``history``, its outputs withheld (decision 3)."""
    if isinstance(exc, PolicyViolation):
        state.withhold_call(record, reason=exc.reason)
    elif not (rule is not None and rule.output_review and record.call_id in state.awaiting_review):
        state.withhold_call(record, reason=f"{type(exc).__name__}: {exc}", status="failed")


def _settle(
    ctx: Runtime,
    state: EngagementState,
    step: StepRef,
    record: CallRecord,
    allows: Allows | None,
    output: Any,
    release: bool = True,  # not keyword-only: a call with such a parameter is not specialized in 3.11
) -> Any:
    """The local checks of a call's output (decision 3): recorded, then the output restriction; an output
    that fails them is withheld. Returns the output to deliver.

    All the checks of a call with nothing to wait for after it ran (no guardian, no Python rules, no output
    review): then the output is let out into the view once they pass. The first of them otherwise
    (``release`` false: :func:`_after_invoke` lets it out after the others).

    What is checked is what is delivered (decision 22): the caller gets a copy of the guard's own, never the
    tool's object, which the tool (or whatever else holds it) could change once the checks passed; the record
    keeps another, which the caller's changes do not reach.
    """
    try:
        if state.status is EngagementStatus.CANCELLED and not state.cancel_graceful:
            raise _cancelled(ctx, state, step, record.name)
        limits = ctx.value_limits
        if type(output) is dict and len(output) <= limits.max_values:  # plain_copies' flat dict, written out
            for key, item in output.items():
                if type(item) not in SCALARS or type(key) is not str:
                    delivered, kept = plain_copies(output, limits)  # positional, as in _direct
                    break
            else:
                delivered = dict(output)  # the second from the first: the tool's dict is read once
                kept = dict(delivered)
        else:
            delivered, kept = plain_copies(output, limits)
        if delivered is NOT_PLAIN:
            delivered = _deliverable(ctx, state, step, record.name, output)  # the guard's own conversion
            kept = to_plain(delivered)
        if release and allows is not None and type(record) is DirectCallRecord:
            # A direct call: its restriction asked under the record's lock, and the output let out, at once
            rule = allows.rule
            restriction = rule.output_assertion
            passed = state.complete_direct(
                record, kept, rule.collect_results, restriction, allows.checked_in, allows.checked_out
            )
            if passed is not True and restriction is not None:
                check(ctx, state, step, restriction, record.name, Phase.OUTPUT, allows.output, passed)
                state.release_call(record)
        else:
            _record_output(ctx, state, step, record, allows, delivered, kept, release=release)
    except BaseException as exc:
        _withhold(state, record, allows.rule if allows is not None else None, exc)
        raise
    return delivered


def _after_invoke(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    record: CallRecord,
    allows: Allows | None,
    call: ToolCall,
    output: Any,
    *,
    resumed: bool,
) -> Flow[Any]:
    name = record.name
    rule = allows.rule if allows is not None else None
    sent: dict[str, Any] | None = None  # the result the guardian was asked about, if it is what is let out
    if not resumed:
        output = _settle(ctx, state, step, record, allows, output, release=False)  # withholds what fails
    try:
        if resumed:
            if state.status is EngagementStatus.CANCELLED and not state.cancel_graceful:
                raise _cancelled(ctx, state, step, name)  # before a reviewer is asked again
        else:
            if ctx.guardian is not None:
                request = ctx.steps.tool_call_result(state, step, output, is_error=False)
                params = yield from ask_guardian(ctx, state, step, request, name, Phase.OUTPUT)
                if params is None:
                    sent = request
                else:
                    found, new_output = _outputs_from(params, output)
                    if not found:
                        undecided(
                            ctx, state, step, "modifiedRequest carries no tool result", name, Phase.OUTPUT
                        )
                    else:
                        output = new_output
                        _record_output(ctx, state, step, record, allows, output, release=False)
            if ctx.rules:
                yield from run_rules(ctx, state, step, name, Phase.OUTPUT, record.inputs, output)
        if rule is not None and rule.output_review:
            try:
                yield from review(
                    ctx, state, step, rule.output_review, name, Phase.OUTPUT, record, to_plain(output)
                )
            except ctx.passthrough:
                if record.call_id:
                    state.await_review(record.call_id, (step, record, rule, output, _asked(call)))
                raise
        # Cancelled at once while the checks judged (or the call waited, paused in review): not let out.
        if state.status is EngagementStatus.CANCELLED and not state.cancel_graceful:
            raise _cancelled(ctx, state, step, name)
    except BaseException as exc:
        _withhold(state, record, rule, exc)
        raise
    if not resumed:
        state.release_call(record)  # every check let it out
        if sent is not None:
            let_out(step, sent)
    else:  # its record may have been rebuilt from the store meanwhile, without its copy: the held output
        state.release_call(record, to_plain(output) if rule is None or rule.collect_results else None)
    return output


def _deliverable(ctx: Runtime, state: EngagementState, step: StepRef, name: str, output: Any) -> Any:
    """What is checked is what is delivered: an output that is not JSON-like (a JSON-like one is delivered as
    it is) is converted once and the converted value handed on. An output that can be consumed only once (a
    generator, an iterator) has no faithful form -- checks would see its ``str()``, the caller its items --
    and is withheld, as is one beyond the Guard's ValueLimits (one that holds itself never ends)."""
    problem = unfaithful(output, ctx.value_limits)
    if problem is None:
        try:  # an object's own conversion (a model's dump, a dataclass's fields) may go beyond the limits
            return to_plain(output, limits=ctx.value_limits)
        except ValueTooComplex as exc:
            problem = str(exc)
    if hasattr(output, "close"):
        output.close()
    raise deny(ctx, state, step, _unfaithful(name, Phase.OUTPUT, problem))


def _unfaithful(name: str, phase: Phase, problem: str) -> RestrictionViolation:
    """The denial of an input or output with no faithful JSON-like form (:func:`~agentguard.record.unfaithful`):
    ``problem`` says why."""
    what, who = ("an input", "the tool") if phase is Phase.INPUT else ("the output", "the caller")
    return RestrictionViolation(
        f"{what} {problem}: what the checks would see is not what {who} would get",
        capability=name,
        phase=phase,
    )
