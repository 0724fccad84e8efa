"""Decision 3: an output is checked before anyone else sees it -- all its checks, not only the first.

While a call's output restriction, Python rules, guardian or output reviewer judge it, the engagement shows
the call's ``outputs`` as ``null`` to everyone else: ``exposes``, ``view()``, a parallel call's checks. The
call's own checks see it, in ``recent`` and in ``history``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentguard import CheckResult, Guard, RestrictionViolation, ReviewDenied, ReviewRequest, RuleViolation
from agentguard.observers import Observer
from tests.conftest import spec_text

SSN = "123-45-6789"

SPEC = spec_text(
    """
    capabilities:
      profile:
        output_restriction:
          assertion: '!recent["profile"].outputs.note.matches("[0-9]{3}-[0-9]{2}-[0-9]{4}")'
      reviewed:
        output_restriction:
          require_review: auditor
      lookup:
        input_restriction:
          assertion: 'recent["profile"].outputs == null || recent["profile"].outputs.note != "leak"'
    exposes:
      last_profile: recent["profile"].outputs
      last_reviewed: recent["reviewed"].outputs
    """
)


def _refuse(request: ReviewRequest) -> bool:
    return False


def _what_others_see(eng: Any) -> str:
    return repr((eng.exposed(), eng.view()["recent"], eng.view()["history"]))


@pytest.mark.parametrize("watched", [False, True], ids=["direct", "flow"])
def test_an_output_under_a_python_rule_is_seen_by_nobody_else_and_never_once_withheld(watched: bool) -> None:
    guard = Guard.from_yaml(SPEC, observers=[Observer()] if watched else [], reviewers={"auditor": _refuse})
    seen: list[str] = []

    def no_secret(context: Any) -> CheckResult:
        seen.append(_what_others_see(eng))  # another reader, while the rule judges the output
        return CheckResult("secret" not in repr(context.outputs), "carries a secret")

    guard.rules.add("no-secret", no_secret, phase="output", capabilities={"profile"})
    with guard.engagement() as eng:
        assert guard.call("profile", {}, lambda: {"note": "fine"}) == {"note": "fine"}
        with pytest.raises(RuleViolation):
            guard.call("profile", {}, lambda: {"note": "top secret", "more": ["secret"]})
        after = _what_others_see(eng)
        assert eng.exposed()["last_profile"] is None
    assert len(seen) == 2
    assert "secret" not in "".join(seen) + after
    assert "fine" not in seen[0]  # not even the output that then passed


def test_an_output_under_review_is_seen_by_nobody_else_until_approved() -> None:
    shown: list[str] = []
    approve = True

    def auditor(request: ReviewRequest) -> bool:
        shown.append(_what_others_see(eng))
        return approve

    guard = Guard.from_yaml(SPEC, reviewers={"auditor": auditor})

    with guard.engagement() as eng:
        assert guard.call("reviewed", {}, lambda: f"ssn {SSN}") == f"ssn {SSN}"
        assert eng.exposed()["last_reviewed"] == f"ssn {SSN}"  # approved: let out
        approve = False
        with pytest.raises(ReviewDenied):
            guard.call("reviewed", {}, lambda: "the second one")
        assert eng.exposed()["last_reviewed"] is None
    assert SSN not in shown[0]
    assert "the second one" not in shown[1]


def test_a_parallel_call_does_not_judge_by_an_output_still_under_check() -> None:
    """``lookup`` may run unless profile's output says ``leak``; while that output is checked (and then
    withheld), a parallel ``lookup`` must not read it as if it had been let out."""
    guard = Guard.from_yaml(SPEC, reviewers={"auditor": _refuse})
    judging, parallel_done = threading.Event(), threading.Event()
    inputs_seen: list[Any] = []

    def slow_rule(context: Any) -> bool:
        judging.set()
        parallel_done.wait(5)
        return False  # then withheld

    guard.rules.add("slow", slow_rule, phase="output", capabilities={"profile"})

    @guard.tool
    def lookup() -> str:
        inputs_seen.append(eng.view()["recent"].get("profile"))
        return "looked up"

    with guard.engagement() as eng:
        outcome: dict[str, Any] = {}

        def profile() -> None:
            with eng.activate():
                try:
                    guard.call("profile", {}, lambda: {"note": "leak"})
                except RuleViolation as exc:
                    outcome["profile"] = exc

        thread = threading.Thread(target=profile)
        thread.start()
        assert judging.wait(5)
        assert lookup() == "looked up"  # the withheld-to-be output is null to its input restriction
        parallel_done.set()
        thread.join()
    assert isinstance(outcome["profile"], RuleViolation)
    assert inputs_seen == [{"inputs": {}, "outputs": None}]


def test_an_output_restriction_over_history_sees_the_calls_own_output() -> None:
    """The call's own checks read its output in ``history`` as in ``recent`` (decision 2's view of a pending
    call, for its output): a rule over a tool's outputs in its whole history counts the one being checked."""
    guard = Guard.from_yaml(
        spec_text(
            """
            capabilities:
              fetch:
                output_restriction:
                  assertion: '!history["fetch"].exists(e, e.outputs == 5)'
            """
        )
    )
    with guard.engagement() as eng:
        assert guard.call("fetch", {}, lambda: 6) == 6
        with pytest.raises(RestrictionViolation):
            guard.call("fetch", {}, lambda: 5)
        assert [e["outputs"] for e in eng.view()["history"]["fetch"]] == [6, None]
        assert guard.call("fetch", {}, lambda: 4) == 4
