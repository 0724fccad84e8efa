"""The LangChain support-agent example runs, and its timeline says what happened (examples cannot rot)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from agentguard_langchain import format_timeline

from agentguard import Decision, Outcome, Phase, Rule, StepRecord
from agentguard.timeline import describe_step

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_support_agent" / "agent.py"


def test_example_main_runs(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("langchain_support_agent_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    out = capsys.readouterr().out

    assert "tool send-email    allowed" in out
    assert "tool send-email    DENIED      restriction (input)" in out
    assert "I can only email corp.com addresses" in out  # the model recovered
    assert "supervisor asked: refund" in out
    assert "reviewed (input) by supervisor (sam@corp.com): approved" in out
    assert "I refunded 30" in out
    assert "STOPPED   [guardrail output] toxicity-check" in out
    assert "stupid" not in out.split("== turn 3")[1]  # the answer never reached the user
    assert "STOPPED   [short-circuit input] lookup-order" in out
    assert "timeline (stopped)" in out


def _step(*decisions: Decision, kind: str = "steps/toolCallRequest", name: str = "refund") -> StepRecord:
    from datetime import UTC, datetime

    return StepRecord(kind, "s", "t", datetime.now(UTC), name=name, decisions=list(decisions))


def test_describe_step_verdicts() -> None:
    allow = Decision(Rule.CAPABILITY, Outcome.ALLOW, Phase.INPUT, "capability", "refund")
    rejected = Decision(
        Rule.REVIEW,
        Outcome.REVIEW_REJECTED,
        Phase.INPUT,
        "sam: too much",
        "refund",
        data={"reviewer": "supervisor"},
    )
    withheld = Decision(Rule.RESTRICTION, Outcome.DENY, Phase.OUTPUT, "assertion is false", "refund", "x < 1")
    modified = Decision(Rule.GUARDIAN, Outcome.MODIFY, Phase.INPUT, "", "refund")
    assert describe_step(_step(allow)) == ("tool refund", "allowed", "")
    assert describe_step(_step(allow, rejected)) == (
        "tool refund",
        "REJECTED",
        "reviewed (input) by supervisor: rejected (sam: too much)",
    )
    _, verdict, why = describe_step(_step(allow, withheld))
    assert verdict == "DENIED"
    assert "[x < 1]" in why
    assert "output withheld" in why
    assert describe_step(_step(allow, modified))[1:] == ("modified", "modified by guardian (input)")
    assert describe_step(_step(kind="steps/knowledgeRetrieval", name=None))[0] == "knowledge retrieval"
    text = format_timeline([_step(allow), _step(allow, rejected)])
    assert text.splitlines()[1].startswith("  2  tool refund  REJECTED")
