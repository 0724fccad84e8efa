"""Many workers, one engagement per thread: ``Guard(store=GraphStore(graph_store))`` (or agentguard's
RedisStore) behind two real ``create_agent`` graphs that share a checkpointer and a LangGraph store, as the
workers of one deployment do; and GraphStore's journal contract on its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware, GraphStore
from agentguard_langchain._toolcall import StoredResult
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from hypothesis import given, settings
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore, Result
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from agentguard import EngagementStatus, Guard, ShortCircuitViolation, StoreUnavailable
from agentguard.record import Appended, Journal, Snapshot, encode_event
from agentguard.stores import RedisStore
from integrations.langchain.tests.conftest import Shop, config, make_guard, make_tools, user_says
from tests.stores.resent import SCENARIOS, STEPS, count_assertion_holds_across_workers, replay

LIFE = 10**15  # a version is life * LIFE + n (see GraphStore's docstring)
APPROVE = {"decisions": [{"type": "approve"}]}
REJECT = {"decisions": [{"type": "reject", "message": "no"}]}
A = ("lookup_order", {"order_id": "A-1"})
B = ("send_email", {"to": "bob@corp.com", "body": "again"})


def ev(*items: Any) -> str:
    return encode_event(list(items))


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


class Workers:
    """``count`` workers of one deployment: each its own Guard (built alike) and middleware, sharing the
    checkpointer, the graph's store and -- through ``journal`` -- the engagements."""

    def __init__(
        self,
        script: list[Any],
        *,
        count: int = 2,
        journal: Callable[[InMemoryStore], Any] | None = GraphStore,
        **options: Any,
    ) -> None:
        self.shop = Shop()
        self.shop.tools = make_tools(self.shop)
        self.model = ScriptedChatModel(script=script)
        self.checkpointer = InMemorySaver()
        self.store = InMemoryStore()
        self.guards: list[Guard] = []
        self.middlewares: list[AgentGuardMiddleware] = []
        self.agents: list[Any] = []
        for _ in range(count):
            guard = make_guard(store=journal(self.store)) if journal is not None else make_guard()
            middleware = AgentGuardMiddleware(guard, **options)
            self.guards.append(guard)
            self.middlewares.append(middleware)
            self.agents.append(
                create_agent(
                    self.model,
                    tools=self.shop.tools,
                    middleware=[middleware],
                    checkpointer=self.checkpointer,
                    store=self.store,
                )
            )

    def held(self) -> list[Any]:
        return self.store.search((StoredResult.NAMESPACE,))


# -- one thread, alternate runs on two workers ----------------------------------------------------------


def test_alternate_runs_on_two_workers_continue_one_engagement() -> None:
    w = Workers(
        [calls(A), answer("A-1 shipped"), calls(B), answer("sent"), calls(A), answer("still shipped")]
    )
    for run, worker in enumerate([0, 1, 0]):
        w.agents[worker].invoke(user_says(f"order {run + 1}?"), config(), context={"user_id": "u-1"})
    first, second = (m.engagement_for("t1") for m in w.middlewares)
    assert first is not None
    assert second is not None
    assert first.id == second.id == "t1"
    assert first.view()["history"]["_total"] == 3  # worker 0 saw worker 1's call before its third run
    assert first.view()["history"]["_list"] == ["lookup-order", "send-email", "lookup-order"]
    second.refresh()
    assert second.view()["history"]["_total"] == 3
    snapshot = GraphStore(w.store).load("t1")
    assert snapshot is not None
    assert snapshot.total == 3
    assert w.shop.runs == {"lookup_order": 2, "send_email": 1}
    # Each worker put only its own runs' new user message through the input guardrail.
    assert len([s for s in second.steps if s.name == "user"]) == 1
    assert len([s for s in first.steps if s.name == "user"]) == 2
    assert first.user is not None
    assert second.user == first.user


def _loop(workers: int) -> tuple[int | None, dict[str, int], Workers]:
    """Runs of one tool call each, alternating between the workers, on one thread: the block [A, B] three
    times is a loop (short_circuit 3). Returns the run that was stopped and what really ran."""
    script: list[Any] = []
    for call in [A, B] * 4:
        script += [calls(call), answer("done")]
    w = Workers(script, count=workers)
    for run in range(8):
        try:
            w.agents[run % workers].invoke(user_says(f"again {run}"), config())
        except ShortCircuitViolation:
            return run, dict(w.shop.runs), w
    return None, dict(w.shop.runs), w


def test_a_loop_spanning_two_workers_is_stopped_at_the_same_call_as_on_one() -> None:
    one_run, one_ran, _ = _loop(1)
    two_run, two_ran, w = _loop(2)
    assert one_run == 5  # the sixth call never ran
    assert (two_run, two_ran) == (one_run, one_ran) == (5, {"lookup_order": 3, "send_email": 2})
    # The stop is in the shared record: the other worker refuses the thread's next run at once.
    received = len(w.model.received)
    with pytest.raises(ShortCircuitViolation):
        w.agents[0].invoke(user_says("still there?"), config())
    assert len(w.model.received) == received
    eng = w.middlewares[0].engagement_for("t1")
    assert eng is not None
    assert eng.status is EngagementStatus.STOPPED


async def test_async_runs_on_two_workers_continue_one_engagement() -> None:
    w = Workers([calls(A), answer("one"), calls(B), answer("two"), calls(A), answer("three")])
    for run in range(3):
        await w.agents[run % 2].ainvoke(user_says(f"run {run}"), config())
    eng = w.middlewares[0].engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["lookup-order", "send-email", "lookup-order"]


def test_evicting_a_shared_engagement_releases_it_without_closing_it() -> None:
    w = Workers([], count=1, max_engagements=1)
    w.model.reset([calls(A), answer("a"), answer("b"), calls(A), answer("a again")])
    w.agents[0].invoke(user_says("hi"), config("a"))
    first = w.middlewares[0].engagement_for("a")
    w.agents[0].invoke(user_says("hi"), config("b"))  # evicts thread a's engagement from memory
    assert w.middlewares[0].engagement_for("a") is None
    assert first is not None
    assert first.status is EngagementStatus.ACTIVE  # released, not closed
    snapshot = GraphStore(w.store).load("a")
    assert snapshot is not None
    assert all(not event.startswith('["s"') for event in snapshot.events)  # no stop event for the others
    w.agents[0].invoke(user_says("again"), config("a"))  # continued from the store
    again = w.middlewares[0].engagement_for("a")
    assert again is not None
    assert again.view()["history"]["_total"] == 2


# -- a review paused on one worker and resumed on the other ------------------------------------------------


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_an_output_review_paused_on_one_worker_is_resumed_on_the_other_once(decision: str) -> None:
    w = Workers([calls(("export_data", {"table": "orders"})), answer("Done.")])
    first = w.agents[0].invoke(user_says("export"), config())
    ((pending,),) = [first["__interrupt__"]]
    assert pending.value["agentguard"]["phase"] == "output"
    assert w.shop.runs["export_data"] == 1
    assert len(w.held()) == 1

    done = w.agents[1].invoke(Command(resume=APPROVE if decision == "approve" else REJECT), config())
    assert w.shop.runs["export_data"] == 1  # the record said it was paused: not run again
    (message,) = tool_messages(done)
    if decision == "approve":
        assert message.status == "success"
        assert "orders-row-1" in message.content
        assert message.name == "export_data"
    else:
        assert message.status == "error"
        assert "orders-row" not in message.content
    assert w.held() == []  # the graph store's copy is gone once the call is over
    # The paused call's output was held in the journal for the resume; once resumed it leaves: a refused
    # output is nowhere in the store (the old code left it in the p event), an approved one is the call's.
    journal = repr([item.value for item in w.store.search(("agentguard",), limit=10_000)])
    assert ("orders-row" in journal) == (decision == "approve")
    eng = w.middlewares[1].engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_total"] == 1  # one call, in one record
    # The worker that paused it cannot resume it a second time.
    snapshot = GraphStore(w.store).load("t1")
    assert snapshot is not None
    assert any(event.startswith('["u"') for event in snapshot.events)


async def test_an_async_output_review_resumed_on_the_other_worker_runs_once() -> None:
    w = Workers([calls(("wire_money", {"to": "ACME", "amount": 10})), answer("Wired.")])
    first = await w.agents[0].ainvoke(user_says("wire 10 to ACME"), config())
    assert first["__interrupt__"][0].value["agentguard"]["phase"] == "input"
    middle = await w.agents[1].ainvoke(Command(resume=APPROVE), config())
    assert middle["__interrupt__"][0].value["agentguard"]["phase"] == "output"
    done = await w.agents[0].ainvoke(Command(resume=APPROVE), config())
    assert w.shop.runs["wire_money"] == 1
    (message,) = tool_messages(done)
    assert message.status == "success"
    assert "W-1" in message.content
    assert w.held() == []


# -- GraphStore: the journal contract ------------------------------------------------------------------


class Face:
    """One face for both halves of the store: "sync" calls the methods, "async" runs their twins."""

    def __init__(self, store: GraphStore, mode: str) -> None:
        self.store = store
        self.mode = mode

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return getattr(self.store, name)(*args, **kwargs)
        coroutine: Coroutine[Any, Any, Any] = getattr(self.store, "a" + name)(*args, **kwargs)
        return asyncio.run(coroutine)


@pytest.fixture(params=["sync", "async"])
def make(request: pytest.FixtureRequest) -> Callable[..., Face]:
    backing = InMemoryStore()

    def build(**settings: Any) -> Face:
        return Face(GraphStore(settings.pop("store", backing), **settings), str(request.param))

    return build


def test_graph_store_is_a_journal() -> None:
    store = GraphStore(InMemoryStore())
    assert isinstance(store, Journal)
    assert store.on_failure == "deny"
    assert "InMemoryStore" in repr(store)
    for bad in ({"on_failure": "maybe"}, {"max_events": 0}, {"prefix": "a.b"}, {"prefix": "langgraph"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GraphStore(InMemoryStore(), **bad)
    with pytest.raises(TypeError):
        GraphStore(object())  # type: ignore[arg-type]


def test_open_creates_once_and_keeps_the_first_meta(make: Callable[..., Face]) -> None:
    journal = make()
    meta = {"agent": "a", "at": datetime(2024, 5, 1, 12, tzinfo=UTC), "raw": b"\x00\xff"}
    v = journal("open", "e1", meta).version  # the life's first version: a random multiple of 10**15
    assert journal("load", "e1") == Snapshot(meta=meta, version=v, total=0, events=[])
    assert v % LIFE == 0
    assert v >= LIFE
    journal("append", "e1", v, [ev("b", "t", "tool")], 1, exclusive=False)
    again = journal("open", "e1", {"agent": "other"})
    assert (dict(again.meta), again.version, again.total, list(again.events)) == (
        meta,
        v + 1,
        1,
        [ev("b", "t", "tool")],
    )
    assert journal("load", "e1") == again
    assert journal("load", "nobody") is None


def test_exclusive_append_conflict_returns_the_missed_events(make: Callable[..., Face]) -> None:
    one, two = make(), make()
    v = one("open", "e", {}).version
    assert one("append", "e", v, [ev("a", "x"), ev("a", "y")], 2, exclusive=True) == Appended(
        ok=True, version=v + 2, total=2, missed=[]
    )
    refused = two("append", "e", v, [ev("b", 1)], 1, exclusive=True)
    assert refused == Appended(ok=False, version=v + 2, total=2, missed=[ev("a", "x"), ev("a", "y")])
    retried = two("append", "e", v + 2, [ev("b", 1)], 1, exclusive=True)
    assert retried == Appended(ok=True, version=v + 3, total=3, missed=[])
    late = one("append", "e", v + 2, [ev("a", "z")], 0, exclusive=False)  # not exclusive: after the others
    assert late == Appended(ok=True, version=v + 4, total=3, missed=[ev("b", 1)])
    many = one("append", "e", v, [], 0, exclusive=False)  # more missed than one read ahead covers
    assert list(many.missed) == [ev("a", "x"), ev("a", "y"), ev("b", 1), ev("a", "z")]
    for n in range(20):
        one("append", "e", v + 4 + n, [ev("n", n)], 0, exclusive=False)
    assert len(one("append", "e", v + 1, [], 0, exclusive=False).missed) == 23


def test_versions_and_total_stay_exact_beyond_the_cap(make: Callable[..., Face]) -> None:
    journal = make(max_events=5)
    v = journal("open", "e", {}).version
    for n in range(1, 21):
        assert journal("append", "e", v + n - 1, [ev("a", n)], 2, exclusive=False).version == v + n
    snapshot = journal("load", "e")
    assert (snapshot.version, snapshot.total) == (v + 20, 40)
    assert list(snapshot.events) == [ev("a", n) for n in range(16, 21)]
    missed = journal("append", "e", v + 15, [], 0, exclusive=False).missed
    assert missed == [ev("a", n) for n in range(16, 21)]
    # A gap: the answer is the record itself, read under the same lock (nothing is kept for a later load).
    gap = journal("append", "e", v + 14, [ev("a", 21)], 1, exclusive=False)
    record = Snapshot(meta={}, version=v + 21, total=41, events=[ev("a", n) for n in range(17, 22)])
    assert gap == Appended(ok=True, version=v + 21, total=41, reloaded=record)
    refused = journal("append", "e", v + 3, [ev("a", 22)], 1, exclusive=True)
    assert refused == Appended(ok=False, version=v + 21, total=41, reloaded=record)
    ahead = journal("append", "e", v + 99, [], 0, exclusive=False)
    assert (ahead.gap, list(ahead.missed), ahead.version, ahead.reloaded) == (False, [], v + 21, record)
    big = journal("append", "e", v + 21, [ev("b", n) for n in range(12)], 12, exclusive=True)
    assert (big.version, big.total) == (v + 33, 53)
    assert list(journal("load", "e").events) == [ev("b", n) for n in range(7, 12)]
    # the store keeps only the newest five events: the trimmed ones are deleted
    kept = journal.store.store.search(("agentguard", "e", "log"), limit=100)
    assert sorted(item.key for item in kept) == [f"{v:016d}" for v in range(29, 34)]


def test_a_resumed_reviews_held_output_leaves_the_log(make: Callable[..., Face]) -> None:
    journal = make(max_events=8)
    v = journal("open", "e", {}).version
    begun = ev("b", "t1", "export", "tool", "call-1", {}, 1.0)
    held = ev("p", "t1", "call-1", {"rows": "secret-rows"}, {})
    other = ev("p", "t2", "call-2", {"rows": "still held"}, {})
    journal("append", "e", v, [begun, held, held, other], 1, exclusive=False)  # held sent twice
    ended = [ev("u", "call-1"), ev("c", "t1", None, "withheld", "the reviewer refused")]
    journal("append", "e", v + 4, ended, 0, exclusive=False)
    # The old code left both p events as they were: the refused output readable in the store.
    scrubbed = [begun, ev("x"), ev("x"), other, *ended]
    assert list(journal("load", "e").events) == scrubbed
    stored = repr([item.value for item in journal.store.store.search(("agentguard",), limit=100)])
    assert "secret-rows" not in stored
    assert "still held" in stored
    # Resumed in the same append as its pause, or after its pause was trimmed: nothing left either.
    journal("append", "e", v + 6, [ev("p", "t3", "c3", "secret-3", {}), ev("u", "c3")], 0, exclusive=False)
    assert list(journal("load", "e").events)[-2:] == [ev("x"), ev("u", "c3")]
    journal("append", "e", v + 8, [ev("p", "t4", "c4", "secret-4", {})], 0, exclusive=False)
    journal("append", "e", v + 9, [ev("a", n) for n in range(8)], 0, exclusive=False)
    journal("append", "e", v + 17, [ev("u", "c4"), ev("u", "never-paused")], 0, exclusive=False)
    stored = repr([item.value for item in journal.store.store.search(("agentguard",), limit=100)])
    assert "secret" not in stored
    meta = journal.store.store.get(("agentguard", "e"), "meta")
    assert meta is not None
    assert "held" not in meta.value  # call-2's p was trimmed: it holds nothing any more


def test_claim_is_won_once_and_append_to_a_missing_engagement_is_a_key_error(
    make: Callable[..., Face],
) -> None:
    journal = make()
    v = journal("open", "e", {}).version
    other = journal("open", "other", {}).version
    assert journal("claim", "e", "resume:c1", "w1", since=v) == "w1"
    assert journal("claim", "e", "resume:c1", "w2", since=v) == "w1"
    assert journal("claim", "e", "resume:c2", "w2", since=v) == "w2"
    assert journal("claim", "other", "resume:c1", "w3", since=other) == "w3"  # per engagement
    with pytest.raises(KeyError, match="never-opened"):
        journal("append", "never-opened", v, [ev("a", 1)], 0, exclusive=False)
    with pytest.raises(ValueError, match="since"):
        journal("append", "e", -1, [], 0, exclusive=False)


def test_opening_anew_drops_the_claims_an_earlier_engagement_left(make: Callable[..., Face]) -> None:
    journal = make()
    v = journal("open", "e", {"first": 1}).version
    journal("claim", "e", "k", "old-owner", since=v)
    journal.store.store.delete(("agentguard", "e"), "meta")  # expired, or deleted
    assert journal("load", "e") is None
    again = journal("open", "e", {"second": 2})
    assert (dict(again.meta), again.total, list(again.events)) == ({"second": 2}, 0, [])
    assert journal("claim", "e", "k", "new-owner", since=again.version) == "new-owner"


def test_no_id_reaches_another_engagements_items(make: Callable[..., Face]) -> None:
    journal = make()
    ids = ["", "%", ".", "a.b", "a%2Eb", "a%252Eb", "a/b", "\x00", "\ud800", "ünï", "x" * 2000]
    for index, engagement_id in enumerate(ids):
        v = journal("open", engagement_id, {"i": index}).version
        journal("append", engagement_id, v, [ev("a", index)], index, exclusive=True)
    for index, engagement_id in enumerate(ids):
        snapshot = journal("load", engagement_id)
        assert (dict(snapshot.meta), snapshot.total, list(snapshot.events)) == (
            {"i": index},
            index,
            [ev("a", index)],
        )


class Broken(InMemoryStore):
    """A store that fails every batch (a database that went away)."""

    def batch(self, ops: Any) -> list[Result]:
        raise ConnectionError("connection refused")

    async def abatch(self, ops: Any) -> list[Result]:
        raise ConnectionError("connection refused")


def test_store_failures_and_foreign_items_are_store_unavailable(make: Callable[..., Face]) -> None:
    broken = make(store=Broken())
    for name, args in [
        ("open", ("e", {})),
        ("load", ("e",)),
        ("append", ("e", 0, [], 0)),
        ("claim", ("e", "k", "w")),
    ]:
        kwargs = {"exclusive": False} if name == "append" else {"since": 0} if name == "claim" else {}
        with pytest.raises(
            StoreUnavailable, match=f"Broken: {name} of engagement 'e' failed: ConnectionError"
        ):
            broken(name, *args, **kwargs)
    journal = make()
    journal.store.store.put(("agentguard", "x"), "meta", {"something": "else"})
    with pytest.raises(StoreUnavailable, match="not a journal's item"):
        journal("load", "x")
    v = journal("open", "y", {}).version
    journal("append", "y", v, [ev("a", 1), ev("a", 2)], 0, exclusive=False)
    journal.store.store.delete(("agentguard", "y", "log"), f"{2:016d}")  # the newest event is gone
    with pytest.raises(StoreUnavailable, match="newest event"):
        journal("load", "y")
    journal.store.store.delete(("agentguard", "y", "log"), f"{1:016d}")
    journal("append", "y", v + 1, [ev("a", 3)], 0, exclusive=False)  # version 2 missed, and gone: a gap
    reloaded = journal("append", "y", v + 1, [], 0, exclusive=False).reloaded
    assert reloaded is not None
    assert list(reloaded.events) == [ev("a", 3)]  # rebuilt from the events left (version 2 counts as trimmed)


def test_racing_threads_through_two_graph_stores_lose_nothing() -> None:
    backing = InMemoryStore()
    stores = [GraphStore(backing), GraphStore(backing)]
    v = stores[0].open("race", {}).version
    barrier = threading.Barrier(8)
    won: list[int] = []

    def worker(index: int) -> None:
        store = stores[index % 2]
        seen = v
        barrier.wait()
        for attempt in range(10):
            while True:
                answer = store.append("race", seen, [ev("w", index, attempt)], 1, exclusive=True)
                seen = answer.version
                if answer.ok:
                    won.append(answer.version)
                    break

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    snapshot = stores[1].load("race")
    assert snapshot is not None
    assert (snapshot.version - v, snapshot.total, len(snapshot.events)) == (80, 80, 80)
    assert sorted(won) == list(range(v + 1, v + 81))  # every version won by exactly one append


async def test_async_tasks_and_a_thread_share_the_lock() -> None:
    store = GraphStore(InMemoryStore())
    v = (await store.aopen("e", {})).version

    async def appender(index: int) -> None:
        seen = v
        while not (answer := await store.aappend("e", seen, [ev("t", index)], 1, exclusive=True)).ok:
            seen = answer.version

    thread = threading.Thread(
        target=lambda: [store.append("e", v, [ev("s", n)], 1, exclusive=False) for n in range(20)]
    )
    thread.start()
    await asyncio.gather(*(appender(i) for i in range(10)))
    thread.join(10)
    snapshot = await store.aload("e")
    assert snapshot is not None
    assert (snapshot.version - v, snapshot.total) == (30, 30)


# -- agentguard's RedisStore behind the same two graphs --------------------------------------------------


def test_two_workers_with_a_redis_store_continue_one_engagement(redis_url: str) -> None:
    stores: list[RedisStore] = []

    def journal(_: BaseStore) -> RedisStore:
        stores.append(RedisStore(redis_url, prefix="lc-test"))
        return stores[-1]

    try:
        w = Workers([calls(("export_data", {"table": "orders"})), answer("Done.")], journal=journal)
        w.agents[0].invoke(user_says("export"), config("redis-t"))
        done = w.agents[1].invoke(Command(resume=APPROVE), config("redis-t"))
        assert w.shop.runs["export_data"] == 1
        assert tool_messages(done)[0].status == "success"
        assert w.held() == []
        snapshot = stores[0].load("redis-t")
        assert snapshot is not None
        assert snapshot.total == 1
    finally:
        for store in stores:
            store.close()


# -- appends whose answer was lost, sent again (tests/stores/resent.py: RedisStore is held to the same) -------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_graph_store_counts_an_append_sent_again_once(scenario: Callable[[Journal, str], None]) -> None:
    scenario(GraphStore(InMemoryStore()), "resent")


def test_graph_store_holds_a_count_assertion_across_workers_when_a_take_back_answer_is_lost() -> None:
    def stores() -> tuple[GraphStore, GraphStore]:
        shared = InMemoryStore()
        return GraphStore(shared), GraphStore(shared)

    count_assertion_holds_across_workers(stores)


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_graph_store_counts_any_sequence_of_lost_and_resent_appends_once(
    steps: list[tuple[int, str, bool, int | None]],
) -> None:
    replay(GraphStore(InMemoryStore()), "random", steps)
