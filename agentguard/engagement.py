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
import functools
import itertools
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentguard.cel import CelProgram
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
    "is_plain",
    "new_id",
    "one_shot",
    "repeated_block",
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


class Outcome(enum.StrEnum):
    """What a check or a guardian decided about a step."""

    ALLOW = "allow"
    DENY = "deny"
    MODIFY = "modify"
    REVIEW_APPROVED = "review-approved"
    REVIEW_REJECTED = "review-rejected"
    REVIEW_PENDING = "review-pending"  # the host paused the run to ask; the step was not carried out yet
    NO_DECISION = "no-decision"
    WARN = "warn"


@dataclass(slots=True)
class Decision:
    """One recorded decision of one rule about one step. Treat as read-only.

    (Not a frozen dataclass on purpose: a frozen one costs ~1.5 µs more to build, several times per call.)
    """

    rule: Rule
    outcome: Outcome
    phase: Phase | None = None
    reason: str = ""
    capability: str | None = None
    expression: str | None = None
    at: float = field(default_factory=time.time)
    data: Mapping[str, Any] | None = None
    severity: str = "error"  # of the check: error blocks; warning / info only record (shadow mode)

    @property
    def blocked(self) -> bool:
        return self.outcome in (Outcome.DENY, Outcome.REVIEW_REJECTED)


class EngagementStatus(enum.StrEnum):
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
    # The observers watching this step (chosen when it started); decisions are dispatched to them only.
    observed_by: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    @property
    def outcome(self) -> Outcome:
        """The step's final outcome: the first blocking decision, else a review still pending, else modify,
        else no-decision, else allow."""
        for d in self.decisions:
            if d.blocked:
                return d.outcome
        reviews = [d for d in self.decisions if d.rule is Rule.REVIEW]
        if reviews and reviews[-1].outcome is Outcome.REVIEW_PENDING:
            return Outcome.REVIEW_PENDING
        if any(d.outcome is Outcome.MODIFY for d in self.decisions):
            return Outcome.MODIFY
        if any(d.outcome is Outcome.NO_DECISION for d in self.decisions):
            return Outcome.NO_DECISION
        return Outcome.ALLOW


_PLAIN = (str, int, float, bool, type(None))
_PRIMITIVE = frozenset(_PLAIN)
_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def new_id() -> str:
    """A process-unique id (random per-process prefix + counter): cheap enough for every step."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


def to_plain(value: Any, *, owned: bool = False) -> Any:
    """Convert a tool input or output into the JSON-like value CEL and AOS understand.

    Primitives pass through untouched (the common case costs one ``isinstance``); mappings, sequences,
    pydantic models, dataclasses and datetimes are converted; anything else becomes its ``str``. A flat dict
    of primitives is copied, so that the record does not change when its owner does, unless the caller
    ``owned`` it (a dict built for this call that nobody else holds).
    """
    cls = type(value)
    if cls in _PRIMITIVE:
        return value
    if cls is dict:  # fast path: a flat dict of primitives with str keys (most tool inputs and outputs)
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return value if owned else dict(value)
    elif cls is list:
        for item in value:
            if type(item) not in _PRIMITIVE:
                break
        else:
            return list(value)
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


def is_plain(value: Any) -> bool:
    """Whether ``value`` is already a JSON-like value (exact ``dict`` with ``str`` keys, ``list``, ``str``,
    ``int``, ``float``, ``bool``, ``None``, all the way down): then it is delivered as it is."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _PRIMITIVE:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        else:
            return False
    return True


def one_shot(value: Any) -> str | None:
    """What in ``value`` can be consumed only once (a generator, an iterator, a coroutine), or ``None``.

    Such a value has no faithful JSON-like form: :func:`to_plain` would give checks its ``str()``, while the
    consumer would get its items.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _PRIMITIVE:
            continue
        if kind is dict:  # the common containers first: no ABC checks on the per-call path
            pending.extend(item.values())
            continue
        if kind is list or kind is tuple:
            pending.extend(item)
            continue
        if isinstance(item, Iterator | AsyncIterator | Awaitable):
            return f"is a {type(item).__name__} object, which can be consumed only once"
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            pending.extend(item)
    return None


_ENTRY_PARTS = frozenset({"inputs", "outputs"})


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """Which parts of the Engagement view one expression reads.

    ``recent_keys`` / ``history_keys`` list the members an expression selects with a constant name
    (``recent["send-email"]``, ``history._total``); ``None`` means the variable is used as a whole
    (``history[x]`` with a computed key, ``size(history)``, ``history.exists(...)``, ...) and is bound whole.
    """

    variables: frozenset[str]
    recent_keys: frozenset[str] | None
    history_keys: frozenset[str] | None
    # For each name in ``recent_keys``: the parts of its entry read (``inputs`` / ``outputs``), or ``None``
    # for the whole entry. An input assertion on ``recent["x"].inputs`` is not given ``x``'s outputs.
    recent_fields: Mapping[str, frozenset[str] | None] = field(default_factory=dict)

    @classmethod
    def of(cls, program: CelProgram) -> ViewPlan:
        """The plan of a compiled expression, from what its syntax tree reads (:attr:`CelProgram.reads`).

        Never from the text: a comment, a string literal or a macro cannot hide a read from the tree.
        """
        reads = program.reads
        recent, history = reads.get("recent", {}), reads.get("history", {})
        fields: dict[str, frozenset[str] | None] = {}
        if recent is not None:
            for key, parts in recent.items():
                fields[key] = frozenset(parts) if parts is not None and parts.keys() <= _ENTRY_PARTS else None
        return cls(
            program.variables,
            frozenset(recent) if recent is not None else None,
            frozenset(history) if history is not None else None,
            fields,
        )


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
        # The attempted names (invoked or refused), newest first, one char per name, at most `loop_window`
        # long: the short-circuit detector matches a regex against it (see repeated_block), at a cost
        # independent of history length.
        self._chars: dict[str, str] = {}
        self._reversed = ""
        self._loop_window = loop_window
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
        self, name: str, inputs: dict[str, Any], *, kind: str = "tool", call_id: str | None = None
    ) -> CallRecord:
        """Record an attempted call as the most recent one (decision 2: the pending call is visible)."""
        entry: dict[str, Any] = {"inputs": inputs, "outputs": None}
        record = CallRecord(name, kind, call_id or new_id(), entry, time.time())
        with self._lock:
            self._names.append(name)
            self._reversed = (self._char(name) + self._reversed)[: self._loop_window]
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
        """
        with self._lock:
            if not attempted:
                spot = self._reversed.find(self._char(record.name))
                if spot >= 0:
                    self._reversed = self._reversed[:spot] + self._reversed[spot + 1 :]
            record.status = "denied"
            record.error = reason
            record.ended_at = time.time()
            self._settled(record)
            entries = self._history.get(record.name, [])
            index = next((i for i in range(len(entries) - 1, -1, -1) if entries[i] is record.entry), None)
            if index is None:
                return
            del entries[index]
            # the record is the index-th call of its name: find that occurrence in the ordered list
            seen = -1
            for position, n in enumerate(self._names):
                if n == record.name:
                    seen += 1
                    if seen == index:
                        del self._names[position]
                        break
            if entries:
                self._recent[record.name] = entries[-1]
            else:
                del self._history[record.name]
                self._recent.pop(record.name, None)
            if self._names:
                self._recent["_name"] = self._names[-1]
            else:
                self._recent.pop("_name", None)

    def _char(self, name: str) -> str:
        char = self._chars.get(name)
        if char is None:
            char = self._chars[name] = chr(0x100 + len(self._chars))
        return char

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
            self._reversed = (self._char(name) + self._reversed)[: self._loop_window]

    def would_short_circuit(self, name: str, k: int, max_block: int) -> int | None:
        """Block length at which attempting ``name`` now would repeat a block ``k`` times, else ``None``.

        The detector sees every attempted call, refused ones included, over the last ``loop_window``
        attempts; a longer window asked for here widens it from now on.
        """
        with self._lock:
            self._loop_window = max(self._loop_window, k * max_block)
            return repeated_block(self._char(name) + self._reversed, k, max_block)

    def attempts(self, count: int) -> list[str]:
        """The last ``count`` attempted names, oldest first (to explain a loop)."""
        names = {char: name for name, char in self._chars.items()}
        return [names[char] for char in reversed(self._reversed[:count])]

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


@functools.lru_cache(maxsize=64)
def _loop_pattern(k: int, max_block: int) -> re.Pattern[str]:
    # On the *reversed* sequence, "ends with a block repeated k times" becomes "starts with one": a
    # backreference match anchored at position 0, run by the regex engine in C, smallest block first.
    return re.compile(rf"(.{{1,{max_block}}}?)\1{{{k - 1}}}", re.DOTALL)


def repeated_block(reversed_sequence: str, k: int, max_block: int) -> int | None:
    """Length of the shortest block that the (reversed, one char per name) sequence starts with k times."""
    match = _loop_pattern(k, max_block).match(reversed_sequence)
    return len(match.group(1)) if match else None


def find_short_circuit(sequence: Sequence[str], k: int, max_block: int) -> int | None:
    """Decision 5: does ``sequence`` (the invoked names plus the attempted one) end with a block of one or
    more names repeated ``k`` times in a row? Returns the block length, or ``None``.

    Blocks longer than ``max_block`` calls are not looked for (documented limit; default 100).
    """
    if k < 1:
        return None
    chars: dict[str, str] = {}
    window = sequence[-k * max_block :]
    text = "".join(chars.setdefault(n, chr(0x100 + len(chars))) for n in reversed(window))
    return repeated_block(text, k, max_block)
