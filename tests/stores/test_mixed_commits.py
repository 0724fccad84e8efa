"""One record's sync and async commits take turns: ``guard.call`` in a worker thread and ``guard.acall`` on the
event loop may share an engagement (a sync tool run in a thread by an async host, calling a guarded tool).

Each commit appends a prefix of the outbox and, when the answer comes, takes that many events off its front.
Two commits in flight at once sent the same prefix twice and took it off twice: the second took off events that
were never sent, and the store never had them. A sync commit on the event loop's own thread, while an async
commit of the record waits there for its answer, could only wait forever: it is a failed store round trip
instead (``StoreUnavailable``, under the store's ``on_failure``), against a real redis-server.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentguard import Guard, StoreDenied, StoreUnavailable
from agentguard.pipeline._driver import _acommit, _commit
from agentguard.pipeline._effects import Commit
from agentguard.record import EngagementState, decode_event
from agentguard.stores import RedisStore
from tests.conftest import spec_text
from tests.stores.workers import USER


class Held(RedisStore):
    """A store whose next async append waits for ``release`` before it reaches the server (``sent`` says it is
    in flight)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
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


def test_a_guarded_sync_call_on_the_loop_thread_follows_on_failure_and_loses_nothing(redis_url: str) -> None:
    """Through the public API: an async call's commit waits for its answer while a sync tool, called on the
    loop's thread, makes a guarded call of the same engagement. Under ``on_failure="deny"`` it is refused
    (recorded), its tool never run; the async call and everything recorded reach the store."""
    store = Held(redis_url)
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


def test_async_calls_of_one_engagement_on_two_event_loops_take_turns(redis_url: str) -> None:
    """Two threads, each with its own event loop, call one engagement: the second commit waits for the
    first's answer, whichever loop made it (an ``asyncio.Lock`` serves one loop only)."""
    store = Held(redis_url)
    try:
        guard = Guard.from_yaml(SPEC, store=store, telemetry=False)

        async def fetch(q: str) -> str:
            return q

        guard.tool(name="fetch")(fetch)
        engagement = guard.engagement(USER, engagement_id="e")
        results: list[object] = []

        def on_its_own_loop(q: str) -> None:
            async def one() -> object:
                with engagement.activate():
                    return await guard.acall("fetch", {"q": q})

            try:
                results.append(asyncio.run(one()))
            except BaseException as exc:  # the test reports it
                results.append(exc)

        first = threading.Thread(target=on_its_own_loop, args=("first",))
        first.start()
        assert store.sent.wait(10)  # the first loop's append is in flight
        second = threading.Thread(target=on_its_own_loop, args=("second",))
        second.start()
        second.join(0.5)
        assert second.is_alive()  # waits for the first loop's commit
        store.release.set()
        first.join(10)
        second.join(10)
        assert not first.is_alive()
        assert not second.is_alive()
        assert results == ["first", "second"]
        again = Guard.from_yaml(SPEC, store=RedisStore(redis_url), telemetry=False).engagement(
            USER, engagement_id="e"
        )
        assert again.view()["history"]["fetch"] == [
            {"inputs": {"q": "first"}, "outputs": "first"},
            {"inputs": {"q": "second"}, "outputs": "second"},
        ]
    finally:
        store.release.set()
        store.close()
