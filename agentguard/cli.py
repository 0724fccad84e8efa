"""The ``agentguard`` command line.

Usage::

    agentguard validate examples/support-agent/agent.yaml other-agent.yaml
    agentguard validate --format json --cel-backend cel-python agent.yaml
    agentguard validate --strict support.agentspec.json mailcomposer.json SUPPORT-OS.md
    agentguard validate --guard myapp.agents:guard

``validate`` checks agent documents the way the library loads them, so they can be checked in CI before
they are deployed: OpenAgentSpec agents (YAML, schema, names, CEL, and what the assertions read: see
:func:`agentguard.spec.lint_spec`) and the descriptor formats of :mod:`agentguard.formats` -- Agent Spec
configurations, Agent Manifests, OS Protocol app files -- told apart by their content. ``--guard`` checks a
built :class:`~agentguard.Guard` (imported from the current directory): its spec, and the reviewers and
guardrail tools it was not given. Warnings (a name that is likely not a capability, an unknown provider, a
secret written in a file) are printed but do not fail the check, unless ``--strict`` makes them errors.
Exit status: 0 when every file is valid, 1 when any is not, 2 for a usage error.

Each subcommand is a function that adds its parser and sets ``run`` to the function carrying it out; adding
a subcommand means writing one and listing it, with its one-line summary, in :data:`_COMMANDS`. Only the
subcommand being run is imported (``agentguard --help`` lists the summaries and imports none of them), so
the command line starts in a fraction of the time the whole library takes to import.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from agentguard.errors import SpecProblem
    from agentguard.formats import Format

__all__ = ["main"]

_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True)
class _Command:
    summary: str
    """The line ``agentguard --help`` shows (the subcommand's own parser is not built for that)."""
    add_parser: str
    """``module:function`` adding the subcommand's parser, imported only when the subcommand is named."""
    extra: str | None = None
    """The optional dependency set (``pip install 'agentguard[<extra>]'``) the subcommand needs to run."""


_EXTRAS = {"server": ("starlette", "uvicorn", "jsonschema")}
"""The top-level modules of each extra the command line checks for (as in ``pyproject.toml``)."""

_BROKEN_PIPE = 128 + 13
"""The exit status of a process ended by ``SIGPIPE`` (signal 13), as shells report it."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    Output piped into a program that stops reading early (``agentguard validate ... | head``) ends the
    command quietly, with the status of a process killed by ``SIGPIPE``, instead of with a traceback.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _build_parser(argv).parse_args(argv)
    missing = _missing_extra(args.command)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 1
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        status = run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can reach the reader. Point stdout at /dev/null so that the interpreter's own flush
        # at exit does not fail again and print a traceback after all.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _BROKEN_PIPE
    return status


def _build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser, with the full parser of only the subcommand ``argv`` names (summaries for the rest)."""
    parser = argparse.ArgumentParser(
        prog="agentguard", description="Guard every step an AI agent takes with OpenAgentSpec policies."
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command", required=True)
    named = argv[0] if argv else None
    for name, command in _COMMANDS.items():
        if name == named:
            module, _, function = command.add_parser.partition(":")
            add: Callable[[_Subparsers], None] = getattr(importlib.import_module(module), function)
            add(subparsers)
        else:
            subparsers.add_parser(name, help=command.summary)
    return parser


def _missing_extra(name: str) -> str | None:
    """Why subcommand ``name`` cannot run in this installation, with the command that fixes it; else ``None``."""
    extra = _COMMANDS[name].extra
    if extra is None:
        return None
    absent = [module for module in _EXTRAS[extra] if importlib.util.find_spec(module) is None]
    if not absent:
        return None
    return (
        f"agentguard {name} needs the {extra!r} extra ({', '.join(absent)} not installed): "
        f"pip install 'agentguard[{extra}]'"
    )


# -------------------------------------------------------------------------------------------- validate


def _add_validate(subparsers: _Subparsers) -> None:
    from agentguard.cel import BACKEND_ENV_VAR, DEFAULT_BACKEND

    parser = subparsers.add_parser(
        "validate",
        help=_COMMANDS["validate"].summary,
        description="Check OpenAgentSpec agent files (YAML, schema, names and CEL expressions) and agent "
        "descriptors (Agent Spec, Agent Manifest, OS Protocol app), told apart by their content. "
        "Exits 0 when every file is valid, 1 otherwise.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="agent file to check")
    parser.add_argument(
        "--guard",
        action="append",
        default=[],
        metavar="MODULE:NAME",
        help="also check a built Guard: its spec, and the reviewers and guardrail tools it lacks",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="count warnings as errors, and validate Agent Spec files with pyagentspec too "
        "(pip install 'agentguard[agentspec]')",
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--cel-backend",
        metavar="NAME",
        default=None,
        help=f"CEL engine to compile with (default: ${BACKEND_ENV_VAR}, else {DEFAULT_BACKEND})",
    )
    parser.set_defaults(run=_validate, usage_error=parser.error)


@dataclass
class _Checked:
    file: str
    format: Format | None
    problems: tuple[SpecProblem, ...] = ()
    warnings: tuple[SpecProblem, ...] = ()


def _validate(args: argparse.Namespace) -> int:
    from agentguard.cel import get_backend
    from agentguard.errors import ConfigurationError, SpecError
    from agentguard.formats import LoadOptions, descriptor_of, read_document, read_file
    from agentguard.spec import in_file_order, lint_spec, load_spec_text

    if not args.files and not args.guard:
        args.usage_error("name a FILE or a --guard to check")  # exits with status 2, as argparse does
    try:
        backend = get_backend(args.cel_backend)
        results = [_checked_guard(name) for name in args.guard]
    except (ValueError, ImportError) as error:  # unknown backend, its engine not installed, no such guard
        print(f"agentguard validate: error: {error}", file=sys.stderr)
        return 2
    for file in args.files:
        checked = _Checked(file, None)
        try:
            text, source = read_file(file)
            doc = read_document(text, source)
            checked.format = doc.format
            if doc.format == "openagentspec":
                found = lint_spec(load_spec_text(text, backend=backend, source=source))
                checked.problems, checked.warnings = found.errors, found.warnings
            else:
                checked.warnings = descriptor_of(
                    doc, LoadOptions(strict=args.strict, secrets_known=False)
                ).warnings
        except SpecError as error:
            checked.problems = error.problems
        except ConfigurationError as error:  # --strict without pyagentspec installed
            print(f"agentguard validate: error: {error}", file=sys.stderr)
            return 2
        results.append(checked)
    if args.strict:
        for checked in results:
            checked.problems = tuple(in_file_order([*checked.problems, *checked.warnings]))
            checked.warnings = ()

    if args.format == "json":
        print(json.dumps([_as_json(checked) for checked in results], indent=2))
    else:
        for checked in results:
            if not checked.problems:
                print(f"{checked.file}: ok")
            for problem in checked.problems:
                print(problem)
            for warning in checked.warnings:
                print(f"{warning} (warning)")
        print(_summary(results))
    return 1 if any(checked.problems for checked in results) else 0


def _checked_guard(name: str) -> _Checked:
    """The findings on the guard ``module:attribute`` names (imported from the current directory, as a
    script's own modules are): its spec's, and every reviewer and guardrail tool it was not given."""
    from agentguard._lazy import import_object
    from agentguard.errors import SpecError
    from agentguard.guard import Guard
    from agentguard.spec import lint_spec

    guard: object
    try:
        guard = import_object(name, "--guard", "MODULE:NAME")
    except SpecError as error:  # the module builds its guard from a spec file that does not load
        return _Checked(name, "openagentspec", error.problems)
    except AttributeError:
        guard = None
    if not isinstance(guard, Guard):
        raise ValueError(f"--guard {name}: not a Guard (found {type(guard).__name__})")
    found = lint_spec(
        guard.compiled, missing=guard.missing_configuration(), unknown_capability=guard.unknown_capability
    )
    return _Checked(f"{name} ({guard.compiled.source})", "openagentspec", found.errors, found.warnings)


def _as_json(checked: _Checked) -> dict[str, object]:
    """One file's result, each problem with its severity; descriptor formats also carry their format."""
    entry: dict[str, object] = {
        "file": checked.file,
        "valid": not checked.problems,
        "problems": [problem.as_dict() | {"severity": "error"} for problem in checked.problems],
        "warnings": [warning.as_dict() | {"severity": "warning"} for warning in checked.warnings],
    }
    if checked.format not in (None, "openagentspec"):
        entry["format"] = checked.format
    return entry


def _summary(results: Sequence[_Checked]) -> str:
    invalid = sum(1 for checked in results if checked.problems)
    count = sum(len(checked.problems) for checked in results)
    warned = sum(len(checked.warnings) for checked in results)
    files = f"{len(results)} file{'s' if len(results) != 1 else ''}"
    warnings = f" ({warned} warning{'s' if warned != 1 else ''})" if warned else ""
    if not invalid:
        return f"{files} checked: all valid{warnings}"
    return f"{files} checked: {invalid} invalid, {count} problem{'s' if count != 1 else ''}{warnings}"


def _add_demo(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help=_COMMANDS["demo"].summary,
        description="A scripted LangChain support agent under a real spec, an in-process reference guardian "
        "on 127.0.0.1, a timeline of every step and decision, audit reports and an OpenTelemetry trace. "
        "No API key, no network.",
    )
    parser.add_argument("--out", default="agentguard-demo", help="where audit reports and the trace go")
    parser.add_argument("--no-guardian", action="store_true", help="run without the in-process guardian")
    parser.add_argument("--no-files", action="store_true", help="write no audit reports and no trace")
    parser.add_argument(
        "--no-content",
        action="store_true",
        help="content capture off: show which arguments changed, not values",
    )
    parser.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    """Deprecated: the demo is the LangChain adapter's own command, ``agentguard-langchain-demo``."""
    print(
        "agentguard demo is deprecated and goes in 0.2: run agentguard-langchain-demo (or scripts/demo)",
        file=sys.stderr,
    )
    try:  # by name: the core knows no adapter
        demo: Callable[[list[str]], int] = importlib.import_module("agentguard_langchain.demo").main
    except ImportError as error:
        print(
            f"the demo needs the LangChain integration ({error}): "
            "pip install -e integrations/langchain (or run scripts/demo)",
            file=sys.stderr,
        )
        return 2
    argv = [
        "--out",
        args.out,
        *(["--no-guardian"] if args.no_guardian else []),
        *(["--no-files"] if args.no_files else []),
        *(["--no-content"] if args.no_content else []),
    ]
    return demo(argv)


def _add_mcp_proxy(subparsers: _Subparsers) -> None:
    # Everything after `mcp-proxy` is the proxy's own command line (its options, then `-- server command`):
    # no prefix characters, so that nothing in it is taken for an option of this parser.
    parser = subparsers.add_parser(
        "mcp-proxy", help=_COMMANDS["mcp-proxy"].summary, add_help=False, prefix_chars="\0"
    )
    parser.add_argument("proxy_args", nargs=argparse.REMAINDER)
    parser.set_defaults(run=_mcp_proxy)


def _mcp_proxy(args: argparse.Namespace) -> int:
    try:
        from agentguard_mcp.proxy import main as proxy  # the integration, imported only for this command
    except ImportError as error:
        print(
            f"agentguard mcp-proxy needs the MCP integration ({error}): pip install agentguard-mcp",
            file=sys.stderr,
        )
        return 2
    status: int = proxy(args.proxy_args)
    return status


_COMMANDS = {
    "validate": _Command(
        "check agent files (OpenAgentSpec, Agent Spec, Agent Manifest, OS Protocol app)",
        "agentguard.cli:_add_validate",
    ),
    "guardian": _Command(
        "run the reference AOS guardian", "agentguard.guardian.server._cli:add_parser", extra="server"
    ),
    "audit": _Command("list, show and query audit reports", "agentguard.checks._cli:add_parser"),
    "serve": _Command(
        "serve OpenAgentSpec agents over HTTP", "agentguard.server._cli:add_parser", extra="server"
    ),
    "demo": _Command(
        "deprecated: run agentguard-langchain-demo (the LangChain adapter's demo)",
        "agentguard.cli:_add_demo",
    ),
    "mcp-proxy": _Command(
        "guard a third-party MCP server: agentguard mcp-proxy --spec agent.yaml -- COMMAND (needs agentguard-mcp)",
        "agentguard.cli:_add_mcp_proxy",
    ),
}
