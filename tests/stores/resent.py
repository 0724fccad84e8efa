"""Appends whose answer was lost after they landed, sent again: the scenarios RedisStore
(tests/stores/test_resent_appends.py) and GraphStore (integrations/langchain/tests/test_lc_shared_store.py) are
both held to. Each takes a fresh store and an engagement id, and asserts what ``history._total`` must be.

A :class:`Writer` appends its record's outbox by hand, so that an answer can be dropped after the append
landed (``lose=True``): the record then sends those events again, as the pipeline does after a timeout."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import strategies as st

from agentguard import Guard, PolicyViolation, StoreDenied, StoreUnavailable
from agentguard.record import Appended, CallRecord, EngagementState, Journal, Snapshot, decode_event
from tests.stores.workers import USER


class Writer:
    """One worker's record of an engagement, appended to the store by hand."""

    def __init__(self, store: Journal, engagement_id: str) -> None:
        meta = EngagementState(engagement_id=engagement_id).meta()
        self.store, self.id = store, engagement_id
        self.state = EngagementState.shared(engagement_id, store.open(engagement_id, meta), store)

    def begin(self) -> CallRecord:
        return self.state.begin_call("ping", {})

    def call(self, *, denied: bool = False) -> None:
        """A call that ran (its ``b`` and ``c``), or was denied before it ran (its ``b`` and ``r``)."""
        record = self.begin()
        if denied:
            self.state.rollback_call(record, reason="denied")
        else:
            self.state.complete_call(record, {"ok": True})

    def send(self, *, lose: bool = False, max_events: int | None = None, exclusive: bool = False) -> bool:
        """Append the outbox (its first ``max_events`` events); ``lose``: the append lands, its answer does not
        come back (the record keeps the events, to send them again). Whether the store took it."""
        batch = self.state.batch(None, max_events)
        if batch is None:
            return True
        events, total = batch
        appended = self.store.append(self.id, self.state.version, events, total, exclusive=exclusive)
        if lose:
            return True
        return self.state.settle(len(events), appended)

    def flush(self) -> None:
        """Send everything still unsent, nothing lost."""
        while self.state.waiting():
            assert self.send()


def stored(store: Journal, engagement_id: str) -> tuple[int, Counter[tuple[str, Any]]]:
    """The store's ``history._total`` and how many times its log holds each call's ``b`` and ``r``."""
    snapshot = store.load(engagement_id)
    assert snapshot is not None
    named = Counter(
        (event[0], event[1]) for event in map(decode_event, snapshot.events) if event[0] in ("b", "r")
    )
    return snapshot.total, named


def assert_counted_once(store: Journal, engagement_id: str, total: int) -> None:
    """The store counts ``total`` calls and holds each call's ``b`` and ``r`` once."""
    counted, named = stored(store, engagement_id)
    assert counted == total
    assert all(times == 1 for times in named.values()), named


def lost_begin_sent_again(store: Journal, engagement_id: str) -> None:
    writer = Writer(store, engagement_id)
    writer.call()
    writer.send(lose=True)
    writer.send()  # the old code counted the call twice
    assert_counted_once(store, engagement_id, 1)
    assert writer.state.view()["history"]["_total"] == 1


def lost_take_back_sent_again(store: Journal, engagement_id: str) -> None:
    writer = Writer(store, engagement_id)
    record = writer.begin()
    writer.send()
    writer.state.rollback_call(record, reason="denied")
    writer.send(lose=True)
    writer.send()  # the old code took the call back twice: history._total -1
    assert_counted_once(store, engagement_id, 0)
    assert writer.state.view()["history"]["_total"] == 0


def lost_take_back_sent_again_with_a_newer_call(store: Journal, engagement_id: str) -> None:
    writer = Writer(store, engagement_id)
    record = writer.begin()
    writer.send()
    writer.state.rollback_call(record, reason="denied")
    writer.send(lose=True)
    writer.call()
    writer.send()  # the lost r and the new call's b and c: the old code counted 0 calls
    assert_counted_once(store, engagement_id, 1)


def lost_take_backs_sent_again_as_a_prefix(store: Journal, engagement_id: str) -> None:
    writer = Writer(store, engagement_id)
    first, second = writer.begin(), writer.begin()
    writer.send()
    writer.state.rollback_call(first, reason="denied")
    writer.state.rollback_call(second, reason="denied")
    writer.send(lose=True)  # both r land
    writer.send(max_events=1)  # the first r again, alone: its answer shows both landed
    writer.flush()  # the second r was not sent again from past its copy (the old code: -2)
    assert_counted_once(store, engagement_id, 0)


def lost_take_back_then_a_refused_exclusive_append(store: Journal, engagement_id: str) -> None:
    """The lost ``r`` goes again in front of a new call's exclusive append, which finds the log moved (by that
    very ``r``): the record's version passes the copy, and the ``r`` must not go again from there."""
    writer = Writer(store, engagement_id)
    record = writer.begin()
    writer.send()
    writer.state.rollback_call(record, reason="denied")
    writer.send(lose=True)
    checked = writer.begin()
    assert not writer.send(exclusive=True)  # refused: the log moved
    assert checked.status == "recheck"
    writer.begin()
    assert writer.send(exclusive=True)
    assert_counted_once(store, engagement_id, 1)  # the old code: 0


def lost_take_back_of_a_call_the_store_refused(store: Journal, engagement_id: str) -> None:
    """A call denied before its ``b`` was sent, whose ``b`` the store then refused for good (too large): its
    ``r`` takes back nothing the store counted. Lost and sent again, the store took it for a copy of a
    counted ``r`` and added +1 for a call that never began (found in review)."""
    writer = Writer(store, engagement_id)
    record = writer.begin()
    writer.state.rollback_call(record, reason="denied")
    writer.state.refuse([0])  # the store refused its b: b -> a
    writer.send(lose=True)
    writer.send()
    assert stored(store, engagement_id)[0] == 0
    assert writer.state.view()["history"]["_total"] == 0


SCENARIOS = (
    lost_begin_sent_again,
    lost_take_back_of_a_call_the_store_refused,
    lost_take_back_sent_again,
    lost_take_back_sent_again_with_a_newer_call,
    lost_take_backs_sent_again_as_a_prefix,
    lost_take_back_then_a_refused_exclusive_append,
)
"""Each fails on the journal of before (the store counted an append's ``total`` every time it was sent)."""


STEPS = st.lists(  # (writer, what, lose, max_events): see replay
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["call", "deny", "send"]),
        st.booleans(),
        st.one_of(st.none(), st.integers(1, 3)),
    ),
    max_size=24,
)


def replay(store: Journal, engagement_id: str, steps: list[tuple[int, str, bool, int | None]]) -> None:
    """Two writers on one engagement, ``steps`` of (writer, what, lose, max_events): ``call`` / ``deny``
    (a call that ran, or was denied before it ran), ``send`` (the outbox or its first ``max_events``, the
    answer lost or not). Whatever was sent again, and as whatever prefix or superset, the store counts each
    call that ran once, and its log holds each ``b`` and ``r`` once."""
    writers = (Writer(store, engagement_id), Writer(store, engagement_id))
    ran = 0
    for who, what, lose, max_events in steps:
        writer = writers[who]
        if what == "send":
            writer.send(lose=lose, max_events=max_events)
        else:
            writer.call(denied=what == "deny")
            ran += what == "call"
    for writer in writers:
        writer.flush()
    assert_counted_once(store, engagement_id, ran)
    for writer in writers:  # each worker's view, once it read what the other appended
        writer.state.settle(0, store.append(engagement_id, writer.state.version, [], 0, exclusive=False))
        assert writer.state.view()["history"]["_total"] == ran


class Lossy:
    """A journal whose answer to an append that takes a call back (an ``r``) is lost after it landed, ``lose``
    times: what a connection dropped after the command was sent does."""

    def __init__(self, inner: Journal, lose: int) -> None:
        self.inner, self.lose = inner, lose
        self.on_failure = inner.on_failure

    def _lost(self, events: Sequence[str]) -> None:
        if self.lose and any(event.startswith('["r",') for event in events):
            self.lose -= 1
            raise StoreUnavailable("the append landed, its answer was lost")

    def open(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        return self.inner.open(engagement_id, meta)

    def load(self, engagement_id: str) -> Snapshot | None:
        return self.inner.load(engagement_id)

    def append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        appended = self.inner.append(engagement_id, since, events, total, exclusive=exclusive)
        self._lost(events)
        return appended

    def claim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        return self.inner.claim(engagement_id, key, owner, since=since)

    async def aopen(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        return await self.inner.aopen(engagement_id, meta)

    async def aload(self, engagement_id: str) -> Snapshot | None:
        return await self.inner.aload(engagement_id)

    async def aappend(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        appended = await self.inner.aappend(engagement_id, since, events, total, exclusive=exclusive)
        self._lost(events)
        return appended

    async def aclaim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        return await self.inner.aclaim(engagement_id, key, owner, since=since)


LIMITED = """
kind: openagentspec:v1/agent
name: counted
description: Two workers share one engagement's count of calls.
intent: Ping, a few times.
owner: shop@corp.com
capabilities:
  ping:
    input_restriction:
      assertion: history._total < 4 && recent["ping"].inputs.q != "bad"
"""


def calls_allowed(lossy: Journal, other: Journal, engagement_id: str, *, lose: int) -> int:
    """Worker A makes a call, then one its input restriction denies after it began (its take-back's answer
    lost ``lose`` times, though it landed), then another; worker B then calls until the count assertion
    refuses. How many calls ran in all: a take-back counted twice would let B run one more."""
    worker_a = Guard.from_yaml(LIMITED, store=Lossy(lossy, lose), telemetry=False)
    worker_b = Guard.from_yaml(LIMITED, store=other, telemetry=False)
    ran: list[str] = []

    def ping(q: str) -> str:
        ran.append(q)
        return q

    for guard in (worker_a, worker_b):
        guard.tool(name="ping")(ping)
    eng_a = worker_a.engagement(USER, engagement_id=engagement_id)
    with eng_a.activate():
        worker_a.call("ping", {"q": "a1"})
        with pytest.raises(PolicyViolation):
            worker_a.call("ping", {"q": "bad"})
        for _ in range(lose + 1):  # the step that reads a lost answer fails; the events go again
            with contextlib.suppress(StoreDenied):
                worker_a.call("ping", {"q": "a2"})
                break
    eng_b = worker_b.engagement(USER, engagement_id=engagement_id)
    with eng_b.activate():
        for n in range(5):
            try:
                worker_b.call("ping", {"q": f"b{n}"})
            except PolicyViolation:
                break
    assert eng_b.view()["history"]["_total"] == len(ran)
    return len(ran)


def count_assertion_holds_across_workers(stores: Callable[[], tuple[Journal, Journal]]) -> None:
    """``history._total < 4`` (the call being checked counts) lets three calls run across two workers,
    whether or not an answer was lost (the old code: one more after each lost take-back)."""
    assert calls_allowed(*stores(), "kept", lose=0) == 3
    assert calls_allowed(*stores(), "lost", lose=1) == 3
