"""The direct path after a hostile review of the work that made it cheaper (e750593, ddaba30).

- The output restriction was asked with the output put in the call's own entry, taken back out unless it
  passed: ``exposed()``, a record's ``outputs`` and another thread's check read the view without the lock, and
  saw an output its check then withheld.
- A tool's capability is kept once found (``Runtime.direct``): a review gate added by another thread between
  the look at the gates and the keeping was skipped for good; and a gate written into ``review_gates``
  directly was skipped by a tool kept already.
- Found in that review, older than it: ``EngagementState.bindings`` read ``recent`` into the variable that held
  the call's own entry, so an output check reading one part of another tool's entry and ``history`` was shown
  that tool's entry in place of the output it judged, and released an output it had to withhold (on the
  direct path too: a closure's "no" is evaluated again from scratch).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentguard import Approval, Guard, PolicyViolation, RestrictionViolation, ReviewDenied, User
from agentguard.observers import Observer
from agentguard.pipeline import Runtime
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      lookup:
        output_restriction:
          assertion: '!recent["lookup"].outputs.exists(r, r.contains("secret"))'
      quiet:
    exposes:
      looked_up: recent["lookup"].outputs
    """
)


def lookup(q: str) -> list[str]:
    return [f"{q} page"]


def quiet(x: str) -> dict[str, str]:
    return {"x": x}


def test_an_output_under_check_is_not_seen_by_another_thread() -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)
    wrapped = guard.tool(lookup)
    rule = guard.policy.capability_for("lookup", "tool", {})
    assert rule is not None
    assert rule.output_assertion is not None
    assertion = rule.output_assertion
    original = assertion.quick
    assert original is not None
    inside, read = threading.Event(), threading.Event()

    def pausing(view: Any) -> Any:  # the interpreter switching threads while the closure runs
        inside.set()
        read.wait(5)
        return original(view)

    object.__setattr__(assertion, "quick", pausing)
    seen: dict[str, object] = {}
    errors: list[BaseException] = []
    with guard.engagement() as eng:

        def worker() -> None:
            with eng.activate():
                try:
                    wrapped(q="secret")
                except BaseException as exc:
                    errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        assert inside.wait(5)
        seen["exposed"] = eng.exposed()["looked_up"]
        seen["outputs"] = eng.state.calls[-1].outputs
        read.set()
        thread.join(5)
    assert len(errors) == 1
    assert isinstance(errors[0], PolicyViolation)
    assert eng.state.calls[-1].outputs is None  # withheld
    assert seen == {"exposed": None, "outputs": None}


def test_a_gate_added_while_a_first_call_finds_its_capability_stops_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)
    guard.add_reviewer("nobody", lambda request: Approval(False, "no"))
    wrapped = guard.tool(quiet)
    original = Runtime.allows
    added: list[bool] = []

    def allows(self: Runtime, rule: Any, name: str) -> Any:  # another thread adds the gate right here
        if not added:
            added.append(True)
            gate = threading.Thread(target=guard.add_review_gate, args=("quiet", "nobody"))
            gate.start()
            gate.join()
        return original(self, rule, name)

    monkeypatch.setattr(Runtime, "allows", allows)
    with guard.engagement(user=User(id="u1")):
        wrapped(x="1")  # raced with the gate: either way
        with pytest.raises(ReviewDenied):
            wrapped(x="2")  # begun after add_review_gate returned: reviewed


def test_review_gates_are_added_through_add_review_gate_only() -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)
    guard.add_reviewer("nobody", lambda request: Approval(False, "no"))
    wrapped = guard.tool(quiet)
    runtime: Runtime = guard._runtime
    with guard.engagement(user=User(id="u1")):
        wrapped(x="1")  # kept as a direct call's capability
        with pytest.raises(TypeError):
            runtime.review_gates["quiet"] = "nobody"  # type: ignore[index]
        guard.add_review_gate("quiet", "nobody")
        with pytest.raises(ReviewDenied):
            wrapped(x="2")


# -- bindings() gave an output check over history another tool's entry in place of the call's own -------------

HISTORY_SPEC = spec_text(
    """
    capabilities:
      tool-a:
        output_restriction:
          assertion: >-
            recent["tool-b"].inputs.x == 1
            && !history["tool-a"].exists(e, e.outputs != null && has(e.outputs.leak))
      tool-b:
    """
)


def tool_a(x: int) -> dict[str, bool]:
    return {"leak": True}


def tool_b(x: int) -> dict[str, bool]:
    return {"ok": True}


class _Watching(Observer):
    def step_started(self, state: Any, step: Any) -> None:
        return None


@pytest.mark.parametrize("watched", [False, True])
def test_an_output_check_over_history_judges_the_calls_own_output(watched: bool) -> None:
    guard = Guard.from_yaml(HISTORY_SPEC, telemetry=False, observers=[_Watching()] if watched else [])
    a, b = guard.tool(tool_a, name="tool-a"), guard.tool(tool_b, name="tool-b")
    with guard.engagement(user=User(id="u1")) as eng:
        b(x=1)
        with pytest.raises(RestrictionViolation):
            a(x=1)
        assert eng.view()["history"]["tool-a"][0]["outputs"] is None  # withheld
