"""Audit reports: the opinion and findings mappings, the file format, the observer, and queries."""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from agentguard import (
    Approval,
    CapabilityDenied,
    CheckResult,
    Decision,
    Guard,
    GuardrailViolation,
    Outcome,
    Phase,
    RestrictionViolation,
    ReviewDenied,
    ReviewRequest,
    Rule,
    RuleViolation,
    ShortCircuitViolation,
    User,
)
from agentguard.checks import (
    Audit,
    AuditEntry,
    AuditFindings,
    AuditFormatError,
    AuditObserver,
    JudgeConfig,
    JudgeResult,
    add_judge,
    build_report,
    write_report,
)
from agentguard.guardian import GuardianClient
from agentguard.pipeline import new_step
from agentguard.record import EngagementState
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      refund:
        input_restriction:
          require_review: supervisor
          assertion: recent["refund"].inputs.amount <= 100
      search:
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok
    lifespan:
      short_circuit: 3
    """
)


def _refuse(request: ReviewRequest) -> bool:
    """The reviewer a test does not choose: it refuses (a guard cannot start without every reviewer)."""
    return False


def _guard(**options: Any) -> Guard:
    guard = Guard.from_yaml(
        SPEC, **{**options, "reviewers": {"supervisor": _refuse, **options.get("reviewers", {})}}
    )

    @guard.tool
    def send_email(to: str) -> str:
        return "sent"

    @guard.tool
    def refund(amount: int) -> str:
        return "refunded"

    @guard.tool
    def search(q: str) -> str:
        return f"results for {q}"

    @guard.tool(name="pii-check")
    def pii(text: str) -> dict[str, bool]:
        return {"ok": "ssn" not in text}

    return guard


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _findings(critical: int = 0, major: int = 0, minor: int = 0) -> AuditFindings:
    return AuditFindings(critical=critical, major=major, minor=minor)


# -- opinion and findings -------------------------------------------------------------------------------


def test_a_clean_engagement_is_unqualified() -> None:
    guard = _guard(reviewers={"supervisor": lambda request: True})
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("send-email", {"to": "bob@corp.com"})
        guard.call("refund", {"amount": 5})
    report = build_report(eng)
    assert report.entry.opinion == "unqualified"
    assert report.entry.findings == _findings()
    assert "No findings." in report.body
    assert "the agent acted within its policy" in report.body


def test_shadow_mode_rollout_denies_nothing_and_reports_every_would_be_denial(tmp_path: Path) -> None:
    guard = _guard(
        severity={"restriction": "warning"},
        reviewers={"supervisor": lambda request: True},
        observers=[AuditObserver(tmp_path, agent_id="support-agent")],
    )
    with guard.engagement(user=User(id="u1")) as eng:
        assert guard.call("send-email", {"to": "eve@evil.test"}) == "sent"
        assert guard.call("refund", {"amount": 500}) == "refunded"
        assert guard.call("send-email", {"to": "bob@corp.com"}) == "sent"
    [path] = tmp_path.glob("*.md")
    report = Audit.parse(path)
    entry = report.entry
    assert entry.opinion == "qualified"
    assert entry.findings == _findings(minor=2)
    assert entry.agent_id == "support-agent"
    assert entry.execution_id == eng.id
    would_be = [r.rule_name for r in entry.rule_results or [] if not r.passed]
    assert would_be == ["restriction:send-email:input", "restriction:refund:input"]
    assert "- **m1** `restriction:send-email:input` (warning)" in report.body
    assert "- **m2** `restriction:refund:input` (warning)" in report.body
    assert "would deny (warning): assertion is false" in report.body
    assert "### Major" not in report.body


def test_a_real_denial_is_adverse() -> None:
    guard = _guard()
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("send-email", {"to": "bob@corp.com"})
        with pytest.raises(RestrictionViolation):
            guard.call("send-email", {"to": "eve@evil.test"})
    report = build_report(eng)
    assert report.entry.opinion == "adverse"
    assert report.entry.findings == _findings(major=1)
    assert "- **M1** `restriction:send-email:input` (error)" in report.body


def test_an_unreachable_guardian_is_a_disclaimer() -> None:
    client = GuardianClient(f"http://127.0.0.1:{_free_port()}/", on_failure="allow", timeout=1.0)
    guard = _guard(guardian=client)
    with guard.engagement(user=User(id="u1")) as eng:
        assert guard.call("search", {"q": "x"}) == "results for x"
    report = build_report(eng)
    assert report.entry.opinion == "disclaimer"
    assert report.entry.findings == _findings(minor=2)  # toolCallRequest and toolCallResult went undecided
    assert "proceeded without guardian decision: transport" in report.body
    assert "evidence is insufficient" in report.body
    assert report.entry.agent_id == "test-agent"  # from the guard (and in every AOS request on record)
    assert build_report(eng.state).entry.agent_id == "test-agent"


def test_a_denial_outranks_missing_guardian_decisions() -> None:
    client = GuardianClient(f"http://127.0.0.1:{_free_port()}/", on_failure="allow", timeout=1.0)
    guard = _guard(guardian=client)
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("search", {"q": "x"})
        with pytest.raises(RestrictionViolation):
            guard.call("send-email", {"to": "eve@evil.test"})
    assert build_report(eng).entry.opinion == "adverse"


def test_stopping_and_failing_the_engagement_are_critical() -> None:
    guard = _guard()
    with guard.engagement() as eng:
        guard.call("search", {"q": "x"})
        guard.call("search", {"q": "x"})
        with pytest.raises(ShortCircuitViolation):
            guard.call("search", {"q": "x"})
        with pytest.raises(ShortCircuitViolation):  # refused: the engagement stays stopped
            guard.call("send-email", {"to": "bob@corp.com"})
    report = build_report(eng)
    assert (report.entry.opinion, report.entry.findings) == ("adverse", _findings(critical=2))
    assert "- **C1** `short-circuit:search:input`" in report.body
    assert "stopped (calling 'search' would repeat" in report.body

    guard = _guard()
    with guard.engagement() as eng, pytest.raises(GuardrailViolation):
        eng.check_input("my ssn is 123")
    assert build_report(eng).entry.findings == _findings(critical=1)


def test_info_failures_are_observations_not_findings() -> None:
    guard = _guard(severity={"restriction": "info"})
    with guard.engagement() as eng:
        guard.call("send-email", {"to": "eve@evil.test"})
    entry = build_report(eng).entry
    assert (entry.opinion, entry.findings) == ("unqualified", _findings())
    assert [r.severity for r in entry.rule_results or [] if not r.passed] == ["info"]


def test_reviews_name_who_approved_and_who_rejected() -> None:
    answers = iter([Approval(True, "within budget", "alice"), Approval(False, "too much", "bob")])
    guard = _guard(reviewers={"supervisor": lambda request: next(answers)})
    with guard.engagement() as eng:
        guard.call("refund", {"amount": 50})
        with pytest.raises(ReviewDenied):
            guard.call("refund", {"amount": 60})
    body = build_report(eng).body
    assert "## Reviews" in body
    assert "**approved** by `alice` at " in body
    assert ": within budget" in body
    assert "**rejected** by `bob` at " in body


def test_judgments_on_record_give_the_lowest_judge_result() -> None:
    class Scores:
        def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
            return JudgeResult.from_score(0.6 if content == "sent" else 0.9, f"for {content}", config)

    guard = _guard()
    add_judge(guard, Scores(), JudgeConfig(criteria="c"), name="quality")
    with guard.engagement() as eng:
        guard.call("search", {"q": "a"})
        guard.call("send-email", {"to": "bob@corp.com"})
    judge = build_report(eng).entry.judge_result
    assert judge is not None
    assert (judge.score, judge.reasoning) == (0.6, "for sent")


# -- files, round trip and queries ---------------------------------------------------------------------------


def test_report_round_trip_engagement_write_parse_query(tmp_path: Path) -> None:
    guard = _guard(reviewers={"supervisor": lambda request: Approval(True, "ok", "alice")})
    with guard.engagement(user=User(id="u1", email="ann@corp.com")) as eng:
        guard.call("refund", {"amount": 5})
        with pytest.raises(RestrictionViolation):
            guard.call("send-email", {"to": "eve@evil.test"})
    built = build_report(eng, objectives="Check refunds.", scope=["refund flow"], metadata={"ticket": 7})
    path = Audit.write(built.entry, tmp_path, body=built.body)
    assert path.name == f"{datetime.now(UTC):%Y-%m-%d}-{built.entry.id}.md"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind

    parsed = Audit.parse(path)
    assert parsed.entry == built.entry
    assert parsed.body == built.body
    assert parsed.path == path
    assert parsed.entry.objectives == "Check refunds."
    assert parsed.entry.scope == ["refund flow"]
    assert parsed.entry.metadata is not None
    assert parsed.entry.metadata["ticket"] == 7
    assert parsed.entry.metadata["engagement"] == {
        "user": "u1",
        "status": "closed",
        "statusReason": "engagement closed",
        "startedAt": eng.state.started_at.isoformat(),
        "steps": 2,
        "decisions": len(parsed.entry.rule_results or []),
    }

    text = path.read_text()
    assert text.startswith(f"---\nid: {built.entry.id}\ncreatedAt: ")
    assert "\nopinion: adverse\n" in text  # greppable, as the OS Protocol suggests
    assert "\n  major: 1\n" in text

    [found] = Audit.query(tmp_path, execution_id=eng.id)
    assert found.entry == built.entry


def test_write_report_defaults(tmp_path: Path) -> None:
    guard = _guard()
    with guard.engagement() as eng:
        guard.call("search", {"q": "x"})
        eng.check_input("hello")
    entry = Audit.parse(write_report(eng, tmp_path / "nested")).entry
    assert entry.agent_id == "test-agent"
    assert entry.scope == ["steps/toolCallRequest search", "steps/message user"]
    assert entry.objectives == (
        f"Determine whether agent 'test-agent' stayed within its OpenAgentSpec policy in engagement {eng.id}."
    )


def _entry(**fields: Any) -> AuditEntry:
    base: dict[str, Any] = {
        "id": "a1",
        "createdAt": 1_700_000_000_000,
        "objectives": "o",
        "scope": [],
        "opinion": "unqualified",
        "findings": {"critical": 0, "major": 0, "minor": 0},
    }
    return AuditEntry.model_validate({**base, **fields})


def test_query_filters(tmp_path: Path) -> None:
    day = 86_400_000
    t0 = 1_700_000_000_000
    entries = [
        _entry(id="a", createdAt=t0, agentId="x", executionId="e1", opinion="adverse", findings={"major": 2}),
        _entry(id="b", createdAt=t0 + day, agentId="x", opinion="qualified", findings={"minor": 3}),
        _entry(id="c", createdAt=t0 + 2 * day, agentId="y", opinion="adverse", findings={"critical": 1}),
        _entry(id="d", createdAt=t0 + 3 * day, agentId="y", opinion="disclaimer"),
    ]
    for entry in reversed(entries):
        Audit.write(entry, tmp_path)

    def ids(**query: Any) -> list[str]:
        return [report.entry.id for report in Audit.query(tmp_path, **query)]

    assert ids() == ["a", "b", "c", "d"]  # oldest first
    assert ids(opinion="adverse") == ["a", "c"]
    assert ids(opinion=["adverse", "disclaimer"]) == ["a", "c", "d"]
    assert ids(min_major=1) == ["a"]
    assert ids(min_critical=1) == ["c"]
    assert ids(agent_id="y") == ["c", "d"]
    assert ids(execution_id="e1") == ["a"]
    assert ids(since=t0 + day, until=t0 + 2 * day) == ["b", "c"]
    start = datetime.fromtimestamp(t0 / 1000, UTC)
    assert ids(since=start + timedelta(days=2)) == ["c", "d"]
    assert ids(opinion="adverse", agent_id="x", min_major=2) == ["a"]


def test_files_that_are_not_reports_are_skipped_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    Audit.write(_entry(), tmp_path)
    (tmp_path / "README.md").write_text("# Audits\n")
    (tmp_path / "broken.md").write_text("---\nid: [unclosed\n---\n")
    (tmp_path / "notes.txt").write_text("not markdown")
    with caplog.at_level(logging.WARNING, logger="agentguard.checks"):
        assert [r.entry.id for r in Audit.query(tmp_path)] == ["a1"]
    assert "README.md: no YAML frontmatter" in caplog.text
    assert "broken.md: frontmatter is not valid YAML" in caplog.text


def test_loads_refuses_what_is_not_an_audit_entry() -> None:
    with pytest.raises(AuditFormatError, match="no YAML frontmatter"):
        Audit.loads("# just markdown\n")
    with pytest.raises(AuditFormatError, match="not an AuditEntry"):
        Audit.loads("---\nid: x\nopinion: fine\n---\nbody\n")
    with pytest.raises(AuditFormatError, match="not an AuditEntry"):
        Audit.loads("---\n- a list\n---\n")


def test_entries_from_other_tools_keep_their_extra_fields() -> None:
    text = (
        "---\n"
        "type: audit\n"
        "id: cfg-review\n"
        "createdAt: 1771632000000\n"
        "agent: reviewer\n"
        'objectives: "Verify configuration files follow security best practices"\n'
        "scope:\n  - config/production.yaml\n  - config/staging.yaml\n"
        "status: complete\n"
        "opinion: qualified\n"
        "findings:\n  critical: 0\n  major: 1\n  minor: 2\n"
        "---\n\n## Findings\n\n### Major\n"
    )
    report = Audit.loads(text)
    assert report.entry.opinion == "qualified"
    assert report.entry.findings == _findings(major=1, minor=2)
    assert report.body == "## Findings\n\n### Major\n"
    again = Audit.loads(Audit.dumps(report.entry, report.body))
    assert again.entry.wire()["type"] == "audit"
    assert again.entry.wire()["status"] == "complete"
    assert again == report


def test_an_audit_observer_that_cannot_write_never_breaks_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    guard = _guard(observers=[AuditObserver(blocker)])
    with caplog.at_level(logging.ERROR), guard.engagement():
        assert guard.call("search", {"q": "x"}) == "results for x"
    assert "observer" in caplog.text


def test_one_report_per_engagement(tmp_path: Path) -> None:
    guard = _guard(observers=[AuditObserver(tmp_path)])
    ids = []
    for _ in range(3):
        with guard.engagement() as eng:
            guard.call("search", {"q": "x"})
        ids.append(eng.id)
    assert sorted(str(r.entry.execution_id) for r in Audit.query(tmp_path)) == sorted(ids)
    assert all(r.entry.agent_id is None for r in Audit.query(tmp_path))  # no guardian, no agent_id given


def test_failed_judgments_carrying_their_data_are_named_and_reported() -> None:
    state = EngagementState()
    step = new_step(state, "steps/toolCallRequest", name="search", call_id="c1")
    for score, outcome in ((0.9, Outcome.ALLOW), (0.2, Outcome.DENY)):
        judge = {"score": score, "passed": score >= 0.5, "reasoning": f"scored {score}"}
        data = {"rule": "judge:tone", "judge": judge}
        step.decisions.append(Decision(Rule.RULE, outcome, Phase.OUTPUT, "judged", "search", data=data))
    entry = build_report(state).entry
    assert [r.rule_name for r in entry.rule_results or []] == ["rule:judge:tone", "rule:judge:tone"]
    assert entry.judge_result == JudgeResult(score=0.2, passed=False, reasoning="scored 0.2")
    assert (entry.opinion, entry.findings) == ("adverse", _findings(major=1))


def test_rule_metadata_that_only_looks_like_a_judgment_is_ignored() -> None:
    guard = _guard()
    guard.rules.add("odd", lambda ctx: CheckResult(True, "ok", {"judge": {"score": "high"}}))
    with guard.engagement() as eng:
        guard.call("search", {"q": "x"})
    assert build_report(eng).entry.judge_result is None


# -- what the engagement recorded cannot change what the report says ---------------------------------------

# Values a model or a host chooses (a tool name, a user id, arguments a reason quotes): lone surrogates,
# control, format and separator characters, and markdown.
HOSTILE = st.text(
    st.sampled_from(
        [*"`*_[]<>~&!#-|\\()=: \t\n\r", "\u2028", "\u202e", "\u200b", "\x1b", "\x00", "\ud800", "a"]
    )
    | st.characters(),
    max_size=12,
)


def _hostile_engagement(value: str, observers: Any = ()) -> Any:
    """An engagement whose every recorded name and reason holds ``value``: a tool the model called, the user
    id, a rule's message, a reviewer's name and reason, a judge's reasoning."""
    guard = _guard(
        reviewers={"supervisor": lambda request: Approval(False, f"r{value}", f"b{value}")},
        observers=list(observers),
    )
    guard.rules.add("hostile", lambda ctx: CheckResult(False, f"m{value}"), capabilities={"send-email"})
    add_judge(guard, _Reasoning(f"j{value}"), JudgeConfig(criteria="c"), name="tone", capabilities={"search"})
    with guard.engagement(user=User(id=f"u{value}")) as eng:
        with pytest.raises(CapabilityDenied):
            guard.call(f"t{value}", {}, lambda: None)
        with pytest.raises(RuleViolation):
            guard.call("send-email", {"to": "bob@corp.com"})
        with pytest.raises(ReviewDenied):
            guard.call("refund", {"amount": 5})
        guard.call("search", {"q": "x"})
    return eng


class _Reasoning:
    """A judge that passes everything with the reasoning it is given."""

    def __init__(self, reasoning: str) -> None:
        self.reasoning = reasoning

    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
        return JudgeResult.from_score(0.9, self.reasoning, config)


def _shape(markdown: str) -> list[tuple[str, str, list[str]]]:
    """The structure of a markdown text as CommonMark (with strikethrough) reads it: every block and the kind
    of every inline element, none of their text."""
    parser = MarkdownIt("commonmark").enable("strikethrough")
    return [(t.type, t.tag, [c.type for c in t.children or []]) for t in parser.parse(markdown)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
@example("\n\n## Conclusion\n\nNo check failed")
@example("`\n- **M9** fake")
@example("\n```\n\nNo findings.")
@example("<details>")
@example("&#x202e;~~denied~~")
def test_recorded_values_cannot_change_the_shape_of_the_report(value: str) -> None:
    """Before, a tool named ``"x\\n\\n## Conclusion\\n\\nNo check failed"`` or a reviewer named ``"b`\\n- **M9**"``
    added headings, findings and conclusions to the report's body, a ```` ``` ```` in a tool name closed the
    timeline's code block, and a reason could bring inline HTML (``<details>``, which folds the rest away).
    Whatever the values, the report reads as the one of harmless values does; the frontmatter keeps them."""
    report = build_report(_hostile_engagement(value))
    assert _shape(report.body) == _shape(build_report(_hostile_engagement("v")).body)
    assert all(line.isprintable() for line in report.body.split("\n"))
    entry = Audit.loads(Audit.dumps(report.entry, report.body)).entry
    assert (entry.opinion, entry.findings) == ("adverse", _findings(major=3))


def test_a_lone_surrogate_never_keeps_the_report_from_being_written(tmp_path: Path) -> None:
    """Before, a tool named ``"shell\\ud800"`` (JSON from a model can say so) made the YAML writer raise: the
    observer logged it, the engagement's report with all its denials was never written, and a temporary file
    was left behind."""
    _hostile_engagement("\ud800", observers=[AuditObserver(tmp_path)])
    [path] = tmp_path.iterdir()
    report = Audit.parse(path)
    assert (report.entry.opinion, report.entry.findings) == ("adverse", _findings(major=3))
    assert report.entry.rule_results is not None
    assert report.entry.rule_results[0].rule_name == "capability:t\\ud800:input"
    assert "`t\\ud800`" in report.body


def test_a_report_that_cannot_be_written_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("agentguard.checks._audit.os.replace", full)
    with pytest.raises(OSError, match="No space"):
        Audit.write(build_report(EngagementState()).entry, tmp_path)
    assert list(tmp_path.iterdir()) == []
