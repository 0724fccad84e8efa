"""The LangChain support-agent example runs, and its timeline says what happened (examples cannot rot)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from agentguard_langchain import demo, format_timeline

from agentguard import Decision, Outcome, Phase, Rule, StepRecord
from agentguard.timeline import describe_step

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_support_agent" / "agent.py"


def test_demo_shows_every_rule_firing_in_process() -> None:
    out = io.StringIO()
    assert demo.main(["--no-files"], out=out) == 0
    text = out.getvalue()
    assert "and the reference guardian at http://127.0.0.1:" in text
    assert (  # the guardian's modification, before -> after (the demo captures content by default)
        'tool send-email    modified    modified by guardian (input): body: "A-1 shipped, card 4111111111111111 '
        'charged" -> "[card number redacted]"'
    ) in text
    assert "tool send-email    DENIED      restriction (input)" in text
    assert "tool lookup-order  DENIED      guardian (input): Orders in the X- namespace" in text
    assert "I can only email corp.com addresses" in text  # the model recovered
    assert "supervisor asked: refund" in text
    assert "reviewed (input) by supervisor (sam@corp.com): approved" in text
    assert "I refunded 30" in text
    assert (
        "WITHHELD  the agent's answer never reached the user; the check: [guardrail output] toxicity-check"
        in text
    )
    assert "output.score < 0.5" in text.split("== turn 3")[1]  # the check that withheld it
    assert "-- answer withheld from the user" in text
    assert "stupid" not in text.split("== turn 3")[1]  # the answer never reached the user
    assert "STOPPED   [short-circuit input] lookup-order" in text
    assert "timeline (stopped)" in text


def test_without_content_capture_the_demo_names_the_changed_arguments_only() -> None:
    out = io.StringIO()
    assert demo.main(["--no-files", "--no-content"], out=out) == 0
    text = out.getvalue()
    assert "content capture: off" in text
    assert "modified by guardian (input): changed body (values not shown: content capture is off)" in text
    assert "4111111111111111" not in text
    assert "[card number redacted]" not in text


def test_the_demo_command_writes_audit_reports_and_a_trace(tmp_path: Path) -> None:
    # A subprocess: the demo configures the global OpenTelemetry SDK, which a test process must not keep.
    command = Path(sys.executable).with_name("agentguard-langchain-demo")
    result = subprocess.run(
        [str(command), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert f"audit reports of this run: 4 in {tmp_path / 'audit'}/" in result.stdout
    first = set((tmp_path / "audit").glob("*.md"))
    assert len(first) == 4
    assert all(f"  {report.name}\n" in result.stdout for report in first)
    trace = (tmp_path / "trace.txt").read_text()
    assert '"name": "execute_tool send-email"' in trace
    assert '"name": "invoke_agent support-agent"' in trace
    assert "Traceback" not in result.stderr

    # the core's deprecated `agentguard demo` forwards to the same command
    again = subprocess.run(
        [str(Path(sys.executable).with_name("agentguard")), "demo", "--out", str(tmp_path), "--no-guardian"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert "deprecated" in again.stderr
    assert "audit reports of this run: 4 in" in again.stdout  # the second run's own, not 8
    assert not any(report.name in again.stdout for report in first)


def test_the_example_script_runs_the_demo() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--no-files", "--no-guardian"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "timeline (stopped)" in result.stdout


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
