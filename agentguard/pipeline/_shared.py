"""The flow pieces of an engagement kept in a store (:mod:`agentguard.stores`), shared by several processes.

Only records with a journal come here: the default, in-process record pays nothing for them.

- A call is checked against the record this process has, then its ``b`` event is appended *exclusively*
  (:func:`begin_shared`): if another process changed the engagement first, the call is taken back, what was
  missed is applied, and the call is checked again -- at most ``1 + RECHECKS`` times, then denied.
- Everything else a flow changed is appended when it ends (:func:`flushed`). After a flow that succeeded it
  is *posted* to a store that can (:class:`~agentguard.record.Pipelined`): sent before the output is handed
  on, its answer read at the record's next commit -- so a guarded call waits for one round trip, its begin.
  A send that fails is a failed append (the output is withheld under ``deny``); an answer that never comes
  fails the step that reads it (the events go again with the next append).
- A store that cannot answer follows its ``on_failure``: ``deny`` refuses the step (a recorded
  :class:`~agentguard.errors.StoreDenied`; an output already produced is withheld), ``allow`` records a
  warning and carries on with this process's copy, sending what the store missed with the next append.
- Events the store refuses for good (:class:`~agentguard.record.EventRefused`: larger than it takes) deny
  the step whatever ``on_failure`` says (a bound was hit); the record has replaced them in its outbox, so
  the steps after it are appended as usual.
- Resuming a paused review is claimed in the store (:func:`claim_resume`) with the version the record holds:
  a record of an engagement that expired and was opened anew is refused, not let win the new one's claims.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable

from agentguard.errors import Phase, PolicyViolation, ReviewDenied, Rule, StoreDenied, StoreUnavailable
from agentguard.pipeline._checks import deny
from agentguard.pipeline._effects import Claim, Commit, Flow, T
from agentguard.pipeline._runtime import Runtime
from agentguard.record import (
    CallRecord,
    CommitBusy,
    Decision,
    EngagementState,
    EventRefused,
    Outcome,
    StepRecord,
)

__all__ = ["begin_shared", "claim_resume", "commit", "flush_flow", "flushed", "shared"]

RECHECKS = 8
"""How many times a call is checked again because other processes kept changing the engagement first."""


def commit(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    name: str | None,
    phase: Phase,
    *,
    exclusive: bool,
    post: bool = False,
) -> Flow[bool]:
    """Append what changed (see :class:`~agentguard.pipeline._effects.Commit`), under the store's failure
    policy. ``True`` when appended (or posted), or when the store failed and its policy is ``allow``."""
    try:
        appended: bool = yield Commit(state, exclusive, post=post)
        return appended
    except StoreUnavailable as exc:
        journal = state.journal
        # Events the store refused for good (too large) are a bound hit, and a commit lock not taken in time
        # (CommitBusy) asked no store: neither is a store down, always denied.
        if (
            journal is not None
            and journal.on_failure == "allow"
            and not isinstance(exc, (EventRefused, CommitBusy))
        ):
            reason = f"the engagement store failed ({exc}); carrying on with this process's record (on_failure: allow)"
            ctx.decide(state, step, Decision(Rule.STORE, Outcome.WARN, phase, reason, name))
            return True
        error = StoreDenied(f"the engagement store failed: {exc}", capability=name, phase=phase)
        raise deny(ctx, state, step, error) from exc


def begin_shared(
    ctx: Runtime,
    state: EngagementState,
    step: StepRecord,
    name: str,
    begin: Callable[[], tuple[T, CallRecord]],
    call_id: str | None = None,
) -> Flow[tuple[T, CallRecord] | None]:
    """Check a call and record it as begun, atomically across processes.

    ``begin`` runs the checks that read the record (closed engagement, capability, short-circuit) and begins
    the call (``state.begin_call``), returning what it decided and the call; it is run again after a
    conflict. Returns ``None`` instead when the conflict showed that the call of this ``call_id`` is paused
    in output review (in another process): then it is to be resumed, not run.
    """
    for _ in range(RECHECKS + 1):
        decided, record = begin()
        try:
            yield from commit(ctx, state, step, name, Phase.INPUT, exclusive=True)
        except BaseException as exc:
            # Also a flow that ends here otherwise (cancelled, interrupted): a call still to be checked would
            # hold back every later non-exclusive commit of the record, which stops before its ``b``. A call
            # checked again (``recheck``) was taken back already.
            if record.status != "recheck":
                reason = exc.reason if isinstance(exc, PolicyViolation) else type(exc).__name__
                state.rollback_call(record, reason=reason)
            raise
        if record.status != "recheck":
            if state.unsent(record):  # the store failed and its policy is allow
                state.ran_unsent(record)
            return decided, record
        reason = "the engagement changed in another process while the call was checked: checked again"
        ctx.decide(state, step, Decision(Rule.STORE, Outcome.WARN, Phase.INPUT, reason, name))
        if call_id is not None and call_id in state.awaiting_review:
            return None
    error = StoreDenied(
        f"the engagement changed in other processes {RECHECKS + 1} times while this call was checked",
        capability=name,
        phase=Phase.INPUT,
    )
    raise deny(ctx, state, step, error)


def shared(ctx: Runtime, state: EngagementState, step: StepRecord, flow: Flow[T]) -> Flow[T]:
    """``flow`` as it is for a record of this process only; else :func:`flushed`."""
    return flow if state.journal is None else flushed(ctx, state, step, flow)


def flush_flow(ctx: Runtime, state: EngagementState, step: StepRecord) -> Flow[None]:
    """Append what changed outside a flow (a close, a cancel, a call recorded after the fact); a failure
    is recorded on ``step`` and raised under ``deny``."""
    if state.journal is not None:
        yield from commit(ctx, state, step, step.name, Phase.OUTPUT, exclusive=False)


def flushed(ctx: Runtime, state: EngagementState, step: StepRecord, flow: Flow[T]) -> Flow[T]:
    """``flow``, then what it changed appended to the store (posted, after a flow that succeeded). When that
    fails under ``deny`` after the flow succeeded, the call's output is withheld (it is not in the store, so
    no other process would know)."""
    try:
        result = yield from flow
    except BaseException:
        with contextlib.suppress(PolicyViolation):  # recorded on the step; the flow's error is the one raised
            yield from commit(ctx, state, step, step.name, Phase.OUTPUT, exclusive=False)
        raise
    try:
        yield from commit(ctx, state, step, step.name, Phase.OUTPUT, exclusive=False, post=True)
    except PolicyViolation as violation:
        if step.call is not None:
            state.withhold_call(step.call, reason=violation.reason)
        raise
    return result


def claim_resume(
    ctx: Runtime, state: EngagementState, step: StepRecord, name: str, call_id: str
) -> Flow[None]:
    """Resuming a call paused in output review happens once, in one process, whatever the host re-runs."""
    owner = secrets.token_hex(8)
    try:
        holder = yield Claim(state, f"resume:{call_id}", owner)
    except StoreUnavailable as exc:
        error = StoreDenied(f"the engagement store failed: {exc}", capability=name, phase=Phase.OUTPUT)
        raise deny(ctx, state, step, error) from exc
    if holder != owner:
        reason = f"call {call_id!r} paused in output review was already resumed in another process"
        raise deny(ctx, state, step, ReviewDenied(reason, capability=name, phase=Phase.OUTPUT))
