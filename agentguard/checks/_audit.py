"""Audit reports: one markdown file per engagement, its YAML frontmatter an OS Protocol ``AuditEntry``.

Write one at the end of every engagement with an observer, or on demand::

    from agentguard import Guard
    from agentguard.checks import Audit, AuditObserver, write_report

    guard = Guard.from_file("agent.yaml", observers=[AuditObserver("audit/", agent_id="support-agent")])
    with guard.engagement(user=user) as eng:
        ...                                   # audit/<date>-<id>.md is written when the engagement closes
    write_report(eng, "audit/")               # or any time, for any engagement

    adverse = Audit.query("audit/", opinion="adverse", min_major=1)

The frontmatter is machine-readable (``grep -l "opinion: adverse" audit/*.md`` works); the body is for
people: the conclusion, the findings, the reviews with who approved, and a timeline of every step and
decision. Reports hold decisions and reasons, never tool inputs or outputs.

**Findings** (ISO 27001 non-conformities), one per failed rule result (see :mod:`agentguard.checks._rules`):

- *critical*: an ``error`` failure of a guardrail or the short-circuit rule -- the engagement was failed or
  stopped, and every step it refused afterwards is one more;
- *major*: any other ``error`` failure -- a step was blocked (denied, review rejected, guardian denied);
- *minor*: a ``warning`` failure -- a shadow-mode would-be denial, or a step that proceeded without a
  guardian decision;
- ``info`` failures are observations, not findings.

**Opinion** (ISACA), first match wins:

1. *adverse* -- some step was blocked by an ``error`` check: the agent attempted what its policy forbids;
2. *disclaimer* -- else, some step proceeded without a guardian decision (outcome ``no-decision``): the
   evidence is incomplete, so no opinion is given on it (a blocked step outranks this: missing evidence
   elsewhere cannot make a proven violation acceptable);
3. *qualified* -- else, some check failed at ``warning`` severity (shadow mode): nothing was blocked, but
   something would have been;
4. *unqualified* -- no check failed (``info`` failures included).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import Field, JsonValue, ValidationError

from agentguard.checks._judge import JudgeResult
from agentguard.checks._rules import CheckModel, RuleResult, json_safe, rule_results, state_of
from agentguard.errors import AgentGuardError
from agentguard.observers import Observer
from agentguard.record import EngagementState, StepRecord
from agentguard.timeline import format_timeline, one_line, visible

if TYPE_CHECKING:
    from agentguard.guard import Engagement

__all__ = [
    "Audit",
    "AuditEntry",
    "AuditFindings",
    "AuditFormatError",
    "AuditObserver",
    "AuditOpinion",
    "AuditQuery",
    "AuditReport",
    "build_report",
    "finding_of",
    "opinion_of",
    "write_report",
]

logger = logging.getLogger("agentguard.checks")

AuditOpinion = Literal["unqualified", "qualified", "adverse", "disclaimer"]
Finding = Literal["critical", "major", "minor"]

_CRITICAL_KINDS = frozenset({"guardrail", "short-circuit"})
_Count = Annotated[int, Field(ge=0)]


class AuditFindings(CheckModel):
    """OS Protocol ``AuditFindings``: how many findings of each severity."""

    critical: _Count = 0
    major: _Count = 0
    minor: _Count = 0


class AuditEntry(CheckModel):
    """OS Protocol ``AuditEntry``: the YAML frontmatter of an audit report.

    ``created_at`` is Unix time in milliseconds; ``execution_id`` is the engagement id.
    """

    id: str
    created_at: int
    agent_id: str | None = None
    execution_id: str | None = None
    objectives: str
    scope: list[str]
    opinion: AuditOpinion
    findings: AuditFindings
    rule_results: list[RuleResult] | None = None
    judge_result: JudgeResult | None = None
    metadata: dict[str, JsonValue] | None = None


class AuditQuery(CheckModel):
    """OS Protocol ``AuditQuery``: which entries to find (``since`` / ``until`` in Unix ms, inclusive)."""

    opinion: AuditOpinion | list[AuditOpinion] | None = None
    min_critical: int | None = None
    min_major: int | None = None
    agent_id: str | None = None
    execution_id: str | None = None
    since: float | None = None
    until: float | None = None

    def matches(self, entry: AuditEntry) -> bool:
        opinions = [self.opinion] if isinstance(self.opinion, str) else self.opinion
        return (
            (opinions is None or entry.opinion in opinions)
            and (self.min_critical is None or entry.findings.critical >= self.min_critical)
            and (self.min_major is None or entry.findings.major >= self.min_major)
            and (self.agent_id is None or entry.agent_id == self.agent_id)
            and (self.execution_id is None or entry.execution_id == self.execution_id)
            and (self.since is None or entry.created_at >= self.since)
            and (self.until is None or entry.created_at <= self.until)
        )


class AuditFormatError(AgentGuardError, ValueError):
    """A file is not an audit report: no YAML frontmatter, or frontmatter that is not an ``AuditEntry``."""


@dataclass(frozen=True)
class AuditReport:
    """An audit report: its entry (the frontmatter), its markdown body, and its file once written or read."""

    entry: AuditEntry
    body: str
    path: Path | None = None


# -- findings and opinion ---------------------------------------------------------------------------


def _meta(result: RuleResult, key: str) -> JsonValue:
    return (result.metadata or {}).get(key)


def finding_of(result: RuleResult) -> Finding | None:
    """The finding a rule result is, if any (the mapping is in the module docstring)."""
    if result.passed:
        return None
    if result.severity == "error":
        return "critical" if _meta(result, "kind") in _CRITICAL_KINDS else "major"
    return "minor" if result.severity == "warning" else None


def findings_of(results: Sequence[RuleResult]) -> AuditFindings:
    counts = {"critical": 0, "major": 0, "minor": 0}
    for result in results:
        finding = finding_of(result)
        if finding is not None:
            counts[finding] += 1
    return AuditFindings(**counts)


def opinion_of(results: Sequence[RuleResult]) -> AuditOpinion:
    """The opinion rule results support (the mapping and its precedence are in the module docstring)."""
    failed = [r for r in results if not r.passed]
    if any(r.severity == "error" for r in failed):
        return "adverse"
    if any(_meta(r, "outcome") == "no-decision" for r in failed):
        return "disclaimer"
    if any(r.severity == "warning" for r in failed):
        return "qualified"
    return "unqualified"


_CONCLUSIONS: dict[AuditOpinion, str] = {
    "unqualified": "No check failed: the agent acted within its policy throughout the engagement.",
    "qualified": "Checks in shadow mode (severity warning) would have denied steps, but nothing was blocked.",
    "adverse": "Checks of severity error blocked steps: the agent attempted what its policy forbids.",
    "disclaimer": "Steps proceeded without a guardian decision: the evidence is insufficient for an opinion.",
}


# -- building a report --------------------------------------------------------------------------------


def _recorded_agent_id(state: EngagementState) -> str | None:
    """The agent id in the AOS requests on record (present for every step when a guardian is set)."""
    for step in state.steps:
        for request in step.aos:
            params = request.get("params")
            context = params.get("context") if isinstance(params, Mapping) else None
            agent = context.get("agent") if isinstance(context, Mapping) else None
            if isinstance(agent, Mapping) and isinstance(agent.get("id"), str):
                return str(agent["id"])
    return None


def _lowest_judgment(results: Sequence[RuleResult]) -> JudgeResult | None:
    """The lowest-scoring judgment in the decisions' data (a rule's own ``judge`` metadata is skipped if it is
    not a ``JudgeResult``: a report is written whatever user rules put in their metadata)."""
    judgments = []
    for result in results:
        data = _meta(result, "data")
        judge = data.get("judge") if isinstance(data, dict) else None
        try:
            judgments.append(JudgeResult.model_validate(judge))
        except ValidationError:
            continue
    return min(judgments, key=lambda j: j.score, default=None)


def build_report(
    source: Engagement | EngagementState,
    *,
    agent_id: str | None = None,
    objectives: str | None = None,
    scope: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> AuditReport:
    """The audit report of an engagement, as it stands now (nothing is written).

    ``agent_id`` defaults to the engagement's guard's agent id (given an :class:`~agentguard.Engagement`),
    else to the one in the AOS requests on record. ``scope`` defaults to the steps audited (``"<AOS
    method> <name>"``, in order of first appearance). ``metadata`` is added to the entry's.
    """
    state = state_of(source)
    if agent_id is None:
        guard = getattr(source, "guard", None)
        agent_id = guard.agent_descriptor()["id"] if guard is not None else _recorded_agent_id(state)
    results = rule_results(state)
    opinion = opinion_of(results)
    who = f"agent {agent_id!r}" if agent_id else "the agent"
    extra = json_safe(metadata or {})
    engagement: dict[str, JsonValue] = {
        "user": state.user.id if state.user else None,
        "status": state.status.value,
        "statusReason": state.status_reason,
        "startedAt": state.started_at.isoformat(),
        "steps": len(state.steps),
        "decisions": len(results),
    }
    entry = AuditEntry(
        id=uuid.uuid4().hex,
        created_at=int(time.time() * 1000),
        agent_id=agent_id,
        execution_id=state.id,
        objectives=objectives
        or f"Determine whether {who} stayed within its OpenAgentSpec policy in engagement {state.id}.",
        scope=list(scope) if scope is not None else _scope(state),
        opinion=opinion,
        findings=findings_of(results),
        rule_results=results,
        judge_result=_lowest_judgment(results),
        metadata={"engagement": engagement, **(extra if isinstance(extra, dict) else {})},
    )
    return AuditReport(entry, render_body(entry, state.steps))


def _scope(state: EngagementState) -> list[str]:
    return list(dict.fromkeys(f"{step.kind} {step.name}" if step.name else step.kind for step in state.steps))


def write_report(
    source: Engagement | EngagementState,
    directory: str | os.PathLike[str],
    *,
    agent_id: str | None = None,
    objectives: str | None = None,
    scope: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Build the engagement's report (see :func:`build_report`) and write it to ``directory``; its path."""
    report = build_report(source, agent_id=agent_id, objectives=objectives, scope=scope, metadata=metadata)
    return Audit.write(report.entry, directory, body=report.body)


# -- the markdown body ----------------------------------------------------------------------------------


# The body is markdown built from values the engagement recorded, and a model chooses some of them (the name
# of a tool it calls, the arguments a reason quotes), a host others (the user id, the engagement id). None of
# them may add a line, a heading or a finding to the report, hide or reorder what follows, or keep the report
# from being written: every value goes in through ``_code``, ``_prose`` or ``_code_block``.


def visible_lines(text: str) -> str:
    """``text`` with :func:`visible` applied to each of its lines: its line feeds are kept, and nothing else
    that is not printable."""
    return "\n".join(visible(line) for line in text.split("\n"))


_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*_[]<>~&"})


def _prose(text: object) -> str:
    """``text`` as one line of markdown prose that reads as written: emphasis, links, code, inline HTML (a
    ``<details>`` would fold the rest of the report away) and character references are escaped."""
    return one_line(text).translate(_MARKDOWN)


_TICKS = re.compile("`+")


def _code(value: object) -> str:
    """``value`` as one markdown code span, whatever backticks it holds (the fence is longer than any of
    its runs of them)."""
    text = one_line(value)
    fence = "`" * (1 + max(map(len, _TICKS.findall(text)), default=0))
    pad = " " if not text or text.startswith("`") or text.endswith("`") else ""  # "``" is no code span
    return f"{fence}{pad}{text}{pad}{fence}"


def _code_block(text: str) -> list[str]:
    """``text`` as a fenced code block that none of its lines can close."""
    text = visible_lines(text)
    fence = "`" * max(3, 1 + max(map(len, _TICKS.findall(text)), default=0))
    return [f"{fence}text", text, fence]


def _where(result: RuleResult) -> str:
    step = _meta(result, "step")
    step = step if isinstance(step, dict) else {}
    subject = f" {_code(step['name'])}" if step.get("name") else ""
    return f"{_code(step.get('kind', '?'))}{subject} at {_code(_meta(result, 'at'))}"


def _reviews(results: Sequence[RuleResult]) -> Iterator[tuple[RuleResult, Mapping[str, Any]]]:
    """(result, approval) for every reviewer answer on record: review gates and judges routed to review."""
    for result in results:
        data = _meta(result, "data")
        if not isinstance(data, dict):
            continue
        review = data if _meta(result, "kind") == "review" else data.get("review")
        approvals = review.get("approvals") if isinstance(review, dict) else None
        for approval in approvals if isinstance(approvals, list) else ():
            if isinstance(approval, dict):
                yield result, approval


def render_body(entry: AuditEntry, steps: Iterable[StepRecord]) -> str:
    """The markdown body of a report: findings and reviews from the entry, the timeline from the steps.

    The timeline has one line per step (:mod:`agentguard.timeline`, without tool inputs); every single
    decision is in the entry's ``ruleResults``.
    """
    results = entry.rule_results or []
    engagement = (entry.metadata or {}).get("engagement")
    engagement = engagement if isinstance(engagement, dict) else {}
    f = entry.findings
    lines = [
        f"# Audit of engagement {_code(entry.execution_id)}",
        "",
        f"- **Agent:** {_code(entry.agent_id or 'unknown')}; **user:** {_code(engagement.get('user') or 'unknown')}",
        f"- **Engagement:** started {_prose(engagement.get('startedAt', '?'))}, "
        f"{_prose(engagement.get('status', '?'))}"
        + (f" ({_prose(engagement['statusReason'])})" if engagement.get("statusReason") else ""),
        f"- **Steps:** {_prose(engagement.get('steps', '?'))}, **decisions:** {len(results)}",
        f"- **Opinion:** **{entry.opinion}**; **findings:** {f.critical} critical, {f.major} major, "
        f"{f.minor} minor",
        "",
        "## Conclusion",
        "",
        _CONCLUSIONS[entry.opinion],
        "",
        "## Findings",
        "",
    ]
    for finding, label in (("critical", "C"), ("major", "M"), ("minor", "m")):
        listed = [r for r in results if finding_of(r) == finding]
        if listed:
            lines += [f"### {finding.capitalize()}", ""]
            lines += [
                f"- **{label}{n}** {_code(r.rule_name)} ({r.severity}), {_where(r)}: {_prose(r.message)}"
                for n, r in enumerate(listed, 1)
            ]
            lines.append("")
    if not (f.critical or f.major or f.minor):
        lines += ["No findings.", ""]
    reviews = list(_reviews(results))
    if reviews:
        lines += ["## Reviews", ""]
        for result, approval in reviews:
            verdict = "approved" if approval.get("approved") else "rejected"
            reason = f": {_prose(approval['reason'])}" if approval.get("reason") else ""
            lines.append(
                f"- {_code(result.rule_name)}, {_where(result)}: **{verdict}** by "
                f"{_code(approval.get('approvedBy', 'unknown'))} at {_code(approval.get('timestamp', '?'))}"
                f"{reason}"
            )
        lines.append("")
    if entry.judge_result is not None:
        j = entry.judge_result
        verdict = "passed" if j.passed else "failed"
        lines += ["## Judgment", "", f"Lowest score {j.score:.2f} ({verdict}): {_prose(j.reasoning)}", ""]
    timeline = format_timeline(steps, inputs=False)
    lines += ["## Timeline", "", *(_code_block(timeline) if timeline else ["No steps."])]
    return "\n".join(lines) + "\n"


# -- files ----------------------------------------------------------------------------------------------

_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _encodable(value: Any) -> Any:
    """``value`` (JSON) with every lone surrogate in its strings, keys included, written as its escape
    (``\\ud800``). A model's JSON can carry one (``"\\ud800"``) into a tool name or a reason; UTF-8 cannot
    encode it, and the whole report of the engagement, every denial in it, used to be lost on it."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    return value


def _millis(value: datetime | float | None) -> float | None:
    return value.timestamp() * 1000 if isinstance(value, datetime) else value


class Audit:
    """OS Protocol ``Audit``: parse, write and query audit reports (markdown files with YAML frontmatter)."""

    @staticmethod
    def loads(content: str) -> AuditReport:
        """Read a report from its text; :class:`AuditFormatError` if it is not one."""
        match = _FRONTMATTER.match(content)
        if match is None:
            raise AuditFormatError("no YAML frontmatter (a report starts with a line '---')")
        try:
            data = yaml.load(match.group(1), Loader=_Loader)  # a safe loader (C-accelerated when available)
            entry = AuditEntry.model_validate(data)
        except yaml.YAMLError as exc:
            raise AuditFormatError(f"frontmatter is not valid YAML: {exc}") from None
        except ValidationError as exc:
            raise AuditFormatError(f"frontmatter is not an AuditEntry: {exc}") from None
        return AuditReport(entry, content[match.end() :].lstrip("\r\n"))

    @staticmethod
    def dumps(entry: AuditEntry, body: str = "") -> str:
        """The text of a report: ``entry`` as YAML frontmatter, then ``body``; UTF-8 encodable whatever they
        hold (a lone surrogate is written as its escape, ``\\ud800``)."""
        frontmatter = yaml.dump(
            _encodable(entry.wire()),
            Dumper=_Dumper,
            sort_keys=False,
            allow_unicode=True,
            default_flow_style=False,
        )
        return f"---\n{frontmatter}---\n\n{_encodable(body)}"

    @staticmethod
    def parse(path: str | os.PathLike[str]) -> AuditReport:
        """Read the report in ``path``; :class:`AuditFormatError` (naming the file) if it is not one."""
        path = Path(path)
        try:
            report = Audit.loads(path.read_text(encoding="utf-8"))
        except AuditFormatError as exc:
            raise AuditFormatError(f"{path}: {exc}") from None
        return AuditReport(report.entry, report.body, path)

    @staticmethod
    def write(entry: AuditEntry, directory: str | os.PathLike[str], *, body: str = "") -> Path:
        """Write ``entry`` and ``body`` to ``<directory>/<date>-<id>.md`` (atomically); returns the path."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        day = datetime.fromtimestamp(entry.created_at / 1000, UTC).strftime("%Y-%m-%d")
        path = folder / f"{day}-{entry.id}.md"
        text = Audit.dumps(entry, body)
        # Written whole or not at all: a reader querying the directory never sees half a report, and a write
        # that fails leaves no temporary file behind.
        descriptor, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        try:
            with open(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path

    @staticmethod
    def scan(directory: str | os.PathLike[str]) -> Iterator[AuditReport]:
        """Every report in ``directory`` (``*.md``, by file name); other files there are logged and skipped."""
        for path in sorted(Path(directory).glob("*.md")):
            try:
                yield Audit.parse(path)
            except AuditFormatError as exc:
                logger.warning("skipped %s", exc)

    @staticmethod
    def query(
        directory: str | os.PathLike[str],
        *,
        opinion: AuditOpinion | Collection[AuditOpinion] | None = None,
        min_critical: int | None = None,
        min_major: int | None = None,
        agent_id: str | None = None,
        execution_id: str | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
    ) -> list[AuditReport]:
        """The reports in ``directory`` matching every filter given, oldest first.

        ``since`` / ``until`` are datetimes or Unix milliseconds (inclusive), as in ``AuditQuery``.
        """
        query = AuditQuery(
            opinion=opinion if opinion is None or isinstance(opinion, str) else list(opinion),
            min_critical=min_critical,
            min_major=min_major,
            agent_id=agent_id,
            execution_id=execution_id,
            since=_millis(since),
            until=_millis(until),
        )
        found = [report for report in Audit.scan(directory) if query.matches(report.entry)]
        return sorted(found, key=lambda report: report.entry.created_at)


class AuditObserver(Observer):
    """Writes the audit report of every engagement to ``directory`` when the engagement is closed.

    An observer is not told which guard it serves, so ``agent_id`` is given here (or read from the AOS
    requests on record, when a guardian is configured). A report that cannot be written is logged; the agent
    goes on (observers never break the agent).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        agent_id: str | None = None,
        objectives: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.agent_id = agent_id
        self.objectives = objectives

    def engagement_ended(self, state: EngagementState) -> None:
        write_report(state, self.directory, agent_id=self.agent_id, objectives=self.objectives)
