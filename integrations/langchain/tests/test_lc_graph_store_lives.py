"""An engagement's lives in a GraphStore: its items expire (or are deleted) mid-run and a worker opens the
thread's engagement anew. A worker that still holds the earlier life is refused -- a recorded denial, the
tool does not run -- instead of reloading the fresh record (its loop count, its history, all restarted) or
merging its events into it. On real ``create_agent`` graphs sharing an ``InMemoryStore`` (and, for the same
guarantee end to end, agentguard's RedisStore on a real redis-server)."""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from agentguard_langchain import GraphStore
from agentguard_langchain.testing import answer, calls
from langgraph.store.base import BaseStore, Result
from langgraph.store.memory import InMemoryStore

from agentguard import Outcome, PolicyViolation, StoreUnavailable
from agentguard.record import Appended, Snapshot, encode_event
from agentguard.record._journal import EventRefused
from agentguard.stores import RedisStore
from integrations.langchain.tests import test_lc_shared_store as shared
from integrations.langchain.tests.conftest import config, user_says
from integrations.langchain.tests.test_lc_shared_store import (
    LIFE,
    A,
    B,
    Face,
    Workers,
    ev,
    tool_messages,
)

make = shared.make  # the journal fixture (its sync and async faces)
LOOP = [A, B] * 4  # short_circuit 3: the sixth call (index 5) is a loop


class Backend:
    """The journal the workers share, and how the test makes an engagement's record vanish."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.kind = str(request.param)
        self.redis: redis.Redis | None = None
        self.stores: list[RedisStore] = []
        self.prefix = f"lives-{uuid.uuid4().hex[:8]}"
        if self.kind == "redis":
            self.url = request.getfixturevalue("redis_url")
            self.redis = redis.Redis.from_url(self.url)

    def journal(self, _: BaseStore) -> Any:
        if self.kind == "graph-store":
            return GraphStore(_, prefix=self.prefix)
        self.stores.append(RedisStore(self.url, prefix=self.prefix))
        return self.stores[-1]

    def forget(self, w: Workers, thread: str, *, meta_only: bool) -> None:
        """The engagement's record expires: every item of it, or only its meta (the first to go)."""
        if self.redis is not None:
            keys = list(self.redis.scan_iter(f"{self.prefix}:{{{thread}}}:*"))
            assert keys
            self.redis.delete(*[k for k in keys if not meta_only or k.endswith(b":meta")])
            return
        items = w.store.search((self.prefix, thread), limit=100_000)
        assert items
        for item in items:
            if not meta_only or item.key == "meta":
                w.store.delete(tuple(item.namespace), item.key)

    def close(self) -> None:
        for store in self.stores:
            store.close()
        if self.redis is not None:
            self.redis.close()


@pytest.fixture(params=["graph-store", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = Backend(request)
    yield made
    made.close()


def _script() -> list[Any]:
    script: list[Any] = []
    for call in LOOP:
        script += [calls(call), answer("done")]
    return script


def _run(w: Workers, worker: int, index: int) -> dict[str, Any]:
    return w.agents[worker].invoke(user_says(f"again {index}"), config())  # type: ignore[no-any-return]


@pytest.mark.parametrize("meta_only", [False, True], ids=["all-items", "meta-only"])
def test_a_worker_holding_an_expired_life_is_refused_and_never_restarts_its_loop_count(
    backend: Backend, meta_only: bool
) -> None:
    w = Workers(_script(), journal=backend.journal)
    for index in range(4):  # worker 0: A, B, A, B
        _run(w, 0, index)
    backend.forget(w, "t1", meta_only=meta_only)
    _run(w, 1, 4)  # worker 1 opens the thread's engagement afresh (it was forgotten) and makes one call
    ran = dict(w.shop.runs)
    assert ran == {"lookup_order": 3, "send_email": 2}
    # Worker 0 still holds the earlier life. The old GraphStore counted versions from 0 in every life: its
    # version 8 was "ahead" of the fresh record's 1, so it reloaded that record as its own -- a loop count
    # of one call -- and its calls B, A, B ran (the loop was stopped at the 9th call instead of the 6th).
    for index in range(5, 8):
        try:
            result = _run(w, 0, index)
        except PolicyViolation:  # a store denial ends the run (the tool node re-raises it)
            continue
        (*_, message) = tool_messages(result)
        assert message.status == "error"
    assert w.shop.runs == ran  # nothing ran
    first = w.middlewares[0].engagement_for("t1")
    assert first is not None
    assert first.steps[-1].outcome is Outcome.DENY
    assert first.view()["history"]["_list"] == ["lookup-order", "send-email"] * 2  # its own life only
    second = w.middlewares[1].engagement_for("t1")
    assert second is not None
    second.refresh()
    fresh = second.view()["history"]
    assert (fresh["_list"], fresh["_total"]) == (["lookup-order"], 1)  # nothing of the earlier life merged in


async def test_the_async_graph_refuses_an_expired_life_too(backend: Backend) -> None:
    w = Workers(_script(), journal=backend.journal)
    for index in range(4):
        await w.agents[0].ainvoke(user_says(f"again {index}"), config())
    backend.forget(w, "t1", meta_only=False)
    await w.agents[1].ainvoke(user_says("fresh"), config())
    ran = dict(w.shop.runs)
    for index in range(5, 8):
        try:
            await w.agents[0].ainvoke(user_says(f"again {index}"), config())
        except PolicyViolation:
            continue
    assert w.shop.runs == ran


# -- the journal's answers -------------------------------------------------------------------------------


def forget(journal: Face, engagement_id: str) -> None:
    """Every item of the engagement is gone (expired, or deleted)."""
    backing = journal.store.store
    for item in backing.search(("agentguard", engagement_id), limit=100_000):
        backing.delete(tuple(item.namespace), item.key)


@pytest.mark.parametrize("exclusive", [True, False])
def test_an_append_from_an_earlier_life_is_refused_even_where_the_versions_line_up(
    make: Callable[..., Face], exclusive: bool
) -> None:
    journal = make()
    old = journal("open", "e", {"life": 1})
    seen = journal("append", "e", old.version, [ev("a", "old")], 1, exclusive=True).version
    forget(journal, "e")
    new = journal("open", "e", {"life": 2})
    assert new.version not in (seen, old.version)
    moved = journal("append", "e", new.version, [ev("a", n) for n in range(5)], 5, exclusive=True)
    # The old code counted versions from 0 in every life: ``since`` 1 was "4 events behind" in the new one,
    # and it answered with them as missed, appending the old life's event to the new record.
    with pytest.raises(KeyError):
        journal("append", "e", seen, [ev("a", "late")], 1, exclusive=exclusive)
    snapshot = journal("load", "e")
    assert (snapshot.version, snapshot.total) == (moved.version, 5)
    assert ev("a", "late") not in snapshot.events


def test_a_version_no_life_has_is_refused(make: Callable[..., Face]) -> None:
    journal = make()
    journal("open", "e", {})
    for since in (0, 1, 5, LIFE - 1):  # counted from 0, as the old code did: no life of any engagement
        with pytest.raises(KeyError):
            journal("append", "e", since, [ev("a", since)], 1, exclusive=False)
    assert journal("load", "e").total == 0


def test_each_life_of_an_id_has_versions_of_its_own(make: Callable[..., Face]) -> None:
    journal = make()
    versions = set()
    for _ in range(20):
        versions.add(journal("open", "e", {}).version)
        forget(journal, "e")
    assert len(versions) == 20


def test_a_claim_from_an_earlier_life_is_refused(make: Callable[..., Face]) -> None:
    journal = make()
    old = journal("open", "e", {}).version
    assert journal("claim", "e", "resume:c1", "w1", since=old) == "w1"
    forget(journal, "e")
    with pytest.raises(KeyError):  # expired: nothing to resume
        journal("claim", "e", "resume:c1", "w2", since=old)
    new = journal("open", "e", {}).version
    # The new life's claims are empty: the old code let a worker of the earlier life win "resume:c1" again
    # there (and resume, a second time, a review its life had already resumed).
    with pytest.raises(KeyError):
        journal("claim", "e", "resume:c1", "w2", since=old)
    assert journal("claim", "e", "resume:c1", "w3", since=new) == "w3"


def test_a_claim_an_earlier_life_left_behind_is_free_in_the_new_one(make: Callable[..., Face]) -> None:
    journal = make()
    old = journal("open", "e", {}).version
    journal("claim", "e", "resume:c1", "w1", since=old)
    (claim,) = journal.store.store.search(("agentguard", "e", "claims"))
    forget(journal, "e")
    new = journal("open", "e", {}).version
    # The earlier life's claim comes back (its deletion lost a race with a writer of that life, or there
    # were more than one open deletes): it is not the new life's.
    journal.store.store.put(tuple(claim.namespace), claim.key, claim.value, index=False)
    assert journal("claim", "e", "resume:c1", "w2", since=new) == "w2"


def test_a_reload_after_a_gap_does_not_pick_up_a_life_opened_since(make: Callable[..., Face]) -> None:
    behind, ahead = make(max_events=2), make(max_events=2)
    seen = behind("open", "e", {}).version
    for n in range(5):
        ahead("append", "e", seen + n, [ev("a", n)], 1, exclusive=False)
    # Too far behind: the answer is the record it was behind in, read under the same lock as the append. The
    # old code answered gap=True and the pipeline loaded the record in a second call, in which the items could
    # go and the id be opened anew: to tell, the journal kept the life per engagement id until that load (a
    # leak for every engagement behind once and never loaded, and a None for the next load of that id).
    appended = behind("append", "e", seen, [], 0, exclusive=False)
    assert appended.reloaded == Snapshot(meta={}, version=seen + 5, total=5, events=[ev("a", 3), ev("a", 4)])
    assert not appended.gap
    forget(behind, "e")  # the items go and the id is opened anew
    fresh = ahead("open", "e", {})
    with pytest.raises(KeyError):  # the life it reloaded is refused
        behind("append", "e", appended.version, [], 0, exclusive=False)
    assert behind("load", "e") == fresh  # nothing of the gap was kept: a load reads whatever is there


def test_an_event_of_another_life_in_this_ones_log_is_refused(make: Callable[..., Face]) -> None:
    journal = make()
    old = journal("open", "e", {}).version
    journal("append", "e", old, [ev("a", "old")], 1, exclusive=False)
    (stale,) = journal.store.store.search(("agentguard", "e", "log"))
    forget(journal, "e")
    new = journal("open", "e", {}).version
    journal("append", "e", new, [ev("a", "new")], 1, exclusive=False)
    # A worker of the earlier life (another process, no compare-and-set) writes its event just after the
    # new life's: the old code replayed it as the new life's own.
    journal.store.store.put(tuple(stale.namespace), stale.key, stale.value, index=False)
    with pytest.raises(StoreUnavailable, match="another life"):
        journal("load", "e")
    with pytest.raises(StoreUnavailable, match="another life"):
        journal("append", "e", new, [], 0, exclusive=False)


@pytest.mark.parametrize(
    "meta",
    [
        {"version": 1, "total": 1},  # written before lives existed (or by someone else)
        {"life": True, "version": 1, "total": 1},
        {"life": 0, "version": 1, "total": 1},
    ],
)
def test_a_meta_that_is_not_a_lifes_is_refused(make: Callable[..., Face], meta: dict[str, Any]) -> None:
    journal = make()
    backing = journal.store.store
    backing.put(("agentguard", "e"), "meta", {"meta": encode_event(["meta", {}]), **meta}, index=False)
    backing.put(
        ("agentguard", "e", "log"), f"{1:016d}", {"e": ev("a", 1), "l": meta.get("life")}, index=False
    )
    for name, args in [("open", ("e", {})), ("load", ("e",))]:
        with pytest.raises(StoreUnavailable, match="not a journal's item"):
            journal(name, *args)


# -- sizes ---------------------------------------------------------------------------------------------------


def test_events_larger_than_max_event_bytes_are_refused_for_good_and_never_written(
    make: Callable[..., Face],
) -> None:
    journal = make(max_event_bytes=4096)
    v = journal("open", "e", {}).version
    small, huge = ev("a", "ok"), ev("a", "secret " + "y" * 10_000)
    with pytest.raises(EventRefused, match="max_event_bytes") as refused:
        journal("append", "e", v, [small, huge, small], 2, exclusive=False)
    assert refused.value.positions == (1,)
    assert journal("load", "e") == Snapshot(meta={}, version=v, total=0, events=[])  # nothing was sent
    assert journal("append", "e", v, [small], 1, exclusive=False).version == v + 1
    with pytest.raises(StoreUnavailable, match="max_event_bytes"):
        journal("open", "big", {"notes": "z" * 10_000})
    assert journal("load", "big") is None


def test_a_tool_call_larger_than_an_event_may_be_is_denied_and_never_stored() -> None:
    body = "secret " + "x" * 10_000
    w = Workers(
        [calls(("send_email", {"to": "bob@corp.com", "body": body})), answer("done")],
        journal=lambda store: GraphStore(store, max_event_bytes=4096),
    )
    try:
        first = w.agents[0].invoke(user_says("mail bob"), config())
        assert tool_messages(first)[-1].status == "error"
    except PolicyViolation:  # a store denial may end the run instead
        pass
    assert w.shop.runs["send_email"] == 0
    stored = w.store.search(("agentguard",), limit=100_000)
    assert not any("secret" in str(item.value) for item in stored)
    # Refused for good, not left in the worker's outbox to be sent again: its next call goes on as usual.
    w.model.reset([calls(A), answer("ok")])
    w.agents[0].invoke(user_says("order?"), config())
    assert w.shop.runs["lookup_order"] == 1


# -- a store that does not answer ------------------------------------------------------------------------------


class Hanging(InMemoryStore):
    """A store whose batches wait, once ``hang`` is set, until ``gate`` opens (a database that stopped
    answering mid-query)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.gate = threading.Event()

    def batch(self, ops: Any) -> list[Result]:
        if self.hang:
            self.gate.wait()
        return super().batch(ops)

    async def abatch(self, ops: Any) -> list[Result]:
        if self.hang:
            await asyncio.to_thread(self.gate.wait)
        return await super().abatch(ops)


def _until_free(call: Callable[[], Any]) -> Any:
    """``call()`` once the engagement is no longer busy with a batch that overran."""
    while True:
        try:
            return call()
        except StoreUnavailable as exc:
            if "busy" not in str(exc) and "no answer" not in str(exc):
                raise


@pytest.mark.parametrize("mode", ["sync"])  # async: each Face call is an asyncio.run, see the report
def test_a_store_that_does_not_answer_is_a_refusal_within_timeout_seconds(mode: str) -> None:
    backing = Hanging()
    journal = Face(GraphStore(backing, timeout_seconds=0.2), mode)
    v = journal("open", "e", {}).version
    backing.hang = True
    # The old code waited for the store for ever, holding the engagement's lock: the guarded call (and every
    # other of the engagement in this process) hung with it.
    with pytest.raises(StoreUnavailable, match=r"no answer within 0\.2s"):
        journal("append", "e", v, [ev("a", 1)], 1, exclusive=True)
    backing.hang = False
    with pytest.raises(StoreUnavailable, match="busy"):  # the batch that overran may still write
        journal("append", "e", v, [ev("a", 2)], 1, exclusive=True)
    backing.gate.set()
    answer = _until_free(lambda: journal("append", "e", v, [ev("a", 3)], 1, exclusive=True))
    # The read that overran was answered at last, but its append had given up: nothing of it was written.
    assert answer == Appended(ok=True, version=v + 1, total=1, missed=[])
    assert list(journal("load", "e").events) == [ev("a", 3)]


def test_a_graph_whose_store_hangs_denies_the_call_and_does_not_run_the_tool() -> None:
    backing = Hanging()
    w = Workers(
        [answer("hello"), calls(A), answer("done")],
        count=1,
        journal=lambda _: GraphStore(backing, timeout_seconds=0.2),
    )
    w.agents[0].invoke(user_says("hi"), config("warm"))  # the engagement's first open answers
    backing.hang = True
    try:
        w.agents[0].invoke(user_says("order?"), config("warm"))
    except PolicyViolation:
        pass
    finally:
        backing.gate.set()
    assert w.shop.runs["lookup_order"] == 0


def test_timeout_seconds_must_be_a_bound() -> None:
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="timeout_seconds"):
            GraphStore(InMemoryStore(), timeout_seconds=bad)
