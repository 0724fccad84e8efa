"""Observers see every turn, step and decision, and cannot break the agent."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentguard import Guard, RestrictionViolation
from agentguard.observers import Observer
from agentguard.record import Decision, EngagementState, StepRecord
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      lookup:
        input_restriction:
          assertion: recent["lookup"].inputs.ok
    """
)


class Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def turn_started(self, state: EngagementState) -> str:
        self.events.append(("turn", state.turn_id))
        return state.turn_id

    def turn_ended(self, state: EngagementState, token: Any) -> None:
        self.events.append(("turn-end", token))

    def engagement_ended(self, state: EngagementState) -> None:
        self.events.append(("end", state.status.value))

    def step_started(self, state: EngagementState, step: StepRecord) -> str:
        self.events.append(("step", step.name))
        return step.step_id

    def step_ended(
        self, state: EngagementState, step: StepRecord, token: Any, error: BaseException | None
    ) -> None:
        assert token == step.step_id
        self.events.append(("step-end", step.name, type(error).__name__ if error else None))

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        self.events.append(("decision", decision.rule.value, decision.outcome.value))


class Broken(Observer):
    def step_started(self, state: EngagementState, step: StepRecord) -> None:
        raise RuntimeError("observer bug")

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        raise RuntimeError("observer bug")


def test_observers_see_turns_steps_and_decisions_in_order() -> None:
    recorder = Recorder()
    guard = Guard.from_yaml(SPEC, observers=[recorder])

    @guard.tool
    def lookup(ok: bool) -> str:
        return "found"

    with guard.engagement() as eng:
        first_turn = eng.state.turn_id
        lookup(ok=True)
        with pytest.raises(RestrictionViolation):
            lookup(ok=False)
        second_turn = eng.new_turn()
    assert recorder.events == [
        ("turn", first_turn),
        ("step", "lookup"),
        ("decision", "capability", "allow"),
        ("decision", "restriction", "allow"),
        ("step-end", "lookup", None),
        ("step", "lookup"),
        ("decision", "capability", "allow"),
        ("decision", "restriction", "deny"),
        ("step-end", "lookup", "RestrictionViolation"),
        ("turn-end", first_turn),
        ("turn", second_turn),
        ("turn-end", second_turn),
        ("end", "closed"),
    ]
    eng.close()  # closing twice tells observers once
    assert recorder.events[-1] == ("end", "closed")
    assert recorder.events.count(("end", "closed")) == 1


def test_a_failing_observer_is_logged_and_the_agent_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    guard = Guard.from_yaml(SPEC, observers=[Broken()])
    guard.add_observer(recorder)

    @guard.tool
    def lookup(ok: bool) -> str:
        return "found"

    with caplog.at_level(logging.ERROR, logger="agentguard.observers"), guard.engagement():
        assert lookup(ok=True) == "found"
    assert "observer bug" in caplog.text
    assert ("step-end", "lookup", None) in recorder.events


class Refreshing(Observer):
    """Records when it is refreshed and asked whether it is active."""

    def __init__(self, *, broken: bool = False) -> None:
        self.events: list[str] = []
        self.broken = broken

    def refresh(self) -> None:
        self.events.append("refresh")
        if self.broken:
            raise RuntimeError("refresh bug")

    def active(self) -> bool:
        self.events.append("active")
        return True

    def turn_started(self, state: EngagementState) -> None:
        self.events.append("turn")

    def step_started(self, state: EngagementState, step: StepRecord) -> None:
        self.events.append("step")


def _lookup(guard: Guard) -> Any:
    @guard.tool
    def lookup(ok: bool) -> str:
        return "found"

    return lookup


def test_refresh_runs_once_per_turn_before_active() -> None:
    observer = Refreshing()
    guard = Guard.from_yaml(SPEC, observers=[observer])
    lookup = _lookup(guard)
    with guard.engagement() as eng:
        lookup(ok=True)
        lookup(ok=True)
        eng.new_turn()
        lookup(ok=True)
    turn = ["refresh", "active", "turn"]
    step = ["active", "step"]
    assert observer.events == [*turn, *step, *step, *turn, *step]


def test_a_raising_refresh_is_logged_and_the_turn_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    observer = Refreshing(broken=True)
    guard = Guard.from_yaml(SPEC, observers=[observer])
    lookup = _lookup(guard)
    with caplog.at_level(logging.ERROR, logger="agentguard.observers"), guard.engagement():
        assert lookup(ok=True) == "found"
    assert "refresh bug" in caplog.text
    assert observer.events == ["refresh", "active", "turn", "active", "step"]


def test_an_engagement_without_a_turn_refreshes_when_it_ends() -> None:
    observer = Refreshing()
    guard = Guard.from_yaml(SPEC, observers=[observer], auto_engagement=True)
    lookup = _lookup(guard)
    lookup(ok=True)  # a one-call engagement: no turn
    lookup(ok=True)
    assert observer.events == ["active", "step", "refresh", "active", "step", "refresh"]
    with guard.engagement():  # one with a turn refreshes at its start only
        lookup(ok=True)
    assert observer.events[6:] == ["refresh", "active", "turn", "active", "step"]


class Steady(Refreshing):
    """A steady observer (``steady = True``): its ``active()`` answers what its last refresh found."""

    steady = True

    def __init__(self, *, on: bool = True, broken_active: bool = False) -> None:
        super().__init__()
        self.on = on
        self.found = on
        self.broken_active = broken_active

    def refresh(self) -> None:
        super().refresh()
        self.found = self.on

    def active(self) -> bool:
        self.events.append("active")
        if self.broken_active:
            raise RuntimeError("active bug")
        return self.found


def test_a_steady_observer_is_asked_at_each_refresh_not_at_each_step() -> None:
    observer = Steady()
    guard = Guard.from_yaml(SPEC, observers=[observer])
    lookup = _lookup(guard)
    assert observer.events == ["active"]  # looked at when added
    observer.events.clear()
    with guard.engagement() as eng:
        lookup(ok=True)
        lookup(ok=True)
        eng.new_turn()
        lookup(ok=True)
    # Each turn: refresh, the look after it, the turn's own question (turn_started), then its steps unasked.
    turn = ["refresh", "active", "active", "turn"]
    assert observer.events == [*turn, "step", "step", *turn, "step"]


def test_a_steady_observer_switched_on_is_seen_from_the_next_turn() -> None:
    observer = Steady(on=False)
    guard = Guard.from_yaml(SPEC, observers=[observer])
    lookup = _lookup(guard)
    with guard.engagement() as eng:
        lookup(ok=True)
        observer.on = True  # what its next refresh will find (a global SDK set up meanwhile)
        lookup(ok=True)
        assert "step" not in observer.events
        eng.new_turn()
        lookup(ok=True)
    assert observer.events.count("step") == 1
    assert observer.events[-1] == "step"


def test_steady_and_asked_observers_are_all_asked_in_order_at_every_step() -> None:
    steady, asked = Steady(), Refreshing()
    guard = Guard.from_yaml(SPEC, observers=[steady, asked])
    lookup = _lookup(guard)
    steady.events.clear()
    with guard.engagement():
        lookup(ok=True)
        lookup(ok=True)
    # One observer that must be asked at every step makes every step ask them all, as before.
    assert steady.events.count("step") == asked.events.count("step") == 2
    assert steady.events[-2:] == ["active", "step"]
    assert asked.events[-2:] == ["active", "step"]


def test_a_steady_observer_whose_active_raises_is_logged_and_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = Steady(broken_active=True)
    with caplog.at_level(logging.ERROR, logger="agentguard.observers"):
        guard = Guard.from_yaml(SPEC, observers=[observer])
        lookup = _lookup(guard)
        with guard.engagement():
            assert lookup(ok=True) == "found"
    assert "active bug" in caplog.text
    assert "step" not in observer.events
