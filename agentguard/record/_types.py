"""What the record is made of: the user, each step, each call, each decision, and the engagement's status.

These objects are kept for every step of every engagement, so they are built for size: a step's AOS requests
and payload exist only once something is put in them, ids are minted when first read, and an allow decision
the pipeline takes the same way on every call is one shared, untimed object (:meth:`Decision.untimed`),
stamped with its step's time only when somebody reads :attr:`StepRecord.decisions`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, overload

from agentguard.errors import Phase, Rule
from agentguard.record._values import new_id

__all__ = [
    "UNCHECKED",
    "CallRecord",
    "Chains",
    "Decision",
    "DirectCallRecord",
    "EngagementStatus",
    "Outcome",
    "SharedCallRecord",
    "StepRecord",
    "StepRef",
    "Steps",
    "User",
]

_UNTIMED = -1.0  # Decision.at of a shared decision: the time of the step it is read from

Chains = dict[tuple[tuple["Decision", ...], "Decision"], tuple["Decision", ...]]
"""(decisions so far, next shared decision) -> the longer tuple (see :meth:`StepRecord.add_shared`)."""

CHAINS_LIMIT = 4096
"""How many chains a Guard keeps; past it a step keeps a list of its own."""


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

    __hash__ = str.__hash__  # as agentguard.errors.Rule's


@dataclass(slots=True, eq=False)
class Decision:
    """One recorded decision of one rule about one step. Treat as read-only.

    (Not a frozen dataclass on purpose: a frozen one costs ~1.5 µs more to build, several times per call.
    Compared and hashed by identity: each is one decision taken once, and a step's shared decisions are
    looked up by identity in :meth:`StepRecord.add_shared`'s chains.)
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
    in_spec: bool = False
    """A capability decision that allows a call of a tool or agent the spec names (one of its capabilities, a
    guardrail tool): the call's name is the spec's, not only its caller's (telemetry records it then)."""

    @property
    def blocked(self) -> bool:
        return self.outcome in _BLOCKING

    @classmethod
    def untimed(
        cls,
        rule: Rule,
        outcome: Outcome,
        phase: Phase | None,
        reason: str,
        capability: str | None = None,
        expression: str | None = None,
        in_spec: bool = False,
    ) -> Decision:
        """A decision taken the same way on many steps, built once and shared: it takes each step's time.

        For the allow decisions of the per-call path (capability, short-circuit, restriction): recording one
        costs a list append instead of an object and a clock read.
        """
        return cls(rule, outcome, phase, reason, capability, expression, at=_UNTIMED, in_spec=in_spec)

    def timed(self) -> Decision:
        """This decision taken now (a copy stamped with the current time)."""
        return self._taken_at(time.time())

    def _taken_at(self, at: float) -> Decision:
        """A copy of this decision taken at ``at``.

        Built field by field, not with ``dataclasses.replace``: an observed call copies each of its shared
        allow decisions, and ``replace`` (which walks the fields and re-checks them) costs as much Python as
        the rest of the decision's recording.
        """
        return Decision(
            self.rule,
            self.outcome,
            self.phase,
            self.reason,
            self.capability,
            self.expression,
            at,
            self.data,
            self.severity,
            self.in_spec,
        )


_BLOCKING = frozenset({Outcome.DENY, Outcome.REVIEW_REJECTED})
"""The outcomes that block a step (:attr:`Decision.blocked`)."""


class EngagementStatus(enum.StrEnum):
    ACTIVE = "active"
    STOPPED = "stopped"  # short-circuit fired: every later step is refused
    FAILED = "failed"  # a guardrail failed: no more tools may run
    CANCELLED = "cancelled"
    CLOSED = "closed"


class _Entry:
    """Never kept: only its ``__dict__`` is (see :func:`new_entry`)."""


def new_entry(inputs: Any) -> dict[str, Any]:
    """A call's ``{"inputs": ..., "outputs": None}`` as it sits in ``recent`` and ``history``.

    An ordinary ``dict``, made as an instance's ``__dict__`` so that CPython stores it as a split table: its
    keys are shared by every entry, and it takes 104 bytes instead of a literal's 184 -- a record keeps one
    per call, for as long as the engagement lives. Setting ``outputs`` keeps it split; anything else it is
    asked to do, it does as any dict.
    """
    holder = _Entry()
    holder.inputs = inputs  # type: ignore[attr-defined]
    holder.outputs = None  # type: ignore[attr-defined]
    return holder.__dict__


UNCHECKED: Any = object()
""":attr:`CallRecord.checking` of a call whose output is not being checked (``None`` is an output)."""


class CallRecord:
    """One invocation (or attempted invocation) of a tool or sub-agent.

    ``entry`` is the very dict that sits in ``recent[name]`` and ``history[name][i]``: completing the call
    updates the view in place. ``call_id`` is the host's id for the call, else one minted when first read.
    """

    __slots__ = ("_call_id", "checking", "ended_at", "entry", "error", "kind", "name", "started_at", "status")

    token: str | None = None
    """The call's name in a shared store's journal (its events point at it by this): only a
    :class:`SharedCallRecord` has one."""

    def __init__(
        self,
        name: str,
        kind: str,
        call_id: str | None,
        entry: dict[str, Any],
        started_at: float,
        ended_at: float | None = None,
        status: str = "pending",  # pending | completed | failed | denied | withheld
        error: str | None = None,
    ) -> None:
        self.name = name
        self.kind = kind  # "tool" | "agent"
        self._call_id = call_id
        self.entry = entry
        self.started_at = started_at
        self.ended_at = ended_at
        self.status = status
        self.error = error
        # The call's output while its checks run (EngagementState.complete_call): only they see it, as this
        # call's ``outputs``; the view shows ``null`` until they let it out.
        self.checking: Any = UNCHECKED

    @property
    def call_id(self) -> str:
        call_id = self._call_id
        if call_id is None:
            call_id = self._call_id = new_id()
        return call_id

    @property
    def inputs(self) -> dict[str, Any]:
        inputs: dict[str, Any] = self.entry["inputs"]
        return inputs

    @property
    def outputs(self) -> Any:
        return self.entry["outputs"]

    def __repr__(self) -> str:
        return f"CallRecord({self.name!r}, {self.kind!r}, call_id={self.call_id!r}, status={self.status!r})"


class SharedCallRecord(CallRecord):
    """A call of a record kept in a store: it has a :attr:`token` (a slot only these calls pay for)."""

    __slots__ = ("token",)  # shadows CallRecord.token, the None of unshared calls

    def __init__(
        self, name: str, kind: str, call_id: str | None, entry: dict[str, Any], started_at: float, token: str
    ) -> None:
        super().__init__(name, kind, call_id, entry, started_at)
        self.token = token


def chained(
    decisions: tuple[Decision, ...], decision: Decision, chains: Chains, limit: int = CHAINS_LIMIT
) -> tuple[Decision, ...] | None:
    """``decisions`` followed by ``decision``, as the tuple ``chains`` shares (``None``: ``chains`` holds
    ``limit`` tuples and this one is not among them)."""
    longer = chains.get((decisions, decision))
    if longer is None:
        if len(chains) >= limit:
            return None
        longer = chains[decisions, decision] = (*decisions, decision)
    return longer


class StepRecord:
    """What happened at one step and every decision taken on it; kept whether or not a guardian is set.

    ``kind`` names the AOS method the step corresponds to (``steps/toolCallRequest``, ``steps/message``, ...).
    ``aos`` holds the AOS JSON-RPC request(s) sent or built for it, when built. ``call`` is the call a tool
    step made, once it got that far.
    """

    __slots__ = (
        "_call",
        "_decisions",
        "_more",
        "_step_id",
        "at",
        "kind",
        "name",
        "observed_by",
        "turn_id",
    )

    def __init__(
        self,
        kind: str,
        step_id: str | None = None,
        turn_id: str = "",
        timestamp: datetime | None = None,
        name: str | None = None,
        call_id: str | None = None,
        decisions: list[Decision] | None = None,
        aos: list[dict[str, Any]] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self._step_id = step_id
        self.turn_id = turn_id
        self.at = time.time() if timestamp is None else timestamp.timestamp()
        """When the step started, as ``time.time()`` (the clock of :attr:`Decision.at`)."""
        self.name = name
        # The step's call once it got that far; until then the host's id for it, if any (one slot for both:
        # a step is kept for as long as its engagement).
        self._call: CallRecord | str | None = call_id
        # A tuple of shared untimed decisions (see add_shared) until the step takes one of its own; then a
        # list of its own, every decision in it timed.
        self._decisions: list[Decision] | tuple[Decision, ...] = decisions if decisions is not None else ()
        # [aos, payload] once either is asked for (most steps never need them).
        self._more: list[Any] | None = None if aos is None and payload is None else [aos, payload]
        # The observers watching this step (chosen when it started); decisions are dispatched to them only.
        self.observed_by: tuple[Any, ...] = ()

    @property
    def step_id(self) -> str:
        step_id = self._step_id
        if step_id is None:
            step_id = self._step_id = new_id()
        return step_id

    @property
    def call(self) -> CallRecord | None:
        """The call this step made, once it got that far."""
        call = self._call
        return call if isinstance(call, CallRecord) else None

    @call.setter
    def call(self, record: CallRecord | None) -> None:
        if record is not None:
            self._call = record
        elif isinstance(self._call, CallRecord):
            self._call = None

    @property
    def call_id(self) -> str | None:
        call = self._call
        return call.call_id if isinstance(call, CallRecord) else call

    @property
    def timestamp(self) -> datetime:
        return datetime.fromtimestamp(self.at, UTC)

    @property
    def decisions(self) -> list[Decision]:
        """Every decision taken on this step, in order (shared allow decisions stamped with the step's time)."""
        decisions = self._decisions
        if isinstance(decisions, list):
            return decisions
        listed = self._decisions = [self._stamped(d) for d in decisions]
        return listed

    def _stamped(self, decision: Decision) -> Decision:
        return decision._taken_at(self.at) if decision.at == _UNTIMED else decision

    def add(self, decision: Decision) -> None:
        """Record ``decision`` (an :meth:`~Decision.untimed` one takes the step's time)."""
        decisions = self._decisions
        if type(decisions) is not list:  # still the shared tuple: the step's own list from now on
            decisions = self.decisions
        decisions.append(self._stamped(decision))

    def add_shared(self, decision: Decision, chains: Chains, limit: int = CHAINS_LIMIT) -> None:
        """Record an untimed shared ``decision`` without allocating: the step's decisions so far and this
        one are a tuple from ``chains``, which every step that took the same decisions in the same order
        shares (an allowed call of one capability takes the same four every time).

        ``chains`` maps (the tuple so far, the decision) to the longer tuple; decisions hash by identity, so
        the lookup is a few pointer hashes. Past ``limit`` entries it grows no more and the decision is
        appended to a list of the step's own.
        """
        decisions = self._decisions
        longer = chained(decisions, decision, chains, limit) if type(decisions) is tuple else None
        if longer is None:
            self.add(decision)
        else:
            self._decisions = longer

    def _extra(self) -> list[Any]:
        more = self._more
        if more is None:
            more = self._more = [None, None]
        return more

    @property
    def aos(self) -> list[dict[str, Any]]:
        more = self._extra()
        aos: list[dict[str, Any]] | None = more[0]
        if aos is None:
            aos = more[0] = []
        return aos

    @property
    def payload(self) -> dict[str, Any]:
        more = self._extra()
        payload: dict[str, Any] | None = more[1]
        if payload is None:
            payload = more[1] = {}
        return payload

    @property
    def outcome(self) -> Outcome:
        """The step's final outcome: the first blocking decision, else a review still pending, else modify,
        else no-decision, else allow."""
        pending = modified = undecided = False
        for d in self._decisions:  # one pass, no frame per decision: telemetry reads this at every step
            outcome = d.outcome
            if outcome in _BLOCKING:
                return outcome
            if d.rule is Rule.REVIEW:
                pending = outcome is Outcome.REVIEW_PENDING  # the last review decides
            if outcome is Outcome.MODIFY:
                modified = True
            elif outcome is Outcome.NO_DECISION:
                undecided = True
        if pending:
            return Outcome.REVIEW_PENDING
        if modified:
            return Outcome.MODIFY
        return Outcome.NO_DECISION if undecided else Outcome.ALLOW

    def __repr__(self) -> str:
        return f"StepRecord({self.kind!r}, name={self.name!r}, outcome={self.outcome.value!r})"


class DirectCallRecord(CallRecord):
    """A call its pipeline ran directly (no observer watched it, and nothing but shared allow decisions was
    taken on it so far): the record stands for its own step, holding the step's turn and decisions, until
    somebody reads that step (:class:`Steps`). Most steps are never read, and a StepRecord costs about as
    much memory as the call it made.

    Not locked: the :class:`~agentguard.record.EngagementState` that owns it holds its lock around each use.
    """

    __slots__ = ("held", "turn_id")

    # Both set by EngagementState.begin_direct right after CallRecord.__init__ (no __init__ of its own: a
    # frame and a super() look-up less on every direct call).
    turn_id: str
    held: tuple[Decision, ...] | StepRecord
    """The step's decisions (shared, untimed) until the step is read; then the StepRecord itself. The
    owning EngagementState extends the tuple under its lock (:meth:`EngagementState.add_shared`)."""

    def step(self) -> StepRecord:
        """The step of this call (a ``steps/toolCallRequest`` started when the call did), made once."""
        held = self.held
        if isinstance(held, StepRecord):
            return held
        step = StepRecord("steps/toolCallRequest", turn_id=self.turn_id, name=self.name)
        step.at = self.started_at
        step._call = self
        step._decisions = held
        self.held = step
        return step


StepRef = StepRecord | DirectCallRecord
"""A step as the pipeline holds it: its record, or a direct call's record standing for it."""


class Steps(Sequence[StepRecord]):
    """The steps of one engagement in order, as a read-only sequence that sees later steps as they come.

    A directly run call's record (:class:`DirectCallRecord`) stands in it for the call's step until the step
    is first read here; reading makes the :class:`StepRecord`, once, under the engagement's lock.
    """

    __slots__ = ("_items", "_lock", "append")

    def __init__(self, lock: Any) -> None:
        self._items: list[StepRef] = []
        self._lock = lock
        # Add the newest step (the pipeline's; a direct call's record adds itself under the lock): the list's
        # own method, called on every step.
        self.append: Callable[[StepRef], None] = self._items.append

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> StepRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepRecord]: ...

    def __getitem__(self, index: int | slice) -> StepRecord | list[StepRecord]:
        if isinstance(index, slice):
            return [self._read(i) for i in range(*index.indices(len(self._items)))]
        return self._read(index)

    def _read(self, index: int) -> StepRecord:
        item = self._items[index]
        if isinstance(item, StepRecord):
            return item
        with self._lock:
            item = self._items[index]
            if isinstance(item, StepRecord):
                return item
            step = self._items[index] = item.step()
            return step

    def __iter__(self) -> Iterator[StepRecord]:
        index = 0
        while index < len(self._items):  # a step added meanwhile is seen, as a list's iterator sees it
            yield self._read(index)
            index += 1

    def __reversed__(self) -> Iterator[StepRecord]:
        for index in range(len(self._items) - 1, -1, -1):
            yield self._read(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Steps | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=False))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"Steps({list(self)!r})"
