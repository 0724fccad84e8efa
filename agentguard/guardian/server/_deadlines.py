"""The body deadline of every request one event loop is reading, kept by one timer for all of them.

``asyncio.timeout`` arms a timer for each request and cancels it when the body has arrived: some 5 µs, a
noticeable share of a guardian's whole decision, spent on a deadline that almost never passes. Every body
read here waits the same time, so the read that began first is always the first due: a read only notes when
it began (in a dict, which keeps that order), and one timer, armed for the oldest note still there, cancels
the reads whose deadline has passed and is armed again for the next. Under steady load it fires about once
per timeout, not once per request.

A read past its deadline is cancelled, as ``asyncio.timeout`` would, and :meth:`Deadlines.expired` tells that
cancellation apart from any other (the server shutting down), which is let through.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["Deadlines"]


class Deadlines:
    """The reads of one event loop, each of which must end within ``timeout`` seconds of its start."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        # Task reading -> (when its deadline passes, the cancellations it had pending then), oldest first.
        self._reading: dict[asyncio.Task[Any], tuple[float, int]] = {}
        # Task cancelled for its deadline -> the cancellations it had pending before.
        self._overdue: dict[asyncio.Task[Any], int] = {}
        self._timer: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[Any]) -> None:
        """``task`` begins a read; it calls :meth:`stop` when the read ends, whichever way."""
        due = self._loop.time() + self._timeout
        self._reading[task] = (due, task.cancelling())
        if self._timer is None:
            self._timer = self._loop.call_at(due, self._sweep)

    def stop(self, task: asyncio.Task[Any]) -> None:
        """``task``'s read is over: it is timed no more."""
        self._reading.pop(task, None)
        self._overdue.pop(task, None)

    def expired(self, task: asyncio.Task[Any]) -> bool:
        """For a read that raised ``CancelledError``: whether its deadline, and nothing else, cancelled it.

        If so the cancellation is withdrawn (``Task.uncancel``), so that the task may go on to answer.
        """
        pending = self._overdue.pop(task, None)
        return pending is not None and task.uncancel() <= pending

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        while self._reading:
            task, (due, pending) = next(iter(self._reading.items()))
            if due > now:
                self._timer = self._loop.call_at(due, self._sweep)
                return
            del self._reading[task]
            self._overdue[task] = pending
            task.cancel()
