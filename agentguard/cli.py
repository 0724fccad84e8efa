"""The ``agentguard`` command line.

Usage::

    agentguard validate examples/support-agent/agent.yaml other-agent.yaml
    agentguard validate --format json --cel-backend cel-python agent.yaml

``validate`` checks agent documents the way the library loads them (YAML, schema, names, CEL), so a spec
can be checked in CI before it is deployed. Exit status: 0 when every file is valid, 1 when any is not,
2 for a usage error.

Each subcommand is one ``_add_<name>`` function that adds its parser and sets ``run`` to the function
carrying it out; adding a subcommand means writing one and listing it in :data:`_SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

from agentguard.cel import BACKEND_ENV_VAR, DEFAULT_BACKEND, get_backend
from agentguard.checks._cli import add_parser as _add_audit
from agentguard.errors import SpecError, SpecProblem
from agentguard.guardian.server._cli import add_parser as _add_guardian
from agentguard.server._cli import add_parser as _add_serve
from agentguard.spec import load_spec

__all__ = ["main"]

_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentguard", description="Guard every step an AI agent takes with OpenAgentSpec policies."
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


# -------------------------------------------------------------------------------------------- validate


def _add_validate(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check OpenAgentSpec agent files",
        description="Check OpenAgentSpec agent files: YAML, schema, names and CEL expressions. "
        "Exits 0 when every file is valid, 1 otherwise.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="agent YAML file to check")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--cel-backend",
        metavar="NAME",
        default=None,
        help=f"CEL engine to compile with (default: ${BACKEND_ENV_VAR}, else {DEFAULT_BACKEND})",
    )
    parser.set_defaults(run=_validate)


def _validate(args: argparse.Namespace) -> int:
    try:
        backend = get_backend(args.cel_backend)
    except (ValueError, ImportError) as error:  # unknown backend name, or its engine is not installed
        print(f"agentguard validate: error: {error}", file=sys.stderr)
        return 2
    results: list[tuple[str, tuple[SpecProblem, ...]]] = []
    for file in args.files:
        try:
            load_spec(file, backend=backend)
        except SpecError as error:
            results.append((file, error.problems))
        else:
            results.append((file, ()))

    if args.format == "json":
        document = [
            {"file": file, "valid": not problems, "problems": [problem.as_dict() for problem in problems]}
            for file, problems in results
        ]
        print(json.dumps(document, indent=2))
    else:
        for file, problems in results:
            if not problems:
                print(f"{file}: ok")
            for problem in problems:
                print(problem)
        print(_summary(results))
    return 1 if any(problems for _, problems in results) else 0


def _summary(results: Sequence[tuple[str, Sequence[SpecProblem]]]) -> str:
    invalid = sum(1 for _, problems in results if problems)
    count = sum(len(problems) for _, problems in results)
    files = f"{len(results)} file{'s' if len(results) != 1 else ''}"
    if not invalid:
        return f"{files} checked: all valid"
    return f"{files} checked: {invalid} invalid, {count} problem{'s' if count != 1 else ''}"


_SUBCOMMANDS: tuple[Callable[[_Subparsers], None], ...] = (
    _add_validate,
    _add_guardian,
    _add_audit,
    _add_serve,
)
