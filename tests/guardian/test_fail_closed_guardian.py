"""Issue 12, items 6, 8 and 13 against a real reference guardian on 127.0.0.1.

A failed call is an output too (its error passes the output restriction and the guardian hears of it), every
failure inside the pipeline is a recorded denial, and each AOS step has its own ``stepId``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentguard import Guard, GuardianDenied, Outcome, RestrictionViolation, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.conftest import spec_text

RULES = """\
default_decision: allow
rules:
  - name: no-secret-errors
    methods: [steps/toolCallResult]
    when: params.result.isError && params.result.outputs.exists(p, p.text.contains("SECRET"))
    decision: deny
    message: The error carries a secret
  - name: wrong-argument
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "lookup"
    decision: modify
    message: Renamed the argument
    set:
      params.toolCallRequest.inputs: '[{"name": "no_such_parameter", "value": "x"}]'
"""

SPEC = spec_text(
    """
    capabilities:
      lookup:
      fail:
      guarded-fail:
        output_restriction:
          assertion: '!string(recent["guarded-fail"].outputs).contains("TOKEN")'
      count:
        input_restriction:
          assertion: history._total < 5
    """
)


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server:
        yield server


def _guard(url: str, **client_options: Any) -> tuple[Guard, list[str]]:
    guard = Guard.from_yaml(SPEC, guardian=GuardianClient(url, timeout=5.0, **client_options))
    ran: list[str] = []

    @guard.tool
    def lookup(order_id: str) -> str:
        ran.append(order_id)
        return "found"

    @guard.tool
    def fail(text: str) -> str:
        raise ValueError(text)

    @guard.tool(name="guarded-fail")
    def guarded_fail(text: str) -> str:
        raise ValueError(text)

    @guard.tool
    def count() -> int:
        return 1

    return guard, ran


def test_the_guardian_hears_of_a_failed_call(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement() as eng, pytest.raises(ValueError, match="disk full"):
        guard.call("fail", {"text": "disk full"})
    methods = [request["method"] for request in eng.steps[-1].aos]
    assert methods == ["steps/toolCallRequest", "steps/toolCallResult"]
    result = eng.steps[-1].aos[1]["params"]["result"]
    assert result["isError"] is True
    assert result["outputs"] == [{"kind": "text", "text": "disk full"}]


def test_an_error_the_guardian_denies_does_not_reach_the_caller(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement() as eng, pytest.raises(GuardianDenied) as caught:
        guard.call("fail", {"text": "SECRET-42 in the stack"})
    assert "SECRET-42" not in str(caught.value)
    assert caught.value.__suppress_context__
    assert eng.steps[-1].outcome is Outcome.DENY
    assert "SECRET-42" not in repr(eng.steps[-1].payload)


def test_an_error_that_fails_the_output_restriction_is_withheld() -> None:
    guard = Guard.from_yaml(SPEC)  # the local check alone

    @guard.tool(name="guarded-fail")
    def guarded_fail(text: str) -> str:
        raise ValueError(text)

    with guard.engagement() as eng:
        with pytest.raises(RestrictionViolation) as caught:
            guard.call("guarded-fail", {"text": "TOKEN=abc"})
        assert "TOKEN=abc" not in str(caught.value)
        with pytest.raises(ValueError, match="harmless"):
            guard.call("guarded-fail", {"text": "harmless"})
    assert "TOKEN=abc" not in repr([step.payload for step in eng.steps])
    assert "TOKEN=abc" not in repr([step.decisions for step in eng.steps])


def test_a_modify_naming_an_unknown_argument_is_a_recorded_denial(guardian: RunningServer) -> None:
    guard, ran = _guard(guardian.url)
    with guard.engagement() as eng:
        with pytest.raises(GuardianDenied, match="do not fit"):
            guard.call("lookup", {"order_id": "A-1"})
        assert ran == []
        assert eng.view()["history"]["_total"] == 0  # no phantom call left behind
        for _ in range(4):
            guard.call("count", {})  # an unrelated assertion on history._total is not thrown off


def test_a_modify_that_does_not_fit_proceeds_unmodified_under_on_failure_allow(
    guardian: RunningServer,
) -> None:
    guard, ran = _guard(guardian.url, on_failure="allow")
    with guard.engagement() as eng:
        assert guard.call("lookup", {"order_id": "A-1"}) == "found"
    assert ran == ["A-1"]
    assert Outcome.NO_DECISION in [d.outcome for d in eng.steps[-1].decisions]


class _BrokenClient(GuardianClient):
    def decide(self, request: dict[str, Any]) -> Any:
        raise KeyError("a bug in a custom transport")


@pytest.mark.parametrize(("on_failure", "runs"), [("deny", False), ("allow", True)])
def test_an_unexpected_guardian_failure_follows_the_failure_policy(on_failure: str, runs: bool) -> None:
    guard = Guard.from_yaml(SPEC, guardian=_BrokenClient("http://127.0.0.1:9/", on_failure=on_failure))  # type: ignore[arg-type]
    ran: list[str] = []
    guard.tool(name="lookup")(lambda order_id: ran.append(order_id) or "found")
    with guard.engagement() as eng:
        if runs:
            guard.call("lookup", {"order_id": "A-1"})
        else:
            with pytest.raises(GuardianDenied, match="guardian client failed: KeyError"):
                guard.call("lookup", {"order_id": "A-1"})
    assert ran == (["A-1"] if runs else [])
    expected = Outcome.NO_DECISION if runs else Outcome.DENY
    assert expected in [d.outcome for d in eng.steps[-1].decisions]


def test_request_and_result_are_two_steps_with_their_own_ids(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("count", {})
    request, result = eng.steps[-1].aos
    assert request["params"]["context"]["stepId"] != result["params"]["context"]["stepId"]
    assert request["params"]["toolCallRequest"]["executionId"] == result["params"]["executionId"]
    assert request["params"]["context"]["timestamp"] <= result["params"]["context"]["timestamp"]
    assert request["params"]["context"]["user"]["organization"] == {"id": "unknown"}


NUL_RULES = """\
default_decision: allow
rules:
  - name: plain-commands-only
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "shell" &&
      !params.toolCallRequest.inputs.all(i, i.name != "cmd" || i.value.matches("^[a-z ]*$"))
    decision: deny
    message: Only plain commands
"""


def test_the_reference_guardian_sees_a_nul_character_too() -> None:
    """Issue 12 item 2: the guardian's rules run on the same CEL layer, which never cuts text at a NUL."""
    spec = spec_text("capabilities:\n  shell:\n")
    with serve_in_thread(create_app(parse_rules(NUL_RULES))) as server:
        guard = Guard.from_yaml(spec, guardian=GuardianClient(server.url, timeout=5.0))
        ran: list[str] = []
        guard.tool(name="shell")(lambda cmd: ran.append(cmd))
        with guard.engagement():
            guard.call("shell", {"cmd": "ls"})
            with pytest.raises(GuardianDenied, match="Only plain commands"):
                guard.call("shell", {"cmd": "ls\x00; rm -rf /"})
    assert ran == ["ls"]
