"""The record's outbox and its journal, attacked, against a real redis-server (tests/redis_support.py).

- An event the store refuses for good (larger than ``max_event_bytes``, or than the server's
  ``proto-max-bulk-len``) must deny its own step only: left first in the outbox it was sent again, and refused
  again, by every later step of the engagement on that worker.
- A claim names the life the worker holds: a worker holding an expired life must not win the new life's
  empty claims.
- An empty engagement id is not "no id".
- A reload (the worker missed more than the store keeps) keeps what this worker did that the store does not
  have yet, and lists each call once; an ``r`` seen twice takes back one attempt.
- An outbox that grew while the store was away, larger than the server takes in one command, goes in several
  appends (``max_append_bytes``, ``max_append_events``): sent whole it was cut off again with every later
  step, and never got through. Each counts its own events' change to ``history._total`` (sent again after a
  later one failed, nothing counts twice), and another worker appending between them gets the new call
  checked again (it ran unchecked under ``on_failure="allow"`` when the store wrote the parts itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agentguard import (
    ConfigurationError,
    EngagementStatus,
    Guard,
    Outcome,
    PolicyViolation,
    Rule,
    StoreDenied,
    StoreUnavailable,
)
from agentguard.pipeline._driver import _commit
from agentguard.pipeline._effects import Commit
from agentguard.record import EngagementState, EventRefused, decode_event, encode_event
from agentguard.stores import RedisStore
from tests.conftest import spec_text
from tests.stores.keys import keys_of
from tests.stores.workers import USER, make_guard

SPEC = (
    "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
    "capabilities:\n  fetch:\n"
)


def logged(raw: redis.Redis, engagement_id: str) -> list[list[Any]]:
    return [decode_event(text) for text in raw.lrange(keys_of(engagement_id)[1], 0, -1)]


def fetch_guard(redis_url: str, ran: list[str], **settings: Any) -> Guard:
    guard = Guard.from_yaml(SPEC, store=RedisStore(redis_url, **settings), telemetry=False)

    def fetch(q: str, size: int = 0) -> str:
        ran.append(q[:20])
        return "secret " + "y" * size

    guard.tool(name="fetch")(fetch)
    return guard


def call(guard: Guard, eng: Any, q: str, size: int = 0) -> Any:
    with eng.activate():
        return guard.call("fetch", {"q": q, "size": size})


# -- events refused for good ---------------------------------------------------------------------------


def test_an_oversized_output_is_withheld_and_the_next_steps_of_that_worker_still_run(
    redis_url: str, raw: redis.Redis
) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran, max_event_bytes=4096)
    eng = guard.engagement(USER, engagement_id="poison-out")
    with pytest.raises(StoreDenied, match="max_event_bytes"):
        call(guard, eng, "huge", 10_000)
    assert eng.state.calls[-1].status == "withheld"
    # The old code sent the unsent 10 KB ``c`` again with every later step, and was refused every time.
    for index in range(3):
        assert call(guard, eng, f"small-{index}") == "secret "
    assert ran == ["huge", "small-0", "small-1", "small-2"]
    assert eng.steps[-1].outcome is Outcome.ALLOW
    # Another worker sees the huge call withheld (no output), and the others completed.
    other = fetch_guard(redis_url, []).engagement(USER, engagement_id="poison-out")
    history = other.view()["history"]
    assert history["_total"] == 4
    assert [entry["outputs"] for entry in history["fetch"]] == [None, "secret ", "secret ", "secret "]
    assert not any("y" * 100 in encode_event(event) for event in logged(raw, "poison-out"))


def test_an_oversized_input_is_denied_still_counts_as_an_attempt_and_the_next_steps_run(
    redis_url: str, raw: redis.Redis
) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran, max_event_bytes=4096)
    eng = guard.engagement(USER, engagement_id="poison-in")
    with pytest.raises(StoreDenied, match="max_event_bytes"):
        call(guard, eng, "x" * 10_000)
    assert ran == []
    assert call(guard, eng, "small") == "secret "
    assert ran == ["small"]
    events = logged(raw, "poison-in")
    # The refused call's beginning went as its attempt (loop detection), with no take-back of a call that
    # never began there; the store counts one call.
    assert ["a", "fetch"] in events
    assert not any(event[0] == "r" for event in events)
    assert int(raw.hget(keys_of("poison-in")[0], "total") or 0) == 1
    other = fetch_guard(redis_url, []).engagement(USER, engagement_id="poison-in")
    assert other.view()["history"]["_total"] == 1
    assert other.state.attempts(5) == ["fetch", "fetch"]
    assert eng.view()["history"]["_total"] == 1


def test_oversized_events_are_denied_under_on_failure_allow_too(redis_url: str) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran, max_event_bytes=4096, on_failure="allow")
    eng = guard.engagement(USER, engagement_id="poison-allow")
    # A bound hit is a recorded denial, not a store that is down: the call does not run on a warning.
    with pytest.raises(StoreDenied, match="max_event_bytes"):
        call(guard, eng, "x" * 10_000)
    assert ran == []
    assert call(guard, eng, "small") == "secret "


@pytest.fixture
def small_bulk(raw: redis.Redis) -> Iterator[None]:
    """The server takes no argument past 1 MB (its proto-max-bulk-len; 512 MB by default)."""
    before = raw.config_get("proto-max-bulk-len")["proto-max-bulk-len"]
    raw.config_set("proto-max-bulk-len", 1024 * 1024)
    try:
        yield
    finally:
        raw.config_set("proto-max-bulk-len", before)


@pytest.mark.usefixtures("small_bulk")
def test_an_output_the_server_refuses_fails_one_step_not_every_later_one(
    redis_url: str, raw: redis.Redis
) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran)  # max_event_bytes 8 MiB: the server is the one to refuse
    eng = guard.engagement(USER, engagement_id="bulk-out")
    outcomes: list[str] = []
    for q, size in (("huge", 2 * 1024 * 1024), ("next", 0)):
        try:
            call(guard, eng, q, size)
            outcomes.append("ran")
        except StoreDenied as denied:
            outcomes.append("denied" if "bytes)" in str(denied) else str(denied))  # names the event's size
    # The server closes the connection on the 2 MB argument: while it is sent (the post fails, the output
    # is withheld) or after (its answer is the error, read by the next step, which is denied). Either way
    # one step, and only one: the old code re-sent the 2 MB event with every later step, refused each time.
    assert outcomes in (["denied", "ran"], ["ran", "denied"])
    for index in range(3):
        assert call(guard, eng, f"small-{index}") == "secret "
    assert ran == ["huge", *(["next"] if outcomes[0] == "denied" else []), "small-0", "small-1", "small-2"]
    ends = [event for event in logged(raw, "bulk-out") if event[0] == "c"]
    assert ends[0][2] is None  # the huge call's end, without its output
    assert [end[2] for end in ends[-3:]] == ["secret "] * 3
    assert all(len(event) < 1024 * 1024 for event in raw.lrange(keys_of("bulk-out")[1], 0, -1))


@pytest.mark.usefixtures("small_bulk")
def test_inputs_the_server_refuses_are_denied_and_later_steps_run(redis_url: str, raw: redis.Redis) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran)
    eng = guard.engagement(USER, engagement_id="bulk-in")
    with pytest.raises(StoreDenied, match=r"an event of \d+ bytes"):
        call(guard, eng, "x" * (2 * 1024 * 1024))
    assert ran == []
    assert call(guard, eng, "small") == "secret "
    assert ["a", "fetch"] in logged(raw, "bulk-in")


def commit(state: EngagementState, *, exclusive: bool = False) -> bool:
    """The pipeline's commit of ``state``'s outbox (what a guarded step's flow yields), driven here."""
    return _commit(Commit(state, exclusive))


@pytest.mark.usefixtures("small_bulk")
def test_an_event_the_server_refuses_in_a_later_round_trip_is_replaced_where_it_is(
    redis_url: str, raw: redis.Redis
) -> None:
    store = RedisStore(redis_url, max_event_bytes=1536 * 1024, max_append_bytes=1536 * 1024)
    state = EngagementState.shared("e", store.open("e", {}), store)
    for size in (700_000, 700_000, 1_200_000):  # the third output goes in the second round trip
        state.complete_call(state.begin_call("fetch", {}), "y" * size)
    with pytest.raises(EventRefused) as refused:  # the server takes no argument past 1 MB
        commit(state)
    # Named in the outbox that is left (the first round trip landed and was settled): the third call's end.
    assert refused.value.positions == (0,)
    assert commit(state)
    ends = [event for event in logged(raw, "e") if event[0] == "c"]
    assert [len(end[2] or "") for end in ends] == [700_000, 700_000, 0]  # its end kept, not its output
    store.close()


async def test_an_oversized_output_does_not_refuse_later_async_steps(redis_url: str) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran, max_event_bytes=4096)
    eng = await guard.aengagement(USER, engagement_id="poison-async")
    with eng.activate():
        with pytest.raises(StoreDenied, match="max_event_bytes"):
            await guard.acall("fetch", {"q": "huge", "size": 10_000})
        for index in range(2):
            assert await guard.acall("fetch", {"q": f"small-{index}", "size": 0}) == "secret "
    assert ran == ["huge", "small-0", "small-1"]
    await asyncio.sleep(0)


# -- an outbox larger than the server takes in one command ---------------------------------------------


class CuttingRelay:
    """A TCP relay to the redis-server that drops a connection whose client sends more than ``limit`` bytes
    with no answer in between -- as a server does whose query buffer a command overflows (Redis's
    ``client-query-buffer-limit``, 1 GB by default) -- and, while ``away`` is set, every connection (a store
    that cannot be reached)."""

    def __init__(self, target: str, limit: int) -> None:
        host, port = target.removeprefix("redis://").split("/")[0].split(":")
        self.target = (host, int(port))
        self.limit = limit
        self.cut = 0  # connections dropped for a command past the limit
        self._away = False
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._server.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def away(self) -> bool:
        return self._away

    @away.setter
    def away(self, away: bool) -> None:
        self._away = away
        if away:
            with self._lock:
                pairs, self._pairs = self._pairs, []
            for pair in pairs:
                self._close(pair)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            if self._away:
                client.close()
                continue
            pair = (client, socket.create_connection(self.target))
            with self._lock:
                self._pairs.append(pair)
            sent = [0]  # bytes the client sent since the server last answered
            threading.Thread(target=self._pump, args=(pair, 0, sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, 1, sent), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket], source: int, sent: list[int]) -> None:
        with contextlib.suppress(OSError):
            while data := pair[source].recv(65536):
                if source == 0:
                    sent[0] += len(data)
                    if sent[0] > self.limit:
                        self.cut += 1
                        break
                else:
                    sent[0] = 0
                pair[1 - source].sendall(data)
        self._close(pair)

    @staticmethod
    def _close(pair: tuple[socket.socket, socket.socket]) -> None:
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._server.close()
        self.away = True


@pytest.fixture
def relay(redis_url: str) -> Iterator[CuttingRelay]:
    """A relay that takes at most 64 KiB in one command."""
    made = CuttingRelay(redis_url, 64 * 1024)
    yield made
    made.close()


@pytest.mark.parametrize(
    "bound", [{"max_event_bytes": 16 * 1024, "max_append_bytes": 48 * 1024}, {"max_append_events": 5}]
)
def test_an_outbox_larger_than_the_server_takes_at_once_goes_in_parts(
    redis_url: str, relay: CuttingRelay, bound: dict[str, int]
) -> None:
    ran: list[str] = []
    guard = fetch_guard(relay.url, ran, on_failure="allow", **bound)
    eng = guard.engagement(USER, engagement_id="backlog")
    relay.away = True
    for index in range(8):  # each ran on a warning; its end (a 12 KiB output) waits in the outbox
        assert call(guard, eng, f"away-{index}", 12 * 1024).startswith("secret ")
    relay.away = False
    # About 100 KiB of events, more than the server takes in one command. Sent whole with every later step,
    # each was cut off (a store that cannot answer: under allow, a warning) and the other workers never saw
    # these calls. The pipeline appends them in several round trips, the new call's begin in the last.
    call(guard, eng, "back")
    assert not [d for d in eng.steps[-1].decisions if d.rule is Rule.STORE]
    assert relay.cut == 0
    history = fetch_guard(redis_url, []).engagement(USER, engagement_id="backlog").view()["history"]
    assert history["_total"] == 9
    assert [len(entry["outputs"]) for entry in history["fetch"]] == [7 + 12 * 1024] * 8 + [7]
    assert ran == [f"away-{index}" for index in range(8)] + ["back"]


class FailingPart(RedisStore):
    """Its ``fail_at``-th append round trip (counted once armed) fails before it is sent, each time."""

    fail_at = 0
    seen = 0

    def _run(self, operation: str, engagement_id: str, script: int, args: Any) -> Any:
        if operation == "append" and self.fail_at:
            self.seen += 1
            if self.seen % self.fail_at == 0:
                raise self._unavailable(operation, engagement_id, ConnectionError("dropped"))
        return super()._run(operation, engagement_id, script, args)


def test_an_outbox_sent_again_after_a_later_round_trip_failed_counts_each_call_once(redis_url: str) -> None:
    # The store wrote an append in parts, the first carrying the whole ``total``: each try after a later
    # part failed counted it again -- here the outbox's total is negative (five take-backs, one call), so
    # history._total ended at -11 and a count assertion passed calls it should refuse.
    store = FailingPart(redis_url, max_event_bytes=1000, max_append_bytes=1000)
    state = EngagementState.shared("e", store.open("e", {}), store)
    records = [state.begin_call("lookup", {"i": i}) for i in range(5)]
    assert commit(state, exclusive=True)
    assert state.view()["history"]["_total"] == 5
    for record in records:  # five calls taken back (paused in review, say): r events, -1 each
        state.rollback_call(record, reason="taken back")
    state.complete_call(state.begin_call("ping", {"pad": "y" * 800}), "x" * 800)  # two round trips
    store.fail_at = 2  # every second round trip fails: the second of each try
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            commit(state)
    store.fail_at = 0
    assert commit(state)
    assert state.view()["history"]["_total"] == 1
    fresh = EngagementState.shared("e", store.open("e", {}), store)
    assert fresh.view()["history"]["_total"] == 1
    assert fresh.view()["history"]["_list"] == ["ping"]
    store.close()


RACE_SPEC = spec_text(
    """
    capabilities:
      fetch:
      lookup:
        input_restriction:
          assertion: 'size(history.lookup) < 2'
    """
)


class Racing(RedisStore):
    """Runs ``other`` (another worker's call) just before its ``nth`` append round trip once armed."""

    armed = False
    nth = 0
    other: Any = None
    seen = 0

    def _run(self, operation: str, engagement_id: str, script: int, args: Any) -> Any:
        if self.armed and operation == "append":
            self.seen += 1
            if self.seen == self.nth:
                self.armed = False
                self.other()
        return super()._run(operation, engagement_id, script, args)


def race_guard(store: RedisStore, ran: list[str]) -> Guard:
    guard = Guard.from_yaml(RACE_SPEC, store=store, telemetry=False)

    def fetch(q: str, size: int = 0) -> str:
        ran.append("fetch")
        return "secret " + "y" * size

    def lookup(q: str) -> str:
        ran.append(f"lookup {q}")
        return "ok"

    guard.tool(name="fetch")(fetch)
    guard.tool(name="lookup")(lookup)
    return guard


@pytest.mark.parametrize("parts", [False, True])
@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_another_worker_between_the_round_trips_of_an_outbox_gets_the_call_checked_again(
    redis_url: str, parts: bool, policy: str
) -> None:
    # The store wrote an exclusive append too large for one round trip in parts; a later part that found
    # the log moved raised StoreUnavailable, which under on_failure="allow" ran the call unchecked: both
    # workers passed ``size(history.lookup) < 2``. Now it is a conflict: the call is checked again.
    relay = CuttingRelay(redis_url, 1 << 30)
    try:
        ran_a: list[str] = []
        ran_b: list[str] = []
        big = 48 * 1024 if parts else 8 * 1024 * 1024
        store_a = Racing(relay.url, max_event_bytes=16 * 1024, max_append_bytes=big, on_failure="allow")
        guard_a = race_guard(store_a, ran_a)
        guard_b = race_guard(RedisStore(redis_url, on_failure="allow"), ran_b)
        eng_a = guard_a.engagement(USER, engagement_id="race")
        eng_b = guard_b.engagement(USER, engagement_id="race")
        relay.away = True
        for index in range(8):  # a backlog: about 100 KiB waiting in A's outbox
            with eng_a.activate():
                guard_a.call("fetch", {"q": f"away-{index}", "size": 12 * 1024})
        relay.away = False
        store_a.on_failure = policy  # the backlog was recorded under allow; the racing call under policy

        def worker_b() -> None:
            with eng_b.activate():
                guard_b.call("lookup", {"q": "B"})

        store_a.other = worker_b
        store_a.nth = 2 if parts else 1  # B's call lands between A's first and second round trip
        store_a.armed = True
        with eng_a.activate(), pytest.raises(PolicyViolation):
            guard_a.call("lookup", {"q": "A"})
        assert ran_b == ["lookup B"]
        assert ran_a == ["fetch"] * 8
        assert any("checked again" in d.reason for d in eng_a.steps[-1].decisions)
        history = fetch_guard(redis_url, []).engagement(USER, engagement_id="race").view()["history"]
        assert len(history["lookup"]) == 1
        assert history["_total"] == 9
    finally:
        relay.close()


def test_max_append_bytes_holds_every_event(redis_url: str) -> None:
    with pytest.raises(ValueError, match="max_append_bytes"):
        RedisStore(redis_url, max_event_bytes=4096, max_append_bytes=4095)


# -- claims know the engagement's life -----------------------------------------------------------------


def test_a_worker_holding_an_expired_life_cannot_win_the_new_lifes_claims(
    redis_url: str, raw: redis.Redis
) -> None:
    store = RedisStore(redis_url)
    old = store.open("e", {}).version
    for key in keys_of("e"):
        raw.delete(key)  # expired (or deleted)
    new = store.open("e", {}).version
    assert new // 10**15 != old // 10**15
    # The old code let the earlier life win "resume:c1" in the new life's empty claims hash: a review the
    # earlier life had resumed already could be resumed again.
    with pytest.raises(KeyError):
        store.claim("e", "resume:c1", "stale", since=old)
    assert raw.hlen(keys_of("e")[2]) == 0
    assert store.claim("e", "resume:c1", "fresh", since=new) == "fresh"
    for key in keys_of("e"):
        raw.delete(key)
    with pytest.raises(KeyError):  # nor claim in an engagement that does not exist
        store.claim("e", "resume:c1", "stale", since=new)
    assert raw.exists(*keys_of("e")) == 0
    store.close()


async def test_an_async_claim_of_an_expired_life_is_refused(redis_url: str, raw: redis.Redis) -> None:
    store = RedisStore(redis_url)
    old = (await store.aopen("e", {})).version
    for key in keys_of("e"):
        raw.delete(key)
    await store.aopen("e", {})
    with pytest.raises(KeyError):
        await store.aclaim("e", "resume:c1", "stale", since=old)
    assert raw.hlen(keys_of("e")[2]) == 0
    await store.aclose()


# -- empty engagement ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
def test_an_empty_engagement_id_is_refused_not_a_fresh_engagement_each_time(
    redis_url: str, shared: bool
) -> None:
    guard = make_guard(redis_url) if shared else Guard.from_yaml(SPEC, telemetry=False)
    # The old code opened a fresh, randomly named engagement for each "" (an app whose missing conversation
    # id defaults to ""): no loop count, no history carried from one request to the next.
    with pytest.raises(ConfigurationError, match="engagement_id"):
        guard.engagement(USER, engagement_id="")
    with pytest.raises(ConfigurationError, match="engagement_id"):
        asyncio.run(guard.aengagement(USER, engagement_id=""))
    assert guard.engagement(USER, engagement_id=None).id != guard.engagement(USER).id


def test_an_engagement_record_refuses_an_empty_id() -> None:
    with pytest.raises(ValueError, match="engagement_id"):
        EngagementState(engagement_id="")


# -- reloads -------------------------------------------------------------------------------------------


def shared_state(store: RedisStore, engagement_id: str) -> EngagementState:
    meta = EngagementState(engagement_id=engagement_id).meta()
    return EngagementState.shared(engagement_id, store.open(engagement_id, meta), store)


def test_a_reload_keeps_what_this_worker_did_that_the_store_does_not_have_yet(redis_url: str) -> None:
    store = RedisStore(redis_url)
    state = shared_state(store, "reload")
    record = state.begin_call("lookup", {"q": 1})  # its ``b`` not appended yet (another thread's call)
    state.attempted("ping")  # a refused attempt, not appended yet
    state.stop(EngagementStatus.STOPPED, "a loop")  # stopped here, not appended yet
    snapshot = store.load("reload")
    assert snapshot is not None
    state.reload(snapshot)
    # The old code rebuilt only the store's events: the call gone from history (a count assertion passes
    # one call short), the attempts gone (the loop count restarted), and the stopped engagement active again.
    assert state.names == ["lookup"]
    assert state.total == 1
    assert state.attempts(5) == ["lookup", "ping"]
    assert state.status is EngagementStatus.STOPPED
    assert state.calls == [record]
    store.close()


def test_a_reload_lists_each_call_in_flight_once(redis_url: str) -> None:
    store = RedisStore(redis_url)
    state = shared_state(store, "reload-twice")
    record = state.begin_call("lookup", {"q": 1})
    batch = state.batch()
    assert batch is not None
    events, total = batch
    state.settle(len(events), store.append("reload-twice", state.version, events, total, exclusive=True))
    snapshot = store.load("reload-twice")
    assert snapshot is not None
    state.reload(snapshot)  # the call still in flight, its ``b`` in the store
    assert state.calls == [record]  # the old code listed it twice
    state.complete_call(record, {"ok": True})
    assert state.view()["history"]["lookup"] == [{"inputs": {"q": 1}, "outputs": {"ok": True}}]
    store.close()


def test_a_take_back_seen_twice_takes_back_one_attempt(redis_url: str) -> None:
    store = RedisStore(redis_url)
    writer = shared_state(store, "twice")

    def b(token: str) -> str:
        return encode_event(["b", token, "ping", "tool", None, {}, 0.0])

    paused = encode_event(["r", "t2", "paused for review", False])
    # An append whose answer was lost is sent again: its ``r`` lands twice.
    store.append("twice", writer.version, [b("t1"), b("t2"), paused, paused], 0, exclusive=False)
    reader = shared_state(store, "twice")
    # The old code took back two attempts for one pause: the loop detector forgot a real one.
    assert reader.attempts(5) == ["ping"]
    assert reader.names == ["ping"]
    store.close()


# -- events nobody should have written -----------------------------------------------------------------


def test_an_event_nested_too_deep_to_decode_fails_closed_as_the_store_unavailable(
    redis_url: str, raw: redis.Redis
) -> None:
    ran: list[str] = []
    guard = fetch_guard(redis_url, ran)
    eng = guard.engagement(USER, engagement_id="deep")
    assert call(guard, eng, "first") == "secret "
    # Another program (or a worker gone rogue) pushes an event nested deeper than Python recurses.
    deep = '["c","t",' + "[" * 5000 + "]" * 5000 + ',"completed",null]'
    raw.rpush(keys_of("deep")[1], deep)
    raw.hincrby(keys_of("deep")[0], "version", 1)
    # The old code let a RecursionError out of the store's failure handling: no recorded denial.
    with pytest.raises(StoreDenied, match="not a journal"):
        call(guard, eng, "second")
    assert ran == ["first"]
    assert eng.steps[-1].outcome is Outcome.DENY
    with pytest.raises(StoreUnavailable, match="malformed"):
        fetch_guard(redis_url, []).engagement(USER, engagement_id="deep")
