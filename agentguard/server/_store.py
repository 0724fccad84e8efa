"""Engagement state as the server reports it, and where it is kept: the :class:`EngagementStore` protocol.

The server keeps each engagement's reported state (:class:`EngagementRecord`) in a store so that
``GET /engagements/{id}`` can answer after the run is over. The default, :class:`MemoryEngagementStore`,
lives in the process; a store shared by several server processes implements the same two async methods.
A Redis one, for instance (not shipped; ``redis.asyncio``)::

    class RedisEngagementStore:
        def __init__(self, redis, ttl_seconds=86_400):
            self.redis, self.ttl = redis, ttl_seconds

        async def save(self, record):
            await self.redis.set(f"agentguard:engagement:{record.id}", json.dumps(record.to_json()), ex=self.ttl)

        async def load(self, engagement_id):
            raw = await self.redis.get(f"agentguard:engagement:{engagement_id}")
            return None if raw is None else EngagementRecord.from_json(json.loads(raw))

The run itself -- the runner, its engagement, cancellation, long polling -- stays in the process that
started it; the store only makes its state readable from everywhere (see ``docs/server.md``).
"""

from __future__ import annotations

import collections
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

__all__ = ["EngagementRecord", "EngagementStore", "MemoryEngagementStore", "RunStatus"]


class RunStatus(enum.StrEnum):
    """Where a served engagement stands. The last four are final."""

    RUNNING = "running"
    AWAITING_REVIEW = "awaiting-review"
    COMPLETED = "completed"
    FAILED = "failed"
    DENIED = "denied"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self not in (RunStatus.RUNNING, RunStatus.AWAITING_REVIEW)


@dataclass(frozen=True)
class EngagementRecord:
    """The state of one served engagement, as ``GET /engagements/{id}`` returns it.

    ``output`` is what the runner returned (``completed`` only); ``exposes`` the agent's ``exposes``
    selections over the final Engagement; ``error`` why it did not complete (``type``, ``message`` and, for a
    policy decision, ``rule``, ``reason``, ``capability``, ``phase``); ``review`` the review being waited for
    while ``awaiting-review``. Values are JSON-ready.
    """

    id: str
    agent: str
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    output: Any = None
    exposes: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    review: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "status": self.status.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "output": self.output,
            "exposes": dict(self.exposes) if self.exposes is not None else None,
            "error": dict(self.error) if self.error is not None else None,
            "review": dict(self.review) if self.review is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngagementRecord:
        """The inverse of :meth:`to_json` (for stores that keep records as JSON)."""
        finished = data.get("finished_at")
        return cls(
            id=data["id"],
            agent=data["agent"],
            status=RunStatus(data["status"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            finished_at=datetime.fromisoformat(finished) if finished else None,
            output=data.get("output"),
            exposes=data.get("exposes"),
            error=data.get("error"),
            review=data.get("review"),
        )


class EngagementStore(Protocol):
    """Where engagement records are kept. ``save`` replaces the record of the same id."""

    async def save(self, record: EngagementRecord) -> None: ...

    async def load(self, engagement_id: str) -> EngagementRecord | None: ...


class MemoryEngagementStore:
    """Records in this process, bounded by count and by size: the most recently updated ones are kept.

    A record's size is the length of its JSON form (what ``GET /engagements/{id}`` sends). The policy:

    - a record larger than ``max_record_bytes`` is stored without its ``output``, ``exposes`` and
      ``review``, with ``error`` ``{"type": "RecordTooLarge", ...}`` saying so, and -- when it has finished
      -- as ``failed``: a client must not read a dropped output as a completed run's ``null``;
    - then the least recently updated records are forgotten until at most ``max_records`` records of at
      most ``max_bytes`` bytes in all remain (a forgotten engagement reads as 404; one still running is
      stored again at its next change).
    """

    def __init__(
        self, max_records: int = 10_000, *, max_bytes: int = 64 * 1_048_576, max_record_bytes: int = 1_048_576
    ) -> None:
        if max_records < 1 or max_bytes < 1 or max_record_bytes < 1:
            raise ValueError("max_records, max_bytes and max_record_bytes must be positive")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_record_bytes = min(max_record_bytes, max_bytes)
        self._records: collections.OrderedDict[str, tuple[EngagementRecord, int]] = collections.OrderedDict()
        self._bytes = 0

    @property
    def stored_bytes(self) -> int:
        """The JSON size of every record kept."""
        return self._bytes

    async def save(self, record: EngagementRecord) -> None:
        size = _size(record)
        if size > self.max_record_bytes:
            record = self._trimmed(record, size)
            size = _size(record)
        previous = self._records.pop(record.id, None)
        if previous is not None:
            self._bytes -= previous[1]
        self._records[record.id] = (record, size)
        self._bytes += size
        while len(self._records) > self.max_records or self._bytes > self.max_bytes:
            _, (_, forgotten) = self._records.popitem(last=False)
            self._bytes -= forgotten

    async def load(self, engagement_id: str) -> EngagementRecord | None:
        kept = self._records.get(engagement_id)
        return None if kept is None else kept[0]

    def _trimmed(self, record: EngagementRecord, size: int) -> EngagementRecord:
        message = (
            f"the engagement's state ({size} bytes as JSON) is larger than the server keeps per engagement "
            f"({self.max_record_bytes} bytes): its output, exposes and review were dropped"
        )
        return replace(
            record,
            status=RunStatus.FAILED if record.status.finished else record.status,
            output=None,
            exposes=None,
            review=None,
            error={"type": "RecordTooLarge", "message": message},
        )


def _size(record: EngagementRecord) -> int:
    return len(json.dumps(record.to_json(), default=str))
