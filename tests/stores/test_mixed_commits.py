"""One record's sync and async commits take turns: ``guard.call`` in a worker thread and ``guard.acall`` on the
event loop may share an engagement (a sync tool run in a thread by an async host, calling a guarded tool).

Each commit appends a prefix of the outbox and, when the answer comes, takes that many events off its front.
Two commits in flight at once sent the same prefix twice and took it off twice: the second took off events that
were never sent, and the store never had them. A commit that cannot take the lock in time (its holder is stuck,
or waits for this very thread), or a sync commit on the event loop's thread while an async one waits there, is
refused (``CommitBusy``), whatever ``on_failure`` says; an async waiter is not starved by busy threads. Against a
real redis-server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest

from agentguard import Guard, StoreDenied, StoreUnavailable
from agentguard.pipeline._driver import _acommit, _commit
from agentguard.pipeline._effects import Commit
from agentguard.record import CommitBusy, EngagementState, decode_event
from agentguard.stores import RedisStore
from tests.conftest import spec_text
from tests.stores.workers import USER


class Held(RedisStore):
    """A store whose next async append waits for ``release`` before it reaches the server (``sent`` says it is
    in flight)."""

    commit_wait_seconds: float | None = None
    """How long a commit waits for another of its engagement (read by the pipeline; see decision 36)."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.sent = threading.Event()
        self.release = threading.Event()
        self.hold = True

    async def _arun(self, operation: str, engagement_id: str, script: int, args: Any) -> Any:
        if operation == "append" and self.hold:
            self.hold = False
            self.sent.set()
            await asyncio.to_thread(self.release.wait, 10)
        return await super()._arun(operation, engagement_id, script, args)


def attempts(store: RedisStore) -> list[str]:
    """The attempts the store holds (``a`` events), in order."""
    return [event[1] for event in map(decode_event, store.load("e").events) if event[0] == "a"]


def test_a_sync_commit_in_another_thread_waits_for_the_async_one_in_flight(redis_url: str) -> None:
    store = Held(redis_url)
    try:
        state = EngagementState.shared("e", store.open("e", {}), store)
        state.attempted("y")

        def sync_commit() -> None:
            state.attempted("z")
            assert _commit(Commit(state, exclusive=False))

        async def main() -> threading.Thread:
            task = asyncio.ensure_future(_acommit(Commit(state, exclusive=False)))
            assert await asyncio.to_thread(store.sent.wait, 10)  # the async append of [y] is in flight
            thread = threading.Thread(target=sync_commit)
            thread.start()
            await asyncio.to_thread(thread.join, 0.5)
            assert thread.is_alive()  # it waits for the async commit's answer
            state.attempted("w")  # recorded meanwhile: the async answer must not take it off unsent
            store.release.set()
            assert await task
            return thread

        thread = asyncio.run(main())
        thread.join(10)
        assert not thread.is_alive()
        assert _commit(Commit(state, exclusive=False))
        assert attempts(store) == ["y", "z", "w"]
        assert state.waiting() == 0
    finally:
        store.release.set()
        store.close()


def test_a_sync_commit_on_the_loop_thread_during_an_async_one_is_a_failed_round_trip(redis_url: str) -> None:
    store = Held(redis_url)
    try:
        state = EngagementState.shared("e", store.open("e", {}), store)
        state.attempted("y")

        async def main() -> None:
            task = asyncio.ensure_future(_acommit(Commit(state, exclusive=False)))
            assert await asyncio.to_thread(store.sent.wait, 10)
            state.attempted("z")
            with pytest.raises(StoreUnavailable, match="event loop"):
                _commit(Commit(state, exclusive=False))  # would wait for a task this thread must run
            store.release.set()
            assert await task

        asyncio.run(main())
        assert _commit(Commit(state, exclusive=False))
        assert attempts(store) == ["y", "z"]
        assert state.waiting() == 0
    finally:
        store.release.set()
        store.close()


SPEC = spec_text(
    """
    capabilities:
      fetch:
      lookup:
    """
)


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_a_guarded_sync_call_on_the_loop_thread_is_refused_and_loses_nothing(
    redis_url: str, on_failure: str
) -> None:
    """Through the public API: an async call's commit waits for its answer while a sync tool, called on the
    loop's thread, makes a guarded call of the same engagement. It is refused (recorded), its tool never run,
    under ``on_failure="allow"`` too: the store was not asked, and carrying on would run a call no
    compare-and-set checked. The async call and everything recorded reach the store."""
    store = Held(redis_url, on_failure=on_failure)
    try:
        guard = Guard.from_yaml(SPEC, store=store, telemetry=False)
        ran: list[str] = []
        guard.tool(name="lookup")(lambda q: ran.append(q) or "ok")

        async def fetch(q: str) -> str:
            return "ok"

        guard.tool(name="fetch")(fetch)
        engagement = guard.engagement(USER, engagement_id="e")

        async def main() -> None:
            with engagement.activate():
                task = asyncio.ensure_future(guard.acall("fetch", {"q": "a"}))
                assert await asyncio.to_thread(store.sent.wait, 10)
                with pytest.raises(StoreDenied, match="event loop"):
                    guard.call("lookup", {"q": "s"})
                store.release.set()
                assert await task == "ok"

        asyncio.run(main())
        engagement.close()
        assert ran == []
        again = Guard.from_yaml(SPEC, store=RedisStore(redis_url), telemetry=False).engagement(
            USER, engagement_id="e"
        )
        assert again.view()["history"]["_list"] == ["fetch"]
        assert "lookup" in again.state.attempts(5)
    finally:
        store.release.set()
        store.close()


def test_a_sync_commit_waiting_for_an_async_one_the_blocked_loop_must_finish_is_refused_in_time(
    redis_url: str,
) -> None:
    """Code on the loop's thread hands a guarded step to a thread pool and waits (blocking the loop) while an
    async commit of the engagement waits there for Redis: the thread's sync commit cannot take the lock until
    the loop runs again. It waits ``commit_wait_seconds`` (by default four of the store's round trips,
    ``timeout_seconds``), then is refused (``CommitBusy``), never held for ever."""
    store = Held(redis_url)
    store.commit_wait_seconds = 1.0  # the store's own round trips keep their 2 s
    store.release.set()  # the async append only goes slowly, through a worker thread
    try:
        state = EngagementState.shared("e", store.open("e", {}), store)
        state.attempted("y")

        def sync_commit() -> bool:
            state.attempted("z")
            return _commit(Commit(state, exclusive=False))

        async def main() -> None:
            task = asyncio.ensure_future(_acommit(Commit(state, exclusive=False)))
            assert await asyncio.to_thread(store.sent.wait, 10)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                future = pool.submit(sync_commit)
                with pytest.raises(CommitBusy, match="held the commit lock for 1 s"):
                    future.result(timeout=10)  # the loop is blocked here all along
                assert time.monotonic() - started < 5
            assert await task

        asyncio.run(main())
        assert _commit(Commit(state, exclusive=False))
        assert attempts(store) == ["y", "z"]
    finally:
        store.close()


def test_an_async_commit_is_not_starved_by_threads_committing_back_to_back(redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        state = EngagementState.shared("e", store.open("e", {}), store)
        stop = threading.Event()

        def worker(i: int) -> None:
            while not stop.is_set():
                state.attempted(f"t{i}")
                _commit(Commit(state, exclusive=False))

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
        for thread in threads:
            thread.start()

        async def main() -> list[float]:
            waits = []
            for _ in range(5):
                state.attempted("async")
                started = time.monotonic()
                assert await asyncio.wait_for(_acommit(Commit(state, exclusive=False)), 5)
                waits.append(time.monotonic() - started)
            return waits

        try:
            waits = asyncio.run(main())
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
        assert max(waits) < 2, waits
        assert "async" in attempts(store)
    finally:
        store.close()


def test_an_async_commit_cancelled_while_it_waits_for_the_lock_does_not_keep_it(redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        state = EngagementState.shared("e", store.open("e", {}), store)
        state.attempted("y")

        async def main() -> None:
            state.commit_lock.acquire()  # a sync commit of another thread holds it
            task = asyncio.ensure_future(_acommit(Commit(state, exclusive=False)))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            state.commit_lock.release()  # the waiting worker thread takes it now, and lets it go
            await asyncio.sleep(0.1)

        asyncio.run(main())
        assert state.commit_lock.acquire(timeout=2)
        state.commit_lock.release()
        assert _commit(Commit(state, exclusive=False))
        assert attempts(store) == ["y"]
    finally:
        store.close()


COUNTED = spec_text(
    """
    capabilities:
      fetch:
      lookup:
        input_restriction:
          assertion: history._total < 3
    """
)


def test_a_call_in_a_thread_after_an_acall_is_not_let_through_unchecked_under_allow(redis_url: str) -> None:
    """An ``acall`` posts its end on its loop; a ``call`` of the engagement in a worker thread cannot read that
    answer there. That is no store down: under ``on_failure="allow"`` the call ran with no compare-and-set,
    past a count assertion another worker had used up (found in review; known limit: it is denied)."""
    ran: list[str] = []

    def worker() -> Guard:
        guard = Guard.from_yaml(COUNTED, store=RedisStore(redis_url, on_failure="allow"), telemetry=False)
        guard.tool(name="lookup")(lambda q: ran.append(q) or q)

        async def fetch(q: str) -> str:
            return q

        guard.tool(name="fetch")(fetch)
        return guard

    a, b = worker(), worker()
    ea, eb = a.engagement(USER, engagement_id="e"), b.engagement(USER, engagement_id="e")

    def in_a_thread() -> None:
        with ea.activate(), pytest.raises(StoreDenied, match="event loop"):
            a.call("lookup", {"q": "3"})

    async def main() -> None:
        with ea.activate():
            await a.acall("fetch", {"q": "1"})  # its end posted on this loop
        with eb.activate():
            b.call("lookup", {"q": "2"})  # worker B: history._total 2 in the store
        await asyncio.to_thread(in_a_thread)

    asyncio.run(main())
    assert ran == ["2"]
