"""Observe mode's delivery machinery: a bounded in-order queue drained by one daemon thread.

Why this shape: in observe mode the guardian must never slow the agent down, so the caller only appends
to a queue (a lock, a length check, an append: constant time, no I/O, no serialisation). One thread
delivers every step in the order it was submitted, which keeps the guardian's view of an engagement
coherent (a ``toolCallResult`` never arrives before its ``toolCallRequest``). The queue is bounded so that
a slow or dead guardian costs memory only up to a limit; past it, steps are dropped — and every drop is
counted and reported by the owner, never silent.

The worker holds no reference to the :class:`~agentguard.guardian.GuardianClient` (only to the delivery
callables it was given), so a client that is no longer used can be garbage-collected; its queue is then
drained and the thread exits. Pending steps are also flushed at interpreter exit (one ``atexit`` hook for all
queues, holding them weakly), within a bounded time.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Literal

__all__ = ["Backlog", "RateLimitedLog"]

_logger = logging.getLogger("agentguard.guardian")

#: Upper bound on the time interpreter exit waits for all observe queues together.
EXIT_FLUSH_SECONDS = 10.0

Handler = Callable[[dict[str, object]], None]


class RateLimitedLog:
    """A warning that is logged at most once per ``interval`` seconds, reporting how many were suppressed.

    A dead guardian under load fails or drops thousands of steps a second; one line per step would bury
    the log (and cost the agent time), while no line at all would hide the problem.
    """

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._logger = logger
        self._interval = interval
        self._lock = threading.Lock()
        self._next_at = 0.0
        self._suppressed = 0

    def warning(self, message: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next_at:
                self._suppressed += 1
                return
            suppressed, self._suppressed = self._suppressed, 0
            self._next_at = now + self._interval
        if suppressed:
            message += " (%d similar messages suppressed)"
            args = (*args, suppressed)
        self._logger.warning(message, *args, exc_info=exc_info)


class Backlog:
    """Bounded FIFO of AOS requests, delivered one at a time, in order, by a lazily started daemon thread.

    ``deliver`` is called for every accepted request; after :meth:`stop` with ``discard_pending``, the
    remaining ones go to ``discard`` instead. Each runs in a copy of the submitter's ``contextvars`` context,
    so callbacks see the caller's tracing span and engagement. ``on_stop`` runs once, on the worker thread,
    when it exits. Handlers are expected not to raise; if one does, it is logged and the queue goes on.
    """

    def __init__(
        self, capacity: int, *, deliver: Handler, discard: Handler, on_stop: Callable[[], None], name: str
    ) -> None:
        self._capacity = capacity
        self._deliver = deliver
        self._discard = discard
        self._on_stop = on_stop
        self._name = name
        self._items: deque[tuple[dict[str, object], contextvars.Context]] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._accepted = 0  # requests ever queued
        self._finished = 0  # requests taken off the queue and handled (delivered, failed or discarded)
        self._stopping = False
        self._discarding = False
        self._thread: threading.Thread | None = None
        self._exited = False
        self._handler_log = RateLimitedLog(_logger)

    @property
    def name(self) -> str:
        return self._name

    @property
    def depth(self) -> int:
        """Requests waiting (not counting the one being delivered)."""
        return len(self._items)

    @property
    def unfinished(self) -> int:
        """Requests accepted but not yet handled, the one being delivered included."""
        with self._lock:
            return self._accepted - self._finished

    def offer(self, request: dict[str, object]) -> Literal["queued", "full", "closed"]:
        """Queue ``request`` unless the queue is full or stopped. Never blocks on delivery."""
        context = contextvars.copy_context()
        with self._lock:
            if self._stopping:
                return "closed"
            if len(self._items) >= self._capacity:
                return "full"
            self._items.append((request, context))
            self._accepted += 1
            if self._thread is None:
                self._start()
            self._not_empty.notify()
        return "queued"

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every request queued before this call has been handled; False if ``timeout`` ran out."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("flush() called from the observe worker itself would wait for itself")
        with self._lock:
            target = self._accepted
            return self._progress.wait_for(lambda: self._finished >= target, timeout)

    def stop(self, *, discard_pending: bool) -> bool:
        """Accept nothing more; the worker drains (or discards) what is queued, then exits.

        Does not wait. Returns True if a worker is running and will therefore call ``on_stop`` itself.
        """
        with self._lock:
            self._stopping = True
            self._discarding = self._discarding or discard_pending
            self._not_empty.notify()
            return self._thread is not None and not self._exited

    def join(self) -> None:
        """Wait for the worker to exit (after :meth:`stop`); it finishes the delivery in progress first."""
        if self._thread is not None:
            self._thread.join()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._items and not self._stopping:
                        self._not_empty.wait()
                    if not self._items:
                        return
                    request, context = self._items.popleft()
                    handler = self._discard if self._discarding else self._deliver
                try:
                    context.run(handler, request)
                except Exception:
                    self._handler_log.warning(
                        "guardian observe queue %s: handler raised", self._name, exc_info=True
                    )
                with self._lock:
                    self._finished += 1
                    self._progress.notify_all()
        finally:
            with self._lock:
                self._exited = True
            try:
                self._on_stop()
            except Exception:
                _logger.warning("guardian observe queue %s: cleanup raised", self._name, exc_info=True)


_LIVE: weakref.WeakSet[Backlog] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _flush_at_exit() -> None:
    """Give every live observe queue a bounded chance to deliver; say how many steps were left behind."""
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    with _LIVE_LOCK:
        backlogs = list(_LIVE)
    for backlog in backlogs:
        if not backlog.flush(max(0.0, deadline - time.monotonic())):
            _logger.warning(
                "guardian observe queue %s: %d steps were not delivered before interpreter exit",
                backlog.name,
                backlog.unfinished,
            )


atexit.register(_flush_at_exit)
