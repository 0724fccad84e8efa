"""Engagements are isolated per thread and per asyncio task (contextvars)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from agentguard import Guard, User
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      record:
        input_restriction:
          assertion: recent["record"].inputs.owner == user.id
    lifespan:
      short_circuit: 1000
    """
)


def test_a_thousand_concurrent_async_engagements_never_see_each_other() -> None:
    guard = Guard.from_yaml(SPEC)

    @guard.tool
    async def record(owner: str, n: int) -> int:
        await asyncio.sleep(0)  # yield to the other engagements between check and completion
        return n

    async def one(i: int) -> list[int]:
        user = f"user-{i}"
        async with guard.engagement(user=User(id=user)) as eng:
            for n in range(3):
                await record(owner=user, n=n)
            history = eng.view()["history"]
            assert history["_total"] == 3
            assert {e["inputs"]["owner"] for e in history["record"]} == {user}
            return [e["outputs"] for e in history["record"]]

    async def main() -> list[list[int]]:
        return await asyncio.gather(*(one(i) for i in range(1000)))

    assert asyncio.run(main()) == [[0, 1, 2]] * 1000


def test_engagements_in_threads_are_isolated() -> None:
    guard = Guard.from_yaml(SPEC)
    barrier = threading.Barrier(8)

    @guard.tool
    def record(owner: str, n: int) -> int:
        return n

    def one(i: int) -> tuple[int, set[str]]:
        user = f"user-{i}"
        with guard.engagement(user=User(id=user)) as eng:
            barrier.wait(timeout=10) if i < 8 else None
            for n in range(50):
                record(owner=user, n=n)
            history = eng.view()["history"]
            return history["_total"], {e["inputs"]["owner"] for e in history["record"]}

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(200)))
    assert results == [(50, {f"user-{i}"}) for i in range(200)]
    assert guard.current_engagement() is None


def test_parallel_calls_within_one_engagement_are_all_recorded() -> None:
    guard = Guard.from_yaml(SPEC)

    @guard.tool
    def record(owner: str, n: int) -> int:
        return n

    with guard.engagement(user=User(id="u")) as eng:
        engagement = guard.current_engagement()
        assert engagement is eng

        def call(n: int) -> int:
            with eng:  # the host's worker thread enters the same engagement
                return record(owner="u", n=n)

        with ThreadPoolExecutor(max_workers=4) as pool:
            assert sorted(pool.map(call, range(100))) == list(range(100))
        assert eng.view()["history"]["_total"] == 100
