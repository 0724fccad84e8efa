"""The pipeline's driver: what each effect of a policy flow means, performed by the one trampoline.

A flow decides; the driver performs the effects it yields (run the tool, ask a reviewer, ask the guardian)
and sends back the result or throws back the exception (:mod:`agentguard._trampoline`). The sync and the
async driver differ only in *how* they wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

from agentguard._trampoline import adrive, drive
from agentguard.errors import ConfigurationError, StoreUnavailable
from agentguard.pipeline._effects import (
    AskGuardian,
    AskReviewer,
    AwaitLate,
    CallUser,
    Claim,
    Commit,
    Effect,
    Flow,
    Invoke,
    InvokeTimedOut,
    Observe,
    Sleep,
    T,
)
from agentguard.policy._identity import Credentials, reset_credentials, set_credentials
from agentguard.record import (
    Appended,
    CommitBusy,
    EngagementState,
    EventRefused,
    Journal,
    Pipelined,
    Snapshot,
)

__all__ = ["call_async", "call_sync", "run_async", "run_in_daemon_thread", "run_sync"]


def run_in_daemon_thread(fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """Run ``fn`` in a new daemon thread, in a copy of this context, and return its future.

    A daemon thread per call, not a pool: a call that overruns its timeout may never return, and it must
    neither hold up interpreter exit nor starve the calls after it.
    """
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(context.run(fn))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="agentguard-call").start()
    return future


def _outcome(future: concurrent.futures.Future[Any]) -> str:
    """How a timed-out call's late run ended, for the decision that discards it: its error's type, not its
    text, which is the tool's output and was never checked (the decision is recorded and exported)."""
    error = future.exception()
    return "returned" if error is None else f"raised {type(error).__name__}"


NOT_AWAITABLE = frozenset({dict, list, tuple, str, int, float, bool, type(None), bytes})


def call_sync(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], credentials: Credentials | None
) -> Any:
    """What the sync driver does with an :class:`Invoke` without a timeout, in this thread (an async tool is
    run to completion when no event loop runs here, its body with the credentials set too), for a call run
    without the trampoline."""
    token = set_credentials(credentials)
    try:
        value = fn(*args, **kwargs)
        # Most tools return JSON-like values: only anything else may be an awaitable to run (one call less).
        return value if type(value) in NOT_AWAITABLE else resolve_sync(value, "the tool")
    finally:
        reset_credentials(token)


async def call_async(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], credentials: Credentials | None
) -> Any:
    """:func:`call_sync` for the async driver: the credentials stay set while the coroutine body runs."""
    token = set_credentials(credentials)
    try:
        value = fn(*args, **kwargs)
        return await value if inspect.isawaitable(value) else value
    finally:
        reset_credentials(token)


def _overran(effect: Invoke, future: concurrent.futures.Future[Any]) -> InvokeTimedOut:
    if not effect.keep_running and effect.on_late is not None:
        on_late = effect.on_late
        future.add_done_callback(lambda done: on_late(_outcome(done)))
    return InvokeTimedOut(future)


def resolve_sync(value: Any, what: str) -> Any:
    """A sync driver met an awaitable (an async tool or reviewer): run it if no loop runs in this thread."""
    if type(value) in NOT_AWAITABLE or not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(value))
    if inspect.iscoroutine(value):
        value.close()
    raise ConfigurationError(f"{what} is async but was called from a running event loop: use the async API")


async def _await(value: Any) -> Any:
    return await value


def _reviewer_timed_out(timeout_ms: int) -> TimeoutError:
    return TimeoutError(f"reviewer did not answer within {timeout_ms} ms")


def _within(
    fn: Callable[[], Any],
    timeout_ms: int | None,
    timed_out: Callable[[concurrent.futures.Future[Any], int], BaseException],
) -> Any:
    """``fn()`` here, or with a timeout in a thread of its own: ``timed_out(its future, timeout_ms)`` is
    raised when the time is up (the thread runs on: Python cannot kill it)."""
    if timeout_ms is None:
        return fn()
    future = run_in_daemon_thread(fn)
    try:
        return future.result(timeout=timeout_ms / 1000)
    except concurrent.futures.TimeoutError:
        raise timed_out(future, timeout_ms) from None


def _perform_sync(effect: Effect) -> Any:
    if isinstance(effect, Invoke):
        if effect.timeout_ms is None:  # the per-call path: no closures, no thread
            return call_sync(effect.fn, effect.args, effect.kwargs, effect.credentials)
        return _within(
            lambda: call_sync(effect.fn, effect.args, effect.kwargs, effect.credentials),
            effect.timeout_ms,
            lambda late, _: _overran(effect, late),
        )
    if isinstance(effect, CallUser):
        return resolve_sync(effect.fn(*effect.args), effect.what)
    if isinstance(effect, AskReviewer):
        # A reviewer that overruns keeps its thread until it returns; its late answer is ignored and the
        # timeout decision stands.
        return _within(
            lambda: resolve_sync(effect.reviewer(effect.request), "the reviewer"),
            effect.timeout_ms,
            lambda _, timeout_ms: _reviewer_timed_out(timeout_ms),
        )
    if isinstance(effect, AskGuardian):
        return effect.client.decide(effect.request)
    if isinstance(effect, Observe):
        effect.client.submit(effect.request)
        return None
    if isinstance(effect, AwaitLate):
        return effect.handle.result()
    if isinstance(effect, Sleep):
        time.sleep(effect.ms / 1000)
        return None
    if isinstance(effect, Commit):
        return _commit(effect)
    if isinstance(effect, Claim):
        state = effect.state
        try:
            return _journal(state).claim(state.id, effect.key, effect.owner, since=state.version)
        except KeyError:
            raise _expired(state) from None
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover - exhaustive over Effect


async def _perform_async(effect: Effect) -> Any:
    if isinstance(effect, Invoke):
        if effect.timeout_ms is None:
            return await call_async(effect.fn, effect.args, effect.kwargs, effect.credentials)
        return await _invoke_with_timeout(effect, effect.timeout_ms)
    if isinstance(effect, CallUser):
        value = effect.fn(*effect.args)
        return await value if inspect.isawaitable(value) else value
    if isinstance(effect, AskReviewer):
        reviewer, request, timeout_ms = effect.reviewer, effect.request, effect.timeout_ms
        if timeout_ms is None:
            answer = reviewer(request)
            return await answer if inspect.isawaitable(answer) else answer
        try:
            if inspect.iscoroutinefunction(reviewer) or inspect.iscoroutinefunction(
                getattr(reviewer, "__call__", None)  # noqa: B004 - async callable objects
            ):
                return await asyncio.wait_for(reviewer(request), timeout_ms / 1000)  # type: ignore[arg-type]
            # A sync reviewer runs in a worker thread (contextvars copied) so the timeout can fire; an awaitable
            # it returns is awaited within what is left of the same timeout.
            deadline = time.monotonic() + timeout_ms / 1000
            answer = await asyncio.wait_for(asyncio.to_thread(reviewer, request), timeout_ms / 1000)
            if inspect.isawaitable(answer):
                return await asyncio.wait_for(_await(answer), max(0.0, deadline - time.monotonic()))
            return answer
        except TimeoutError:
            raise _reviewer_timed_out(timeout_ms) from None
    if isinstance(effect, AskGuardian):
        return await effect.client.adecide(effect.request)
    if isinstance(effect, Observe):
        effect.client.submit(effect.request)  # enqueues: never waits, so the same under asyncio
        return None
    if isinstance(effect, AwaitLate):
        handle = effect.handle
        return await (
            asyncio.wrap_future(handle) if isinstance(handle, concurrent.futures.Future) else handle
        )
    if isinstance(effect, Sleep):
        await asyncio.sleep(effect.ms / 1000)
        return None
    if isinstance(effect, Commit):
        return await _acommit(effect)
    if isinstance(effect, Claim):
        state = effect.state
        try:
            return await _journal(state).aclaim(state.id, effect.key, effect.owner, since=state.version)
        except KeyError:
            raise _expired(state) from None
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover - exhaustive over Effect


def _journal(state: EngagementState) -> Journal:
    journal = state.journal
    if journal is None:  # pragma: no cover - flows yield store effects only for shared records
        raise ConfigurationError("the engagement is not kept in a store")
    return journal


def _expired(state: EngagementState) -> StoreUnavailable:
    return StoreUnavailable(f"engagement {state.id!r} is no longer in its store (expired, or deleted)")


def _settled(state: EngagementState, sent: int, appended: Appended, snapshot: Snapshot | None) -> bool:
    """Apply an append's answer (``snapshot``: the record loaded again after a gap)."""
    if appended.gap and snapshot is None:
        raise _expired(state)
    try:
        ok = state.settle(sent, appended)
        if snapshot is not None:  # it missed more than the store keeps
            state.reload(snapshot)
    except ValueError as exc:  # not events this library wrote: fail closed
        raise StoreUnavailable(f"the store answered with something that is not a journal ({exc})") from exc
    return ok


_Bounds = tuple[int | None, int | None]
"""What one append's round trip carries at most: bytes of encoded events, events (``None``: no bound)."""


def _bounds(journal: Journal) -> _Bounds:
    """The journal's round trip, from its ``max_append_bytes`` and ``max_append_events`` attributes (not
    part of :class:`~agentguard.record.Journal`: a store without them takes any append in one)."""
    max_bytes, max_events = (
        getattr(journal, name, None) for name in ("max_append_bytes", "max_append_events")
    )
    return (
        max_bytes if type(max_bytes) is int and max_bytes > 0 else None,
        max_events if type(max_events) is int and max_events > 0 else None,
    )


_RECHECK = object()
"""What :func:`_to_send` answers when the calls still to be checked are to be checked again, unsent."""


def _to_send(effect: Commit, bounds: _Bounds) -> tuple[list[str], int, bool] | object | None:
    """The next append of a commit: its events, their change to ``history._total`` and whether it is the
    last (the commit's own: exclusive when the commit is, posted when it is); ``None`` when there is nothing
    to do, :data:`_RECHECK` when the calls still to be checked must be checked again first.

    A call's ``b`` is appended exclusively, by its own commit, at the version its checks saw: so a
    non-exclusive commit (a flush, a post, a fetch) sends only the events before the first ``b`` of a call
    still to be checked (:meth:`~agentguard.record.EngagementState.unchecked`). Sent by another thread's
    flush, that ``b`` would land after whatever other processes appended meanwhile, never compared with it,
    and its own exclusive commit would find nothing left to compare.

    An outbox of more than one round trip (``bounds``: what grew while the store was away, under
    ``on_failure: allow``) goes as prefixes, each appended and settled on its own (its ``total`` its own
    events' change: one that landed is never counted again), the earlier ones non-exclusively. For an
    exclusive commit those end before that first ``b``: it and what follows go in the last, one exclusive
    append. The calls are checked again instead, unsent, when that rest is more than one round trip, or when
    the record applied what other processes appended since they were checked (an earlier prefix's answer, a
    posted append's read at this commit, or another thread's append between their check and this commit):
    sent at the version after it, the compare-and-set would compare with a record they were not checked
    against."""
    state = effect.state
    max_bytes, max_events = bounds
    end, stale = state.unchecked()
    if not effect.exclusive:
        batch = state.batch(max_bytes, max_events, end=end)
        if batch is None:
            return ([], 0, True) if effect.fetch else None
        events, total = batch
        return events, total, len(events) == end
    if stale:
        return _RECHECK
    batch = state.batch(max_bytes, max_events)
    if batch is None:
        return None
    events, total = batch
    if len(events) == state.waiting():
        return events, total, True
    if end == 0:
        return _RECHECK
    events, total = cast(tuple[list[str], int], state.batch(max_bytes, max_events, end=end))
    return events, total, False


@contextlib.contextmanager
def _answers_of(state: EngagementState, *, bounded: bool = True) -> Iterator[None]:
    """What a store's append (or post, or the reading of a posted one's answer) raises, as the pipeline takes
    it: no such engagement (``KeyError``) is an expired one; events refused for good are replaced in the
    outbox (:meth:`~agentguard.record.EngagementState.refuse`) and the refusal goes on; with ``bounded``, a
    store's own bound (``ValueError``: more events than one round trip carries, which :func:`_bounds` did
    not know of) is a failed append, recorded and following ``on_failure``, not an error of the caller."""
    try:
        yield
    except KeyError:
        raise _expired(state) from None
    except EventRefused as exc:
        state.refuse(exc.positions)
        raise
    except ValueError as exc:
        if not bounded:
            raise
        raise StoreUnavailable(f"the store refused the append ({exc})") from exc


def _stuck(state: EngagementState) -> StoreUnavailable:
    """A store answered an append of part of the outbox without taking it: sent again, it would be again."""
    return StoreUnavailable(
        f"the store did not take an append of engagement {state.id!r}'s events: nothing was sent further"
    )


def _commit(effect: Commit) -> bool:
    """One append at a time per record (the lock, :func:`_held`; async commits take it too), so
    that each is made against the version it saw and takes off the outbox only what it sent; an outbox of
    more than one round trip goes in several (see :func:`_to_send`)."""
    state = effect.state
    journal = _journal(state)
    with _held(state, journal):
        _confirm(state, journal)
        bounds = _bounds(journal)
        while True:
            batch = _to_send(effect, bounds)
            if batch is None:
                return True
            if batch is _RECHECK:
                state.recheck()
                return False
            events, total, last = cast(tuple[list[str], int, bool], batch)
            with _answers_of(state):
                if last and effect.post and _pipelined(journal):
                    state.posted = (
                        cast(Pipelined, journal).post(state.id, state.version, events, total),
                        len(events),
                    )
                    return True
                exclusive = effect.exclusive and last
                appended = journal.append(state.id, state.version, events, total, exclusive=exclusive)
                snapshot = journal.load(state.id) if appended.gap else None
            ok = _settled(state, len(events), appended, snapshot)
            if last:
                return ok
            if not ok:
                raise _stuck(state)


async def _acommit(effect: Commit) -> bool:
    """:func:`_commit` under asyncio."""
    state = effect.state
    journal = _journal(state)
    async with _holding(state, journal):
        await _aconfirm(state, journal)
        bounds = _bounds(journal)
        while True:
            batch = _to_send(effect, bounds)
            if batch is None:
                return True
            if batch is _RECHECK:
                state.recheck()
                return False
            events, total, last = cast(tuple[list[str], int, bool], batch)
            with _answers_of(state):
                if last and effect.post and _pipelined(journal):
                    state.posted = (
                        await cast(Pipelined, journal).apost(state.id, state.version, events, total),
                        len(events),
                    )
                    return True
                exclusive = effect.exclusive and last
                appended = await journal.aappend(state.id, state.version, events, total, exclusive=exclusive)
                snapshot = await journal.aload(state.id) if appended.gap else None
            ok = _settled(state, len(events), appended, snapshot)
            if last:
                return ok
            if not ok:
                raise _stuck(state)


@contextlib.asynccontextmanager
async def _holding(state: EngagementState, journal: Journal) -> AsyncIterator[None]:
    """The record's commit lock, for an async commit: the thread lock the sync ones take, so that a
    ``guard.call`` in a worker thread and a ``guard.acall`` on the loop never have two appends of one record
    in flight (each would take the same prefix off the outbox, the second events that were never sent).

    Taken without blocking the loop: when it is held, a worker thread waits for it (as a sync commit's thread
    does, so neither side starves the other), for :func:`_lock_wait` at most. Coroutines of one loop queue on
    an ``asyncio.Lock`` first (made for the loop that runs them), so that one of them waits at a time. While
    held, ``commit_thread`` names the loop's thread: a sync commit there would wait for a holder it keeps from
    running (:func:`_held`).
    """
    loop = asyncio.get_running_loop()
    queued = state.acommit_lock
    if queued is None or queued[0] is not loop:
        queued = state.acommit_lock = (loop, asyncio.Lock())
    async with queued[1]:
        lock = state.commit_lock
        if not lock.acquire(blocking=False):
            wait = _lock_wait(journal)
            waiting = loop.run_in_executor(None, lock.acquire, True, wait)
            try:
                taken = await asyncio.shield(waiting)
            except asyncio.CancelledError:  # a lock the worker thread takes after all is let go at once
                waiting.add_done_callback(lambda done: _let_go(lock, done))
                raise
            if not taken:
                raise _busy(state, wait)
        state.commit_thread = threading.get_ident()
        try:
            yield
        finally:
            state.commit_thread = None
            lock.release()


def _lock_wait(journal: Journal) -> float:
    """How long a commit waits for another commit of its engagement (seconds): the journal's
    ``commit_wait_seconds`` attribute when it has one, else four of its round trips (its ``timeout_seconds``;
    30 s for a store with neither). A holder that takes longer is stuck, or waits for this very thread (an
    event loop blocked on a thread whose sync commit waits for the loop's async one): past it the step is
    denied (:class:`~agentguard.record.CommitBusy`), never held for ever."""
    for name, times in (("commit_wait_seconds", 1), ("timeout_seconds", 4)):
        seconds = getattr(journal, name, None)
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 < seconds < math.inf:
            return times * float(seconds)
    return 30.0


def _busy(state: EngagementState, wait: float) -> CommitBusy:
    return CommitBusy(
        f"engagement {state.id!r}: another commit of it held the commit lock for {wait:g} s (stuck, or waiting "
        "for this thread)"
    )


@contextlib.contextmanager
def _held(state: EngagementState, journal: Journal) -> Iterator[None]:
    """The record's commit lock, for a sync commit: waited for :func:`_lock_wait` at most. Refused at once on
    the event loop's thread while an async commit of the record holds it (:func:`_holding`): that commit waits
    for its answer on this very thread, which this call blocks, so waiting for it would never end."""
    if state.commit_thread == threading.get_ident():
        raise CommitBusy(
            f"engagement {state.id!r}: a sync step on the event loop's thread while an async step of the same "
            "engagement waits there for the store (use acall there)"
        )
    lock, wait = state.commit_lock, _lock_wait(journal)
    if not lock.acquire(timeout=wait):
        raise _busy(state, wait)
    try:
        yield
    finally:
        lock.release()


def _let_go(lock: threading.Lock, done: asyncio.Future[bool]) -> None:
    """Release ``lock`` if the wait of a cancelled async commit took it after all."""
    if not done.cancelled() and done.exception() is None and done.result():
        lock.release()


_PIPELINED: dict[type, bool] = {}


def _pipelined(journal: Journal) -> bool:
    """``isinstance(journal, Pipelined)``, asked once per class (a protocol check costs about 17 µs)."""
    kind = type(journal)
    known = _PIPELINED.get(kind)
    if known is None:
        known = _PIPELINED[kind] = isinstance(journal, Pipelined)
    return known


def _confirm(state: EngagementState, journal: Journal) -> None:
    """Read the answer to the record's posted append, if any, and apply it. A failure fails the step that
    reads it, as any append's would: the posted events are still first in the outbox and go with the next
    append (an event that did land after all is applied once) -- but for events the store refused for good,
    which are replaced there (:meth:`~agentguard.record.EngagementState.refuse`), so that only this step
    fails, not every later one. What other processes appended meanwhile, applied here, has the calls still
    to be checked checked again (see :func:`_to_send`)."""
    posted = state.posted
    if posted is None:
        return
    state.posted = None
    handle, sent = posted
    with _answers_of(state, bounded=False):
        appended = handle.result()
        snapshot = journal.load(state.id) if appended.gap else None
    _settled(state, sent, appended, snapshot)


async def _aconfirm(state: EngagementState, journal: Journal) -> None:
    """:func:`_confirm` under asyncio."""
    posted = state.posted
    if posted is None:
        return
    state.posted = None
    handle, sent = posted
    with _answers_of(state, bounded=False):
        appended = await handle.aresult()
        snapshot = await journal.aload(state.id) if appended.gap else None
    _settled(state, sent, appended, snapshot)


async def _invoke_with_timeout(effect: Invoke, timeout_ms: int) -> Any:
    """An async tool runs as a task (cancelled on timeout unless it must keep running, and with its caller:
    ``asyncio.wait`` leaves the task it waits for running when the waiter is cancelled, as awaiting the tool
    itself would not); a sync tool runs in a worker thread (which cannot be cancelled: its late outcome is
    reported through ``on_late``)."""
    if inspect.iscoroutinefunction(effect.fn):
        task: asyncio.Future[Any] = asyncio.ensure_future(
            call_async(effect.fn, effect.args, effect.kwargs, effect.credentials)
        )
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout_ms / 1000)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        if not effect.keep_running:
            task.cancel()
        raise InvokeTimedOut(task)
    future = run_in_daemon_thread(
        lambda: call_sync(effect.fn, effect.args, effect.kwargs, effect.credentials)
    )
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout_ms / 1000)
    except TimeoutError:
        raise _overran(effect, future) from None


def run_sync(flow: Flow[T]) -> T:
    """Drive ``flow`` to completion in this thread; return its result or raise its error."""
    return drive(flow, _perform_sync)


async def run_async(flow: Flow[T]) -> T:
    """Drive ``flow`` to completion under asyncio; return its result or raise its error."""
    return await adrive(flow, _perform_async)
