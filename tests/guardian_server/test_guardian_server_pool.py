"""The pool that decides requests off the event loop: results, errors, context, and many at once."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from agentguard.guardian.server._pool import DecisionPool

CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="none")


def _work(value: int) -> tuple[int, str, str]:
    if value < 0:
        raise ValueError("negative")
    return value * 2, CURRENT.get(), threading.current_thread().name


async def test_results_errors_and_the_callers_context_cross_to_the_pool_threads() -> None:
    pool = DecisionPool(_work, 2)
    CURRENT.set("request-7")
    try:
        doubled, context, thread = await pool.run(21)
        assert (doubled, context) == (42, "request-7")
        assert thread.startswith("agentguard-rules-")
        with pytest.raises(ValueError, match="negative"):
            await pool.run(-1)
        answers = await asyncio.gather(*(pool.run(n) for n in range(500)))
        assert [answer[0] for answer in answers] == [n * 2 for n in range(500)]
        assert {answer[2] for answer in answers} <= {"agentguard-rules-0", "agentguard-rules-1"}
        assert threading.current_thread().name not in {answer[2] for answer in answers}
    finally:
        pool.shutdown()


async def test_a_cancelled_request_does_not_break_the_others() -> None:
    gate = threading.Event()

    def slow(value: int) -> int:
        gate.wait(5)
        return value

    pool = DecisionPool(slow, 1)
    try:
        waiting = asyncio.ensure_future(pool.run(1))
        other = asyncio.ensure_future(pool.run(2))
        await asyncio.sleep(0.05)
        waiting.cancel()
        gate.set()
        assert await other == 2
        assert waiting.cancelled()
    finally:
        pool.shutdown()


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threads"):
        DecisionPool(_work, 0)


async def test_one_worker_decides_while_it_keeps_up_and_another_wakes_when_it_is_held_up() -> None:
    release = threading.Event()

    def work(value: int) -> str:
        if value < 0:
            release.wait(5)
        return threading.current_thread().name

    # A patience of 0.25 s, not the default's 2 ms: a busy machine (CI beside a benchmark) can keep a worker
    # thread unscheduled for some ms, which the pool rightly reads as a worker held up (2 threads answered).
    pool = DecisionPool(work, 3, patience=0.25)
    try:
        assert len({await pool.run(n) for n in range(50)}) == 1  # one thread keeps up with these
        held = asyncio.ensure_future(pool.run(-1))
        await asyncio.sleep(0.01)
        # Queued behind the held-up worker, taken by another within the pool's patience.
        other = await asyncio.wait_for(pool.run(1), 2.0)
        assert not held.done()
        release.set()
        assert await held != other
    finally:
        release.set()
        pool.shutdown()
