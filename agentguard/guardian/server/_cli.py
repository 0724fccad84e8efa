"""``agentguard guardian``: run the reference guardian from the command line.

Usage::

    agentguard guardian --rules rules.yaml
    AOS_TOKEN=s3cret agentguard guardian --rules rules.yaml --host 0.0.0.0 --port 8700 --token-env AOS_TOKEN

This module imports neither Starlette nor uvicorn until the command runs, so the command line works (and
says what to install) without the ``server`` extra. Exit status: 1 when the rules file or the server
cannot be loaded, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys

from agentguard._servecli import add_listen_options, start_logging, token_from_env
from agentguard.errors import SpecError

from ._rules import load_rules

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``guardian`` subcommand; its ``run`` default runs it and returns the exit status."""
    parser = subparsers.add_parser(
        "guardian",
        help="run the reference AOS guardian",
        description="Serve AOS JSON-RPC on / and /aos, deciding every step with the rules of a YAML file.",
    )
    parser.add_argument("--rules", required=True, metavar="FILE", help="rules YAML file")
    add_listen_options(parser, port=8700)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the rules, then serve until interrupted."""
    try:
        token = token_from_env(args.token_env)
    except ValueError as error:
        print(f"agentguard guardian: {error}", file=sys.stderr)
        return 2
    try:
        rules = load_rules(args.rules)
    except SpecError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"agentguard guardian: cannot read {args.rules}: {error.strerror}", file=sys.stderr)
        return 1
    try:
        import uvicorn

        from ._app import create_app
    except ImportError as error:
        print(f"agentguard guardian: {error}", file=sys.stderr)
        return 1
    start_logging(args, token, "agentguard.guardian.server", "ask for decisions")
    uvicorn.run(create_app(rules, token=token), host=args.host, port=args.port, log_level=args.log_level)
    return 0
