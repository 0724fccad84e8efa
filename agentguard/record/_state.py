"""The Engagement record of one conversation: who the user is, which tools and agents were called, and how
CEL sees it (decision 1 of ARCHITECTURE.md)::

    started_at   timestamp the engagement was created
    user         {"id": ..., "email": ...}
    recent       {"_name": <last invoked name>, "<name>": {"inputs": {...}, "outputs": ...}, ...}
    history      {"_list": [<names in order>], "_total": <count>, "<name>": [{"inputs": ..., "outputs": ...}, ...]}

The view is kept up to date incrementally (one dict update per call, never a rebuild), so an assertion costs
the same at the 10th and the 10,000th call, and so does taking a denied call back out (the call to take back
is almost always the newest). :class:`~agentguard.record.ViewPlan` says which parts of the view an
expression reads, and :meth:`EngagementState.bindings` hands the CEL engine only those parts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agentguard.record._loop import LoopDetector
from agentguard.record._types import CallRecord, EngagementStatus, StepRecord, User
from agentguard.record._values import new_id
from agentguard.record._view import ViewPlan

__all__ = ["EngagementState"]


class EngagementState:
    """The Engagement record of one conversation with an agent, and its CEL view.

    Thread-safe: several calls of one engagement may be pending at once (frameworks run tool calls in
    parallel); every mutation holds the engagement's lock.
    """

    def __init__(
        self,
        *,
        user: User | None = None,
        engagement_id: str | None = None,
        started_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        loop_window: int = 300,
    ) -> None:
        self.id = engagement_id or new_id()
        self.user = user
        self.started_at = started_at or datetime.now(UTC)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.status = EngagementStatus.ACTIVE
        self.status_reason: str | None = None
        self.turn_id = new_id()
        self.calls: list[CallRecord] = []
        self.steps: list[StepRecord] = []
        # Calls paused in output review by a host that re-runs the step on resume (LangGraph interrupt):
        # call id -> what the pipeline needs to finish the review without running the tool again.
        self.awaiting_review: dict[str, Any] = {}
        # Identity-only credentials by (kind, subject), built once per engagement (see agentguard.policy).
        self.credentials: dict[tuple[str, str], Any] = {}
        self._lock = threading.RLock()
        self._recent: dict[str, Any] = {}
        self._names: list[str] = []
        self._history: dict[str, Any] = {"_list": self._names, "_total": 0}
        # Every attempted name (invoked or refused), for the short-circuit detector (decision 5).
        self._loop = LoopDetector(loop_window)
        self._user_view: dict[str, Any] = user.as_view() if user else {"id": None, "email": None}
        # Calls begun but not yet completed, withheld or rolled back: what a graceful cancel waits for.
        self._in_flight: set[int] = set()
        self._idle = threading.Condition(self._lock)
        self._idle_waiters = 0
        self.cancel_graceful = True

    # -- the view -------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Invoked names in order (``history._list``). Denied attempts are not in it."""
        return self._names

    @property
    def total(self) -> int:
        return len(self._names)

    def view(self) -> dict[str, Any]:
        """The Engagement exactly as CEL sees it (a snapshot: later calls do not change it)."""
        with self._lock:
            history: dict[str, Any] = {
                "_list": list(self._names),
                "_total": len(self._names),
            }
            for name, entries in self._history.items():
                if not name.startswith("_"):
                    history[name] = [dict(e) for e in entries]
            recent = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._recent.items()}
            return {
                "started_at": self.started_at,
                "user": dict(self._user_view),
                "recent": recent,
                "history": history,
            }

    def bindings(self, plan: ViewPlan) -> dict[str, Any]:
        """The variables ``plan`` reads, and only the parts of ``history`` it reads."""
        out: dict[str, Any] = {}
        for var in plan.variables:
            if var == "recent":
                rkeys = plan.recent_keys
                if rkeys is None:
                    out["recent"] = self._recent
                else:
                    recent, parts = self._recent, plan.recent_fields
                    selected: dict[str, Any] = {}
                    for key in rkeys:
                        entry = recent.get(key)
                        if entry is None:
                            continue
                        wanted = parts.get(key)
                        selected[key] = (
                            {p: entry[p] for p in wanted}
                            if wanted is not None and type(entry) is dict
                            else entry
                        )
                    out["recent"] = selected
            elif var == "user":
                out["user"] = self._user_view
            elif var == "started_at":
                out["started_at"] = self.started_at
            elif var == "history":
                keys = plan.history_keys
                if keys is None:
                    self._history["_total"] = len(self._names)
                    out["history"] = self._history
                else:
                    part: dict[str, Any] = {}
                    for key in keys:
                        if key == "_total":
                            part["_total"] = len(self._names)
                        elif key in self._history:
                            part[key] = self._history[key]
                    out["history"] = part
        return out

    # -- calls ----------------------------------------------------------------------------------------

    def begin_call(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        kind: str = "tool",
        call_id: str | None = None,
        started_at: float | None = None,
    ) -> CallRecord:
        """Record an attempted call as the most recent one (decision 2: the pending call is visible).

        ``started_at``: when the call began (``time.time()``; default now), e.g. its step's time.
        """
        entry: dict[str, Any] = {"inputs": inputs, "outputs": None}
        record = CallRecord(name, kind, call_id, entry, time.time() if started_at is None else started_at)
        with self._lock:
            self._names.append(name)
            self._loop.attempt(name)
            entries = self._history.get(name)
            if entries is None:
                entries = self._history[name] = []
            entries.append(entry)
            self._recent[name] = entry
            self._recent["_name"] = name
            self.calls.append(record)
            self._in_flight.add(id(record))
        return record

    def _settled(self, record: CallRecord) -> None:
        self._in_flight.discard(id(record))
        if self._idle_waiters and not self._in_flight:
            self._idle.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no call is in flight (``True``), or ``timeout`` seconds pass (``False``)."""
        with self._idle:
            self._idle_waiters += 1
            try:
                return self._idle.wait_for(lambda: not self._in_flight, timeout)
            finally:
                self._idle_waiters -= 1

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def rollback_call(self, record: CallRecord, *, reason: str, attempted: bool = True) -> None:
        """Take a denied call back out of ``recent`` and ``history``: it was never invoked (decision 2).

        The short-circuit detector keeps it -- a refused attempt is an attempt (decision 5) -- unless
        ``attempted`` is false: a host paused the run to ask a reviewer and will make the same call again
        when it resumes, which must not count twice.

        O(1) when the call is the newest one (the common case); otherwise the walk is as long as the number
        of calls begun after it (calls running in parallel), never the whole history.
        """
        with self._lock:
            if not attempted:
                self._loop.take_back(record.name)
            record.status = "denied"
            record.error = reason
            record.ended_at = time.time()
            self._settled(record)
            name, entry = record.name, record.entry
            entries = self._history.get(name)
            if not entries:
                return
            # ``later``: calls of the same name begun after this one; skip that many occurrences of the name,
            # walking both lists from their ends.
            later = 0
            for index in range(len(entries) - 1, -1, -1):
                if entries[index] is entry:
                    break
                later += 1
            else:
                return  # already taken back
            del entries[index]
            names = self._names
            for position in range(len(names) - 1, -1, -1):
                if names[position] == name:
                    if later == 0:
                        del names[position]
                        break
                    later -= 1
            if entries:
                self._recent[name] = entries[-1]
            else:
                del self._history[name]
                self._recent.pop(name, None)
            if names:
                self._recent["_name"] = names[-1]
            else:
                self._recent.pop("_name", None)

    def complete_call(self, record: CallRecord, outputs: Any, *, collect: bool = True) -> None:
        """Store a call's outputs (``null`` when ``collect_results`` is false)."""
        with self._lock:
            record.entry["outputs"] = outputs if collect else None
            record.status = "completed"
            record.ended_at = time.time()
            self._settled(record)

    def withhold_call(self, record: CallRecord, *, reason: str, status: str = "withheld") -> None:
        """The call happened but its outputs may not be used: keep it in history with ``outputs: null``."""
        with self._lock:
            record.entry["outputs"] = None
            record.status = status
            record.error = reason
            record.ended_at = time.time()
            self._settled(record)

    def attempted(self, name: str) -> None:
        """Count an attempt that was refused before it became a call (decision 5: refused attempts count)."""
        with self._lock:
            self._loop.attempt(name)

    def would_short_circuit(self, name: str, k: int, max_block: int) -> int | None:
        """Block length at which attempting ``name`` now would repeat a block ``k`` times, else ``None``.

        The detector sees every attempted call, refused ones included, over the last ``loop_window``
        attempts; a longer window asked for here widens it from now on.
        """
        with self._lock:
            return self._loop.would_repeat(name, k, max_block)

    def attempts(self, count: int) -> list[str]:
        """The last ``count`` attempted names, oldest first (to explain a loop)."""
        with self._lock:
            return self._loop.last(count)

    # -- status ---------------------------------------------------------------------------------------

    def stop(self, status: EngagementStatus, reason: str) -> None:
        """Stop the engagement for good (short-circuit, failed guardrail, cancel, close)."""
        with self._lock:
            if self.status is EngagementStatus.ACTIVE:
                self.status = status
                self.status_reason = reason

    @property
    def active(self) -> bool:
        return self.status is EngagementStatus.ACTIVE

    def new_turn(self) -> str:
        self.turn_id = new_id()
        return self.turn_id
