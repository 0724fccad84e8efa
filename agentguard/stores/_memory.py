"""The default store: engagements in this process's memory, resumable by id while they are open.

Nothing is shared with other processes and nothing survives a restart; for that, see
:class:`~agentguard.stores.RedisStore`. What it adds to keeping the record in the :class:`~agentguard.Engagement`
itself: ``guard.engagement(engagement_id=...)`` continues the open engagement of that id instead of starting
a second record, as it does with a shared store. Bounded: at most ``max_engagements`` are held (the least
recently opened goes first) and one not opened for ``ttl_seconds`` is forgotten. A closed engagement is
forgotten at once, so its id starts afresh; one stopped by the guard (a loop, a failed guardrail, a cancel)
is held as it is, and refuses every step of whoever opens its id again, as a shared store's does.
"""

from __future__ import annotations

import threading
import time
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
            if now - opened > self.ttl_seconds or state.status is EngagementStatus.CLOSED:
                del self._held[engagement_id]
                return None
            self._held[engagement_id] = (state, now)
            self._held.move_to_end(engagement_id)
            return state

    def hold(self, state: EngagementState) -> None:
        """Keep ``state`` for :meth:`resume` (evicting the least recently opened past the bound)."""
        with self._lock:
            self._held[state.id] = (state, time.monotonic())
            self._held.move_to_end(state.id)
            while len(self._held) > self.max_engagements:
                self._held.popitem(last=False)

    def forget(self, engagement_id: str) -> None:
        """Drop the engagement of this id (it was closed)."""
        with self._lock:
            self._held.pop(engagement_id, None)

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._held)} held, max_engagements={self.max_engagements})"
