"""An engagement's lives in a RedisStore, against a real redis-server: keys that expire (or are deleted)
mid-run and an engagement of the same id opened anew must never be mistaken for one another. A worker that
holds the earlier life is refused -- a recorded denial, the tool does not run -- instead of reloading the
fresh record (its loop count, its history, all restarted) or merging its events into it. Also: a record
whose log is not the one its meta counts (evicted under ``maxmemory``, deleted, pushed to by another
program) is refused, not replayed short."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agentguard import Guard, Outcome, ShortCircuitViolation, StoreDenied, StoreUnavailable
from agentguard.record import Snapshot, encode_event
from agentguard.stores import RedisStore
from tests.stores.keys import keys_of
from tests.stores.workers import USER, make_guard

LOOP = ["lookup", "ping"] * 6  # short_circuit 3 stops the 6th call (index 5)


def ev(*items: Any) -> str:
    return encode_event(list(items))


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStore]:
    made = RedisStore(redis_url)
    yield made
    made.close()


def expire(raw: redis.Redis, engagement_id: str) -> None:
    """Let the engagement's keys reach their time to live (1 ms), and wait until Redis has dropped them."""
    keys = keys_of(engagement_id)
    for key in keys:
        raw.pexpire(key, 1)
    while raw.exists(*keys):  # an expired key is gone for every reader once its time has passed
        pass


def _call(guard: Guard, eng: Any, name: str, q: str, fn: Any = None) -> Any:
    with eng.activate():
        return guard.call(name, {"q": q}, fn)


# -- the audit's run -----------------------------------------------------------------------------------


def test_a_worker_holding_an_expired_life_is_refused_and_never_restarts_its_loop_count(
    redis_url: str, raw: redis.Redis
) -> None:
    one, two = make_guard(redis_url), make_guard(redis_url)
    first = one.engagement(USER, engagement_id="lives")
    for index in range(4):
        _call(one, first, LOOP[index], str(index))
    expire(raw, "lives")
    # The next worker opens the id afresh (by design: the engagement was forgotten) and makes one call.
    second = two.engagement(USER, engagement_id="lives")
    _call(two, second, "lookup", "fresh")
    ran: list[str] = []
    # The first worker still holds the earlier life: each of its calls is a recorded denial, the tool never
    # runs, and its count is never restarted from the fresh record (the old code reloaded it and let the
    # loop go on until the 10th call).
    for index in range(4, len(LOOP)):
        with pytest.raises((StoreDenied, ShortCircuitViolation)):
            _call(one, first, LOOP[index], str(index), lambda q: ran.append(q) or q)
    assert ran == []
    assert first.steps[-1].outcome is Outcome.DENY
    assert first.view()["history"]["_list"] == LOOP[:4]  # its own life, not the fresh one
    fresh = make_guard(redis_url).engagement(USER, engagement_id="lives").view()["history"]
    assert (fresh["_list"], fresh["_total"]) == (["lookup"], 1)  # nothing of the earlier life merged in


def test_the_async_api_refuses_an_expired_life_too(redis_url: str, raw: redis.Redis) -> None:
    one, two = make_guard(redis_url), make_guard(redis_url)
    ran: list[str] = []

    async def run() -> None:
        first = await one.aengagement(USER, engagement_id="alives")
        with first.activate():
            await one.acall("lookup", {"q": "0"})
        expire(raw, "alives")
        second = await two.aengagement(USER, engagement_id="alives")
        with second.activate():
            await two.acall("lookup", {"q": "fresh"})
            await two.acall("ping", {"q": "fresh"})
        with first.activate(), pytest.raises(StoreDenied):
            await one.acall("ping", {"q": "1"}, lambda q: ran.append(q) or q)

    asyncio.run(run())
    assert ran == []


# -- the store's answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive", [True, False])
def test_an_append_from_an_earlier_life_is_refused_even_where_the_versions_line_up(
    store: RedisStore, raw: redis.Redis, exclusive: bool
) -> None:
    old = store.open("e", {"life": 1})
    seen = store.append("e", old.version, [ev("a", "old")], 1, exclusive=True).version
    expire(raw, "e")
    new = store.open("e", {"life": 2})
    assert new.version not in (seen, old.version)
    moved = store.append("e", new.version, [ev("a", n) for n in range(5)], 5, exclusive=True)
    # The old code counted versions from 0 in every life: ``since`` 1 was "4 events behind" in the new one,
    # and it answered with them as missed, appending the old life's events to the new record.
    with pytest.raises(KeyError):
        store.append("e", seen, [ev("a", "late")], 1, exclusive=exclusive)
    snapshot = store.load("e")
    assert snapshot is not None
    assert (snapshot.version, snapshot.total) == (moved.version, 5)
    assert ev("a", "late") not in snapshot.events


def test_a_posted_append_from_an_earlier_life_is_refused(store: RedisStore, raw: redis.Redis) -> None:
    seen = store.open("e", {}).version
    expire(raw, "e")
    store.open("e", {})
    with pytest.raises(KeyError):
        store.post("e", seen, [ev("a", "late")], 1).result()
    assert store.load("e") == Snapshot(meta={}, version=store.open("e", {}).version, total=0, events=[])


def test_a_version_no_life_has_is_refused(store: RedisStore) -> None:
    store.open("e", {})
    for since in (0, 1, 5):  # counted from 0, as the old code did: no life of any engagement
        with pytest.raises(KeyError):
            store.append("e", since, [ev("a", since)], 1, exclusive=False)


def test_each_life_of_an_id_has_versions_of_its_own(store: RedisStore, raw: redis.Redis) -> None:
    versions = set()
    for _ in range(20):
        versions.add(store.open("e", {}).version)
        raw.delete(*keys_of("e"))
    assert len(versions) == 20


def test_a_reload_after_a_gap_does_not_pick_up_a_life_opened_since(redis_url: str, raw: redis.Redis) -> None:
    behind, ahead = RedisStore(redis_url, max_events=2), RedisStore(redis_url, max_events=2)
    seen = behind.open("e", {}).version
    for n in range(5):
        ahead.append("e", seen + n, [ev("a", n)], 1, exclusive=False)
    # Too far behind: the answer is the record it was behind in, read by the same script as the append. The
    # old code answered gap=True and the pipeline loaded the record in a second round trip, in which the keys
    # could go and the id be opened anew: to tell, the store kept the life per engagement id until that load.
    appended = behind.append("e", seen, [], 0, exclusive=False)
    assert appended.reloaded == Snapshot(meta={}, version=seen + 5, total=5, events=[ev("a", 3), ev("a", 4)])
    assert not appended.gap  # nothing left to load
    raw.delete(*keys_of("e"))  # the keys go and the id is opened anew: a later append of that life is refused
    with pytest.raises(KeyError):
        behind.append("e", appended.version, [], 0, exclusive=False)
    behind.close()
    ahead.close()


def test_a_gap_leaves_nothing_in_the_store_for_later(redis_url: str, raw: redis.Redis) -> None:
    behind, ahead = RedisStore(redis_url, max_events=2), RedisStore(redis_url, max_events=2)
    behind_a_gap = []
    for index in range(50):
        seen = behind.open(f"e{index}", {}).version
        for n in range(3):
            ahead.append(f"e{index}", seen + n, [ev("a", n)], 1, exclusive=False)
        behind_a_gap.append(behind.append(f"e{index}", seen, [], 0, exclusive=False))
    assert not [name for name, value in vars(behind).items() if isinstance(value, dict) and len(value) >= 50]
    raw.delete(*keys_of("e0"))
    fresh = ahead.open("e0", {})
    # The old code kept the life each gap was found in, per engagement id, until a load of that id came: a
    # long-running worker's store grew with every engagement that was behind once and never loaded, and the
    # next load of such an id -- whoever asked, whenever -- answered None for the record opened since.
    assert behind.load("e0") == fresh
    assert all(behind.load(f"e{index}") is not None for index in range(1, 50))
    assert all(appended.reloaded is not None for appended in behind_a_gap)  # each answered with its record
    behind.close()
    ahead.close()


# -- a log that is not the one the record counts -------------------------------------------------------


@pytest.mark.parametrize("how", ["log deleted", "log shortened"])
def test_a_log_that_does_not_match_its_count_fails_closed(redis_url: str, raw: redis.Redis, how: str) -> None:
    small, store = RedisStore(redis_url, max_events=2), RedisStore(redis_url)
    version = small.open("e", {}).version
    version = small.append("e", version, [ev("a", n) for n in range(3)], 3, exclusive=False).version
    # What the store itself trimmed is no missing log, for a store that keeps more events too.
    assert list(store.open("e", {}).events) == [ev("a", 1), ev("a", 2)]
    _, log, _ = keys_of("e")
    if how == "log deleted":  # evicted under maxmemory (volatile-* policies evict keys one by one)
        raw.delete(log)
    else:
        raw.ltrim(log, 1, -1)
    for operation in (
        lambda: store.open("e", {}),
        lambda: store.load("e"),
        lambda: store.append("e", version, [], 0, exclusive=False),
    ):
        with pytest.raises(StoreUnavailable, match="not a journal"):
            operation()
    small.close()
    store.close()


def test_a_worker_does_not_replay_a_record_whose_log_was_evicted(redis_url: str, raw: redis.Redis) -> None:
    guard = make_guard(redis_url)
    eng = guard.engagement(USER, engagement_id="evicted")
    for index in range(4):
        _call(guard, eng, LOOP[index], str(index))
    raw.delete(keys_of("evicted")[1])
    # The old code opened it at version 8 with no events: a loop count of 0, the 5th and 6th calls allowed.
    with pytest.raises(StoreUnavailable):
        make_guard(redis_url).engagement(USER, engagement_id="evicted")
    ran: list[str] = []
    with pytest.raises(StoreDenied):
        _call(guard, eng, "lookup", "4", lambda q: ran.append(q) or q)
    assert ran == []


# -- events larger than the store takes ----------------------------------------------------------------


def _small_guard(redis_url: str, tool: Any) -> Guard:
    guard = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
        "capabilities:\n  fetch:\n",
        store=RedisStore(redis_url, max_event_bytes=4096),
        telemetry=False,
    )
    guard.tool(name="fetch")(tool)
    return guard


def test_a_call_whose_inputs_are_larger_than_an_event_may_be_is_denied(
    redis_url: str, raw: redis.Redis
) -> None:
    ran: list[str] = []
    guard = _small_guard(redis_url, lambda q: ran.append(q) or "ok")
    eng = guard.engagement(USER, engagement_id="huge-in")
    with pytest.raises(StoreDenied, match="max_event_bytes"):
        _call(guard, eng, "fetch", "x" * 10_000)
    assert ran == []
    assert eng.steps[-1].outcome is Outcome.DENY
    assert all(len(event) <= 4096 for event in raw.lrange(keys_of("huge-in")[1], 0, -1))


def test_an_output_larger_than_an_event_may_be_is_withheld_and_never_written(
    redis_url: str, raw: redis.Redis
) -> None:
    guard = _small_guard(redis_url, lambda q: "secret " + "y" * 10_000)
    eng = guard.engagement(USER, engagement_id="huge-out")
    with pytest.raises(StoreDenied, match="max_event_bytes"):
        _call(guard, eng, "fetch", "page")
    assert eng.state.calls[-1].status == "withheld"
    assert not any(b"secret" in event for event in raw.lrange(keys_of("huge-out")[1], 0, -1))


def test_a_meta_larger_than_an_event_may_be_is_refused(redis_url: str, raw: redis.Redis) -> None:
    store = RedisStore(redis_url, max_event_bytes=4096)
    with pytest.raises(StoreUnavailable, match="max_event_bytes"):
        store.open("e", {"notes": "z" * 10_000})
    assert raw.exists(*keys_of("e")) == 0
    store.close()


# -- ids -----------------------------------------------------------------------------------------------


def test_long_engagement_ids_are_not_kept_alive_by_the_store(store: RedisStore) -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(20):
            assert store.load(f"{index}:" + "*" * 1_000_000) is None
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The old code cached the percent-encoded tag of each (3 MB of '%2A'), 4096 of them at most.
    assert kept < 5_000_000


# -- claims --------------------------------------------------------------------------------------------


def test_a_claim_lost_with_its_hash_is_not_won_again(store: RedisStore, raw: redis.Redis) -> None:
    since = store.open("e", {}).version
    assert store.claim("e", "resume:c1", "w1", since=since) == "w1"
    assert store.claim("e", "resume:c2", "w1", since=since) == "w1"
    raw.delete(keys_of("e")[2])  # evicted under maxmemory, or deleted
    # The old code let w2 win "resume:c1" again: the paused call resumed twice, its tool run twice.
    with pytest.raises(StoreUnavailable, match="not a journal"):
        store.claim("e", "resume:c1", "w2", since=since)
    assert raw.exists(keys_of("e")[2]) == 0  # nothing was claimed
