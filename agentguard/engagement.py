"""The Engagement record: who the user is and which tools and agents were called, as CEL sees it.

The OpenAgentSpec says restrictions are evaluated against "this object and only this object". Its CEL view
(decision 1 of ARCHITECTURE.md) has four top-level variables::

    started_at   timestamp the engagement was created
    user         {"id": ..., "email": ...}
    recent       {"_name": <last invoked name>, "<name>": {"inputs": {...}, "outputs": ...}, ...}
    history      {"_list": [<names in order>], "_total": <count>, "<name>": [{"inputs": ..., "outputs": ...}, ...]}

This module keeps that view up to date incrementally (one dict update per call, never a rebuild), so an
assertion costs the same at the 10th and the 10,000th call. :class:`ViewPlan` says which parts of the view an
expression reads, and :meth:`EngagementState.bindings` hands the CEL engine only those parts: an assertion on
``history._total`` is given ``{"_total": n}``, not ten thousand call records.

It also holds the short-circuit detector (decision 5) and the per-engagement list of steps and decisions.
Nothing here does I/O or knows about the Guard; see :mod:`agentguard.guard` for the facade users touch.

Example::

    from agentguard.engagement import EngagementState, User

    state = EngagementState(user=User(id="u1", email="ann@corp.com"))
    call = state.begin_call("send-email", {"to": "bob@corp.com"})
    state.complete_call(call, {"status": "sent"})
    state.view()["recent"]["send-email"]["outputs"]     # {'status': 'sent'}
"""

from __future__ import annotations

import enum
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentguard.errors import Phase, Rule

__all__ = [
    "CallRecord",
    "Decision",
    "EngagementState",
    "EngagementStatus",
    "Outcome",
    "StepRecord",
    "User",
    "ViewPlan",
    "find_short_circuit",
    "to_plain",
]


@dataclass(frozen=True, slots=True)
class User:
    """The person (or system) an engagement acts for. ``id`` is required; the rest is known when known."""

    id: str
    email: str | None = None
    name: str | None = None
    organization: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def as_view(self) -> dict[str, Any]:
        """The ``user`` variable CEL sees: ``id`` and ``email`` (``null`` when unknown)."""
        return {"id": self.id, "email": self.email}


class Outcome(str, enum.Enum):
    """What a check or a guardian decided about a step."""

    ALLOW = "allow"
    DENY = "deny"
    MODIFY = "modify"
    REVIEW_APPROVED = "review-approved"
    REVIEW_REJECTED = "review-rejected"
    NO_DECISION = "no-decision"
    WARN = "warn"


@dataclass(frozen=True, slots=True)
class Decision:
    """One recorded decision of one rule about one step."""

    rule: Rule
    outcome: Outcome
    phase: Phase | None = None
    reason: str = ""
    capability: str | None = None
    expression: str | None = None
    at: float = field(default_factory=time.time)
    data: Mapping[str, Any] | None = None

    @property
    def blocked(self) -> bool:
        return self.outcome in (Outcome.DENY, Outcome.REVIEW_REJECTED)


class EngagementStatus(str, enum.Enum):
    ACTIVE = "active"
    STOPPED = "stopped"  # short-circuit fired: every later step is refused
    FAILED = "failed"  # a guardrail failed: no more tools may run
    CANCELLED = "cancelled"
    CLOSED = "closed"


@dataclass(slots=True)
class CallRecord:
    """One invocation (or attempted invocation) of a tool or sub-agent.

    ``entry`` is the very dict that sits in ``recent[name]`` and ``history[name][i]``: completing the call
    updates the view in place.
    """

    name: str
    kind: str  # "tool" | "agent"
    call_id: str
    entry: dict[str, Any]
    started_at: float
    ended_at: float | None = None
    status: str = "pending"  # pending | completed | failed | denied | withheld
    error: str | None = None

    @property
    def inputs(self) -> dict[str, Any]:
        inputs: dict[str, Any] = self.entry["inputs"]
        return inputs

    @property
    def outputs(self) -> Any:
        return self.entry["outputs"]


@dataclass(slots=True)
class StepRecord:
    """What happened at one step and every decision taken on it; kept whether or not a guardian is set.

    ``kind`` names the AOS method the step corresponds to (``steps/toolCallRequest``, ``steps/message``, ...).
    ``aos`` holds the AOS JSON-RPC request(s) sent or built for it, when built.
    """

    kind: str
    step_id: str
    turn_id: str
    timestamp: datetime
    name: str | None = None
    call_id: str | None = None
    decisions: list[Decision] = field(default_factory=list)
    aos: list[dict[str, Any]] = field(default_factory=list)
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> Outcome:
        """The step's final outcome: the first blocking decision, else modify, else allow."""
        for d in self.decisions:
            if d.blocked:
                return d.outcome
        if any(d.outcome is Outcome.MODIFY for d in self.decisions):
            return Outcome.MODIFY
        if any(d.outcome is Outcome.NO_DECISION for d in self.decisions):
            return Outcome.NO_DECISION
        return Outcome.ALLOW


_PLAIN = (str, int, float, bool, type(None))


def to_plain(value: Any) -> Any:
    """Convert a tool input or output into the JSON-like value CEL and AOS understand.

    Primitives pass through untouched (the common case costs one ``isinstance``); mappings, sequences,
    pydantic models, dataclasses and datetimes are converted; anything else becomes its ``str``.
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_plain(v) for v in value]
    if isinstance(value, datetime | bytes):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_plain(dump(mode="json"))
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: to_plain(getattr(value, name)) for name in fields}
    return str(value)


_HISTORY_REF = re.compile(r"""(?<![\w.])history\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*(["'])([^"'\\]*)\2\s*\])?""")
_STRING = re.compile(r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """Which parts of the Engagement view one expression reads.

    ``history_keys`` is ``None`` when the expression uses ``history`` as a whole (``history[x]`` with a
    computed key, ``size(history)``, ...): then the whole history is bound.
    """

    variables: frozenset[str]
    history_keys: frozenset[str] | None

    @classmethod
    def for_expression(cls, expression: str, variables: Iterable[str]) -> ViewPlan:
        variables = frozenset(variables)
        if "history" not in variables:
            return cls(variables, frozenset())
        # Blank out string literals so that "history" inside a string is not taken as a reference, but keep
        # the literal right after `history[` (that is the key we want).
        keys: set[str] = set()
        masked = _STRING.sub(lambda m: m.group(0)[0] + "_" * (len(m.group(0)) - 2) + m.group(0)[0], expression)
        for match in _HISTORY_REF.finditer(masked):
            if match.group(1):
                keys.add(match.group(1))
            elif match.group(2):
                start, end = match.span(3)
                keys.add(expression[start:end])
            else:
                return cls(variables, None)
        return cls(variables, frozenset(keys))


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
    ) -> None:
        self.id = engagement_id or uuid.uuid4().hex
        self.user = user
        self.started_at = started_at or datetime.now(UTC)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.status = EngagementStatus.ACTIVE
        self.status_reason: str | None = None
        self.turn_id = uuid.uuid4().hex
        self.calls: list[CallRecord] = []
        self.steps: list[StepRecord] = []
        # Calls paused in output review by a host that re-runs the step on resume (LangGraph interrupt):
        # call id -> what the pipeline needs to finish the review without running the tool again.
        self.awaiting_review: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._recent: dict[str, Any] = {}
        self._names: list[str] = []
        self._history: dict[str, Any] = {"_list": self._names, "_total": 0}
        self._positions: dict[str, list[int]] = {}
        self._user_view: dict[str, Any] = user.as_view() if user else {"id": None, "email": None}

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
                out["recent"] = self._recent
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

    def begin_call(self, name: str, inputs: dict[str, Any], *, kind: str = "tool", call_id: str | None = None) -> CallRecord:
        """Record an attempted call as the most recent one (decision 2: the pending call is visible)."""
        entry: dict[str, Any] = {"inputs": inputs, "outputs": None}
        record = CallRecord(name, kind, call_id or uuid.uuid4().hex, entry, time.time())
        with self._lock:
            self._positions.setdefault(name, []).append(len(self._names))
            self._names.append(name)
            entries = self._history.get(name)
            if entries is None:
                entries = self._history[name] = []
            entries.append(entry)
            self._recent[name] = entry
            self._recent["_name"] = name
            self.calls.append(record)
        return record

    def rollback_call(self, record: CallRecord, *, reason: str) -> None:
        """Take a denied call back out of ``recent`` and ``history``: it was never invoked (decision 2)."""
        with self._lock:
            record.status = "denied"
            record.error = reason
            record.ended_at = time.time()
            entries = self._history.get(record.name, [])
            index = next((i for i in range(len(entries) - 1, -1, -1) if entries[i] is record.entry), None)
            if index is None:
                return
            del entries[index]
            position = self._position_of(record.name, index)
            del self._names[position]
            if position == len(self._names):
                self._positions[record.name].pop()
            else:  # a parallel call finished in between: positions after it shift, rebuild the index
                self._positions = {}
                for i, n in enumerate(self._names):
                    self._positions.setdefault(n, []).append(i)
            if entries:
                self._recent[record.name] = entries[-1]
            else:
                del self._history[record.name]
                self._recent.pop(record.name, None)
            if self._names:
                self._recent["_name"] = self._names[-1]
            else:
                self._recent.pop("_name", None)

    def _position_of(self, name: str, occurrence: int) -> int:
        return self._positions[name][occurrence]

    def complete_call(self, record: CallRecord, outputs: Any, *, collect: bool = True) -> None:
        """Store a call's outputs (``null`` when ``collect_results`` is false)."""
        with self._lock:
            record.entry["outputs"] = outputs if collect else None
            record.status = "completed"
            record.ended_at = time.time()

    def withhold_call(self, record: CallRecord, *, reason: str, status: str = "withheld") -> None:
        """The call happened but its outputs may not be used: keep it in history with ``outputs: null``."""
        with self._lock:
            record.entry["outputs"] = None
            record.status = status
            record.error = reason
            record.ended_at = time.time()

    def would_short_circuit(self, name: str, k: int, max_block: int) -> int | None:
        """Block length at which calling ``name`` now would repeat a block ``k`` times, else ``None``."""
        with self._lock:
            return find_short_circuit(self._names, self._positions.get(name, ()), name, k, max_block)

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
        self.turn_id = uuid.uuid4().hex
        return self.turn_id


def find_short_circuit(
    names: list[str], positions: Iterable[int] | list[int], name: str, k: int, max_block: int
) -> int | None:
    """Decision 5: would appending ``name`` make ``names`` end with one block repeated ``k`` times?

    Only blocks that end with an earlier occurrence of ``name`` one block-length back can repeat, so the
    candidates are the earlier positions of ``name`` (``positions``, ascending) within ``max_block`` calls;
    each candidate is verified from the end with an early exit. That keeps the check at a few comparisons
    per call at any history length; blocks longer than ``max_block`` calls are not detected (documented).
    """
    if k < 1:
        return None
    if k == 1:
        return 1
    n = len(names)  # index the new call would take
    pos = positions if isinstance(positions, list) else list(positions)
    for p in reversed(pos):
        block = n - p
        if block > max_block or k * block > n + 1:
            break
        span = (k - 1) * block
        ok = True
        # new sequence s' = names + [name]; need s'[i] == s'[i - block] for i in (n - span, n]
        for i in range(n - 1, n - span, -1):
            if names[i] != names[i - block]:
                ok = False
                break
        if ok:
            return block
    return None
