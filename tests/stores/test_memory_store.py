"""MemoryStore as a RedisStore would behave: an engagement in use does not expire, and an engagement forgotten
while something still holds it has one life at a time (the holder of the earlier one is refused); two
threads opening a new id at once never get two records of it that both run calls."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agentguard import EngagementStatus, Guard, Outcome, PolicyViolation, User
from agentguard.record import EngagementState
from agentguard.stores import MemoryStore

USER = User(id="u1")
SPEC = (
    "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
    "capabilities:\n  lookup:\n  ping:\nlifespan:\n  short_circuit: 3\n"
)
LOOP = ["lookup", "ping"] * 6  # short_circuit 3 stops the 6th call (index 5)


def _guard(store: MemoryStore, ran: list[str] | None = None) -> Guard:
    guard = Guard.from_yaml(SPEC, store=store, telemetry=False)
    guard.tool(name="lookup")(lambda q: (ran.append(q) if ran is not None else None) or q)
    guard.tool(name="ping")(lambda q: (ran.append(q) if ran is not None else None) or q)
    return guard


def _call(guard: Guard, eng: Any, name: str, q: str) -> Any:
    with eng.activate():
        return guard.call(name, {"q": q})


def test_an_engagement_forgotten_while_held_and_opened_anew_refuses_its_earlier_life() -> None:
    ran: list[str] = []
    guard = _guard(MemoryStore(max_engagements=1), ran)
    first = guard.engagement(USER, engagement_id="a")
    for index in range(4):
        _call(guard, first, LOOP[index], str(index))
    guard.engagement(USER, engagement_id="b")  # "a" is evicted, but this code still holds it
    second = guard.engagement(USER, engagement_id="a")  # forgotten: a fresh record
    assert second.state is not first.state
    ran.clear()
    # The old code let both lives go on, each with a loop count of its own: the loop ran past the 6th call.
    for index in range(4, len(LOOP)):
        with pytest.raises(PolicyViolation):
            _call(guard, first, LOOP[index], str(index))
    assert ran == []
    assert first.steps[-1].outcome is Outcome.DENY
    assert "opened anew" in str(first.state.status_reason)
    _call(guard, second, "lookup", "fresh")  # the new life is the engagement now
    assert ran == ["fresh"]


def test_an_engagement_in_use_does_not_expire_between_opens() -> None:
    # A shared store's time to live runs from the last call as well as the last open; so does this one's.
    guard = _guard(MemoryStore(ttl_seconds=2.0))
    eng = guard.engagement(USER, engagement_id="busy")
    for index in range(3):
        _call(guard, eng, LOOP[index], str(index))
        time.sleep(1.2)  # 3.6 s since it was opened, never more than about 1.2 s since its last call
    _call(guard, eng, LOOP[3], "3")
    again = guard.engagement(USER, engagement_id="busy")
    assert again.state is eng.state
    assert again.view()["history"]["_total"] == 4


class _Racing(MemoryStore):
    """A store whose two first resumes both answer "not held" before either thread holds the id; the thread
    named "second" then waits until ``running`` is set before it goes on to hold its own record."""

    def __init__(self) -> None:
        super().__init__()
        self.both_looked: threading.Barrier | None = threading.Barrier(2)
        self.running = threading.Event()

    def resume(self, engagement_id: str) -> EngagementState | None:
        found = super().resume(engagement_id)
        if self.both_looked is not None:
            self.both_looked.wait(10)
            if threading.current_thread().name == "second":
                assert self.running.wait(10)
        return found


def test_two_threads_opening_a_new_id_at_once_never_both_run_a_call_it_allows_once() -> None:
    store = _Racing()
    guard = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  once:\n    input_restriction:\n      assertion: history._total < 2\n",
        store=store,
        telemetry=False,
    )
    release = threading.Event()
    ran: list[str] = []
    outcomes: dict[str, Any] = {}

    def once(q: str) -> str:
        ran.append(q)
        if q == "first":
            store.running.set()  # the first thread's call runs ...
            assert release.wait(10)  # ... while the second thread opens the id and calls
        return q

    guard.tool(name="once")(once)

    def request(name: str) -> None:
        eng = guard.engagement(USER, engagement_id="at-once")
        try:
            outcomes[name] = _call(guard, eng, "once", name)
        except PolicyViolation as exc:
            outcomes[name] = exc
            eng.close()  # its request is over (a `with` block ends): the engagement held stays
        finally:
            if name == "second":
                release.set()

    threads = [threading.Thread(target=request, args=(name,), name=name) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    # The old code stopped the first thread's record when the second held its own: the first call went on,
    # and the second ran too, on a fresh record that did not count it (history._total < 2, which counts the
    # pending call, passed twice).
    assert ran == ["first"]
    assert outcomes["first"] == "first"
    assert isinstance(outcomes["second"], PolicyViolation)
    assert "at the same time" in str(outcomes["second"])
    store.both_looked = None
    again = guard.engagement(USER, engagement_id="at-once")  # opened again: the held record, which counts it
    assert again.view()["history"]["_total"] == 1
    assert again.state.active
    with pytest.raises(PolicyViolation):  # and allows no second call
        _call(guard, again, "once", "third")
    assert ran == ["first"]


class _RacedOnce(MemoryStore):
    """Its next resume, once ``race`` is set, answers "not held": another thread held the id after this
    one looked (the race above, one step at a time)."""

    race = False

    def resume(self, engagement_id: str) -> EngagementState | None:
        if self.race:
            self.race = False
            return None
        return super().resume(engagement_id)


def test_closing_the_raced_record_does_not_forget_the_held_one_the_guard_stopped() -> None:
    store = _RacedOnce()
    ran: list[str] = []
    guard = _guard(store, ran)
    first = guard.engagement(USER, engagement_id="x")
    store.race = True
    raced = guard.engagement(USER, engagement_id="x")  # the thread that lost the race: its record is stopped
    assert not raced.state.active
    for index in range(5):
        _call(guard, first, LOOP[index], str(index))
    with pytest.raises(PolicyViolation):
        _call(guard, first, LOOP[5], "5")  # the loop stops the engagement held for the id
    assert not first.state.active
    # The losing thread's request ends. The old forget(id) dropped the held record whenever it was not
    # active: the next open started a fresh record, the loop count gone, and the looping call ran.
    raced.close()
    again = guard.engagement(USER, engagement_id="x")
    assert again.state is first.state
    with pytest.raises(PolicyViolation):
        _call(guard, again, LOOP[5], "again")
    assert ran == ["0", "1", "2", "3", "4"]


def test_forget_by_id_is_deprecated_and_drops_only_a_closed_record() -> None:
    store = MemoryStore()
    guard = _guard(store)
    stopped = guard.engagement(USER, engagement_id="s")
    stopped.state.stop(EngagementStatus.STOPPED, "a loop")
    with pytest.warns(DeprecationWarning, match="forget"):
        store.forget("s")
    assert guard.engagement(USER, engagement_id="s").state is stopped.state
    closed = guard.engagement(USER, engagement_id="c")
    closed.state.stop(EngagementStatus.CLOSED, "closed")
    with pytest.warns(DeprecationWarning, match="forget"):
        store.forget("c")
    assert len(store) == 1  # "s" only
