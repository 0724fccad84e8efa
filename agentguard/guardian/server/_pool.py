"""A small pool of threads that decide requests off the event loop, answering the loop in batches.

The guardian must not decide on its event loop (a costly rule condition would stall every other client),
but a hop to a worker thread and back is a large share of a cheap decision. ``loop.run_in_executor`` pays
for it on every request: a wake-up of an idle pool thread, and a write to the loop's self-pipe for each
answer. Here a fixed set of threads takes work from one queue, and the answers they finish while the loop
is busy are handed over together, with one wake-up. The caller's ``contextvars`` go with each call.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["DecisionPool"]

_A = TypeVar("_A")
_R = TypeVar("_R")


class _Deliveries:
    """Answers finished on worker threads for one event loop, handed to it in batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = (
            collections.deque()
        )
        self.scheduled = False

    def add(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        """From a worker thread: queue an answer; wake the loop unless a hand-over is already due."""
        self.done.append((future, result, error))
        if not self.scheduled:  # a race only schedules one hand-over too many, never one too few
            self.scheduled = True
            self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:
        """On the loop: settle every queued answer (cleared first, so later answers schedule again)."""
        self.scheduled = False
        while self.done:
            future, result, error = self.done.popleft()
            if future.cancelled():  # the request went away meanwhile
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)


class DecisionPool(Generic[_A, _R]):
    """``threads`` daemon threads running ``function(argument)`` for coroutines of any event loop."""

    def __init__(self, function: Callable[[_A], _R], threads: int) -> None:
        if threads < 1:
            raise ValueError("threads must be positive")
        self._function = function
        self._threads = threads
        self._queue: queue.SimpleQueue[tuple[_Deliveries, asyncio.Future[_R], contextvars.Context, _A] | None]
        self._queue = queue.SimpleQueue()
        self._deliveries: dict[asyncio.AbstractEventLoop, _Deliveries] = {}
        self._lock = threading.Lock()
        self._started = False

    async def run(self, argument: _A) -> _R:
        """``function(argument)`` on a pool thread, in a copy of the caller's context."""
        loop = asyncio.get_running_loop()
        deliveries = self._deliveries.get(loop)
        if deliveries is None:
            deliveries = self._deliveries.setdefault(loop, _Deliveries(loop))
        if not self._started:
            self._start()
        future: asyncio.Future[_R] = loop.create_future()
        self._queue.put((deliveries, future, contextvars.copy_context(), argument))
        return await future

    def shutdown(self) -> None:
        """Let the threads finish the work queued and exit."""
        with self._lock:
            if self._started:
                for _ in range(self._threads):
                    self._queue.put(None)
                self._started = False

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for index in range(self._threads):
                threading.Thread(target=self._work, name=f"agentguard-rules-{index}", daemon=True).start()
            self._started = True

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            deliveries, future, context, argument = item
            try:
                result, error = context.run(self._function, argument), None
            except BaseException as exc:  # handed to the awaiting request, which answers an internal error
                result, error = None, exc
            deliveries.add(future, result, error)
