"""The default store: engagements in this process's memory, resumable by id while they are open.

Nothing is shared with other processes and nothing survives a restart; for that, see
:class:`~agentguard.stores.RedisStore`. What it adds to keeping the record in the :class:`~agentguard.Engagement`
itself: ``guard.engagement(engagement_id=...)`` continues the open engagement of that id instead of starting
a second record, as it does with a shared store. Bounded: at most ``max_engagements`` are held (the least
recently opened goes first) and one idle for ``ttl_seconds`` -- neither opened nor called since, as a
shared store's time to live counts -- is forgotten. A closed engagement is forgotten at once, so its id
starts afresh; one stopped by the guard (a loop, a failed guardrail, a cancel) is held as it is, and refuses
every step of whoever opens its id again, as a shared store's does.

An engagement forgotten (idle, or the least recently opened past the bound) while some code still holds
it and then opened anew by id has two lives: the record the holder keeps using and the fresh one. They are
never both used: opening the new life stops the earlier one, so its holder's next step is refused (its loop
count and history would otherwise go on apart from the new record's), as a shared store refuses a worker
that holds an expired engagement.

Two threads that open a new id at the same moment may both find it not held yet (:meth:`resume`, then
:meth:`hold`). The first to hold it keeps it; the other's record is stopped as it is offered, so that thread's
steps are refused until it opens the id again (and continues the held one); closing that stopped record
does not forget the held one, whatever its status (:meth:`MemoryStore.forget` drops only the record it is
given). Stopping the first instead would leave the call it may already be running go
on beside a fresh record that does not count it: two calls where a count assertion or the loop detector
allows one.
"""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from collections import OrderedDict

from agentguard.record import EngagementState, EngagementStatus

__all__ = ["MemoryStore"]


class MemoryStore:
    """Open engagements of this process by id (the :class:`~agentguard.Guard`'s default store)."""

    def __init__(self, *, max_engagements: int = 10_000, ttl_seconds: float = 3600.0) -> None:
        if max_engagements < 1:
            raise ValueError(f"max_engagements must be at least 1, got {max_engagements!r}")
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds!r}")
        self.max_engagements = max_engagements
        self.ttl_seconds = ttl_seconds
        self._held: OrderedDict[str, tuple[EngagementState, float]] = OrderedDict()
        # Every record held by id that something still refers to, forgotten or not: a new life stops it.
        self._alive: weakref.WeakValueDictionary[str, EngagementState] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def resume(self, engagement_id: str) -> EngagementState | None:
        """The engagement of this id, if it is held (and not idle past the TTL, nor closed): a stopped one
        too, which refuses what it is asked (forgotten, it would start afresh: a loop's count, the history
        that restrictions read, all gone)."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(engagement_id)
            if held is None:
                return None
            state, opened = held
            if not self._current(state, opened, now):
                del self._held[engagement_id]
                return None
            self._held[engagement_id] = (state, now)
            self._held.move_to_end(engagement_id)
            return state

    def hold(self, state: EngagementState) -> None:
        """Keep ``state`` for :meth:`resume` (evicting the least recently opened past the bound); an earlier
        life of its id that is still in use is stopped. When another thread held a record of the id since
        this one's :meth:`resume` found none, that one stays the engagement and ``state`` is stopped (see
        the module's docstring)."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(state.id)
            if held is not None and held[0] is not state and self._current(*held, now):
                state.stop(
                    EngagementStatus.STOPPED,
                    f"engagement {state.id!r} was opened at the same time in another thread of this process, "
                    "which holds it: this record of it is not the engagement (open it again to continue it)",
                )
                return
            earlier = self._alive.get(state.id)
            if earlier is not None and earlier is not state:
                earlier.stop(
                    EngagementStatus.STOPPED,
                    f"engagement {state.id!r} was forgotten by its store (idle past ttl_seconds, or past "
                    "max_engagements) and opened anew: this record of it is no longer the engagement",
                )
            self._alive[state.id] = state
            self._held[state.id] = (state, now)
            self._held.move_to_end(state.id)
            while len(self._held) > self.max_engagements:
                self._held.popitem(last=False)

    def _current(self, state: EngagementState, opened: float, now: float) -> bool:
        """Whether a held record is still the engagement of its id: not idle past the TTL, nor closed."""
        return (
            now - _last_used(state, opened, now) <= self.ttl_seconds
            and state.status is not EngagementStatus.CLOSED
        )

    def forget(self, state: EngagementState | str) -> None:
        """Drop ``state`` (it was closed) if it is the record held for its id. Another record of the id -- the
        one stopped as it was opened at the same time, an earlier life -- forgets nothing: the held one, active
        or stopped by the guard (a loop, a failed guardrail), stays the engagement, or the next open of the id
        would start a fresh record beside it (its loop count and history gone).

        Given an engagement id (deprecated: give the record), it drops the record held for it only when that
        one is closed (a stopped record is held, as :meth:`resume` holds it)."""
        if isinstance(state, str):
            warnings.warn(
                "MemoryStore.forget(engagement_id) is deprecated: give the closed EngagementState",
                DeprecationWarning,
                stacklevel=2,
            )
            with self._lock:
                held = self._held.get(state)
                if held is not None and held[0].status is EngagementStatus.CLOSED:
                    del self._held[state]
            return
        with self._lock:
            held = self._held.get(state.id)
            if held is not None and held[0] is state:
                del self._held[state.id]

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._held)} held, max_engagements={self.max_engagements})"


def _last_used(state: EngagementState, opened: float, now: float) -> float:
    """When ``state`` was last opened or its last call began or ended (on the monotonic clock of ``now``;
    calls are timed by the wall clock)."""
    calls = state.calls
    if not calls:
        return opened
    last = calls[-1]
    called = last.ended_at or last.started_at
    return max(opened, now - (time.time() - called))
