"""Observers: see every engagement turn, step and decision as it happens (telemetry, audit, dashboards).

An observer subclasses :class:`Observer` and overrides what it needs; every method is a no-op by default.
The Guard calls them synchronously, in the thread or task of the step, so an observer may make its own
context current for the step (an OpenTelemetry span, say) and the tool's own work nests inside it::

    from agentguard import Guard
    from agentguard.observers import Observer

    class PrintDenials(Observer):
        def decision(self, state, step, decision):
            if decision.blocked:
                print(f"{step.name}: denied by {decision.rule.value}: {decision.reason}")

    guard = Guard.from_file("agent.yaml", observers=[PrintDenials()])

Observers observe; they cannot change a decision. An exception raised inside one is logged and swallowed:
telemetry never breaks the agent (policy code, by contrast, fails closed).

An observer whose interest can change while the Guard runs (telemetry, once an OpenTelemetry SDK is set up
globally) looks again in :meth:`Observer.refresh`, once per turn, so that :meth:`Observer.active`, asked at
every step, stays a cheap read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar

from agentguard.record import Decision, EngagementState, StepRecord

__all__ = ["Observer", "Observers"]

logger = logging.getLogger("agentguard.observers")


class Observer:
    """Base class of observers. Override any of the methods; the defaults do nothing."""

    steady: ClassVar[bool] = False
    """Set ``True`` on an observer whose :meth:`active` answers the same from one :meth:`refresh` to the next
    (telemetry: it reads what its refresh found). The Guard then asks it when it is added and after each
    refresh, not at every step: a guard whose only observer is idle telemetry pays nothing per step. (A
    subclass of telemetry whose ``active()`` answers otherwise sets it back to ``False``.)"""

    def active(self) -> bool:
        """Whether this observer wants the turn or step about to start (asked once at its start).

        Telemetry answers ``False`` while no OpenTelemetry SDK is configured, so that an idle observer costs
        a guarded call almost nothing. Asked at every step: keep it a cheap read, and do in :meth:`refresh`
        what costs more.
        """
        return True

    def refresh(self) -> None:
        """Look again at what :meth:`active` answers from; the default does nothing.

        Called at the start of each turn, before :meth:`active` is asked for the turn, and when an engagement
        that started no turn ends (a one-call engagement of ``auto_engagement``), so that the engagements
        after it see the change. Telemetry re-reads the global OpenTelemetry providers here: a provider set
        globally later is picked up at the next turn. Shielded like every hook: an exception is logged.
        """

    def turn_started(self, state: EngagementState) -> Any:
        """An engagement turn starts (the engagement was entered, or ``new_turn()`` was called).

        The return value is handed back to :meth:`turn_ended`.
        """
        return None

    def turn_ended(self, state: EngagementState, token: Any) -> None:
        """The turn ends (the engagement was left, closed, or a new turn started)."""

    def engagement_ended(self, state: EngagementState) -> None:
        """The engagement was closed (its last turn has ended); ``state.status`` says how it ended."""

    def step_started(self, state: EngagementState, step: StepRecord) -> Any:
        """A step starts, before any check. The return value is handed back to :meth:`step_ended`."""
        return None

    def step_ended(
        self, state: EngagementState, step: StepRecord, token: Any, error: BaseException | None
    ) -> None:
        """The step ended: allowed and carried out (``error`` is ``None``), denied, or failed."""

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        """A check or the guardian decided something about the step."""


class Observers:
    """The observers of one Guard, called in order; each call is shielded from the others' failures.

    Each hook is dispatched only to the observers that override it, and step hooks only to those that are
    :meth:`~Observer.active` when the step starts: a guard whose only observer is idle telemetry pays one
    cheap check per step, not one call per decision. :meth:`~Observer.refresh` runs once per turn, before
    the turn's :meth:`~Observer.active`.
    """

    __slots__ = ("_asked", "_ends", "_items", "_refreshers", "_steady_on", "_steppers", "_turners", "quiet")

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._items: tuple[Observer, ...] = ()
        self._turners: tuple[Observer, ...] = ()
        self._steppers: tuple[Observer, ...] = ()
        self._asked = False  # a stepper is not steady: every step asks them all (stepping)
        self._steady_on: tuple[Observer, ...] = ()  # the steady steppers active as of the last look
        self.quiet = True
        """No observer wants a step now: :meth:`stepping` would answer ``()`` (read by the per-call path
        instead of calling it)."""
        self._ends: tuple[Observer, ...] = ()
        self._refreshers: tuple[Observer, ...] = ()
        for observer in observers:
            self.add(observer)

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def items(self) -> tuple[Observer, ...]:
        """Every observer, in the order they are called."""
        return self._items

    def add(self, observer: Observer) -> None:
        self._items = (*self._items, observer)
        kind = type(observer)

        def overrides(*names: str) -> bool:
            return any(getattr(kind, n) is not getattr(Observer, n) for n in names)

        if overrides("turn_started", "turn_ended"):
            self._turners = (*self._turners, observer)
        if overrides("step_started", "step_ended", "decision"):
            self._steppers = (*self._steppers, observer)
            self._asked = self._asked or not observer.steady
        if overrides("engagement_ended"):
            self._ends = (*self._ends, observer)
        if overrides("refresh"):
            self._refreshers = (*self._refreshers, observer)
        self._look()

    def _look(self) -> None:
        """Ask the steady steppers whether they are active (:attr:`Observer.steady`)."""
        if not self._asked:
            self._steady_on = tuple(o for o in self._steppers if _safe(o.active, False))
        self.quiet = not self._asked and not self._steady_on

    def stepping(self) -> tuple[Observer, ...]:
        """The observers that want the step about to start (checked once, at its start)."""
        if not self._asked:
            return self._steady_on  # all steady: as the last look found them
        wanting: tuple[Observer, ...] = ()
        for observer in self._steppers:  # a loop, not _safe in a comprehension: this runs at every step
            try:
                if observer.active():
                    wanting = (*wanting, observer)
            except Exception:
                _failed(observer)
        return wanting

    def refresh(self) -> None:
        """Each observer's :meth:`~Observer.refresh` (at a turn's start; an engagement's end without a turn)."""
        for observer in self._refreshers:
            _safe(observer.refresh, None)
        self._look()

    def turn_started(self, state: EngagementState) -> list[tuple[Observer, Any]]:
        if self._refreshers:
            self.refresh()
        return [(o, _safe(o.turn_started, None, state)) for o in self._turners if _safe(o.active, False)]

    @staticmethod
    def turn_ended(state: EngagementState, turn: list[tuple[Observer, Any]]) -> None:
        for observer, token in reversed(turn):
            _safe(observer.turn_ended, None, state, token)

    def engagement_ended(self, state: EngagementState) -> None:
        for observer in self._ends:
            _safe(observer.engagement_ended, None, state)

    @staticmethod
    def step_started(observers: tuple[Observer, ...], state: EngagementState, step: StepRecord) -> list[Any]:
        return [_safe(o.step_started, None, state, step) for o in observers]

    @staticmethod
    def step_ended(
        observers: tuple[Observer, ...],
        state: EngagementState,
        step: StepRecord,
        tokens: list[Any],
        error: BaseException | None,
    ) -> None:
        for observer, token in zip(reversed(observers), reversed(tokens), strict=False):
            _safe(observer.step_ended, None, state, step, token, error)

    @staticmethod
    def decision(
        observers: tuple[Observer, ...], state: EngagementState, step: StepRecord, decision: Decision
    ) -> None:
        for observer in observers:
            try:
                observer.decision(state, step, decision)
            except Exception:
                _failed(observer)


def _failed(observer: object) -> None:
    logger.exception("agentguard observer %r failed; the agent goes on", observer)


def _safe(method: Any, default: Any, *args: Any) -> Any:
    try:
        return method(*args)
    except Exception:
        _failed(getattr(method, "__self__", method))
        return default
