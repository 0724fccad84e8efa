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

import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, overload

from agentguard.errors import StoreUnavailable
from agentguard.record._journal import (
    Appended,
    Event,
    Journal,
    Posted,
    Snapshot,
    call_event,
    decode_event,
    encode_event,
    tag,
    untag,
)
from agentguard.record._loop import LoopDetector
from agentguard.record._types import (
    UNCHECKED,
    CallRecord,
    Chains,
    Decision,
    DirectCallRecord,
    EngagementStatus,
    SharedCallRecord,
    StepRecord,
    StepRef,
    Steps,
    User,
    _Entry,
    chained,
    new_entry,
)
from agentguard.record._values import new_id
from agentguard.record._view import QuickCheck, ViewPlan

__all__ = ["EngagementState"]

_SHORT_REASON = 500
"""How much of a reason an ``r`` or ``s`` event the store refused as too large keeps (:meth:`refuse`)."""

_REFUSED_OUTPUT = "its output was larger than the engagement store takes: not kept in the store"
"""The error a ``c`` event the store refused as too large is sent again with, its output left out."""


_new = object.__new__
_init = CallRecord.__init__
"""Calling a class costs a third more than its ``__new__`` and ``__init__`` called as functions (CPython 3.11
specializes neither class call): :meth:`EngagementState.begin_direct` makes each direct call's record so."""


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
        if engagement_id == "":
            # Not "no id": every open of "" would be a fresh engagement, its loop count and history gone.
            raise ValueError("engagement_id may not be empty (None: a new engagement of its own id)")
        self.id = new_id() if engagement_id is None else engagement_id
        self.user = user
        self._started_at = started_at or datetime.now(UTC)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.status = EngagementStatus.ACTIVE
        self.status_reason: str | None = None
        self.turn_id = new_id()
        self._lock = threading.RLock()
        self.calls: list[CallRecord] = []
        self.steps = Steps(self._lock)
        # Calls paused in output review by a host that re-runs the step on resume (LangGraph interrupt):
        # call id -> what the pipeline needs to finish the review without running the tool again.
        # (step, record, rule, output, the host's inputs of the call as it made it: None when not known).
        self.awaiting_review: dict[str, tuple[Any, CallRecord, Any, Any, Any]] = {}
        # Identity-only credentials by (kind, subject), built once per engagement (see agentguard.policy).
        self.credentials: dict[tuple[str, str], Any] = {}
        # The same, by the id of the capability rule a call ran under: (the rule, its credentials or None).
        self.rule_credentials: dict[int, tuple[Any, Any]] = {}
        self._recent: dict[str, Any] = {}
        self._names: list[str] = []
        self._history: dict[str, Any] = {"_list": self._names, "_total": 0}
        # Every attempted name (invoked or refused), for the short-circuit detector (decision 5).
        self._loop = LoopDetector(loop_window)
        self._user_view: dict[str, Any] = user.as_view() if user else {"id": None, "email": None}
        # The whole view, live (the very dicts above): what a restriction's quick closure is given (_holds).
        self._live: dict[str, Any] = {
            "recent": self._recent,
            "user": self._user_view,
            "history": self._history,
            "started_at": self._started_at,
        }
        # Calls begun but not yet completed, withheld or rolled back: what a graceful cancel waits for.
        self._in_flight: set[CallRecord] = set()  # by identity (a record is not compared by value)
        self._idle = threading.Condition(self._lock)
        self._idle_waiters = 0
        self.cancel_graceful = True
        # Shared through a store (see agentguard.record._journal): None keeps the record in this process only.
        self.journal: Journal | None = None
        self.version = 0  # the journal's version this copy has applied
        self._offset = 0  # calls invoked before the oldest event the store still keeps (history._total)
        self._outbox: list[str] = []  # encoded events not yet appended to the journal
        self._deltas: list[int] = []  # how much each changes history._total by
        # (position in the outbox, call, the epoch it was checked at) of unsent ``b`` events
        self._unsent: list[tuple[int, CallRecord, int]] = []
        # Bumped whenever events of other processes are applied (settle, reload): a call checked at an older
        # epoch was checked without them, and is checked again before its ``b`` is appended (unchecked).
        self._epoch = 0
        self._forced: set[int] = set()  # ids of unsent calls that ran anyway (the store's on_failure: allow)
        self._voided: set[str] = set()  # tokens of calls whose ``b`` the store refused for good (refuse)
        self._by_token: dict[str, CallRecord] = {}
        # A posted append (Pipelined.post): the outbox's first ``n`` events were sent, their answer not read yet.
        self.posted: tuple[Posted, int] | None = None
        self.commit_lock = threading.Lock()  # one append in flight per record, sync or async (the driver)
        self.acommit_lock: Any = None  # (loop, asyncio.Lock): async commits of one loop queue there
        self.commit_thread: int | None = None  # the loop's thread, while an async commit holds the lock

    @property
    def started_at(self) -> datetime:
        """When the engagement started (the view's ``started_at``)."""
        return self._started_at

    @started_at.setter
    def started_at(self, value: datetime) -> None:
        with self._lock:
            self._started_at = self._live["started_at"] = value

    # -- the view -------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Invoked names in order (``history._list``). Denied attempts are not in it."""
        return self._names

    @property
    def total(self) -> int:
        """``history._total``: every call invoked, also those older than what a store keeps."""
        return self._offset + len(self._names)

    def view(self, own: CallRecord | None = None) -> dict[str, Any]:
        """The Engagement exactly as CEL sees it (a snapshot: later calls do not change it).

        ``own``: as the checks of that call see it (:meth:`bindings`): its output, while they judge it, is its
        ``outputs``, and it is the most recent call of its tool (a Python rule's view of the call it judges).
        """
        with self._lock:
            history_now, recent_now = self._history, self._recent
            if own is not None:
                entry = self._own_entry(own)
                history_now, recent_now = self._own_history(own, entry), self._own_recent(own, entry)
            history: dict[str, Any] = {
                "_list": list(self._names),
                "_total": self.total,
            }
            for name, entries in history_now.items():
                if not name.startswith("_"):
                    history[name] = [dict(e) for e in entries]
            recent = {k: (dict(v) if isinstance(v, dict) else v) for k, v in recent_now.items()}
            return {
                "started_at": self.started_at,
                "user": dict(self._user_view),
                "recent": recent,
                "history": history,
            }

    def bindings(self, plan: ViewPlan, own: CallRecord | None = None) -> dict[str, Any]:
        """The variables ``plan`` reads, and only the parts of ``recent`` and ``history`` it reads.

        ``own``: the call whose check this is: in ``recent`` it is its tool's call and the most recent one
        (:meth:`_own_recent`), whatever calls of the same tool began since, in other threads or tasks; its
        output, while its checks run, is its ``outputs`` there and in ``history`` (:meth:`complete_call`).
        """
        out: dict[str, Any] = {}
        entry = None if own is None else self._own_entry(own)
        if plan.reads_recent:
            recent = self._recent if own is None else self._own_recent(own, entry)
            one = plan.recent_one
            # ``found``, not ``entry``: that is the call's own, which its history below shows (read here as
            # another tool's entry, an output check over history judged that entry in place of the output).
            if one is not None:
                key, part = one
                found = recent.get(key)
                if found is None:
                    out["recent"] = {}
                elif type(found) is dict:
                    out["recent"] = {key: {part: found[part]}}
                else:
                    out["recent"] = {key: found}
            elif plan.recent_keys is None:
                out["recent"] = recent
            else:
                selected: dict[str, Any] = {}
                for key, wanted in plan.recent_parts:
                    found = recent.get(key)
                    if found is None:
                        continue
                    if wanted is None or type(found) is not dict:
                        selected[key] = found
                    else:
                        selected[key] = {part: found[part] for part in wanted}
                out["recent"] = selected
        if plan.reads_user:
            out["user"] = self._user_view
        if plan.reads_started_at:
            out["started_at"] = self.started_at
        if plan.reads_history:
            keys = plan.history_keys
            self._history["_total"] = self._offset + len(self._names)
            history = self._history if own is None else self._own_history(own, entry)
            if keys is None:
                out["history"] = history
            else:
                out["history"] = {key: history[key] for key in keys if key in history}
        return out

    # -- calls ----------------------------------------------------------------------------------------

    @overload
    def begin_call(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        kind: str = ...,
        call_id: str | None = ...,
        started_at: float | None = ...,
        short_circuit: None = ...,
        max_block: int = ...,
        after_the_fact: bool = ...,
    ) -> CallRecord: ...

    @overload
    def begin_call(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        kind: str = ...,
        call_id: str | None = ...,
        started_at: float | None = ...,
        short_circuit: int | None,
        max_block: int,
        after_the_fact: bool = ...,
    ) -> CallRecord | None: ...

    def begin_call(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        kind: str = "tool",
        call_id: str | None = None,
        started_at: float | None = None,
        short_circuit: int | None = None,
        max_block: int = 1,
        after_the_fact: bool = False,
    ) -> CallRecord | None:
        """Record an attempted call as the most recent one (decision 2: the pending call is visible).

        ``started_at``: when the call began (``time.time()``; default now), e.g. its step's time.
        ``after_the_fact``: a call a host reports once it ran (recorded, not checked): in a shared record its
        ``b`` goes with the next append as it is and is never checked again (:meth:`ran_unsent`), set under
        the same lock, so that another thread's commit never takes it for a call still to be checked.
        ``short_circuit``: ``None``, with nothing recorded, when attempting ``name`` now would repeat a block
        ``short_circuit`` times (as :meth:`would_short_circuit`, asked again here, under the lock that counts
        the attempt: calls begun in parallel since the caller asked would each pass its own look).
        """
        at = time.time() if started_at is None else started_at
        entry = new_entry(inputs)
        token = None if self.journal is None else secrets.token_hex(8)
        record = (
            CallRecord(name, kind, call_id, entry, at)
            if token is None
            else SharedCallRecord(name, kind, call_id, entry, at, token)
        )
        with self._lock:
            if short_circuit is None:
                self._loop.attempt(name)
            elif self._loop.attempt_unless_repeat(name, short_circuit, max_block) is not None:
                return None
            self._add_call(record)
            self._in_flight.add(record)
            if token is not None:
                self._by_token[token] = record
                self._unsent.append((len(self._outbox), record, self._epoch))
                self._emit(["b", token, name, kind, call_id, inputs, record.started_at], 1)
                if after_the_fact:
                    self._forced.add(id(record))
        return record

    def begin_direct(
        self,
        name: str,
        inputs: dict[str, Any],
        kind: str,
        call_id: str | None,
        decisions: tuple[Decision, ...],
        short_circuit: int | None,
        max_block: int,
        restriction: QuickCheck | None = None,
        checked: tuple[Decision, ...] | None = None,
    ) -> tuple[DirectCallRecord, bool | Exception] | None:
        """:meth:`begin_call` for a call its pipeline runs directly, whose record stands for its step (a
        :class:`~agentguard.record.DirectCallRecord` with the step's shared ``decisions`` so far), and whether
        its input restriction passed.

        ``restriction``: the call's input restriction (``None``: it has none, and the answer says ``True``),
        asked here (its ``quick`` closure) under the lock, once the call is the pending one (decision 2).
        Only its ``True`` passes: the step's decisions are then ``checked`` (the tuple the caller's chains
        share), and the answer says ``True``. Anything else records nothing, and the answer says ``False``, or
        is the exception the closure raised: the caller checks again the general way, which records why (as
        when there is no ``quick``).

        ``None``, with nothing recorded, when the call cannot begin this way: the engagement is not active,
        attempting ``name`` now would repeat a block ``short_circuit`` times (as :meth:`would_short_circuit`),
        or the record is shared through a store. The pipeline's general path then decides, and records why.
        """
        holder = _Entry()  # new_entry, written out: this is the per-call path
        holder.inputs = inputs  # type: ignore[attr-defined]
        holder.outputs = None  # type: ignore[attr-defined]
        entry: dict[str, Any] = holder.__dict__
        lock = self._lock
        lock.acquire()  # not `with`: its protocol costs as much again as the lock, on the per-call path
        try:
            if self.status is not EngagementStatus.ACTIVE or self.journal is not None:
                return None
            if short_circuit is None:
                self._loop.attempt(name)
            elif self._loop.attempt_unless_repeat(name, short_circuit, max_block) is not None:
                return None
            record = _new(DirectCallRecord)  # what DirectCallRecord(...) does, without the class call's cost
            _init(record, name, kind, call_id, entry, time.time())
            record.turn_id = self.turn_id
            record.held = decisions
            self._names.append(name)  # _add_call, written out: this is the per-call path
            entries = self._history.get(name)
            if entries is None:
                entries = self._history[name] = []
            entries.append(entry)
            recent = self._recent
            recent[name] = entry
            recent["_name"] = name
            self.calls.append(record)
            self._in_flight.add(record)
            self.steps.append(record)
            passed: bool | Exception = True
            if restriction is not None:  # no pass unless asked here, and held
                passed = False
                quick = restriction.quick
                if quick is None or checked is None:
                    return record, False
                # The closure is given the whole view, live, not the parts :meth:`bindings` selects: plain
                # Python reads only what the expression reads, and nothing changes the view while the lock is
                # held. The call is the newest one, made so just above: the view is its own (_own_recent).
                if restriction.plan.reads_history:
                    self._history["_total"] = self._offset + len(self._names)
                try:
                    passed = quick(self._live) is True
                except Exception as exc:  # no pass; the caller checks the general way, which records why
                    passed = exc
                except BaseException as exc:  # KeyboardInterrupt, ...: the call never began
                    self._take_back(record, type(exc).__name__, True)
                    self._settled(record)
                    raise
                if passed is True:
                    record.held = checked
        finally:
            lock.release()
        return record, passed

    @staticmethod
    def _own_entry(own: CallRecord) -> dict[str, Any]:
        """``own``'s entry as its checks read it: with the output they are judging, which the record's own
        entry shows as ``null`` until they let it out (:meth:`complete_call`)."""
        output = own.checking
        return own.entry if output is UNCHECKED else {**own.entry, "outputs": output}

    def _own_recent(self, own: CallRecord, entry: Any) -> dict[str, Any]:
        """``recent`` as the check of ``own`` reads it: ``entry`` (:meth:`_own_entry`) is ``recent[name]``,
        and ``name`` is ``recent._name``.

        A call of the same tool begun after ``own`` (calls in parallel: a model asks for several in one turn,
        and hosts run them at once) is ``recent[name]`` in the record, and an assertion reading it would judge
        that call's inputs or output in place of this one's: an address another call was checked with, an
        output another call returned. The record itself is not changed (a copy, only when it differs).
        """
        recent = self._recent
        name = own.name
        if recent.get(name) is entry and recent.get("_name") == name:
            return recent
        return {**recent, name: entry, "_name": name}

    def _own_history(self, own: CallRecord, entry: Any) -> dict[str, Any]:
        """``history`` as the check of ``own`` reads it: ``entry`` (:meth:`_own_entry`) in place of the
        record's. A copy of the tool's list (as long as its history) only while ``own``'s output is checked."""
        history = self._history
        original = own.entry
        if entry is original or own.name not in history:
            return history
        return {**history, own.name: [entry if e is original else e for e in history[own.name]]}

    def add_shared(self, step: DirectCallRecord, decision: Decision, chains: Chains) -> None:
        """Record a shared allow ``decision`` on a direct call's step (under the lock: the step may be being
        read)."""
        lock = self._lock
        lock.acquire()  # as in begin_direct
        try:
            held = step.held
            if type(held) is tuple:
                # Twice per allowed call: the chain's look-up is written out, a call saved when it is there.
                longer = chains.get((held, decision)) or chained(held, decision, chains)
                if longer is not None:
                    step.held = longer
                    return
            step.step().add_shared(decision, chains)
        finally:
            lock.release()

    def step_of(self, step: StepRef) -> StepRecord:
        """The :class:`StepRecord` ``step`` is or stands for (a direct call's is made, once, here)."""
        if isinstance(step, StepRecord):
            return step
        with self._lock:
            return step.step()

    def _add_call(self, record: CallRecord) -> None:
        """The call in ``history`` and ``recent`` (its attempt is counted by the caller)."""
        name, entry = record.name, record.entry
        self._names.append(name)
        entries = self._history.get(name)
        if entries is None:
            entries = self._history[name] = []
        entries.append(entry)
        self._recent[name] = entry
        self._recent["_name"] = name
        self.calls.append(record)

    def _settled(self, record: CallRecord) -> None:
        self._in_flight.discard(record)
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
            if self.journal is not None:
                self._journal_rollback(record, reason, attempted)
            self._take_back(record, reason, attempted)
            self._settled(record)

    def _take_back(self, record: CallRecord, reason: str, attempted: bool) -> None:
        if not attempted:
            self._loop.take_back(record.name)
        record.status = "denied"
        record.error = reason
        record.ended_at = time.time()
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

    def complete_call(
        self, record: CallRecord, outputs: Any, *, collect: bool = True, release: bool = True
    ) -> None:
        """Store a call's outputs (``null`` when ``collect_results`` is false).

        Decision 3: the output is checked before anyone else sees it. Until :meth:`release_call` lets it out,
        the view (``recent``, ``history``, ``exposes``, a store) shows the call's ``outputs`` as ``null``, and
        only the call's own checks see it (:meth:`bindings` with ``own``): a reader in another thread, or a
        parallel call's check, never sees an output its checks are still judging, or go on to withhold.
        ``release``: nothing is left to judge the output; it is let out here, under the same lock.
        """
        with self._lock:
            record.checking = outputs if collect else None
            record.status = "completed"
            record.ended_at = time.time()
            if release:
                self._release(record)

    def complete_direct(
        self,
        record: DirectCallRecord,
        outputs: Any,
        collect: bool,
        restriction: QuickCheck | None,
        held: tuple[Decision, ...] | None,
        checked: tuple[Decision, ...] | None,
    ) -> bool | Exception:
        """:meth:`complete_call` for a direct call (:meth:`begin_direct`), its output ``restriction`` asked
        here, under the same lock, as :meth:`begin_direct` asks the input one: the step's decisions go from
        ``held`` to ``checked`` when it passes, the output is let out, and the answer says ``True`` (also when
        there is no restriction). ``False`` otherwise (nothing to ask it with, or the step's decisions were not
        ``held``: somebody read the step meanwhile), or the exception the closure raised: the output is not let
        out, and the caller checks it the general way (:meth:`release_call` then lets it out).

        The closure is given the whole view, live (as in :meth:`begin_direct`), with this call's entry in it as
        its checks see it (:meth:`_own_entry`, :meth:`_own_recent`): copies showing the output it judges. The
        record's own entry shows ``null`` until the output is let out: :meth:`bindings`, :attr:`calls` and a
        record's ``outputs`` are read without the lock (a check in another thread, ``exposed()``), and must
        never see an output its check may yet withhold.
        """
        lock = self._lock
        lock.acquire()  # as in begin_direct
        try:
            record.status = "completed"
            record.ended_at = time.time()
            kept = outputs if collect else None
            if restriction is not None:
                quick = restriction.quick
                if quick is None or checked is None or record.held is not held:
                    record.checking = kept
                    return False
                name = record.name
                plan = restriction.plan
                one = plan.recent_one
                if one is not None and one[0] == name and not plan.reads_history:
                    # The common shape, one part of this call's own entry (``recent["x"].outputs...``): the
                    # view is that part alone, as the general check binds it (EngagementState.bindings).
                    part = one[1]
                    seen = kept if part == "outputs" else record.entry[part]
                    live = {
                        "recent": {name: {part: seen}},
                        "user": self._user_view,
                        "started_at": self._started_at,
                    }
                else:
                    # Copies made with .copy() and item sets: ``{**d, k: v}`` costs three times as much here.
                    entry = record.entry.copy()
                    entry["outputs"] = kept
                    recent = self._recent.copy()
                    recent[name] = entry
                    recent["_name"] = name
                    live = self._live.copy()
                    live["recent"] = recent
                    if plan.reads_history:
                        self._history["_total"] = self._offset + len(self._names)
                        live["history"] = self._own_history(record, entry)
                passed: bool | Exception = False
                try:
                    passed = quick(live) is True
                except Exception as exc:  # no pass (see begin_direct)
                    passed = exc
                if passed is not True:
                    record.checking = kept
                    return passed
                record.held = checked
            record.entry["outputs"] = kept
            in_flight = self._in_flight  # _settled, written out: this is the per-call path
            in_flight.discard(record)
            if self._idle_waiters and not in_flight:
                self._idle.notify_all()
            return True
        finally:
            lock.release()

    def release_call(self, record: CallRecord, outputs: Any = UNCHECKED) -> None:
        """Let a completed call's output out into the view: its checks passed (:meth:`complete_call`).

        ``outputs``: what to let out when the record holds no output under check: a call paused in output
        review whose record was rebuilt from the store meanwhile (the held output came back with the pause).
        """
        with self._lock:
            if record.checking is UNCHECKED:
                if outputs is UNCHECKED or record.error is not None:  # let out before, or withheld
                    return
                record.checking = outputs
                record.status = "completed"
            self._release(record)

    def _release(self, record: CallRecord) -> None:
        kept = record.checking
        record.checking = UNCHECKED
        record.entry["outputs"] = kept
        self._settled(record)  # in flight until its output is let out (or withheld): a graceful cancel waits
        if self.journal is not None:
            self._emit(["c", record.token, kept, "completed", None])

    def withhold_call(self, record: CallRecord, *, reason: str, status: str = "withheld") -> None:
        """The call happened but its outputs may not be used: keep it in history with ``outputs: null``."""
        with self._lock:
            record.checking = UNCHECKED
            record.entry["outputs"] = None
            record.status = status
            record.error = reason
            record.ended_at = time.time()
            self._settled(record)
            if self.journal is not None:
                self._emit(["c", record.token, None, status, reason])

    def attempted(self, name: str) -> None:
        """Count an attempt that was refused before it became a call (decision 5: refused attempts count)."""
        with self._lock:
            self._loop.attempt(name)
            if self.journal is not None:
                self._emit(["a", name])

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
                if self.journal is not None:
                    self._emit(["s", status.value, reason])

    @property
    def active(self) -> bool:
        return self.status is EngagementStatus.ACTIVE

    def new_turn(self) -> str:
        self.turn_id = new_id()
        return self.turn_id

    # -- sharing through a store (agentguard.record._journal) ---------------------------------------
    # Every change made here is also an event in the outbox; the pipeline appends the outbox to the store
    # (one round trip) and applies what other processes appended meanwhile. Events from elsewhere go through
    # the same private helpers as local changes, so a replayed record is the record.

    def meta(self) -> dict[str, Any]:
        """What a store keeps of the engagement besides its events (JSON, see :func:`tag`)."""
        user = self.user
        return {
            "user": None
            if user is None
            else tag(
                {
                    "id": user.id,
                    "email": user.email,
                    "name": user.name,
                    "organization": user.organization,
                    "metadata": dict(user.metadata),
                }
            ),
            "started_at": self.started_at.isoformat(),
            "metadata": tag(self.metadata),
        }

    @classmethod
    def shared(
        cls, engagement_id: str, snapshot: Snapshot, journal: Journal, *, loop_window: int = 300
    ) -> EngagementState:
        """The record of a store's engagement, rebuilt from its ``snapshot``, and kept in ``journal``.

        Raises :class:`~agentguard.StoreUnavailable` when the snapshot is not what this library writes: a
        user, start time or metadata of another shape, or an event that does not decode.
        """
        user, started_at, metadata = _from_meta(engagement_id, snapshot.meta)
        state = cls(
            user=user,
            engagement_id=engagement_id,
            started_at=started_at,
            metadata=metadata,
            loop_window=loop_window,
        )
        state.journal = journal
        try:
            state.reload(snapshot)
        except ValueError as exc:  # not events this library wrote: fail closed, as an append's answer does
            raise StoreUnavailable(
                f"the store's record of engagement {engagement_id!r} is malformed: it holds an event "
                f"agentguard did not write ({exc})"
            ) from None
        return state

    def reload(self, snapshot: Snapshot) -> None:
        """Rebuild the view from ``snapshot`` (this process missed more events than the store keeps).

        Calls this process has in flight, or whose output is still under check, keep their objects
        (matched by token), so that finishing them updates the rebuilt view; steps, turns and credentials are
        this process's own and stay. What this process changed that the store does not have yet (its
        outbox: calls begun in other threads meanwhile, refused attempts, a stop) is applied after the
        snapshot, as the store will have it: left out, this copy would count fewer calls and attempts than
        it made, or take up again an engagement it stopped.
        """
        with self._lock:
            reviving = {
                token: record
                for token, record in self._by_token.items()
                if record in self._in_flight or record.checking is not UNCHECKED
            }
            self._recent.clear()
            self._names.clear()
            self._history.clear()
            self._history.update({"_list": self._names, "_total": 0})
            self._loop = LoopDetector(self._loop.window)
            self.calls = []  # each comes back with its ``b`` (listed twice before)
            self.awaiting_review = {}
            self.status, self.status_reason = EngagementStatus.ACTIVE, None
            self._by_token = {}
            self._apply_all(snapshot.events, reviving)
            self._apply_all(self._outbox, reviving)
            for token, record in reviving.items():  # its ``b`` older than what the store keeps: still ours
                self._by_token[token] = record
                self.calls.append(record)
            self.version = snapshot.version
            self._offset = snapshot.total + sum(self._deltas) - len(self._names)
            self._epoch += 1  # the calls still to be checked were checked without what it brought

    def _emit(self, event: Event, total: int = 0) -> None:
        self._outbox.append(encode_event(event))
        self._deltas.append(total)

    def _void(self, position: int, replacement: Event) -> None:
        """Replace an unsent event in place (later events point at earlier ones by distance)."""
        self._outbox[position] = encode_event(replacement)
        self._deltas[position] = 0

    def _journal_rollback(self, record: CallRecord, reason: str, attempted: bool) -> None:
        # Also when its ``b`` is unsent: an append that timed out may have landed, and is sent again. Not
        # when the store refused its ``b`` for good (refuse): it never began there.
        token = record.token
        if token in self._voided:
            self._voided.discard(token)
            return
        self._emit(["r", token, reason, attempted], -1)

    def refuse(self, positions: Sequence[int]) -> None:
        """The store refused the outbox's events at ``positions`` for good (too large: see
        :class:`~agentguard.record.EventRefused`); each is replaced in place by what can be kept of it, so
        that the next append goes through instead of being refused again, and again. Call with
        :attr:`commit_lock` held (the outbox's positions are those of the append that was refused).

        A call's ``b`` becomes its ``a``: the attempt counts for loop detection on every worker, the call
        (being denied) does not count in ``history``; a call that ran anyway (``on_failure: allow``) keeps its
        ``b`` without its inputs. A ``c`` keeps the call's end without its output (when it was withheld for
        this, the withheld ``c`` follows); an ``r`` or an ``s`` keeps its meaning with its reason cut short;
        anything else is nothing.
        """
        with self._lock:
            for position in sorted(set(positions)):
                if not 0 <= position < len(self._outbox):
                    continue
                event = decode_event(self._outbox[position])
                kind, token = event[0], _begun(event)
                if token is not None:
                    record = self._by_token.get(token)
                    if record is not None and id(record) in self._forced and event[5] is not None:
                        self._outbox[position] = encode_event([*event[:5], None, event[6]])
                        continue
                    self._void(position, ["a", event[2]])
                    self._unsent = [unsent for unsent in self._unsent if unsent[0] != position]
                    self._uncount_rollback(token)
                    self._voided.add(token)
                elif kind == "c" and len(event) == 5 and event[2] is not None:
                    self._void(position, ["c", event[1], None, event[3], _REFUSED_OUTPUT])
                elif kind in ("r", "s") and len(event) > 2 and _long_text(event[2]):
                    event[2] = event[2][:_SHORT_REASON] + "..."
                    self._outbox[position] = encode_event(event)  # its change to history._total stays
                else:
                    self._void(position, ["x"])

    def unsent(self, record: CallRecord) -> bool:
        """Whether ``record``'s ``b`` event is still waiting to be appended."""
        with self._lock:
            return any(unsent is record for _, unsent, _ in self._unsent)

    def ran_unsent(self, record: CallRecord) -> None:
        """``record`` runs although its ``b`` event could not be appended (the store's ``on_failure`` is
        ``allow``): it goes with the next append as it is, and is never checked again."""
        with self._lock:
            self._forced.add(id(record))

    def await_review(self, call_id: str, held: tuple[Any, CallRecord, Any, Any, Any]) -> None:
        """A call paused in output review: its output is kept so that the resumed call does not run again,
        here or, through the store, in any other process."""
        with self._lock:
            self._settled(held[1])  # it waits for the host to resume it, not for anything in this process
            self.awaiting_review[call_id] = held
            if self.journal is not None:
                self._emit(["p", held[1].token, call_id, held[3], held[4]])

    def resume_review(self, call_id: str) -> tuple[Any, CallRecord, Any, Any, Any] | None:
        """The call paused under ``call_id``, taken out (``None`` if there is none): it is being resumed."""
        with self._lock:
            held = self.awaiting_review.pop(call_id, None)
            if held is not None and self.journal is not None:
                self._emit(["u", call_id])
            return held

    def batch(
        self, max_bytes: int | None = None, max_events: int | None = None, *, end: int | None = None
    ) -> tuple[list[str], int] | None:
        """The events to append next and how they change ``history._total``; ``None`` when there are none.
        Call with :attr:`commit_lock` held, then :meth:`settle`.

        Bounded (a store's one round trip: ``max_bytes`` of encoded events, ``max_events`` events), it is the
        longest prefix of the outbox within them -- at least its first event, whose size the store checks
        itself -- and, with ``end``, of its first ``end`` events. ``total`` is the change of *those* events
        only, so that a prefix that landed and was settled is never counted again with the rest (see
        :meth:`waiting`, :meth:`unchecked`)."""
        with self._lock:
            stop = len(self._outbox) if end is None else min(end, len(self._outbox))
            if stop == 0:
                return None
            count = stop
            if max_bytes is not None or max_events is not None:
                count = _fitting(self._outbox, stop, max_bytes, max_events)
            return self._outbox[:count], sum(self._deltas[:count])

    def waiting(self) -> int:
        """How many events the outbox holds (a :meth:`batch` of them all is the whole outbox)."""
        with self._lock:
            return len(self._outbox)

    def unchecked(self) -> tuple[int, bool]:
        """The outbox's position of the first ``b`` event of a call still to be checked against the store
        (:meth:`_checking`), the outbox's length when there is none; and whether any such call was checked
        before the record last applied events of other processes (:meth:`settle`, :meth:`reload`).

        The events before that ``b`` record what happened already and may be appended whatever came before
        (a non-exclusive commit sends only them); that ``b`` and everything after it go in the one exclusive
        append its call's commit makes: a ``b`` appended non-exclusively was never compared with what other
        processes recorded meanwhile. A call checked before other processes' events were applied is checked
        again (:meth:`recheck`) before any exclusive append: compared at the version after those events, it
        would land although it was checked without them."""
        with self._lock:
            end, stale, epoch = len(self._outbox), False, self._epoch
            for position, record, checked_at in self._unsent:
                if self._checking(record):
                    end = min(end, position)
                    stale = stale or checked_at != epoch
            return end, stale

    def _checking(self, record: CallRecord) -> bool:
        """Whether unsent ``record`` is still to be checked against the store: begun by a flow whose exclusive
        commit has not happened yet (pending), not run anyway under ``on_failure: allow``. A call denied (its
        take-back follows it) or recorded after the fact (ended already) goes as any record of what happened."""
        return record.status == "pending" and id(record) not in self._forced

    def recheck(self) -> None:
        """Take back every call still to be checked (see :meth:`unchecked`) without an append: its ``b``
        cannot go in one exclusive append (what follows it in the outbox is more than one round trip), or
        the record applied what other processes appended since they were checked. Each is checked
        again by its flow (status ``recheck``), as after a refused exclusive append. Call with
        :attr:`commit_lock` held."""
        with self._lock:
            self._recheck_unsent(set(), checked_only=True)

    def settle(self, sent: int, appended: Appended) -> bool:
        """Apply the store's answer to an append of the outbox's first ``sent`` events.

        Returns ``False`` when it refused an exclusive append: then every call whose ``b`` event was in it is
        taken back out (status ``recheck``: its flow checks it again) and the missed events are applied. The
        record the store answered with after a gap (``reloaded``) is reloaded; a bare ``gap`` is left to the
        caller, who loads the record.
        """
        reloaded = appended.reloaded
        # Decoded before anything changes (a malformed event raises here); after a gap, the record the store
        # answered with tells which b events landed.
        missed = [decode_event(text) for text in (appended.missed if reloaded is None else reloaded.events)]
        with self._lock:
            if appended.ok:
                for position, record, _ in self._unsent:
                    if position < sent:
                        self._forced.discard(id(record))
                self._unsent = [(p - sent, r, e) for p, r, e in self._unsent if p >= sent]
                del self._outbox[:sent]
                del self._deltas[:sent]
            else:
                self._recheck_unsent({_begun(event) for event in missed} - {None}, checked_only=False)
            self._landed(appended.missed if reloaded is None else reloaded.events)
            if reloaded is not None:
                self.reload(reloaded)
                return appended.ok
            if not appended.gap:
                for event in missed:
                    self._apply(event)
                if missed:
                    self._epoch += 1
            self.version = appended.version
            self._offset = appended.total + sum(self._deltas) - len(self._names)
            return appended.ok

    def _landed(self, logged: Sequence[str]) -> None:
        """Void the outbox's ``b`` and ``r`` events whose copy the store's answer shows in the log (``logged``):
        an append whose answer was lost landed after all. The store leaves out such a copy only among the
        events after the version the caller had seen (:func:`~agentguard.record.fresh_events`); this record's
        version now is past it, so sent again they would count in ``history._total`` twice -- an ``r`` one
        too few. A ``b`` still to be checked is not touched: its own exclusive commit decides it."""
        if not logged or not self._outbox:
            return
        names = {name for name in map(call_event, logged) if name is not None}
        if not names:
            return
        unsent = {position: record for position, record, _ in self._unsent}
        for position, text in enumerate(self._outbox):
            name = call_event(text)
            if name is None or name not in names:
                continue
            record = unsent.get(position)
            if record is not None:
                if self._checking(record):
                    continue
                self._forced.discard(id(record))
                self._unsent = [entry for entry in self._unsent if entry[0] != position]
            self._void(position, ["x"])

    def _recheck_unsent(self, landed: set[str | None], *, checked_only: bool) -> None:
        """Void the unsent ``b`` events (but those of calls that ran anyway) and take their calls back to
        be checked again; ``landed``: the calls whose ``b`` the store has after all. ``checked_only``: only
        those of calls still to be checked (:meth:`_checking`): the ``b`` of a denied call is sent with its
        take-back, that of a call recorded after the fact with its end, as any record of what happened."""
        kept: list[tuple[int, CallRecord, int]] = []
        for unsent in self._unsent:
            position, record, _ = unsent
            if id(record) in self._forced or (checked_only and not self._checking(record)):
                kept.append(unsent)
                continue
            self._void(position, ["x"])
            if record.token not in landed:
                # Its ``b`` never counted in the store's total: a take-back of it still to send
                # (the call was refused when an append timed out) must not count either.
                self._uncount_rollback(record.token)
            if record.status == "denied":
                continue  # taken back already, its attempt counted: nobody checks it again
            self._take_back(record, "checked again: the engagement changed in another process", False)
            record.status = "recheck"
            self._settled(record)
        self._unsent = kept

    def _uncount_rollback(self, token: str | None) -> None:
        """The unsent ``r`` of call ``token``, whose ``b`` never counted in the store, is voided: it takes back
        nothing a reader has (no reader knows the call), and kept as an ``r`` it would change
        ``history._total`` -- by nothing as sent, but by +1 where a store leaves it out as a copy of one that
        landed (:func:`~agentguard.record.fresh_events` takes every ``r`` it leaves out as a -1)."""
        for position, text in enumerate(self._outbox):
            if self._deltas[position] == -1:
                event = decode_event(text)
                if event[0] == "r" and event[1] == token:
                    self._void(position, ["x"])

    def _apply_all(self, texts: Sequence[str], reviving: dict[str, CallRecord] | None = None) -> None:
        """Apply ``texts``; ``reviving``: this process's calls in flight during a reload, by token (each
        takes its place in the view when its ``b`` comes, and leaves the dict)."""
        for text in texts:
            self._apply(decode_event(text), reviving)

    def _call(self, token: Any) -> CallRecord | None:
        return self._by_token.get(token) if type(token) is str else None

    def _apply(self, event: Event, reviving: dict[str, CallRecord] | None = None) -> None:
        """One event of the journal (another process's change, or a replayed one). Unknown or malformed
        events are skipped, and so is a call's second ``b`` (an append sent again after a timeout) and an
        event of a call older than what the store keeps."""
        kind = event[0]
        if _begun(event) is not None:
            _, token, name, call_kind, call_id, inputs, started = event
            if token in self._by_token:
                return
            record = reviving.pop(token, None) if reviving else None  # ours, in flight, being reloaded
            if record is None:
                entry = new_entry(inputs)
                at = float(started) if type(started) in (int, float) else 0.0
                record = SharedCallRecord(
                    str(name), str(call_kind), str(call_id) if call_id else None, entry, at, token
                )
            self._by_token[token] = record
            self._loop.attempt(record.name)
            self._add_call(record)
        elif kind == "a" and len(event) == 2:
            self._loop.attempt(str(event[1]))
        elif kind == "r" and len(event) == 4:
            target = self._call(event[1])
            # Once: an ``r`` sent again (its append timed out, yet landed) must not take back a second attempt.
            if target is not None and target.status not in ("denied", "recheck"):
                self._take_back(target, str(event[2]), bool(event[3]))
        elif kind == "c" and len(event) == 5:
            target = self._call(event[1])
            if target is not None:
                target.entry["outputs"] = event[2]
                target.status = str(event[3])
                target.error = event[4]
                target.ended_at = time.time()
        elif kind == "s" and len(event) == 3:
            if self.status is EngagementStatus.ACTIVE:
                try:
                    self.status = EngagementStatus(event[1])
                except ValueError:
                    self.status = EngagementStatus.STOPPED
                self.status_reason = str(event[2])
        elif kind == "p" and len(event) in (4, 5):
            target = self._call(event[1])
            if target is not None and isinstance(event[2], str):
                # An event without the host's inputs (written before they were kept) resumes no call.
                asked = event[4] if len(event) == 5 and isinstance(event[4], dict) else None
                self.awaiting_review[event[2]] = (None, target, None, event[3], asked)
        elif kind == "u" and len(event) == 2 and isinstance(event[1], str):
            self.awaiting_review.pop(event[1], None)


def _from_meta(
    engagement_id: str, meta: Mapping[str, Any]
) -> tuple[User | None, datetime | None, dict[str, Any]]:
    """The user, start time and metadata a store keeps of an engagement (:meth:`EngagementState.meta`).

    A field that is missing takes its default (no user, started now, no metadata); one that is there but
    is not what ``meta()`` writes raises :class:`~agentguard.StoreUnavailable` naming it. Guessing would
    be worse: a user quietly dropped runs the agent as nobody, a start time reset to now gives a
    ``started_at`` assertion a fresh time budget.
    """

    def malformed(field: str, value: object, expected: str) -> StoreUnavailable:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return StoreUnavailable(
            f"the store's record of engagement {engagement_id!r} is malformed: {field} is {shown}, "
            f"not {expected}"
        )

    try:
        user_meta, metadata = untag(meta.get("user")), untag(meta.get("metadata"))
    except ValueError as exc:  # a value tagged as a time or as bytes that is not one
        raise StoreUnavailable(
            f"the store's record of engagement {engagement_id!r} is malformed: its user or metadata holds "
            f"a value tagged as a time or bytes that is not one ({exc})"
        ) from None
    user = None
    if user_meta is not None:
        if type(user_meta) is not dict or type(user_meta.get("id")) is not str:
            raise malformed("user", user_meta, "an object with a text id")
        for key in ("email", "name", "organization"):
            if not isinstance(user_meta.get(key), str | None):
                raise malformed(f"user.{key}", user_meta[key], "text or null")
        extra = user_meta.get("metadata")
        if not isinstance(extra, dict | None):
            raise malformed("user.metadata", extra, "an object or null")
        user = User(
            user_meta["id"],
            user_meta.get("email"),
            user_meta.get("name"),
            user_meta.get("organization"),
            dict(extra or {}),
        )
    if not isinstance(metadata, dict | None):
        raise malformed("metadata", metadata, "an object or null")
    started = meta.get("started_at")
    if started is None:
        return user, None, metadata or {}
    started_at = _iso_time(started)
    if started_at is None:
        raise malformed("started_at", started, "an ISO 8601 time with its offset")
    return user, started_at, metadata or {}


def _iso_time(value: object) -> datetime | None:
    """``value`` as the offset-aware time it spells (ISO 8601), else ``None``."""
    if type(value) is not str:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _long_text(value: object) -> bool:
    """Whether ``value`` is a text :meth:`EngagementState.refuse` would cut short."""
    return type(value) is str and len(value) > _SHORT_REASON


def _fitting(outbox: Sequence[str], stop: int, max_bytes: int | None, max_events: int | None) -> int:
    """How many of ``outbox``'s first ``stop`` events one round trip carries: at most ``max_events`` of them,
    of at most ``max_bytes`` in all (the events are ASCII: :func:`encode_event`), and never none."""
    if max_events is not None:
        stop = min(stop, max(1, max_events))
    if max_bytes is None:
        return stop
    size = 0
    for index in range(stop):
        size += len(outbox[index])
        if size > max_bytes:
            return max(1, index)
    return stop


def _begun(event: Event) -> str | None:
    """The token of a well-formed ``b`` event (a call began), else ``None``."""
    return event[1] if event[0] == "b" and len(event) == 7 and type(event[1]) is str else None
