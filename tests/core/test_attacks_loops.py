"""Attacks on the short-circuit rule (decision 5) and on the engagement's end: loops the rule never sees.

Each test is what a demanding user expects; the ones marked ``xfail(strict=True)`` reproduce a defect.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from agentguard import (
    CapabilityDenied,
    EngagementStatus,
    Guard,
    Outcome,
    PolicyViolation,
    Rule,
    ShortCircuitViolation,
)
from agentguard.observers import Observer
from agentguard.record import Decision, EngagementState, StepRecord
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      x:
      y:
    lifespan:
      short_circuit: 3
    """
)


def test_a_loop_of_calls_recorded_after_the_fact_stops_the_engagement() -> None:
    guard = Guard.from_yaml(SPEC)
    ran: list[str] = []
    with guard.engagement() as eng:
        for _ in range(3):  # x -> x -> x: the third one violates short_circuit: 3
            try:
                eng.record_call("x", {}, 1)
            except ShortCircuitViolation:
                break
        # The spec: the server MUST terminate the execution of the agent. The next step is refused.
        with pytest.raises(PolicyViolation):
            guard.call("y", {}, lambda: ran.append("y"))
        assert eng.status is EngagementStatus.STOPPED
    assert ran == []


def test_a_call_recorded_in_a_closed_engagement_is_refused() -> None:
    guard = Guard.from_yaml(SPEC)
    with guard.engagement() as eng:
        eng.record_call("x", {}, 1)
    with pytest.raises(PolicyViolation):
        eng.record_call("y", {"leak": "after the end"}, 2)


class _Rendezvous(Observer):
    """Holds every call at its short-circuit allow decision until ``parties`` calls are there: the
    window between the check and the call becoming an attempt, made wide enough to see."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5)

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        if decision.rule is Rule.SHORT_CIRCUIT and decision.outcome is Outcome.ALLOW:
            with contextlib.suppress(threading.BrokenBarrierError):
                self.barrier.wait()


def test_parallel_calls_cannot_race_past_the_short_circuit_rule() -> None:
    guard = Guard.from_yaml(SPEC, observers=[_Rendezvous(3)])
    ran: list[int] = []
    guard.register("x", lambda: ran.append(1) or "ok")
    eng = guard.engagement()
    outcomes: list[Any] = []

    def worker() -> None:
        with eng.activate():
            try:
                outcomes.append(guard.call("x", {}))
            except PolicyViolation as exc:
                outcomes.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    eng.close()
    # x -> x -> x is a block repeated 3 times: the third attempt must not run, whichever thread makes it.
    assert len(ran) == 2
    assert sum(isinstance(o, ShortCircuitViolation) for o in outcomes) == 1


def test_a_stopped_engagement_reopened_by_its_id_stays_stopped() -> None:
    guard = Guard.from_yaml(SPEC)
    ran: list[int] = []
    guard.register("x", lambda: ran.append(1) or "ok")
    eng = guard.engagement(engagement_id="thread-1")  # a host opens the thread's engagement per request
    with eng.activate():
        guard.call("x", {})
        guard.call("x", {})
        with pytest.raises(ShortCircuitViolation):
            guard.call("x", {})
    assert eng.status is EngagementStatus.STOPPED
    again = guard.engagement(engagement_id="thread-1")  # the next request of the same conversation
    with again.activate(), pytest.raises(PolicyViolation):
        guard.call("x", {})
    assert ran == [1, 1]


def test_a_refused_attempt_and_a_raising_tool_count_toward_a_loop() -> None:
    """Handled: a call that raises is an attempt; so is one denied by another rule."""
    guard = Guard.from_yaml(
        spec_text(
            """
            capabilities:
              x:
                input_restriction:
                  assertion: recent["x"].inputs.n < 0
              boom:
            lifespan:
              short_circuit: 3
            """
        )
    )

    def boom() -> None:
        raise ValueError("no")

    with guard.engagement() as eng:
        for _ in range(2):
            with pytest.raises(PolicyViolation):
                guard.call("x", {"n": 1}, lambda n: n)
        with pytest.raises(ShortCircuitViolation):
            guard.call("x", {"n": 1}, lambda n: n)
    with guard.engagement() as eng:
        for _ in range(2):
            with pytest.raises(ValueError, match="no"):
                guard.call("boom", {}, boom)
        with pytest.raises(ShortCircuitViolation):
            guard.call("boom", {}, boom)
        assert eng.status is EngagementStatus.STOPPED


def test_a_tool_and_an_agent_of_one_name_are_one_loop() -> None:
    """Handled: the detector counts names, so alternating kinds of one name does not hide a loop."""
    guard = Guard.from_yaml(
        spec_text(
            """
            capabilities:
              x:
              oagent://x:
            lifespan:
              short_circuit: 3
            """
        )
    )
    guard.register("x", lambda: 1)  # a tool named x: the bare name is the tool, oagent://x the agent
    with guard.engagement():
        guard.call("x", {})
        guard.call("x", {}, lambda: 1, kind="agent")
        with pytest.raises(ShortCircuitViolation):
            guard.call("x", {})


@pytest.mark.parametrize("mode", ["allow", "observe", "deny"])
def test_a_loop_reason_shows_no_name_the_spec_does_not_know(mode: str) -> None:
    """The loop's reason is the engagement's from then on: every later denial quotes it, and it is recorded
    (decisions, telemetry) with content capture off. The model writes the names of the tools it calls: one
    the spec does not know is its text (any length, any characters), and is shown as such."""
    guard = Guard.from_yaml(SPEC, unknown_capability=mode)
    made_up = "EVIL\u202e" + "x" * 5000
    with guard.engagement() as eng:
        for _ in range(2):
            guard.call("x", {}, lambda: 1)
            with contextlib.suppress(CapabilityDenied):  # unknown_capability: deny refuses; it counts
                guard.call(made_up, {}, lambda: 1)
        guard.call("x", {}, lambda: 1)
        with pytest.raises(ShortCircuitViolation) as loop:
            guard.call(made_up, {}, lambda: 1)
        with pytest.raises(PolicyViolation) as later:
            guard.call("y", {}, lambda: 1)
    # (A step's own decision about its name, e.g. "tool '...' is not a capability", is that step's: telemetry
    # shows it without the name, docs/telemetry.md.)
    loops = [d.reason for d in eng.decisions if d.rule is Rule.SHORT_CIRCUIT]
    recorded = [*loops, eng.state.status_reason, later.value.reason]
    assert "EVIL" not in repr(recorded) + str(later.value) + loop.value.reason
    assert "[x -> <a name the spec does not know>]" in loop.value.reason
