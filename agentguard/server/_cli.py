"""``agentguard serve``: run the OpenAgentSpec server from the command line.

Usage::

    agentguard serve --spec-dir agents/ --runner myapp.agents:run
    agentguard serve --spec-dir agents/ --runner myapp.agents:run --ssl-certfile cert.pem --ssl-keyfile key.pem
    API_TOKEN=s3cret agentguard serve --spec-dir agents/ --runner myapp.agents:run \\
        --host 0.0.0.0 --port 8800 --token-env API_TOKEN \\
        --allow-remote-host agents.corp.com --remote-token agents.corp.com=BILLING_TOKEN

``--runner`` names the callable ``runner(guard, engagement, input)`` as ``module:attribute``; ``--setup``
names ``setup(guard)``, called once for each agent's Guard at start, to register its tools, guardrail tools,
reviewers and credential sets. An agent whose spec names a piece nobody registered stops the server from
starting, with every missing piece listed (rather than refusing every engagement later). Agents whose
specs have ``oagent://host/...`` capabilities get them attached (:func:`agentguard.remote.attach_remote_agents`)
for the hosts of ``--allow-remote-host``, with the bearer tokens of ``--remote-token HOST=VAR``.

Nothing here imports Starlette or uvicorn until the command runs, so the command line works (and says what
to install) without the ``server`` extra. Exit status: 1 when the specs, the runner or the server cannot be
loaded, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from agentguard._lazy import import_object
from agentguard._servecli import add_listen_options, start_logging
from agentguard.errors import ConfigurationError, SpecError
from agentguard.remote import attach_remote_agents
from agentguard.serving import exposure_problem, limits_from_args, token_from_env

from ._agents import load_agents

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``serve`` subcommand; its ``run`` default runs it and returns the exit status."""
    parser = subparsers.add_parser(
        "serve",
        help="serve OpenAgentSpec agents over HTTP",
        description="Serve every agent of a spec directory: GET /agents/{name} returns its definition, a POST "
        "of JSON input starts an engagement run by the runner (303 to /engagements/{id}).",
    )
    parser.add_argument("--spec-dir", required=True, metavar="DIR", help="directory of agent YAML files")
    parser.add_argument(
        "--runner", required=True, metavar="MODULE:CALLABLE", help="runner(guard, engagement, input)"
    )
    parser.add_argument(
        "--setup",
        metavar="MODULE:CALLABLE",
        help="setup(guard), called once per agent at start: register tools, guardrail tools and reviewers",
    )
    add_listen_options(parser, port=8800, workers=False)
    parser.add_argument(
        "--max-stored-bytes",
        type=int,
        default=64 * 1_048_576,
        help="engagement states kept in memory, in bytes of JSON (default: 64 MiB)",
    )
    parser.add_argument(
        "--max-record-bytes",
        type=int,
        default=1_048_576,
        help="one engagement's state; a larger output is dropped (default: 1 MiB)",
    )
    parser.add_argument(
        "--max-concurrency", type=int, default=16, help="engagements running at once (default: 16)"
    )
    parser.add_argument(
        "--run-timeout", type=float, default=300.0, help="seconds an engagement may run (default: 300)"
    )
    parser.add_argument(
        "--allow-remote-host",
        action="append",
        default=[],
        metavar="HOST",
        help="host (or host:port) whose oagent:// agents the served agents may call; repeatable",
    )
    parser.add_argument(
        "--remote-token",
        action="append",
        default=[],
        metavar="HOST=VAR",
        help="send the bearer token in environment variable VAR to remote agents on HOST; repeatable",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="where clients reach this server (https://agents.corp.com): the index's agent URLs and "
        "oagent:// references; without it they are relative and no reference is given",
    )
    parser.add_argument("--ssl-certfile", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", metavar="FILE", help="the certificate's private key (PEM)")
    parser.set_defaults(run=run)


def _fail(message: str, status: int = 1) -> int:
    print(f"agentguard serve: {message}", file=sys.stderr)
    return status


def _load_runner(spec: str, option: str = "--runner") -> Callable[..., Any]:
    target = import_object(spec, option)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target


def _remote_tokens(pairs: list[str]) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for pair in pairs:
        host, equals, variable = pair.partition("=")
        if not equals or not host or not variable:
            raise ValueError(f"--remote-token must be HOST=VAR, not {pair!r}")
        value = os.environ.get(variable)
        if not value:
            raise ValueError(f"${variable} (for --remote-token {host}) is not set or empty")
        tokens[host] = value
    return tokens


def run(args: argparse.Namespace) -> int:
    """Load and check everything, then serve until interrupted."""
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        return _fail("--ssl-certfile and --ssl-keyfile go together", 2)
    try:
        token = token_from_env(args.token_env)
        limits = limits_from_args(args)
    except ValueError as error:
        return _fail(str(error), 2)
    problem = exposure_problem(args.host, token=token, insecure_open=args.insecure_open)
    if problem is not None:
        return _fail(problem, 2)
    try:
        tokens = _remote_tokens(args.remote_token)
    except ValueError as error:
        return _fail(str(error), 2)
    try:
        agents = load_agents(args.spec_dir)
    except SpecError as error:
        print(error, file=sys.stderr)
        return 1
    try:
        runner = _load_runner(args.runner)
    except (ImportError, AttributeError, ValueError) as error:
        return _fail(f"cannot load the runner {args.runner}: {error}")
    try:
        setup = _load_runner(args.setup, "--setup") if args.setup else None
    except (ImportError, AttributeError, ValueError) as error:
        return _fail(f"cannot load the setup {args.setup}: {error}")
    missing: list[str] = []
    for agent in agents:
        if setup is not None:
            setup(agent.guard)
        missing.extend(f"agent {agent.name!r}: {piece}" for piece in agent.guard.missing_configuration())
    if missing:
        listed = "".join(f"\n  - {piece}" for piece in missing)
        return _fail(f"agents need what was not registered (pass --setup MODULE:CALLABLE):{listed}")
    try:
        for agent in agents:
            if agent.guard.policy.remote_agents:
                attach_remote_agents(agent.guard, allow_hosts=args.allow_remote_host, tokens=tokens)
    except ConfigurationError as error:
        return _fail(f"{error} (use --allow-remote-host)")
    try:
        from agentguard.serving import bounded_config, serve

        from ._app import create_app
        from ._store import MemoryEngagementStore
    except ImportError as error:
        return _fail(str(error))
    try:
        app = create_app(
            agents,
            runner,
            token=token,
            max_body_bytes=args.max_body_bytes,
            body_timeout=args.body_timeout,
            max_concurrency=args.max_concurrency,
            run_timeout=args.run_timeout,
            store=MemoryEngagementStore(
                max_bytes=args.max_stored_bytes, max_record_bytes=args.max_record_bytes
            ),
            public_url=args.public_url,
        )
    except (ValueError, ConfigurationError) as error:
        return _fail(str(error), 2)
    start_logging(args, token, "agentguard.server", "start engagements")
    serve(
        bounded_config(
            app,
            args.host,
            args.port,
            limits,
            log_level=args.log_level,
            access_log=args.access_log,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile=args.ssl_keyfile,
        )
    )
    return 0
