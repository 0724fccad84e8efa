"""Engagements shared by several workers through a real redis-server (``Guard(store=RedisStore(...))``).

Other workers are separate Guard objects with their own store connection (in threads, where the test is
about the record) or separate processes (tests/stores/workers.py, where it is about processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentguard import (
    ConfigurationError,
    Guard,
    Outcome,
    PolicyViolation,
    RestrictionViolation,
    Rule,
    ShortCircuitViolation,
    StoreDenied,
    StoreUnavailable,
    User,
)
from agentguard.stores import MemoryStore, RedisStore
from tests.redis_support import RedisServer
from tests.stores.workers import USER, make_guard, serve

LOOP = ["lookup", "ping"] * 6  # a block of two calls repeated: short_circuit 3 stops the 6th


def _call(guard: Guard, eng: Any, name: str, q: str = "x", fn: Any = None) -> Any:
    with eng.activate():
        return guard.call(name, {"q": q} if name != "refund" else {"amount": 5}, fn)


# -- one engagement, several workers ------------------------------------------------------------------


def test_a_second_worker_continues_the_record_and_the_loop_detector(redis_url: str) -> None:
    one, two = make_guard(redis_url), make_guard(redis_url)
    first, second = one.engagement(USER, engagement_id="e1"), two.engagement(USER, engagement_id="e1")
    stopped_at = None
    for index, name in enumerate(LOOP):
        guard, eng = (one, first) if index % 2 == 0 else (two, second)
        try:
            _call(guard, eng, name, str(index))
        except ShortCircuitViolation:
            stopped_at = index
            break
    assert stopped_at == 5  # as in one process: [lookup, ping] three times
    third = one.engagement(USER, engagement_id="e1")
    assert third.view()["history"]["_list"] == LOOP[:5]
    assert third.status.value == "stopped"
    # The worker that did not see the change first checked again, and says so.
    reasons = [d.reason for step in second.steps for d in step.decisions if d.rule is Rule.STORE]
    assert reasons
    assert all("checked again" in r for r in reasons)


def test_racing_workers_cannot_both_pass_a_count_assertion(redis_url: str) -> None:
    workers = [make_guard(redis_url, limit=4, loop=100) for _ in range(6)]
    engagements = [guard.engagement(USER, engagement_id="race") for guard in workers]
    barrier = threading.Barrier(len(workers))
    outcomes: list[str] = []

    def run(index: int) -> None:
        barrier.wait()
        for attempt in range(3):
            try:
                _call(workers[index], engagements[index], "lookup", f"{index}-{attempt}")
                outcomes.append("ok")
            except (RestrictionViolation, StoreDenied) as denied:  # StoreDenied: too many rechecks
                outcomes.append(type(denied).__name__)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(outcomes) == 18
    passed = outcomes.count("ok")
    assert 1 <= passed <= 3  # history._total < 4 counts the pending call: three calls fit, never more
    assert outcomes.count("RestrictionViolation") >= 18 - 3 - outcomes.count("StoreDenied")
    view = make_guard(redis_url).engagement(USER, engagement_id="race").view()
    assert view["history"]["_total"] == passed


def test_history_total_is_exact_beyond_what_the_store_keeps(redis_url: str) -> None:
    guard = make_guard(redis_url)
    guard.store = RedisStore(redis_url, max_events=6)  # about three calls
    small = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  lookup:\n  ping:\n",
        store=RedisStore(redis_url, max_events=6),
        telemetry=False,
    )
    small.tool(name="lookup")(lambda q: q)
    small.tool(name="ping")(lambda q: q)
    eng = small.engagement(USER, engagement_id="long")
    for index in range(20):
        _call(small, eng, ("lookup", "ping")[index % 2], str(index))
    resumed = small.engagement(USER, engagement_id="long")
    history = resumed.view()["history"]
    assert history["_total"] == 20
    assert len(history["_list"]) <= 3
    assert history["_list"][-1] == "ping"


def test_an_engagement_cannot_change_hands(redis_url: str) -> None:
    guard = make_guard(redis_url)
    guard.engagement(USER, engagement_id="mine")
    with pytest.raises(ConfigurationError, match="cannot change hands"):
        make_guard(redis_url).engagement(User(id="mallory"), engagement_id="mine")
    assert make_guard(redis_url).engagement(engagement_id="mine").user == USER  # no user given: the owner's


@pytest.mark.parametrize(
    ("field", "value"), [("started_at", "yesterday"), ("user", {"email": "a@corp.com"}), ("metadata", [1])]
)
def test_a_spoiled_record_is_not_continued_with_a_guessed_user_or_start(
    redis_url: str, field: str, value: Any
) -> None:
    import redis

    from agentguard.record import decode_event, encode_event

    make_guard(redis_url).engagement(USER, engagement_id="spoiled")
    raw = redis.Redis.from_url(redis_url)
    try:
        key = next(iter(raw.scan_iter(match="agentguard:{spoiled}:meta")))
        _, meta = decode_event(raw.hget(key, "meta"))
        raw.hset(key, "meta", encode_event(["meta", {**meta, field: value}]))
    finally:
        raw.close()
    guard = make_guard(redis_url)
    with pytest.raises(StoreUnavailable, match=f"engagement 'spoiled' is malformed: {field} is "):
        guard.engagement(USER, engagement_id="spoiled")
    with pytest.raises(StoreUnavailable, match=f"{field} is "):
        asyncio.run(guard.aengagement(USER, engagement_id="spoiled"))
    _store(guard).close()


def test_closing_closes_for_every_worker(redis_url: str) -> None:
    one, two = make_guard(redis_url), make_guard(redis_url)
    other = two.engagement(USER, engagement_id="closing")
    with one.engagement(USER, engagement_id="closing") as eng:
        _call(one, eng, "lookup")
    with pytest.raises(PolicyViolation, match="closed"):
        _call(two, other, "lookup")


def test_the_async_api_shares_the_same_record(redis_url: str) -> None:
    async def main() -> list[str]:
        guard = make_guard(redis_url)
        eng = await guard.aengagement(USER, engagement_id="async")
        for index in range(3):
            with eng.activate():
                await guard.acall(("lookup", "ping")[index % 2], {"q": str(index)})
        other = make_guard(redis_url)
        seen = await other.aengagement(engagement_id="async")
        with eng.activate():
            await guard.acall("ping", {"q": "3"})
        await seen.arefresh()
        return list(seen.view()["history"]["_list"])

    assert asyncio.run(main()) == ["lookup", "ping", "lookup", "ping"]


# -- one round trip a call: the end is posted ---------------------------------------------------------


def _store(guard: Guard) -> RedisStore:
    store = guard.store
    assert isinstance(store, RedisStore)
    return store


def test_a_call_waits_for_one_round_trip_and_its_end_is_posted_before_the_output_is_handed_on(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = make_guard(redis_url, loop=10)
    store = _store(guard)
    eng = guard.engagement(USER, engagement_id="posted")
    waited, posted = [], []
    run, post = store._run, store.post
    monkeypatch.setattr(store, "_run", lambda *args: waited.append(args[0]) or run(*args))
    monkeypatch.setattr(store, "post", lambda *args: posted.append(args[0]) or post(*args))
    for index in range(5):
        assert _call(guard, eng, "lookup", str(index)) == {"q": str(index)}
    # One round trip a call, its exclusive begin; each begin first reads the previous call's posted answer.
    assert waited == ["append"] * 5
    assert posted == ["posted"] * 5
    # Nothing more is sent after the last call: its end is already in the store for every worker.
    seen = make_guard(redis_url).engagement(engagement_id="posted").view()["history"]
    assert [e["outputs"] for e in seen["lookup"]] == [{"q": str(i)} for i in range(5)]
    # and a record opened in this process reads the posted answer first (the store keeps the order)
    again = guard.engagement(USER, engagement_id="posted").view()["history"]
    assert [e["outputs"]["q"] for e in again["lookup"]] == ["0", "1", "2", "3", "4"]


class _Vanished:
    """A posted append that never reached the store, and whose answer never comes."""

    def result(self) -> Any:
        raise StoreUnavailable("the connection dropped")

    async def aresult(self) -> Any:
        return self.result()


def test_an_end_whose_answer_never_came_fails_the_next_step_and_is_sent_again_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = make_guard(redis_url, loop=10)
    store = _store(guard)
    eng = guard.engagement(USER, engagement_id="lost")
    _call(guard, eng, "lookup", "1")
    _call(guard, eng, "lookup", "2")
    with monkeypatch.context() as patch:  # it landed, but its answer, read now, is lost: did it land?
        answer = store._answer
        patch.setattr(store, "_answer", lambda *args: (answer(*args), (None, StoreUnavailable("dropped")))[1])
        with pytest.raises(StoreDenied, match="dropped"):  # the step that reads the lost answer
            _call(guard, eng, "ping", "3")
    with monkeypatch.context() as patch:  # it never reached the store
        patch.setattr(store, "post", lambda *args: _Vanished())
        _call(guard, eng, "lookup", "4")
    seen = make_guard(redis_url).engagement(engagement_id="lost").view()["history"]
    assert seen["lookup"][-1]["outputs"] is None  # "4" ended here; the store has its begin only, until ...
    with pytest.raises(StoreDenied, match="connection dropped"):
        _call(guard, eng, "ping", "5")
    assert eng.steps[-1].outcome is Outcome.DENY  # recorded, not silent
    _call(guard, eng, "ping", "6")  # ... an append that gets through carries its end
    seen = make_guard(redis_url).engagement(engagement_id="lost").view()["history"]
    assert seen["_list"] == ["lookup", "lookup", "lookup", "ping"]  # the denied pings taken back everywhere
    assert [e["outputs"] for e in seen["lookup"]] == [{"q": "1"}, {"q": "2"}, {"q": "4"}]
    assert [e["outputs"] for e in seen["ping"]] == [{"pong": "6"}]
    assert seen["_total"] == 4


def test_an_end_that_cannot_be_sent_withholds_the_output(
    redis_url: str, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = make_guard(redis_url)
    store = _store(guard)
    eng = guard.engagement(USER, engagement_id="unsent")

    def refused(*args: Any) -> Any:
        raise StoreUnavailable("the store refused the connection")

    monkeypatch.setattr(store, "post", refused)
    with pytest.raises(StoreDenied, match="refused the connection"):
        _call(guard, eng, "lookup", "secret")
    assert eng.state.calls[-1].status == "withheld"


def test_unread_answers_hold_at_most_64_connections(redis_url: str) -> None:
    import redis

    guard = make_guard(redis_url + "?client_name=parking")  # its connections, told apart from others'
    engagements = [guard.engagement(USER, engagement_id=f"many-{i}") for i in range(100)]
    for eng in engagements:
        _call(guard, eng, "lookup")  # each leaves its end's answer unread
    watcher = redis.Redis.from_url(redis_url)
    try:
        clients = sum(client["name"] == "parking" for client in watcher.client_list())
    finally:
        watcher.close()
    assert 64 <= clients <= 66  # the 64 parked, the one the begins use, and the oldest read back
    seen = make_guard(redis_url).engagement(engagement_id="many-0").view()["history"]
    assert seen["lookup"][0]["outputs"] == {"q": "x"}
    _store(guard).close()


def test_one_engagement_called_from_sync_and_async_code_records_every_call_once(redis_url: str) -> None:
    guard = make_guard(redis_url)
    eng = guard.engagement(USER, engagement_id="mixed")
    _call(guard, eng, "lookup", "sync-1")

    async def from_a_loop() -> None:
        with eng.activate():
            await guard.acall("ping", {"q": "async"})

    asyncio.run(from_a_loop())  # reads the sync end's answer off the loop, posts its own on the loop
    with pytest.raises(StoreDenied, match="read there"):  # the loop is gone: its answer cannot be read here
        _call(guard, eng, "lookup", "lost")
    _call(guard, eng, "lookup", "sync-2")  # the async end goes again with this begin
    seen = make_guard(redis_url).engagement(engagement_id="mixed").view()["history"]
    assert seen["_list"] == ["lookup", "ping", "lookup"]
    assert [e["outputs"] for e in seen["lookup"]] == [{"q": "sync-1"}, {"q": "sync-2"}]
    assert seen["ping"][0]["outputs"] == {"pong": "async"}


# -- faults -------------------------------------------------------------------------------------------


def test_a_store_that_is_down_denies_and_the_tool_does_not_run(
    redis_url: str, redis_server: RedisServer
) -> None:
    guard = make_guard(redis_url)
    ran: list[str] = []
    eng = guard.engagement(USER, engagement_id="down")
    redis_server.stop()
    with pytest.raises(StoreDenied, match="store failed"):
        _call(guard, eng, "ping", "lost", lambda q: ran.append(q) or q)
    assert ran == []
    assert eng.steps[-1].outcome is Outcome.DENY
    assert eng.view()["history"]["_total"] == 0  # taken back: nothing half-recorded


def test_a_store_that_fails_after_the_call_withholds_the_output(
    redis_url: str, redis_server: RedisServer
) -> None:
    guard = make_guard(redis_url)
    eng = guard.engagement(USER, engagement_id="late")

    def stop_then_answer(q: str) -> str:
        redis_server.stop()
        return "secret"

    with pytest.raises(StoreDenied):
        _call(guard, eng, "ping", "x", stop_then_answer)
    assert eng.state.calls[-1].status == "withheld"
    assert eng.view()["recent"]["ping"]["outputs"] is None


def test_on_failure_allow_carries_on_and_sends_what_the_store_missed_when_it_is_back(
    redis_url: str, redis_server: RedisServer
) -> None:
    guard = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  ping:\n",
        store=RedisStore(redis_url, on_failure="allow", timeout_seconds=0.5),
        telemetry=False,
    )
    guard.tool(name="ping")(lambda q: q)
    eng = guard.engagement(USER, engagement_id="allow")
    _call(guard, eng, "ping", "before")
    redis_server.pause()  # SIGSTOP: every round trip times out
    try:
        assert _call(guard, eng, "ping", "during") == "during"
    finally:
        redis_server.resume()
    warned = [d for d in eng.steps[-1].decisions if d.rule is Rule.STORE]
    assert warned
    assert {d.outcome for d in warned} == {Outcome.WARN}
    _call(guard, eng, "ping", "after")
    seen = make_guard(redis_url).engagement(USER, engagement_id="allow").view()["history"]
    assert [e["outputs"] for e in seen["ping"]] == ["before", "during", "after"]


def test_a_reconnected_store_keeps_every_recorded_call(redis_url: str, redis_server: RedisServer) -> None:
    redis_server.pause()  # SIGSTOP: the store times out
    guard = make_guard(redis_url)
    redis_server.resume()
    eng = guard.engagement(USER, engagement_id="reconnect")
    _call(guard, eng, "lookup", "1")
    redis_server.pause()
    with pytest.raises(StoreDenied):
        _call(guard, eng, "ping", "2")
    redis_server.resume()
    _call(guard, eng, "lookup", "3")
    view = make_guard(redis_url).engagement(USER, engagement_id="reconnect").view()
    assert [e["inputs"]["q"] for e in view["history"]["lookup"]] == ["1", "3"]
    assert "ping" not in view["history"]  # denied: taken back everywhere
    assert view["history"]["_total"] == 2


# -- the default store --------------------------------------------------------------------------------


def test_the_memory_store_continues_an_open_engagement_by_id_and_forgets_a_closed_one() -> None:
    guard = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  ping:\n",
        telemetry=False,
    )
    assert isinstance(guard.store, MemoryStore)
    guard.tool(name="ping")(lambda q: q)
    first = guard.engagement(USER, engagement_id="m")
    _call(guard, first, "ping")
    again = guard.engagement(USER, engagement_id="m")
    assert again.state is first.state
    with pytest.raises(ConfigurationError, match="cannot change hands"):
        guard.engagement(User(id="other"), engagement_id="m")
    first.close()
    assert guard.engagement(USER, engagement_id="m").view()["history"]["_total"] == 0
    assert guard.engagement(USER).state is not guard.engagement(USER).state  # no id: never held
    bounded = MemoryStore(max_engagements=2)
    small = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  ping:\n",
        telemetry=False,
        store=bounded,
    )
    for name in ("a", "b", "c"):
        small.engagement(USER, engagement_id=name)
    assert len(bounded) == 2
    assert bounded.resume("a") is None


# -- processes ----------------------------------------------------------------------------------------


class Worker:
    def __init__(self, url: str, engagement_id: str, *, limit: int = 1000, pause: bool = False) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(
            target=serve, args=(theirs, url, engagement_id, limit, pause), daemon=True
        )
        self.process.start()
        assert self.conn.poll(60), "worker did not start"
        assert self.conn.recv() == "ready"

    def ask(self, *command: Any) -> Any:
        self.conn.send(command)
        assert self.conn.poll(60), "worker did not answer"
        return self.conn.recv()

    def stop(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


@pytest.fixture
def spawn(redis_url: str) -> Iterator[Any]:
    started: list[Worker] = []

    def start(engagement_id: str, **options: Any) -> Worker:
        worker = Worker(redis_url, engagement_id, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def test_four_processes_round_robin_stop_the_loop_at_the_same_call_as_one(spawn: Any) -> None:
    workers = [spawn("rr") for _ in range(4)]
    replies = []
    for index, name in enumerate(LOOP):
        reply = workers[index % 4].ask("call", name, {"q": str(index)}, None)
        replies.append(reply[0])
        if reply[0] != "ok":
            assert reply[1] == "ShortCircuitViolation", reply
            break
    assert replies == ["ok"] * 5 + ["denied"]
    view = workers[2].ask("view")[1]
    assert view["history"]["_list"] == LOOP[:5]


def test_a_killed_worker_loses_nothing(spawn: Any) -> None:
    doomed, heir = spawn("killed"), spawn("killed")
    for index in range(4):
        assert doomed.ask("call", ("lookup", "ping")[index % 2], {"q": str(index)}, None)[0] == "ok"
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.join(10)
    assert heir.ask("call", "lookup", {"q": "4"}, None)[0] == "ok"
    history = heir.ask("view")[1]["history"]
    assert history["_total"] == 5
    assert [e["outputs"] for e in history["lookup"]] == [{"q": "0"}, {"q": "2"}, {"q": "4"}]
    assert [e["outputs"] for e in history["ping"]] == [{"pong": "1"}, {"pong": "3"}]


def test_a_paused_review_is_resumed_once_and_the_tool_never_runs_twice(spawn: Any) -> None:
    pausing = spawn("review", pause=True)
    assert pausing.ask("call", "refund", {"amount": 5}, "call-1") == ("paused",)
    assert pausing.ask("ran")[1] == ["refund"]
    pausing.ask("call", "lookup", {"q": "after the pause"}, None)  # the pause is in the store by now
    resumers = [spawn("review") for _ in range(2)]
    for worker in resumers:
        worker.conn.send(("call", "refund", {"amount": 5}, "call-1"))
    replies = [worker.conn.recv() for worker in resumers]
    assert sorted(r[0] for r in replies) == ["denied", "ok"], replies
    assert next(r for r in replies if r[0] == "ok")[1] == {"refunded": 5}
    assert all(worker.ask("ran")[1] == [] for worker in resumers)  # neither ran the tool again


def test_a_call_of_another_tool_under_a_paused_call_id_is_refused_in_every_process(spawn: Any) -> None:
    """The paused call's id, under a call of another tool: refused, not resumed with the held output."""
    pausing = spawn("review-other", pause=True)
    assert pausing.ask("call", "refund", {"amount": 5}, "call-1") == ("paused",)
    pausing.ask("call", "lookup", {"q": "after the pause"}, None)  # the pause is in the store by now
    other = spawn("review-other")
    reply = other.ask("call", "ping", {"q": "x"}, "call-1")
    assert reply[:2] == ("denied", "ReviewDenied"), reply
    assert "paused in output review for tool 'refund'" in reply[2]
    assert other.ask("call", "refund", {"amount": 5}, "call-1") == ("ok", {"refunded": 5})
    assert other.ask("ran")[1] == []  # the refund resumed with its held output, not run again


def test_a_call_of_the_same_tool_with_other_inputs_under_a_paused_call_id_is_refused_in_every_process(
    spawn: Any,
) -> None:
    """The paused call's id, under a call of the same tool with other inputs (a provider that numbers the
    calls of each response reuses ids): refused, not handed the held output of a call it did not make."""
    pausing = spawn("review-inputs", pause=True)
    assert pausing.ask("call", "refund", {"amount": 5}, "call-1") == ("paused",)
    pausing.ask("call", "lookup", {"q": "after the pause"}, None)  # the pause is in the store by now
    other = spawn("review-inputs")
    reply = other.ask("call", "refund", {"amount": 500}, "call-1")
    assert reply[:2] == ("denied", "ReviewDenied"), reply
    assert "with other inputs" in reply[2]
    assert "500" not in reply[2]
    assert other.ask("call", "refund", {"amount": 5}, "call-1") == ("ok", {"refunded": 5})
    assert other.ask("ran")[1] == []


SECRET_SPEC = """
kind: openagentspec:v1/agent
name: shop
description: A shop agent whose lookups never show a card number.
intent: Look orders up.
owner: shop@corp.com
capabilities:
  lookup:
    output_restriction:
      assertion: '!recent["lookup"].outputs.contains("SECRET")'
"""


def test_a_withheld_output_is_never_written_to_the_store(redis_url: str) -> None:
    """The output is recorded before its restriction is asked: its ``c`` event, queued for the store, went out
    with the call's ``withheld`` event after it, and the card number stayed readable in Redis for the
    engagement's time to live."""
    import redis

    guard = Guard.from_yaml(SECRET_SPEC, store=RedisStore(redis_url), telemetry=False)
    guard.tool(name="lookup")(lambda q: "card 4111-SECRET")
    eng = guard.engagement(USER, engagement_id="withheld")
    with eng.activate(), pytest.raises(RestrictionViolation):
        guard.call("lookup", {"q": "A-1"})
    eng.refresh()
    assert eng.view()["history"]["lookup"][0]["outputs"] is None
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        logs = [key for key in client.scan_iter("*") if client.type(key) == b"list"]
        events = [event for key in logs for event in client.lrange(key, 0, -1)]
    finally:
        client.close()
    assert any(b'"withheld"' in event for event in events)
    assert not [event for event in events if b"SECRET" in event]


def test_the_many_workers_example_runs(redis_url: str) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "many_workers.py"), redis_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    assert "refused" not in "".join(lines[:4])
    assert "history._total < 5" in lines[4]  # four calls made, on two workers
    assert "short-circuit" in lines[5]  # [lookup-order, greet] three times, across both workers
