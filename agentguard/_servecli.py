"""What the two server subcommands share (``agentguard guardian``, ``agentguard serve``): their command line.

Both listen on a host and port, may require a bearer token read from an environment variable, log at a chosen
level, run one or more worker processes, and bound what one client can hold with the limits of
:mod:`agentguard.serving`. One place declares those options, so the two servers cannot drift apart. Nothing
here imports a web server.
"""

from __future__ import annotations

import argparse
import logging

from agentguard._httputil import is_loopback
from agentguard.serving import add_limit_options

__all__ = ["LOG_LEVELS", "add_listen_options", "start_logging"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_listen_options(parser: argparse.ArgumentParser, *, port: int, workers: bool = True) -> None:
    """``--host``, ``--port``, ``--token-env``, ``--insecure-open``, ``--log-level``, ``--access-log``,
    ``--workers`` (when the server can run in several processes), and the limits
    (:func:`~agentguard.serving.add_limit_options`)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port, help=f"port to listen on (default: {port})")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="environment variable holding the bearer token every request must carry",
    )
    parser.add_argument(
        "--insecure-open",
        action="store_true",
        help="allow listening on a non-loopback address without a token (anyone who can reach it may use it)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="log level (default: info)")
    parser.add_argument("--access-log", action="store_true", help="log every request (default: off)")
    if workers:
        parser.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    add_limit_options(parser, workers=workers)


def start_logging(args: argparse.Namespace, token: str | None, logger: str, exposure: str) -> None:
    """Configure logging at ``--log-level``; warn when anyone who can reach the port can ``exposure``."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if token is None and not is_loopback(args.host):
        logging.getLogger(logger).warning(
            "serving on %s without a token (--insecure-open): anyone who can reach it can %s",
            args.host,
            exposure,
        )
