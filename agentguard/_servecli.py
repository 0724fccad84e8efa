"""What the two server subcommands share on the command line (``agentguard guardian``, ``agentguard serve``).

Both listen on a host and port, may require a bearer token read from an environment variable, log at a chosen
level, and warn when they listen beyond the loopback interface without a token. One place decides each of
those, so the two servers cannot drift apart.
"""

from __future__ import annotations

import argparse
import logging
import os

from agentguard._httputil import is_loopback

__all__ = ["LOG_LEVELS", "add_listen_options", "start_logging", "token_from_env"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_listen_options(parser: argparse.ArgumentParser, *, port: int) -> None:
    """``--host``, ``--port``, ``--token-env`` and ``--log-level``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port, help=f"port to listen on (default: {port})")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="environment variable holding the bearer token every request must carry",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="log level (default: info)")


def token_from_env(variable: str | None) -> str | None:
    """The bearer token from ``variable`` (``None`` without one); ``ValueError`` if it is named but unset."""
    if not variable:
        return None
    token = os.environ.get(variable)
    if not token:
        raise ValueError(f"${variable} is not set or empty")
    return token


def start_logging(args: argparse.Namespace, token: str | None, logger: str, exposure: str) -> None:
    """Configure logging at ``--log-level``; warn when anyone who can reach the port can ``exposure``."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if token is None and not is_loopback(args.host):
        logging.getLogger(logger).warning(
            "serving on %s without a token: anyone who can reach it can %s", args.host, exposure
        )
