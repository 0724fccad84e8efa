"""``agentguard guardian``: run the reference guardian from the command line.

Usage::

    agentguard guardian --rules rules.yaml
    AOS_TOKEN=s3cret agentguard guardian --rules rules.yaml --host 0.0.0.0 --port 8700 --token-env AOS_TOKEN
    agentguard guardian --rules rules.yaml --workers 2 --max-connections 500 --header-timeout 5

Listening beyond the loopback interface needs a token (``--token-env``) or ``--insecure-open``. Every limit
has an option (``agentguard guardian --help``; the table in ``docs/guardian.md``). With ``--workers N`` the
worker processes each load the rules again from the same file, told where by an environment variable.

This module imports neither Starlette nor uvicorn until the command runs, so the command line works (and
says what to install) without the ``server`` extra. Exit status: 1 when the rules file or the server
cannot be loaded, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from agentguard._servecli import add_listen_options, start_logging
from agentguard.errors import SpecError
from agentguard.serving import exposure_problem, limits_from_args, token_from_env

from ._dispatch import MAX_BATCH
from ._rules import load_rules

if TYPE_CHECKING:
    from ._app import GuardianApp

__all__ = ["add_parser", "app_from_environment"]

_SETTINGS_VARIABLE = "AGENTGUARD_GUARDIAN_SETTINGS"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``guardian`` subcommand; its ``run`` default runs it and returns the exit status."""
    parser = subparsers.add_parser(
        "guardian",
        help="run the reference AOS guardian",
        description="Serve AOS JSON-RPC on / and /aos, deciding every step with the rules of a YAML file.",
    )
    parser.add_argument("--rules", required=True, metavar="FILE", help="rules YAML file")
    add_listen_options(parser, port=8700)
    parser.add_argument(
        "--rule-threads",
        type=int,
        default=2,
        help="threads that may decide requests at once, per worker; one does while it keeps up (default: 2)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=MAX_BATCH,
        help=f"most requests a JSON-RPC batch may hold; a longer one is refused whole (default: {MAX_BATCH})",
    )
    parser.set_defaults(run=run)


def _app(settings: dict[str, Any]) -> GuardianApp:
    from ._app import create_app

    return create_app(
        load_rules(settings["rules"]),
        token=token_from_env(settings["token_env"]),
        max_body_bytes=settings["max_body_bytes"],
        body_timeout=settings["body_timeout"],
        rule_threads=settings["rule_threads"],
        max_batch=settings["max_batch"],
    )


def app_from_environment() -> GuardianApp:
    """The app of one ``--workers`` process, from the settings the command put in its environment."""
    return _app(json.loads(os.environ[_SETTINGS_VARIABLE]))


def run(args: argparse.Namespace) -> int:
    """Load the rules, then serve until interrupted."""
    try:
        token = token_from_env(args.token_env)
        limits = limits_from_args(args)
    except ValueError as error:
        print(f"agentguard guardian: {error}", file=sys.stderr)
        return 2
    problem = exposure_problem(args.host, token=token, insecure_open=args.insecure_open)
    if problem is not None:
        print(f"agentguard guardian: {problem}", file=sys.stderr)
        return 2
    settings = {
        "rules": os.path.abspath(args.rules),
        "token_env": args.token_env,
        "max_body_bytes": args.max_body_bytes,
        "body_timeout": args.body_timeout,
        "rule_threads": args.rule_threads,
        "max_batch": args.max_batch,
    }
    try:
        from agentguard.serving import bounded_config, serve

        app = _app(settings)  # loaded here even for --workers: a broken file fails before any worker starts
    except SpecError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"agentguard guardian: cannot read {args.rules}: {error.strerror}", file=sys.stderr)
        return 1
    except ImportError as error:
        print(f"agentguard guardian: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"agentguard guardian: {error}", file=sys.stderr)
        return 2
    start_logging(args, token, "agentguard.guardian.server", "ask for decisions")
    if args.workers > 1:
        os.environ[_SETTINGS_VARIABLE] = json.dumps(settings)
        target: Any = f"{__name__}:app_from_environment"
    else:
        target = app
    serve(
        bounded_config(
            target,
            args.host,
            args.port,
            limits,
            factory=args.workers > 1,
            workers=args.workers,
            log_level=args.log_level,
            access_log=args.access_log,
        )
    )
    return 0
