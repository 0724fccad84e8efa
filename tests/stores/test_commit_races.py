"""A call's ``b`` is appended exclusively, at the version its checks saw, by its own commit: attacked with the
threads of one worker and a second worker, against a real redis-server (tests/redis_support.py).

- Another thread's non-exclusive commit (a flush, a posted end of a call, a refresh) must not carry a call's
  ``b`` that was checked but not yet committed: sent so, it landed after another worker's call without being
  compared with it, and its own exclusive commit found nothing left to compare -- two workers both passed a
  ``short_circuit`` (or a count assertion).
- Events of other workers applied by another thread's append between a call's check and its commit must have
  the call checked again: compared at the version after them, it landed although it was checked without them.
- A flow that ends between its call's begin and its commit (cancelled) takes the call back: its ``b`` must not
  hold back the later non-exclusive commits, nor go to the store as a call that ran.
- A round trip the store answers without taking the events, or refuses for a bound of its own, is a store
  failure, never a loop or an unrecorded error.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentguard import Guard, PolicyViolation, ShortCircuitViolation, StoreUnavailable
from agentguard.pipeline._driver import _acommit, _commit
from agentguard.pipeline._effects import Commit
from agentguard.record import Appended, EngagementState, decode_event
from agentguard.stores import RedisStore
from tests.conftest import spec_text
from tests.stores.workers import USER

SPEC = spec_text(
    """
    capabilities:
      fetch:
      lookup:
    lifespan:
      short_circuit: 2
    """
)


class Hooked(RedisStore):
    """A store that runs ``hook`` just before its next append reaches the server (sync or async)."""

    hook: Callable[[], None] | None = None

    def _take(self, operation: str) -> None:
        hook = self.hook
        if operation == "append" and hook is not None:
            self.hook = None
            hook()

    def _run(self, operation: str, engagement_id: str, script: int, args: Any) -> Any:
        self._take(operation)
        return super()._run(operation, engagement_id, script, args)

    async def _arun(self, operation: str, engagement_id: str, script: int, args: Any) -> Any:
        self._take(operation)
        return await super()._arun(operation, engagement_id, script, args)


def shared(store: RedisStore) -> EngagementState:
    return EngagementState.shared("e", store.open("e", {}), store)


def begin(state: EngagementState, name: str = "x") -> Any:
    """What a shared call's begin does: its loop check and its ``b``, under the record's lock."""
    return state.begin_call(name, {}, short_circuit=2, max_block=1)


def other_worker_lands(url: str, name: str = "x") -> None:
    store = RedisStore(url)
    try:
        other = shared(store)
        record = begin(other, name)
        assert record is not None
        assert _commit(Commit(other, exclusive=True))
        assert record.status != "recheck"
    finally:
        store.close()


def store_log(store: RedisStore) -> list[str]:
    """The store's events, each as ``kind:name`` (``b``, ``a``) or its kind alone."""
    shown = []
    for event in map(decode_event, store.load("e").events):
        kind = event[0]
        shown.append(f"b:{event[2]}" if kind == "b" else f"a:{event[1]}" if kind == "a" else kind)
    return shown


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_flush_of_another_thread_does_not_send_a_call_still_to_be_committed(
    redis_url: str, asynchronous: bool
) -> None:
    # Thread 1 checked x (no x yet) and waits for its exclusive commit; thread 3 flushes an attempt of z.
    # The flush carried x's b, after the other worker's x: both ran although short_circuit 2 allows one.
    store = Hooked(redis_url)
    try:
        state = shared(store)
        x = begin(state)
        assert x is not None
        state.attempted("z")
        store.hook = lambda: other_worker_lands(redis_url)  # the other worker's x lands first
        if asynchronous:

            async def commits() -> None:
                assert await _acommit(Commit(state, exclusive=False))
                assert not await _acommit(Commit(state, exclusive=True))

            asyncio.run(commits())
        else:
            assert _commit(Commit(state, exclusive=False))  # thread 3: nothing before x's b to send
            assert not _commit(Commit(state, exclusive=True))  # thread 1: compared with the other x
        assert x.status == "recheck"
        assert begin(state) is None  # checked again: x after x is refused
        assert store_log(store) == ["b:x"]  # x's b was never sent; the flush left the z after it too
        assert _commit(Commit(state, exclusive=False))
        assert store_log(store) == ["b:x", "x", "a:z"]  # x's voided b, a no-op
        assert state.waiting() == 0
    finally:
        store.close()


def test_a_call_recorded_after_the_fact_is_never_one_still_to_be_checked(redis_url: str) -> None:
    """A host's report of a call that already ran (``Engagement.record_call``) begins and ends its record
    at once; in between, another thread's commit took it for a call still to be checked: a flush stopped before
    it, and a stale exclusive commit took it back. Its begin is marked as it is recorded, under one lock."""
    store = Hooked(redis_url)
    try:
        state = shared(store)
        reported = state.begin_call("y", {}, after_the_fact=True)
        assert state.unchecked()[0] == state.waiting()  # nothing held back by it
        assert _commit(Commit(state, exclusive=False))
        assert store_log(store) == ["b:y"]
        assert reported.status == "pending"  # its end follows, from the host's report
    finally:
        store.close()


def test_a_posted_or_fetched_commit_stops_before_a_call_still_to_be_committed(redis_url: str) -> None:
    store = Hooked(redis_url)
    try:
        state = shared(store)
        state.attempted("y")
        x = begin(state)
        state.attempted("z")
        assert x is not None
        assert _commit(Commit(state, exclusive=False, post=True))
        assert _commit(Commit(state, exclusive=False, fetch=True))  # reads the posted answer, then fetches
        assert store_log(store) == ["a:y"]
        assert state.unsent(x)
        assert _commit(Commit(state, exclusive=True))
        assert x.status == "pending"
        assert store_log(store) == ["a:y", "b:x", "a:z"]
    finally:
        store.close()


def test_other_workers_events_applied_between_a_check_and_its_commit_have_the_call_checked_again(
    redis_url: str,
) -> None:
    # Thread 3's flush is in flight; meanwhile the other worker's x lands, and thread 1 checks x (its record
    # does not have the other x yet). Thread 3's answer applies the other x: thread 1's exclusive commit,
    # compared at the version after it, landed x unchecked.
    store = Hooked(redis_url)
    try:
        state = shared(store)
        state.attempted("z")
        begun: list[Any] = []

        def meanwhile() -> None:
            other_worker_lands(redis_url)
            begun.append(begin(state))

        store.hook = meanwhile
        assert _commit(Commit(state, exclusive=False))
        (x,) = begun
        assert x is not None
        assert state.unsent(x)
        assert not _commit(Commit(state, exclusive=True))
        assert x.status == "recheck"
        assert begin(state) is None
        assert store_log(store) == ["b:x", "a:z"]  # the other x, then the flush; this x never sent
    finally:
        store.close()


class GateLock:
    """The commit lock, but the thread named ``gated`` waits for ``gate`` before taking it (a scheduler's
    choice, made deterministic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread().name == "gated":
            self.waiting.set()
            self.gate.wait(10)
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()


def race_guard(url: str, ran: list[str], who: str, hook: Callable[[], None] | None = None) -> Guard:
    guard = Guard.from_yaml(SPEC, store=RedisStore(url), telemetry=False)

    def fetch(q: str) -> str:
        if hook is not None:
            hook()
        ran.append(f"{who} fetch")
        return "ok"

    def lookup(q: str) -> str:
        ran.append(f"{who} lookup")
        return "ok"

    guard.tool(name="fetch")(fetch)
    guard.tool(name="lookup")(lookup)
    return guard


def test_two_workers_do_not_both_pass_a_short_circuit_through_a_posted_end(redis_url: str) -> None:
    # Worker A runs two calls in two threads; A's lookup is checked and begun, then waits for the commit lock
    # while A's other thread posts its fetch's end, and worker B's lookup lands meanwhile. The post carried
    # A's lookup begin after B's: both lookups ran, though short_circuit 2 allows one lookup after another.
    ran: list[str] = []
    errors: list[BaseException] = []
    gate = GateLock()
    threads: list[threading.Thread] = []
    guard_b = race_guard(redis_url, ran, "B")
    eng_b = guard_b.engagement(USER, engagement_id="e")

    def lookup_a() -> None:
        try:
            with eng_a.activate():
                guard_a.call("lookup", {"q": "A"})
        except PolicyViolation as exc:
            errors.append(exc)

    def during_fetch() -> None:
        thread = threading.Thread(target=lookup_a, name="gated")
        thread.start()
        threads.append(thread)
        assert gate.waiting.wait(10)
        with eng_b.activate():
            guard_b.call("lookup", {"q": "B"})

    guard_a = race_guard(redis_url, ran, "A", during_fetch)
    eng_a = guard_a.engagement(USER, engagement_id="e")
    eng_a.state.commit_lock = gate  # type: ignore[assignment]
    with eng_a.activate():
        guard_a.call("fetch", {"q": "F"})
    gate.gate.set()
    threads[0].join(10)
    assert not threads[0].is_alive()
    assert [type(error) for error in errors] == [ShortCircuitViolation]
    assert sorted(ran) == ["A fetch", "B lookup"]
    again = race_guard(redis_url, [], "C").engagement(USER, engagement_id="e")
    assert again.view()["history"]["_list"] == ["fetch", "lookup"]
    assert eng_a.state.waiting() == 0  # the refused lookup's flow sent everything, the fetch's end too


class Cancelling(RedisStore):
    """A store whose next exclusive append is cancelled before it is sent (the task awaiting it was)."""

    cancel = False

    def append(self, engagement_id: str, since: int, events: Any, total: int, *, exclusive: bool) -> Any:
        if exclusive and self.cancel:
            self.cancel = False
            raise asyncio.CancelledError
        return super().append(engagement_id, since, events, total, exclusive=exclusive)


def test_a_call_whose_flow_ends_before_its_commit_is_taken_back_and_holds_nothing_back(
    redis_url: str,
) -> None:
    store = Cancelling(redis_url)
    guard = Guard.from_yaml(SPEC, store=store, telemetry=False)
    guard.tool(name="fetch")(lambda q: "ok")
    guard.tool(name="lookup")(lambda q: "ok")
    eng = guard.engagement(USER, engagement_id="e")
    store.cancel = True
    with eng.activate(), pytest.raises(asyncio.CancelledError):
        guard.call("lookup", {"q": "cancelled"})
    with eng.activate():
        guard.call("fetch", {"q": "after"})
    eng.close()
    assert eng.state.waiting() == 0
    again = Guard.from_yaml(SPEC, store=RedisStore(redis_url), telemetry=False).engagement(
        USER, engagement_id="e"
    )
    assert again.view()["history"]["_list"] == ["fetch"]  # the cancelled lookup never ran
    assert again.state.attempts(5) == ["lookup", "fetch"]  # an attempt all the same
    assert again.state.status.value == "closed"


class Refusing(RedisStore):
    """A store that answers its non-exclusive appends without taking them (at most ``limit`` times)."""

    limit = 5
    refused = 0

    def append(self, engagement_id: str, since: int, events: Any, total: int, *, exclusive: bool) -> Any:
        if not exclusive:
            self.refused += 1
            assert self.refused <= self.limit, "the driver sent the same events again and again"
            return Appended(False, since, 0)
        return super().append(engagement_id, since, events, total, exclusive=exclusive)


def test_a_round_trip_that_takes_nothing_is_a_store_failure_not_a_loop(redis_url: str) -> None:
    store = Refusing(redis_url, max_append_events=1)
    try:
        state = shared(store)
        state.attempted("y")
        state.attempted("z")
        x = begin(state)
        assert x is not None
        with pytest.raises(StoreUnavailable, match="did not take"):
            _commit(Commit(state, exclusive=True))
        assert store.refused == 1
    finally:
        store.close()


class Bounded(RedisStore):
    """A store with a bound of its own on one round trip, which the driver does not know of."""

    def append(self, engagement_id: str, since: int, events: Any, total: int, *, exclusive: bool) -> Any:
        raise ValueError("more events than one round trip carries")


def test_a_stores_own_bound_on_an_append_is_a_store_failure(redis_url: str) -> None:
    store = Bounded(redis_url, on_failure="allow")
    guard = Guard.from_yaml(SPEC, store=store, telemetry=False)
    ran: list[str] = []
    guard.tool(name="fetch")(lambda q: ran.append(q))
    eng = guard.engagement(USER, engagement_id="e")
    with eng.activate():
        guard.call("fetch", {"q": "a"})  # on_failure allow: recorded, carried on
    assert ran == ["a"]
    assert any("refused the append" in d.reason for d in eng.steps[-1].decisions)
    eng.state.attempted("z")
    with pytest.raises(StoreUnavailable, match="refused the append"):
        _commit(Commit(eng.state, exclusive=False))
