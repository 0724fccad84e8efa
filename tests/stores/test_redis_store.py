"""RedisStore against a real redis-server (tests/redis_support.py): the journal's semantics, sync and async,
the key layout's isolation, time to live, and every way the store can fail (stopped, paused, restarted,
something else's data in its keys)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard.errors import ConfigurationError, StoreUnavailable
from agentguard.record import Appended, Snapshot, decode_event, encode_event
from agentguard.record import Journal as JournalProtocol
from agentguard.stores import RedisStore
from agentguard.stores._redis import _LIFE, _tag
from tests.redis_support import RedisServer, start_redis
from tests.stores.keys import keys_of

ROOT = Path(__file__).resolve().parents[2]


def ev(*items: Any) -> str:
    return encode_event(list(items))


class Journal:
    """One face for both halves of the store: ``mode`` "sync" calls the methods, "async" runs their
    ``a``-twins to completion on a loop of its own (so each test runs twice, once per client).

    Versions are counted from the life of the engagement this face last opened or loaded (the store's are
    ``life * _LIFE + n``): ``since`` 3 is the third event of that life, and so are the versions it answers.
    The tests of lives (``-- lives --``) use the store's own numbers."""

    def __init__(self, store: RedisStore, mode: str) -> None:
        self.store = store
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None
        self.life: dict[str, int] = {}

    def _seen(self, engagement_id: str, snapshot: Snapshot | None) -> Snapshot | None:
        if snapshot is None:
            return None
        self.life[engagement_id], n = divmod(snapshot.version, _LIFE)
        return replace(snapshot, version=n)

    def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.loop is None:
            return getattr(self.store, name)(*args, **kwargs)
        coroutine: Coroutine[Any, Any, Any] = getattr(self.store, "a" + name)(*args, **kwargs)
        return self.loop.run_until_complete(coroutine)

    def open(self, engagement_id: str, meta: dict[str, Any] | None = None) -> Snapshot:
        snapshot = self._seen(engagement_id, self._run("open", engagement_id, meta or {}))
        assert snapshot is not None
        return snapshot

    def load(self, engagement_id: str) -> Snapshot | None:
        return self._seen(engagement_id, self._run("load", engagement_id))

    def append(
        self, engagement_id: str, since: int, events: list[str], total: int = 0, *, exclusive: bool = False
    ) -> Appended:
        life = self.life.get(engagement_id, 0) * _LIFE
        appended: Appended = self._run(
            "append", engagement_id, since + life if since >= 0 else since, events, total, exclusive=exclusive
        )
        reloaded = appended.reloaded
        if reloaded is not None:
            reloaded = replace(reloaded, version=reloaded.version - life)
        return replace(appended, version=appended.version - life, reloaded=reloaded)

    def claim(self, engagement_id: str, key: str, owner: str) -> str:
        since = self.life.get(engagement_id, 0) * _LIFE  # the life this face last saw
        return self._run("claim", engagement_id, key, owner, since=since)  # type: ignore[no-any-return]

    def settle(self) -> None:
        """Let the loop run a moment, as a real program's does between two calls: it reads that the server
        closed its pooled connections (redis-py's pool asks the stream, which only the running loop feeds)."""
        if self.loop is not None:
            self.loop.run_until_complete(asyncio.sleep(0.05))

    def close(self) -> None:
        if self.loop is None:
            self.store.close()
        else:
            self.loop.run_until_complete(self.store.aclose())
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(redis_url: str, mode: str) -> Iterator[Callable[..., Journal]]:
    """Journals on the session server (``make(max_events=5)``), closed after the test."""
    made: list[Journal] = []

    def make_journal(url: str = redis_url, **settings: Any) -> Journal:
        journal = Journal(RedisStore(url, **settings), mode)
        made.append(journal)
        return journal

    yield make_journal
    for journal in made:
        journal.close()


@pytest.fixture
def journal(make: Callable[..., Journal]) -> Journal:
    return make()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, for the tests that stop, pause or restart it."""
    server = start_redis(tmp_path)
    yield server
    server.stop()


# -- the journal ---------------------------------------------------------------------------------------


def test_open_creates_once_and_keeps_the_first_meta(journal: Journal) -> None:
    first = journal.open("e1", {"agent": "a", "at": datetime(2024, 5, 1, 12, tzinfo=UTC), "raw": b"\x00\xff"})
    assert first == Snapshot(meta=first.meta, version=0, total=0, events=[])
    assert first.meta == {"agent": "a", "at": datetime(2024, 5, 1, 12, tzinfo=UTC), "raw": b"\x00\xff"}
    journal.append("e1", 0, [ev("b", "t", "tool", "c1", {}, 1)], 1)
    again = journal.open("e1", {"agent": "other"})
    assert again.meta == first.meta
    assert (again.version, again.total, list(again.events)) == (1, 1, [ev("b", "t", "tool", "c1", {}, 1)])
    assert journal.load("e1") == again


def test_load_is_none_for_an_unknown_engagement(journal: Journal, raw: redis.Redis) -> None:
    assert journal.load("nobody") is None
    assert keys_in(raw) == set()  # and creates nothing


def test_append_returns_what_others_appended_since(make: Callable[..., Journal]) -> None:
    one, two = make(), make()
    one.open("e", {})
    two.open("e", {})
    a = one.append("e", 0, [ev("a", "x"), ev("a", "y")], 2)
    assert a == Appended(ok=True, version=2, total=2, missed=[])
    b = two.append("e", 0, [ev("a", "z")], 1)  # not exclusive: appended after the others
    assert b == Appended(ok=True, version=3, total=3, missed=[ev("a", "x"), ev("a", "y")])
    c = one.append("e", 2, [], 0)  # nothing to append: just what was missed
    assert c == Appended(ok=True, version=3, total=3, missed=[ev("a", "z")])
    assert list(one.load("e").events) == [ev("a", "x"), ev("a", "y"), ev("a", "z")]  # type: ignore[union-attr]


def test_exclusive_append_only_at_the_version_seen(make: Callable[..., Journal]) -> None:
    one, two = make(), make()
    one.open("e", {})
    two.open("e", {})
    assert one.append("e", 0, [ev("b", 1)], 1, exclusive=True).ok
    refused = two.append("e", 0, [ev("b", 2)], 1, exclusive=True)
    assert refused == Appended(ok=False, version=1, total=1, missed=[ev("b", 1)])
    snapshot = two.load("e")
    assert snapshot is not None
    assert (snapshot.version, snapshot.total, list(snapshot.events)) == (1, 1, [ev("b", 1)])
    retried = two.append("e", 1, [ev("b", 2)], 1, exclusive=True)
    assert retried == Appended(ok=True, version=2, total=2, missed=[])


def test_versions_and_total_stay_exact_beyond_the_cap(make: Callable[..., Journal]) -> None:
    journal = make(max_events=5)
    journal.open("e", {})
    for n in range(1, 21):
        assert journal.append("e", n - 1, [ev("a", n)], 2).version == n
    snapshot = journal.load("e")
    assert snapshot is not None
    assert (snapshot.version, snapshot.total) == (20, 40)
    assert list(snapshot.events) == [ev("a", n) for n in range(16, 21)]  # versions 16..20
    # since 15: all five missed are kept; since 14: version 15 is gone -> a gap, and no partial list: the
    # answer is the record itself, read by the same script (nothing left for a load, in another round trip)
    assert journal.append("e", 15, [], 0).missed == [ev("a", n) for n in range(16, 21)]
    assert journal.append("e", 15, [], 0).reloaded is None
    gap = journal.append("e", 14, [ev("a", 21)], 1)
    record = Snapshot(meta={}, version=21, total=41, events=[ev("a", n) for n in range(17, 22)])
    assert gap == Appended(ok=True, version=21, total=41, reloaded=record)
    refused = journal.append("e", 3, [ev("a", 22)], 1, exclusive=True)
    assert refused == Appended(ok=False, version=21, total=41, reloaded=record)
    # a caller ahead of the log (it saw an earlier engagement of the same id): a gap too
    ahead = journal.append("e", 99, [], 0)
    assert (ahead.gap, ahead.missed, ahead.version, ahead.reloaded) == (False, (), 21, record)


def test_a_batch_larger_than_the_cap_and_than_luas_unpack(make: Callable[..., Journal]) -> None:
    journal = make(max_events=5)
    journal.open("e", {})
    answer = journal.append("e", 0, [ev("a", n) for n in range(2500)], 2500)
    assert (answer.version, answer.total) == (2500, 2500)
    snapshot = journal.load("e")
    assert snapshot is not None
    assert list(snapshot.events) == [ev("a", n) for n in range(2495, 2500)]


# -- appends larger than one round trip carries: refused whole (the pipeline sends them in several) -------


def evalsha_calls(raw: redis.Redis) -> int:
    return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.parametrize("bound", ["bytes", "events"])
def test_an_append_past_one_round_trip_is_refused_and_nothing_is_sent(
    make: Callable[..., Journal], raw: redis.Redis, bound: str
) -> None:
    # The store does not split an append: parts written one after the other are not one compare-and-set (an
    # exclusive append's later part that found the log moved could only fail, and under on_failure="allow"
    # the call then ran unchecked). The pipeline appends a larger outbox in several (tests/stores/test_outbox.py).
    settings = (
        {"max_event_bytes": 1000, "max_append_bytes": 2500} if bound == "bytes" else {"max_append_events": 4}
    )
    journal = make(**settings)
    journal.open("e", {})
    journal.append("e", 0, [], 0)  # the script is loaded
    events = [ev("a", str(n) * 800) for n in range(5)] if bound == "bytes" else [ev("a", n) for n in range(5)]
    before = evalsha_calls(raw)
    with pytest.raises(ValueError, match="more than one round trip carries"):
        journal.append("e", 0, events, 5, exclusive=True)
    assert evalsha_calls(raw) == before
    assert journal.append("e", 0, events[:2], 2) == Appended(ok=True, version=2, total=2, missed=[])


def test_max_append_events_is_a_round_trip_redis_takes(redis_url: str) -> None:
    for wrong in (0, 100_001, 1.5):
        with pytest.raises(ValueError, match="max_append_events"):
            RedisStore(redis_url, max_append_events=wrong)  # type: ignore[arg-type]


# -- held outputs: a paused review's output leaves the log once the call is resumed ----------------------

SECRET = "-".join(["123", "45", "6789"])  # built at run time: no source line a traceback quotes shows it


def test_a_resumed_reviews_held_output_leaves_the_log(make: Callable[..., Journal], raw: redis.Redis) -> None:
    journal = make()
    meta, log, _ = keys_of("e")
    journal.open("e", {})
    begun = ev("b", "t1", "export", "tool", "call-1,{x}", {}, 1.0)
    held = ev("p", "t1", "call-1,{x}", {"rows": SECRET}, {})
    other = ev("p", "t2", "call-2", {"rows": "still held"}, {})
    journal.append("e", 0, [begun, held, held, other], 1)  # held sent twice: an append whose answer was lost
    assert SECRET in repr(raw.lrange(log, 0, -1))  # while paused, any worker may resume it from the log
    ended = [ev("u", "call-1,{x}"), ev("c", "t1", None, "withheld", "the reviewer refused")]
    assert journal.append("e", 4, ended, 0).missed == []
    # The old code left both p events as they were: the refused output readable for the time to live.
    scrubbed = [begun, ev("x"), ev("x"), other, *ended]
    assert [text.decode() for text in raw.lrange(log, 0, -1)] == scrubbed
    assert SECRET not in repr(raw.hgetall(meta))
    assert [field for field in raw.hkeys(meta) if field.startswith(b"held:")] == [b"held:call-2"]
    assert journal.append("e", 0, [], 0).missed == scrubbed  # a worker behind reads the same log
    snapshot = journal.load("e")
    assert snapshot is not None
    assert list(snapshot.events) == scrubbed


def test_a_review_resumed_in_the_same_append_or_after_its_pause_was_trimmed_leaves_nothing(
    make: Callable[..., Journal], raw: redis.Redis
) -> None:
    journal = make(max_events=3)
    meta, log, _ = keys_of("e")
    journal.open("e", {})
    journal.append("e", 0, [ev("p", "t1", "c1", SECRET, {}), ev("u", "c1")], 0)  # the outbox held both
    assert raw.lrange(log, 0, -1) == [b'["x"]', b'["u","c1"]']
    journal.append("e", 2, [ev("p", "t2", "c2", SECRET, {}), *(ev("a", n) for n in range(3))], 0)
    # c2's p was trimmed in the same append: its field went with it (a pause never resumed keeps none)
    assert raw.hget(meta, "held:c2") is None
    # c2's p was trimmed already (nothing to scrub: no error); "c3" never paused here (or an earlier
    # agentguard's store kept its p): nothing either
    journal.append("e", 6, [ev("u", "c2"), ev("u", "c3")], 0)
    assert SECRET not in repr(raw.lrange(log, 0, -1)) + repr(raw.hgetall(meta))
    assert not [field for field in raw.hkeys(meta) if field.startswith(b"held:")]
    assert journal.load("e").version == 8  # type: ignore[union-attr]


def test_pauses_never_resumed_keep_no_fields_once_their_events_left_the_log(
    redis_url: str, raw: redis.Redis
) -> None:
    # The meta hash kept a held:<call id> field for every pause never resumed (a run abandoned at its
    # review), long after max_events had trimmed its p event: 2000 pauses, 2000 fields, 10 events kept.
    store = RedisStore(redis_url, max_events=10)
    meta, log, _ = keys_of("e")
    version = store.open("e", {}).version
    for n in range(300):
        event = ev("p", f"t{n}", f"call_{n:05d}_" + "z" * 200, {"rows": "o" * 10}, {})
        version = store.append("e", version, [event, ev("a", n)], 0, exclusive=False).version
    assert raw.llen(log) == 10
    held = {field: raw.hget(meta, field) for field in raw.hkeys(meta) if field.startswith(b"held")}
    # The five p events still kept, each by its call id and its version: as GraphStore keeps its counts.
    assert len([field for field in held if field.startswith(b"held:")]) == 5
    assert len([field for field in held if field.startswith(b"held@")]) == 5
    assert raw.hget(meta, "holding") == b"5"
    assert len(raw.hkeys(meta)) <= 8 + 10
    # A pause still kept is scrubbed as before when its call is resumed.
    store.append("e", version, [ev("u", "call_00299_" + "z" * 200)], 0, exclusive=False)
    assert b"rows" not in b"".join(raw.lrange(log, 0, -1)[-3:])
    store.close()


def test_time_to_live_is_set_and_refreshed(make: Callable[..., Journal], raw: redis.Redis) -> None:
    journal = make(ttl_seconds=100)
    meta, log, claims = keys_of("e")
    journal.open("e", {})
    assert 99_000 < raw.pttl(meta) <= 100_000
    assert raw.exists(log) == 0  # no events yet
    journal.append("e", 0, [ev("a", 1)], 0)
    journal.claim("e", "resume:c1", "worker-1")
    for key in (meta, log, claims):
        assert 99_000 < raw.pttl(key) <= 100_000
    for refresh in (
        lambda: journal.append("e", 1, [ev("a", 2)], 0),
        lambda: journal.open("e", {}),
        lambda: journal.claim("e", "resume:c2", "worker-1"),
    ):
        for key in (meta, log, claims):
            raw.pexpire(key, 5_000)
        refresh()
        for key in (meta, log, claims):
            assert 99_000 < raw.pttl(key) <= 100_000
    for key in (meta, log, claims):
        raw.pexpire(key, 5_000)
    journal.load("e")  # load only reads
    assert all(raw.pttl(key) <= 5_000 for key in (meta, log, claims))


def test_append_to_a_missing_or_expired_engagement_is_a_key_error(make: Callable[..., Journal]) -> None:
    journal = make(ttl_seconds=0.3)
    with pytest.raises(KeyError, match="never-opened"):
        journal.append("never-opened", 0, [ev("a", 1)], 0)
    journal.open("e", {})
    journal.append("e", 0, [ev("a", 1)], 1)
    time.sleep(0.45)
    assert journal.load("e") is None
    with pytest.raises(KeyError):
        journal.append("e", 1, [ev("a", 2)], 0, exclusive=True)
    assert journal.open("e", {"new": True}) == Snapshot(meta={"new": True}, version=0, total=0, events=[])


def test_opening_anew_drops_what_an_expired_engagement_left(journal: Journal, raw: redis.Redis) -> None:
    meta, log, claims = keys_of("e")
    journal.open("e", {"first": 1})
    journal.append("e", 0, [ev("a", 1)], 1)
    journal.claim("e", "k", "old-owner")
    raw.delete(meta)  # the meta hash expired a moment before the others
    assert journal.open("e", {"second": 2}) == Snapshot(meta={"second": 2}, version=0, total=0, events=[])
    assert raw.exists(log, claims) == 0
    assert journal.claim("e", "k", "new-owner") == "new-owner"


def test_claim_is_won_exactly_once(make: Callable[..., Journal]) -> None:
    journal = make()
    journal.open("e", {})
    assert journal.claim("e", "resume:c1", "w1") == "w1"
    assert journal.claim("e", "resume:c1", "w2") == "w1"
    assert journal.claim("e", "resume:c2", "w2") == "w2"
    journal.open("other", {})
    assert journal.claim("other", "resume:c1", "w3") == "w3"  # claims are per engagement


def test_claim_race_threads(redis_url: str) -> None:
    stores = [RedisStore(redis_url) for _ in range(8)]
    since = stores[0].open("e", {}).version
    barrier = threading.Barrier(8)
    holders: list[str] = []

    def claimer(index: int) -> None:
        stores[index].load("warm-up")  # connect before the race
        barrier.wait()
        holders.append(stores[index].claim("e", "resume:c1", f"worker-{index}", since=since))

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(holders) == 8
    assert len(set(holders)) == 1
    assert holders[0].startswith("worker-")
    for store in stores:
        store.close()


async def test_claim_race_tasks(redis_url: str) -> None:
    stores = [RedisStore(redis_url) for _ in range(8)]
    await asyncio.gather(*(store.aload("warm-up") for store in stores))
    since = (await stores[0].aopen("e", {})).version
    holders = await asyncio.gather(
        *(s.aclaim("e", "resume:c1", f"w{i}", since=since) for i, s in enumerate(stores))
    )
    assert len(set(holders)) == 1
    for store in stores:
        await store.aclose()


# -- ids: nothing one id can do reaches another engagement's keys ------------------------------------------

NASTY_IDS = [
    "",
    "%",
    "a",
    "a}",
    "a}:log",
    "}",
    "{",
    "{a}",
    "a:b",
    "a:{b}:log",
    "*",
    "a*",
    "\x00",
    "a\x00b",
    "\ud800",  # a lone surrogate
    "ünïcödé-🛡",
    "%61",  # what "a" would look like percent-encoded
    "x" * 10_000,
    "é" * 5_000,
]


def keys_in(raw: redis.Redis) -> set[str]:
    return {key.decode() if isinstance(key, bytes) else key for key in raw.keys("*")}


def hash_tag(key: str) -> str:
    """Redis Cluster's hash tag of ``key``: what lies between the first ``{`` and the next ``}``."""
    start = key.index("{")
    end = key.index("}", start + 1)
    return key[start + 1 : end]


@given(st.text(), st.text())
@settings(max_examples=300, deadline=None)
def test_two_ids_never_share_a_key(a: str, b: str) -> None:
    keys_a, keys_b = keys_of(a), keys_of(b)
    for keys in (keys_a, keys_b):
        tags = {hash_tag(key) for key in keys}
        assert len(tags) == 1  # one slot per engagement
        assert tags != {""}  # Cluster ignores an empty tag
    if a != b:
        assert not set(keys_a) & set(keys_b)
        assert hash_tag(keys_a[0]) != hash_tag(keys_b[0])


def test_nasty_ids_each_keep_their_own_record(journal: Journal, raw: redis.Redis) -> None:
    for index, engagement_id in enumerate(NASTY_IDS):
        journal.open(engagement_id, {"index": index})
        journal.append(engagement_id, 0, [ev("a", index)], index)
        journal.claim(engagement_id, "k", f"owner-{index}")
    assert len(keys_in(raw)) == 3 * len(NASTY_IDS)
    for index, engagement_id in enumerate(NASTY_IDS):
        snapshot = journal.load(engagement_id)
        assert snapshot == Snapshot(meta={"index": index}, version=1, total=index, events=[ev("a", index)])
        assert journal.claim(engagement_id, "k", "late") == f"owner-{index}"
    for key in keys_in(raw):
        assert key.startswith("agentguard:{")
        assert hash_tag(key) in {_tag(i) for i in NASTY_IDS}


def test_the_prefix_separates_stores(redis_url: str, mode: str, raw: redis.Redis) -> None:
    one = Journal(RedisStore(redis_url, prefix="app1"), mode)
    two = Journal(RedisStore(redis_url, prefix="app2"), mode)
    one.open("e", {"app": 1})
    assert two.load("e") is None
    assert keys_in(raw) == {keys_of("e", "app1")[0]}
    one.close()
    two.close()


# -- values round-trip ---------------------------------------------------------------------------------


def test_events_round_trip_exactly(journal: Journal) -> None:
    events = [
        ["c", 1, {"text": "lone \ud800 surrogate, NUL \x00, \udfff"}, "completed", None],
        ["c", 2, {"big": "ü" * 1_000_000, "bytes": b"\x00\xff" * 1000}, "completed", None],
        ["b", "t", "tool", "c1", {"\x00t": "not a datetime"}, datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)],
        ["p", 3, "c1", {"nested": [[[{"k": [1.5, -0.0, 10**30]}]]]}],
    ]
    encoded = [encode_event(event) for event in events]
    journal.open("e", {})
    journal.append("e", 0, encoded, 1)
    snapshot = journal.load("e")
    assert snapshot is not None
    assert list(snapshot.events) == encoded
    assert [decode_event(text) for text in snapshot.events] == events
    # and a string the store is given as it is, surrogates and all, comes back as it was
    odd = '["s","\ud800\x00é🛡"]'
    assert journal.append("e", 4, [odd], 0).missed == []
    assert journal.open("e", {}).events[-1] == odd


# -- failures ------------------------------------------------------------------------------------------


def test_a_stopped_server_is_store_unavailable_then_a_restart_is_forgotten(
    own_server: RedisServer, mode: str
) -> None:
    journal = Journal(RedisStore(own_server.url, timeout_seconds=1), mode)
    journal.open("e", {"a": 1})
    journal.append("e", 0, [ev("a", 1)], 1)
    own_server.stop()
    for call in (
        lambda: journal.open("e", {}),
        lambda: journal.load("e"),
        lambda: journal.append("e", 1, [ev("a", 2)], 0),
        lambda: journal.claim("e", "k", "w"),
    ):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=rf"127\.0\.0\.1:{own_server.port}") as caught:
            call()
        assert time.monotonic() - started < 1.5
        assert not isinstance(caught.value, redis.RedisError)
    own_server.restart()  # same port, empty: the same store object works again, from the first call
    assert journal.load("e") is None
    assert journal.open("e", {"b": 2}).meta == {"b": 2}
    assert journal.append("e", 0, [ev("a", 1)], 1).version == 1
    own_server.restart()  # and again, this time with connections in the pool
    journal.settle()
    assert journal.open("e", {"c": 3}).version == 0
    journal.close()


def test_store_unavailable_names_the_operation(own_server: RedisServer, mode: str) -> None:
    journal = Journal(RedisStore(own_server.url, timeout_seconds=1), mode)
    own_server.stop()
    with pytest.raises(StoreUnavailable, match=r"append of engagement 'e'"):
        journal.append("e", 0, [], 0)
    with pytest.raises(StoreUnavailable, match=r"claim of engagement 'e'"):
        journal.claim("e", "k", "w")
    journal.close()


def test_a_paused_server_times_out_instead_of_hanging(own_server: RedisServer, mode: str) -> None:
    journal = Journal(RedisStore(own_server.url, timeout_seconds=0.5), mode)
    journal.open("e", {})
    fresh = Journal(RedisStore(own_server.url, timeout_seconds=0.5), mode)  # connects while paused
    own_server.pause()
    try:
        for target in (journal, fresh):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="Timeout"):
                target.append("e", 0, [ev("a", 1)], 0)
            assert time.monotonic() - started < 1.5
    finally:
        own_server.resume()
    assert journal.load("e") is not None  # after the pause, the store answers again
    journal.close()
    fresh.close()


def test_a_busy_server_times_out(own_server: RedisServer, mode: str) -> None:
    journal = Journal(RedisStore(own_server.url, timeout_seconds=0.5), mode)
    journal.open("e", {})
    blocker = redis.Redis.from_url(own_server.url)
    sleeper = threading.Thread(target=blocker.execute_command, args=("DEBUG", "SLEEP", "2"))
    sleeper.start()
    time.sleep(0.1)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Timeout"):
            journal.load("e")
        assert time.monotonic() - started < 1.5
    finally:
        sleeper.join(5)
        blocker.close()
    assert journal.load("e") is not None
    journal.close()


def test_the_password_is_never_shown(tmp_path: Path, mode: str) -> None:
    server = start_redis(tmp_path, "--requirepass", "s3cret-pw")
    try:
        good = Journal(RedisStore(f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"), mode)
        assert good.open("e", {}).version == 0
        bad = Journal(RedisStore(f"redis://:wrong-pw@127.0.0.1:{server.port}/0"), mode)
        with pytest.raises(StoreUnavailable) as caught:
            bad.load("e")
        assert "wrong-pw" not in str(caught.value)
        for journal in (good, bad):
            assert "pw" not in repr(journal.store)
            assert f"127.0.0.1:{server.port}" in repr(journal.store)
            journal.close()
    finally:
        server.stop()


SPOILED = {
    # how the keys were spoiled: the operations that must fail (the others do not touch the spoiled part)
    "meta is a string": {"open", "load", "append", "claim"},
    "log is a string": {"open", "load", "append"},
    "claims is a list": {"claim"},
    "version is not a number": {"open", "load", "append"},
    "total is not a number": {"open", "load", "append"},
    "meta is not json": {"open", "load"},
    "meta is an event": {"open", "load"},
    "meta's fields are missing": {"open", "load", "append", "claim"},
    "more events than versions": {"open", "load", "append"},
}


def spoil(raw: redis.Redis, how: str) -> None:
    """Replace part of the engagement "e" (opened, one event appended, one claim) with something else."""
    meta, log, claims = keys_of("e")
    if how == "meta is a string":
        raw.delete(meta)
        raw.set(meta, "hello")
    elif how == "log is a string":
        raw.delete(log)
        raw.set(log, "hello")
    elif how == "claims is a list":
        raw.delete(claims)
        raw.rpush(claims, "x")
    elif how == "version is not a number":
        raw.hset(meta, "version", "many")
    elif how == "total is not a number":
        raw.hset(meta, "total", "1.5")
    elif how == "meta is not json":
        raw.hset(meta, "meta", "{{{")
    elif how == "meta is an event":
        raw.hset(meta, "meta", '["a",1]')
    elif how == "meta's fields are missing":
        raw.delete(meta)
        raw.hset(meta, "unrelated", "1")
    elif how == "more events than versions":
        raw.rpush(log, "x", "y", "z")
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("how", sorted(SPOILED))
def test_someone_elses_data_in_our_keys_fails_closed(journal: Journal, raw: redis.Redis, how: str) -> None:
    journal.open("e", {"ours": True})
    journal.append("e", 0, [ev("a", 1)], 1)
    journal.claim("e", "k", "w")
    spoil(raw, how)
    calls: dict[str, Callable[[], object]] = {
        "open": lambda: journal.open("e", {}),
        "load": lambda: journal.load("e"),
        "append": lambda: journal.append("e", 1, [], 0),
        "claim": lambda: journal.claim("e", "k", "w"),
    }
    failed = set()
    messages: list[str] = []
    for name, call in calls.items():
        try:
            call()
        except StoreUnavailable as exc:
            failed.add(name)
            messages.append(str(exc))
    assert failed == SPOILED[how]
    assert all(message.startswith("Redis store redis://127.0.0.1:") for message in messages)


@pytest.mark.parametrize(
    "reply",
    [
        None,
        b"garbage",
        7,
        [],
        [1],
        [9, 1, 1, 0, []],
        [1, 1, 1, 0],
        [1, b"x", 1, 0, []],
        [1, 1, 1, 2, []],
        [1, 1, 1, 0, [5]],
        [b"m", b"1", b"0", []],
        [[], [], [], []],
        [b'["meta",{}]', b"1", b"0", [b"a", b"b"]],
        [b'["meta",{}]', b"7", b"1", b"0", [b"a", b"b"]],  # more events than versions
        [b'["meta",{}]', b"0", b"0", b"0", []],  # no life
        [1, b"0", 1, 1, 0, []],
        [1, b"7", b"-1", 1, 0, []],  # a version before the first
    ],
)
def test_a_reply_that_is_not_the_scripts_fails_closed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, reply: object
) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client=client)
    receive = store._receive  # the real answer is read (the connection stays clean), then replaced
    monkeypatch.setattr(store, "_receive", lambda *args: (receive(*args), reply)[1])
    calls: list[Callable[[], object]] = [
        lambda: store.open("e", {}),
        lambda: store.append("e", 0, [], 0, exclusive=False),
    ]
    if type(reply) is not bytes and reply is not None:  # any string is a holder; None: no engagement
        calls.append(lambda: store.claim("e", "k", "w", since=_LIFE))
    for call in calls:
        with pytest.raises(StoreUnavailable, match="not a journal's"):
            call()
    if reply is not None:  # None is load's "no such engagement"
        with pytest.raises(StoreUnavailable):
            store.load("e")
    client.close()


def test_other_redis_errors_become_store_unavailable(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis.Redis.from_url(redis_url)

    store = RedisStore(client=client)
    receive = store._receive

    def fail(*args: object) -> object:
        receive(*args)
        raise redis.exceptions.BusyLoadingError("LOADING Redis is loading the dataset in memory")

    monkeypatch.setattr(store, "_receive", fail)
    with pytest.raises(StoreUnavailable, match="BusyLoadingError"):
        store.open("e", {})
    client.close()


# -- settings and clients ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a url"),
        ({"url": "http://x"}, "schemes"),
        ({"url": "redis://x", "on_failure": "maybe"}, "on_failure"),
        ({"url": "redis://x", "max_events": 0}, "max_events"),
        ({"url": "redis://x", "max_event_bytes": 0}, "max_event_bytes"),
        ({"url": "redis://x", "ttl_seconds": 0}, "ttl_seconds"),
        ({"url": "redis://x", "ttl_seconds": -1}, "ttl_seconds"),
        ({"url": "redis://x", "timeout_seconds": 0}, "timeout_seconds"),
        ({"url": "redis://x", "prefix": "a{b"}, "braces"),
    ],
)
def test_settings_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedisStore(**kwargs)


def test_since_must_be_a_version(journal: Journal) -> None:
    journal.open("e", {})
    with pytest.raises(ValueError, match="since"):
        journal.append("e", -1, [], 0)


async def test_given_clients_are_used_and_left_open(redis_url: str) -> None:
    sync_client = redis.Redis.from_url(redis_url, protocol=3)  # RESP3 answers a script's false with false
    async_client = redis.asyncio.Redis.from_url(redis_url, protocol=3)
    store = RedisStore(client=sync_client, async_client=async_client, on_failure="allow")
    assert store.on_failure == "allow"
    assert store.load("e") is None
    assert await store.aload("e") is None
    assert (await store.aopen("e", {"x": 1})).meta == {"x": 1}
    assert store.load("e") is not None
    await store.aclose()
    assert sync_client.ping()
    assert await async_client.ping()
    only_sync = RedisStore(client=sync_client)
    with pytest.raises(ConfigurationError, match="no async client"):
        await only_sync.aload("e")
    only_async = RedisStore(async_client=async_client)
    with pytest.raises(ConfigurationError, match="no sync client"):
        only_async.load("e")
    sync_client.close()
    await async_client.aclose()


def test_one_store_serves_several_event_loops(redis_url: str) -> None:
    store = RedisStore(redis_url)
    version = asyncio.run(store.aopen("e", {})).version
    assert asyncio.run(store.aappend("e", version, [ev("a", 1)], 1, exclusive=True)).ok

    async def last() -> Snapshot | None:
        try:
            return await store.aload("e")
        finally:
            await store.aclose()

    assert asyncio.run(last()) is not None


def test_close_and_use_again(redis_url: str) -> None:
    store = RedisStore(redis_url)
    store.open("e", {})
    store.close()
    store.close()
    assert store.load("e") is not None  # a closed store builds a new client on its next call
    store.close()


def test_it_is_a_journal() -> None:
    store: JournalProtocol = RedisStore("redis://127.0.0.1:1/0")  # mypy checks the protocol structurally
    assert isinstance(store, JournalProtocol)


def test_importing_agentguard_does_not_import_redis() -> None:
    code = "import sys, agentguard, agentguard.stores; assert 'redis' not in sys.modules, 'redis imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
