"""``agentguard audit``: list, show and query the audit reports in a directory.

Usage::

    agentguard audit ls audit/
    agentguard audit show audit/2026-11-22-3f2a9c....md
    agentguard audit show 3f2a9c --dir audit/            # by id, or a unique prefix of one
    agentguard audit query audit/ --opinion adverse --opinion disclaimer --min-major 1 --since 2026-11-01
    agentguard audit query audit/ --agent support-agent --format json

``ls`` and ``query`` print one row per report (oldest first); ``--format json`` prints the entries instead.
Files in the directory that are not audit reports are skipped with a warning. Exit status: 0 on success
(also when nothing matched), 1 when a report cannot be found or read, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

from agentguard.checks._audit import (
    Audit,
    AuditFormatError,
    AuditOpinion,
    AuditReport,
    visible_lines,
)
from agentguard.timeline import visible

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``audit`` subcommand and its ``ls`` / ``show`` / ``query`` commands."""
    parser = subparsers.add_parser(
        "audit",
        help="list, show and query audit reports",
        description="Read the audit reports (markdown with OS Protocol AuditEntry frontmatter) in a directory.",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    ls = commands.add_parser("ls", help="list the reports in a directory")
    ls.add_argument("directory", metavar="DIR", type=Path)
    _add_format(ls)
    ls.set_defaults(run=_list)

    show = commands.add_parser("show", help="print one report")
    show.add_argument("report", metavar="FILE|ID", help="a report file, or a report id (or unique prefix)")
    show.add_argument("--dir", type=Path, default=Path("."), help="where to look up an id (default: .)")
    _add_format(show)
    show.set_defaults(run=_show)

    query = commands.add_parser("query", help="list the reports that match every filter given")
    query.add_argument("directory", metavar="DIR", type=Path)
    query.add_argument(
        "--opinion", action="append", choices=get_args(AuditOpinion), help="this opinion (repeat for any of)"
    )
    query.add_argument("--min-critical", type=int, metavar="N", help="at least N critical findings")
    query.add_argument("--min-major", type=int, metavar="N", help="at least N major findings")
    query.add_argument("--agent", metavar="ID", help="written for this agent id")
    query.add_argument("--execution", metavar="ID", help="of this engagement (execution) id")
    query.add_argument(
        "--since", type=_time, metavar="TIME", help="created at or after (ISO 8601 or Unix ms)"
    )
    query.add_argument(
        "--until", type=_time, metavar="TIME", help="created at or before (ISO 8601 or Unix ms)"
    )
    _add_format(query)
    query.set_defaults(run=_query)


def _add_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def _time(text: str) -> float:
    """A command-line time: Unix milliseconds, or an ISO 8601 date or datetime (UTC unless it says)."""
    if text.isdigit():
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time or Unix milliseconds: {text!r}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000


def _list(args: argparse.Namespace) -> int:
    return _print_reports(args, Audit.query(args.directory)) if _is_dir(args.directory) else 1


def _query(args: argparse.Namespace) -> int:
    if not _is_dir(args.directory):
        return 1
    reports = Audit.query(
        args.directory,
        opinion=args.opinion,
        min_critical=args.min_critical,
        min_major=args.min_major,
        agent_id=args.agent,
        execution_id=args.execution,
        since=args.since,
        until=args.until,
    )
    return _print_reports(args, reports)


def _is_dir(directory: Path) -> bool:
    if directory.is_dir():
        return True
    print(f"agentguard audit: {directory} is not a directory", file=sys.stderr)
    return False


def _show(args: argparse.Namespace) -> int:
    try:
        report = _find(args.report, args.dir)
    except (AuditFormatError, LookupError, OSError) as error:
        print(f"agentguard audit: {visible(str(error))}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(
            json.dumps(
                {"path": str(report.path), "entry": report.entry.wire(), "body": report.body}, indent=2
            )
        )
        return 0
    # A report's text is the engagement's (a user id, an engagement id, reasons): printed to a terminal, its
    # control characters are shown as escapes, so that none can move the cursor or erase a line.
    entry = report.entry
    print(f"{visible(str(report.path))}\n")
    print(f"id:          {visible(entry.id)}")
    print(f"created:     {_created(entry.created_at)}")
    print(f"agent:       {visible(entry.agent_id or '-')}")
    print(f"execution:   {visible(entry.execution_id or '-')}")
    print(f"objectives:  {visible(entry.objectives)}")
    print(f"scope:       {visible(', '.join(entry.scope) or '-')}")
    print(f"opinion:     {entry.opinion}")
    f = entry.findings
    print(f"findings:    {f.critical} critical, {f.major} major, {f.minor} minor\n")
    print(visible_lines(report.body), end="")
    return 0


def _find(reference: str, directory: Path) -> AuditReport:
    """The report at path ``reference``, else the one in ``directory`` whose id is or starts with it."""
    path = Path(reference)
    if path.is_file():
        return Audit.parse(path)
    if not directory.is_dir():
        raise LookupError(f"{reference} is not a file, and {directory} is not a directory to look it up in")
    matches = [r for r in Audit.scan(directory) if r.entry.id.startswith(reference)]
    exact = [r for r in matches if r.entry.id == reference]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    if not matches:
        raise LookupError(f"no report {reference!r} in {directory}")
    listed = ", ".join(r.entry.id for r in matches)
    raise LookupError(f"{reference!r} matches {len(matches)} reports ({listed}): give more of the id")


def _created(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_reports(args: argparse.Namespace, reports: Sequence[AuditReport]) -> int:
    if args.format == "json":
        print(json.dumps([{"path": str(r.path), "entry": r.entry.wire()} for r in reports], indent=2))
        return 0
    header = ("ID", "CREATED (UTC)", "OPINION", "CRIT", "MAJ", "MIN", "AGENT", "EXECUTION", "FILE")
    rows = [
        tuple(
            visible(cell)  # a cell is one line of printable text: no value adds a row or erases one
            for cell in (
                r.entry.id[:12],
                _created(r.entry.created_at),
                r.entry.opinion,
                str(r.entry.findings.critical),
                str(r.entry.findings.major),
                str(r.entry.findings.minor),
                r.entry.agent_id or "-",
                r.entry.execution_id or "-",
                r.path.name if r.path else "-",
            )
        )
        for r in reports
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"{len(rows)} report{'s' if len(rows) != 1 else ''}")
    return 0
