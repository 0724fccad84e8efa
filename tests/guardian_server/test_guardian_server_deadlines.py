"""The body deadlines one timer keeps for all of a loop's reads: who is cancelled, when, and for what."""

from __future__ import annotations

import asyncio

import pytest

from agentguard.guardian.server._deadlines import Deadlines


async def _read(deadlines: Deadlines, arrives: asyncio.Event) -> str:
    """A body read as the app makes it: "read", "expired", or the cancellation let through."""
    task = asyncio.current_task()
    assert task is not None
    deadlines.start(task)
    try:
        await arrives.wait()
        return "read"
    except asyncio.CancelledError:
        if deadlines.expired(task):
            return "expired"
        raise
    finally:
        deadlines.stop(task)


async def test_only_the_reads_past_their_deadline_are_cancelled_each_in_its_turn() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, 0.2)
    never, soon = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(_read(deadlines, never))
    await asyncio.sleep(0.1)
    second = asyncio.ensure_future(_read(deadlines, never))
    third = asyncio.ensure_future(_read(deadlines, soon))
    await asyncio.sleep(0.05)
    soon.set()
    assert await third == "read"
    started = loop.time()
    assert await first == "expired"
    assert not second.done()  # due 0.1 s later: the timer is armed again for it
    assert await second == "expired"
    assert 0.05 < loop.time() - started < 1.0
    assert (first.cancelling(), second.cancelling()) == (0, 0)  # the deadline's cancellation withdrawn


async def test_a_cancellation_that_is_not_the_deadlines_goes_through() -> None:
    deadlines = Deadlines(asyncio.get_running_loop(), 0.1)
    read = asyncio.ensure_future(_read(deadlines, asyncio.Event()))
    await asyncio.sleep(0.01)
    read.cancel()  # the server shutting down, say
    with pytest.raises(asyncio.CancelledError):
        await read


async def test_a_cancellation_together_with_the_deadlines_goes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop, 60.0)
    read = asyncio.ensure_future(_read(deadlines, asyncio.Event()))
    await asyncio.sleep(0.01)
    deadlines._sweep()  # not due yet: nothing happens
    assert not read.done()
    later = loop.time() + 61.0
    monkeypatch.setattr(loop, "time", lambda: later)
    deadlines._sweep()  # due: cancelled for its deadline, and by someone else in the same turn
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
