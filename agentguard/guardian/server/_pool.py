"""A small pool of threads that decide requests off the event loop, one of them at a time while it keeps up.

The guardian must not decide on its event loop (a costly rule condition would stall every other client),
but a hop to a worker thread and back is a large share of a cheap decision. ``loop.run_in_executor`` pays
for it on every request: a wake-up of an idle pool thread, and a write to the loop's self-pipe for each
answer. Here the answers the workers finish while the loop is busy are handed over together, with one
wake-up, and the caller's ``contextvars`` go with each call.

Only one worker is awake as long as it keeps up: it takes the queued requests one after the other until none
is left, then sleeps, and a request wakes a worker only when none is awake. Every awake thread contends for
the one GIL, and two workers deciding cheap requests side by side cost a busy guardian 10 to 20 µs a request
in handovers, more than they gain. A worker held up by a costly request is noticed by the event loop: when
requests are queued and none has been taken for ``patience`` seconds, another worker is woken, up to
``threads`` of them.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["DecisionPool"]

_A = TypeVar("_A")
_R = TypeVar("_R")


class _Loop:
    """A pool's business with one event loop: the answers finished for it, handed over in batches, and the
    timer that watches the queue move while the loop has requests in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = (
            collections.deque()
        )
        self.scheduled = False
        self.watch: asyncio.TimerHandle | None = None

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


_Item = tuple[_Loop, asyncio.Future[Any], contextvars.Context, Any]


class DecisionPool(Generic[_A, _R]):
    """Up to ``threads`` daemon threads running ``function(argument)`` for coroutines of any event loop."""

    def __init__(self, function: Callable[[_A], _R], threads: int, *, patience: float = 0.002) -> None:
        if threads < 1:
            raise ValueError("threads must be positive")
        self._function = function
        self._threads = threads
        self._patience = patience
        self._queue: collections.deque[_Item] = collections.deque()
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}
        self._lock = threading.Lock()  # guards the four below
        self._awake = 0  # workers taking requests (a worker is counted awake by whoever wakes it)
        self._asleep: list[threading.Lock] = []  # the gate each sleeping worker waits on, latest last
        self._started = False
        self._generation = 0  # the workers of an earlier generation leave once the queue is empty
        self._taken = 0  # requests taken from the queue so far: whether it moves (a lost count is harmless)

    async def run(self, argument: _A) -> _R:
        """``function(argument)`` on a pool thread, in a copy of the caller's context."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops.setdefault(loop, _Loop(loop))
        if not self._started:
            self._start()
        future: asyncio.Future[_R] = loop.create_future()
        self._queue.append((state, future, contextvars.copy_context(), argument))
        self._wake(held_up=False)
        if state.watch is None:
            state.watch = loop.call_later(self._patience, self._check, state, self._taken)
        return await future

    def shutdown(self) -> None:
        """Let the threads finish the work queued and exit."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            self._generation += 1
            asleep, self._asleep = self._asleep, []
            self._awake += len(asleep)
        for gate in asleep:
            gate.release()

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            for index in range(self._threads):
                gate = threading.Lock()
                gate.acquire()
                self._asleep.append(gate)
                threading.Thread(
                    target=self._work,
                    args=(gate, self._generation),
                    name=f"agentguard-rules-{index}",
                    daemon=True,
                ).start()

    def _wake(self, *, held_up: bool) -> None:
        """Wake a sleeping worker if none is awake, or (``held_up``) even if some are, but held up."""
        with self._lock:
            if self._asleep and (held_up or not self._awake):
                self._awake += 1
                self._asleep.pop().release()

    def _check(self, state: _Loop, taken: int) -> None:
        """On the loop, ``patience`` seconds after a request was queued: if requests wait and none was taken
        meanwhile, the awake workers are held up and another one is woken. Watches again while any wait."""
        state.watch = None
        if not self._queue:
            return
        if self._taken == taken:
            self._wake(held_up=True)
        state.watch = state.loop.call_later(self._patience, self._check, state, self._taken)

    def _work(self, gate: threading.Lock, generation: int) -> None:
        while True:
            gate.acquire()  # asleep until woken
            while True:
                try:
                    state, future, context, argument = self._queue.popleft()
                except IndexError:
                    with self._lock:  # a request queued meanwhile found this worker awake: it is taken here
                        if self._queue:
                            continue
                        self._awake -= 1
                        if self._generation != generation:
                            return
                        self._asleep.append(gate)
                    break
                self._taken += 1
                try:
                    result, error = context.run(self._function, argument), None
                except (
                    BaseException
                ) as exc:  # handed to the awaiting request, which answers an internal error
                    result, error = None, exc
                state.add(future, result, error)
