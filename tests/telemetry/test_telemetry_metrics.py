"""Metrics: decisions counted by rule and outcome, agentguard's own check time, guardian latency, and steps
that went on or were refused without a guardian decision."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from agentguard import Approval, GuardianDenied, Outcome, Phase, ReviewRequest, Rule
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from agentguard.record import Decision
from agentguard.telemetry._metrics import cause_kind, split_step_time
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel, wait_until

SPEC = spec_text(
    """
    capabilities:
      refund:
        input_restriction:
          assertion: recent["refund"].inputs.amount <= 100
      slow: {}
      reviewed:
        input_restriction:
          require_review: manager
    """
)


def test_decisions_are_counted_by_outcome_and_rule(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    refund = guard.tool(name="refund")(lambda amount: "ok")
    with guard.engagement():
        refund(amount=1)
        refund(amount=2)
        with pytest.raises(Exception, match="assertion is false"):
            refund(amount=500)
    counts = otel.counts("agentguard.decisions", "agentguard.decision.outcome", "agentguard.decision.rule")
    assert counts == {
        ("allow", "capability"): 3,
        ("allow", "restriction"): 2,
        ("deny", "restriction"): 1,
    }
    assert {a["gen_ai.agent.name"] for a, _ in otel.points("agentguard.decisions")} == {"test-agent"}


def test_check_time_leaves_out_the_tool_and_the_reviewer(otel: Otel) -> None:
    def manager(request: ReviewRequest) -> Approval:
        time.sleep(0.05)
        return Approval(True, "fine", "manager")

    guard = otel.guard(SPEC, reviewers={"manager": manager})
    guard.tool(name="slow")(lambda: time.sleep(0.05))
    guard.tool(name="reviewed")(lambda: "done")
    with guard.engagement():
        guard.call("slow", {})
        guard.call("reviewed", {})
    ((attributes, point),) = otel.points("agentguard.check.duration")
    assert attributes == {
        "agentguard.step.kind": "steps/toolCallRequest",
        "agentguard.outcome": "allow",
        "gen_ai.agent.name": "test-agent",
    }
    assert point.count == 2
    assert 0 < point.sum < 0.02, f"{point.sum} s: the 50 ms tool and the 50 ms reviewer were counted"


def _decision(rule: Rule, at: float, phase: Phase = Phase.INPUT, **data: float) -> Decision:
    outcome = Outcome.REVIEW_APPROVED if rule is Rule.REVIEW else Outcome.ALLOW
    return Decision(rule, outcome, phase, at=at, data=data or None)


def test_a_steps_time_splits_into_checks_tool_and_waits() -> None:
    guardian = _decision(Rule.GUARDIAN, 1.050, latency_ms=40.0)
    decisions = [
        _decision(Rule.CAPABILITY, 1.001),  # 1 ms of checking
        guardian,  # 49 ms, of which 40 ms the guardian's latency
        _decision(Rule.REVIEW, 1.500),  # 450 ms waiting for a person
        # the tool runs from 1.500 to 2.000
        _decision(Rule.RESTRICTION, 2.003, Phase.OUTPUT),  # 3 ms of checking after the tool returned
    ]
    split = split_step_time(1.000, 2.004, decisions, returned_at=2.000)
    assert split.check == pytest.approx(0.001 + 0.009 + 0.003 + 0.001)
    assert split.guardian == ((guardian, 0.040),)


def test_a_guardian_decision_without_latency_is_all_waiting() -> None:
    denied = Decision(Rule.GUARDIAN, Outcome.DENY, Phase.INPUT, at=1.030)
    follow_up = Decision(Rule.GUARDIAN, Outcome.NO_DECISION, Phase.INPUT, at=1.031)
    split = split_step_time(1.000, 1.032, [_decision(Rule.CAPABILITY, 1.010), denied, follow_up], None)
    ((waited, seconds),) = split.guardian  # the follow-up is about the same exchange
    assert waited is denied
    assert seconds == pytest.approx(0.020)
    assert split.check == pytest.approx(0.010 + 0.001 + 0.001)


def test_without_output_checks_the_time_after_the_tool_counts() -> None:
    split = split_step_time(1.000, 1.101, [_decision(Rule.CAPABILITY, 1.001)], returned_at=1.100)
    assert split.check == pytest.approx(0.002)


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        ("timeout", "timeout"),
        ("transport: ConnectError: connection refused", "transport"),
        ("http 503", "http"),
        ("jsonrpc -32603: Internal error", "jsonrpc"),
        ("malformed response: body is not JSON (JSONDecodeError)", "malformed"),
        ("unappliable modify: modifiedRequest.id 2 is not the request's id 1", "unappliable"),
        ("modifiedRequest carries no tool inputs", "unappliable"),
        ("ping: timeout", "ping"),
        ("client closed", "closed"),
        ("queue full", "queue_full"),
        ("something new", "other"),
    ],
)
def test_failure_causes_have_few_kinds(cause: str, kind: str) -> None:
    assert cause_kind(cause) == kind


@pytest.fixture
def guardian(otel: Otel) -> Iterator[RunningServer]:
    rules = """
    rules:
      - name: no-big-refunds
        methods: [steps/toolCallRequest]
        when: params.toolCallRequest.inputs.exists(i, i.name == "amount" && i.value > 50)
        decision: deny
        message: Too big
    """
    with serve_in_thread(create_app(parse_rules(rules))) as server:
        yield server


def test_guardian_latency_is_recorded_per_exchange(otel: Otel, guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url)
    guard = otel.guard(SPEC, guardian=client)
    refund = guard.tool(name="refund")(lambda amount: "ok")
    with client, guard.engagement():
        refund(amount=10)
        with pytest.raises(GuardianDenied):
            refund(amount=60)
    recorded = {
        (a["rpc.method"], a["agentguard.guardian.outcome"], a["agentguard.guardian.mode"]): p
        for a, p in otel.points("agentguard.guardian.duration")
    }
    assert set(recorded) == {
        ("steps/toolCallRequest", "allow", "enforce"),
        ("steps/toolCallResult", "allow", "enforce"),
        ("steps/toolCallRequest", "deny", "enforce"),
    }
    assert all(p.count == 1 and 0 < p.sum < 5 for p in recorded.values())
    assert otel.points("agentguard.guardian.undecided") == []


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A port that is bound but not listening: every connection is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    sock.close()


@pytest.mark.parametrize(("on_failure", "proceeded"), [("deny", False), ("allow", True)])
def test_steps_without_a_guardian_decision_are_counted(
    otel: Otel, dead_url: str, on_failure: str, proceeded: bool
) -> None:
    client = GuardianClient(dead_url, on_failure=on_failure)  # type: ignore[arg-type]
    guard = otel.guard(SPEC, guardian=client)
    refund = guard.tool(name="refund")(lambda amount: "ok")
    with client, guard.engagement():
        if proceeded:
            assert refund(amount=1) == "ok"
        else:
            with pytest.raises(GuardianDenied, match="without guardian decision"):
                refund(amount=1)
    counts = otel.counts(
        "agentguard.guardian.undecided",
        "agentguard.guardian.cause",
        "agentguard.guardian.proceeded",
        "agentguard.guardian.mode",
        "rpc.method",
    )
    expected = {("transport", proceeded, "enforce", "steps/toolCallRequest"): 1}
    if proceeded:  # the call went on, and its result found no guardian either
        expected[("transport", True, "enforce", "steps/toolCallResult")] = 1
    assert counts == expected


def test_observed_steps_dropped_or_failed_are_counted(otel: Otel, dead_url: str) -> None:
    client = GuardianClient(dead_url, mode="observe")
    guard = otel.guard(SPEC, guardian=client)
    refund = guard.tool(name="refund")(lambda amount: "ok")
    with guard.engagement():
        refund(amount=1)  # two steps, both fail to be delivered
    client.close()
    with guard.engagement():
        refund(amount=1)  # two steps, dropped: the client is closed
    counts = otel.counts(
        "agentguard.guardian.undecided", "agentguard.guardian.cause", "agentguard.guardian.mode", "rpc.method"
    )
    assert counts == {
        ("transport", "observe", "steps/toolCallRequest"): 1,
        ("transport", "observe", "steps/toolCallResult"): 1,
        ("closed", "observe", "steps/toolCallRequest"): 1,
        ("closed", "observe", "steps/toolCallResult"): 1,
    }
    failed = otel.points("agentguard.guardian.duration")
    assert {a["agentguard.guardian.outcome"] for a, _ in failed} == {"no-decision"}


def test_a_shared_client_counts_each_drop_once(otel: Otel, dead_url: str) -> None:
    client = GuardianClient(dead_url, mode="observe")
    first = otel.guard(SPEC, guardian=client)
    otel.guard(SPEC, guardian=client)  # a second Guard on the same client and meter provider
    client.close()
    with first.engagement():
        first.call("refund", {"amount": 1}, lambda amount: "ok")
    counts = otel.counts("agentguard.guardian.undecided", "agentguard.guardian.cause")
    assert counts == {("closed",): 2}


def test_delivered_observed_steps_have_their_latency_recorded(otel: Otel, guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url, mode="observe")
    guard = otel.guard(SPEC, guardian=client)
    refund = guard.tool(name="refund")(lambda amount: "ok")
    with guard.engagement():
        refund(amount=1)
    client.close()
    wait_until(lambda: len(otel.points("agentguard.guardian.duration")) == 2)
    modes = {
        (a["rpc.method"], a["agentguard.guardian.mode"])
        for a, _ in otel.points("agentguard.guardian.duration")
    }
    assert modes == {("steps/toolCallRequest", "observe"), ("steps/toolCallResult", "observe")}
