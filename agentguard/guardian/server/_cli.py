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
import logging
import os
import sys

from agentguard._httputil import is_loopback
from agentguard.errors import SpecError

from ._rules import load_rules

__all__ = ["add_parser"]

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``guardian`` subcommand; its ``run`` default runs it and returns the exit status."""
    parser = subparsers.add_parser(
        "guardian",
        help="run the reference AOS guardian",
        description="Serve AOS JSON-RPC on / and /aos, deciding every step with the rules of a YAML file.",
    )
    parser.add_argument("--rules", required=True, metavar="FILE", help="rules YAML file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8700, help="port to listen on (default: 8700)")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="environment variable holding the bearer token every request must carry",
    )
    parser.add_argument("--log-level", choices=_LOG_LEVELS, default="info", help="log level (default: info)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the rules, then serve until interrupted."""
    token: str | None = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            print(f"agentguard guardian: ${args.token_env} is not set or empty", file=sys.stderr)
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
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if token is None and not is_loopback(args.host):
        logging.getLogger("agentguard.guardian.server").warning(
            "serving on %s without a token: anyone who can reach it can ask for decisions", args.host
        )
    uvicorn.run(create_app(rules, token=token), host=args.host, port=args.port, log_level=args.log_level)
    return 0
