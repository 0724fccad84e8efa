"""A readable timeline of an engagement: each step and what was decided about it.

::

    from agentguard.timeline import print_timeline

    print_timeline(eng)          # an Engagement, or any iterable of StepRecord
    #  1  user message            allowed   guardrail pii-check passed
    #  2  tool lookup-order       allowed   {"order_id": "A-1"}
    #  3  tool send-email         DENIED    restriction (input): assertion is false [recent["send-email"]...]
    #  4  tool refund             allowed   reviewed (input) by supervisor: approved
    #  5  tool send-email         modified  modified by guardian (input): body: "card 4111..." -> "[redacted]"

A guardian's modification of a tool call is shown as before -> after for each argument it changed, and only
as the names of the changed arguments when content capture is off (the guard's ``capture_content``, see
:mod:`agentguard.telemetry`): the timeline is content like any span.

It reads only the public step records (kind, name, decisions, outcome), so it works for any adapter, the
command line's ``agentguard demo`` and the audit report alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from agentguard.engagement import Engagement
from agentguard.errors import Rule
from agentguard.record import CallRecord, Decision, Outcome, StepRecord

__all__ = ["describe_step", "format_timeline", "one_line", "print_timeline", "visible"]

_KINDS = {
    "steps/toolCallRequest": "tool",
    "steps/knowledgeRetrieval": "knowledge retrieval",
    "steps/memoryStore": "memory store",
    "steps/memoryContextRetrieval": "memory retrieval",
    "steps/agentTrigger": "trigger",
    "protocols/MCP": "MCP",
}

_VERDICTS = {
    Outcome.ALLOW: "allowed",
    Outcome.DENY: "DENIED",
    Outcome.REVIEW_REJECTED: "REJECTED",
    Outcome.MODIFY: "modified",
    Outcome.NO_DECISION: "no-decision",
    Outcome.WARN: "warned",
    Outcome.REVIEW_APPROVED: "allowed",
    Outcome.REVIEW_PENDING: "paused",
}


def visible(text: str) -> str:
    """``text`` with every character that is not printable written as its Python escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``): a terminal control sequence, a bidi override or an invisible character cannot
    hide or reorder the text around it, and a lone surrogate (which UTF-8 cannot encode) cannot stop a
    report from being written."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def one_line(text: object) -> str:
    """``text`` as one line of printable text: its runs of whitespace (line breaks included) one space each,
    then :func:`visible`."""
    return visible(" ".join(str(text).split()))


def _what(step: StepRecord) -> str:
    if step.kind == "steps/message":
        return f"{step.name or 'agent'} message"
    kind = _KINDS.get(step.kind, step.kind)
    return f"{kind} {step.name}" if step.name and kind == "tool" else kind


def _rule(decision: Decision) -> str:
    phase = f" ({decision.phase.value})" if decision.phase is not None else ""
    return f"{decision.rule.value}{phase}"


def _review(decision: Decision) -> str:
    data = decision.data or {}
    reviewer = data.get("reviewer") or "reviewer"
    people = [a.get("approvedBy") for a in data.get("approvals") or () if isinstance(a, dict)]
    who = ", ".join(p for p in people if p and p != reviewer)
    by = f"{reviewer} ({who})" if who else reviewer
    verdict = {
        Outcome.REVIEW_APPROVED: "approved",
        Outcome.REVIEW_PENDING: "pending (run paused)",
    }.get(decision.outcome, "rejected")
    return f"reviewed{' (' + decision.phase.value + ')' if decision.phase else ''} by {by}: {verdict}"


def describe_step(step: StepRecord) -> tuple[str, str, str]:
    """(what happened, verdict, why) for one step."""
    outcome = step.outcome
    notes: list[str] = []
    blocking = next((d for d in step.decisions if d.blocked), None)
    if blocking is not None:
        if blocking.rule is Rule.REVIEW:
            notes.append(_review(blocking) + (f" ({blocking.reason})" if blocking.reason else ""))
        else:
            notes.append(f"{_rule(blocking)}: {blocking.reason}")
            if blocking.expression:
                notes.append(f"[{blocking.expression}]")
        if blocking.phase is not None and blocking.phase.value == "output":
            if step.kind == "steps/toolCallRequest":
                notes.append("-- output withheld")
            elif step.kind == "steps/message":
                notes.append("-- answer withheld from the user")
    else:
        for d in step.decisions:
            if d.rule is Rule.REVIEW:
                notes.append(_review(d))
            elif d.rule is Rule.GUARDRAIL:
                notes.append(f"guardrail {d.capability} passed")
            elif d.outcome is Outcome.MODIFY:
                notes.append(f"modified by {_rule(d)}")
            elif d.outcome in (Outcome.NO_DECISION, Outcome.WARN):
                notes.append(f"{_rule(d)}: {d.reason}")
    # Names and reasons are the model's and the tools' words: one printable line each, so that a tool named
    # "x\n  2  tool refund  allowed" cannot add a step line of its own to the timeline.
    return one_line(_what(step)), _VERDICTS.get(outcome, outcome.value), one_line(" ".join(notes))


_ABSENT = object()


def _changes(step: StepRecord, record: CallRecord, content: bool) -> str:
    """What a guardian's ``modify`` changed in a tool call's arguments: before -> after, or only which ones."""
    try:
        sent = step.aos[0]["params"]["toolCallRequest"]["inputs"]
        before = {item["name"]: item["value"] for item in sent}
    except (IndexError, KeyError, TypeError):  # not a tool call request as built by agentguard
        return ""
    after = record.inputs
    changed = sorted(
        k for k in before.keys() | after.keys() if before.get(k, _ABSENT) != after.get(k, _ABSENT)
    )
    if not changed:
        return ""
    if not content:
        return f"changed {', '.join(changed)} (values not shown: content capture is off)"

    def shown(value: object) -> str:
        return "(absent)" if value is _ABSENT else json.dumps(value, default=str, ensure_ascii=False)

    return "; ".join(
        f"{k}: {shown(before.get(k, _ABSENT))} -> {shown(after.get(k, _ABSENT))}" for k in changed
    )


def format_timeline(
    source: Engagement | Iterable[StepRecord], *, inputs: bool = True, content: bool | None = None
) -> str:
    """The timeline as text, one line per step; ``inputs``: show a tool call's inputs if nothing else is said.

    A tool step shows its call record's inputs and what a guardian modified. ``content``: show the modified
    values (default: the engagement's guard's ``capture_content``; off for bare step records).
    """
    if content is None:
        telemetry = source.guard.telemetry if isinstance(source, Engagement) else None
        content = telemetry is not None and telemetry.capture_content
    steps: Sequence[StepRecord] = list(source.steps if isinstance(source, Engagement) else source)
    described = [describe_step(step) for step in steps]
    width = max((len(what) for what, _, _ in described), default=10)
    lines = []
    for number, (step, (what, verdict, why)) in enumerate(zip(steps, described, strict=True), 1):
        record = step.call if step.kind == "steps/toolCallRequest" else None
        if step.outcome is Outcome.MODIFY and record is not None:
            why = f"{why}: {one_line(_changes(step, record, content))}".removesuffix(": ")
        if inputs and not why and record is not None:
            why = one_line(json.dumps(record.inputs, default=str, ensure_ascii=False))
        lines.append(f"{number:>3}  {what:<{width}}  {verdict:<10}  {why}".rstrip())
    return "\n".join(lines)


def print_timeline(source: Engagement | Iterable[StepRecord], *, file: TextIO | None = None) -> None:
    """Print :func:`format_timeline` (to stdout by default)."""
    print(format_timeline(source), file=file or sys.stdout)
