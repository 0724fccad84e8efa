"""What the two server subcommands share (``agentguard guardian``, ``agentguard serve``): listening and limits.

Both listen on a host and port, may require a bearer token read from an environment variable, log at a chosen
level, run one or more worker processes, and bound what one client can hold: :class:`ServerLimits` are the
connection-level limits, applied by the uvicorn protocol of :mod:`agentguard.guardian.server._thread`. One
place decides each of those, so the two servers cannot drift apart. Nothing here imports a web server::

    >>> ServerLimits().max_connections
    1000
    >>> exposure_problem("0.0.0.0", token=None, insecure_open=False) is not None
    True
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, fields

from agentguard._httputil import is_loopback

__all__ = [
    "LOG_LEVELS",
    "ServerLimits",
    "add_listen_options",
    "exposure_problem",
    "limits_from_args",
    "start_logging",
    "token_from_env",
]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


@dataclass(frozen=True)
class ServerLimits:
    """What one connection may hold of a server, so that slow or numerous clients cannot starve good ones.

    - ``header_timeout``: seconds a connection has to deliver a request's complete head (request line and
      headers), counted from when it opens or from the end of the previous response; then it is closed.
      uvicorn bounds only the idle time after a response, and any byte restarts that bound.
    - ``keep_alive_timeout``: seconds an idle keep-alive connection is kept after a response.
    - ``max_connections``: open connections at once; one more is answered ``503`` and closed before its
      request is read. One connection has at most one request in progress, so this bounds those too.
    - ``max_header_bytes``: the largest request head (h11's ``max_incomplete_event_size``); more is a 400.
    - ``graceful_shutdown_timeout``: seconds the requests in flight get to finish on shutdown.

    The body's deadline and size are the application's (``create_app(body_timeout=, max_body_bytes=)``):
    they are checked where the body is read.
    """

    header_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 1000
    max_header_bytes: int = 65_536
    graceful_shutdown_timeout: float = 10.0

    def __post_init__(self) -> None:
        for limit in fields(self):
            if not getattr(self, limit.name) > 0:
                raise ValueError(f"{limit.name} must be positive")


def add_listen_options(parser: argparse.ArgumentParser, *, port: int, workers: bool = True) -> None:
    """``--host``, ``--port``, ``--token-env``, ``--insecure-open``, ``--log-level``, ``--access-log``,
    ``--workers`` (when the server can run in several processes), and one option per :class:`ServerLimits`
    field plus ``--max-body-bytes`` and ``--body-timeout``."""
    defaults = ServerLimits()
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
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-body-bytes", type=int, default=1_048_576, help="largest request body (default: 1 MiB)"
    )
    limits.add_argument(
        "--body-timeout",
        type=float,
        default=10.0,
        help="seconds to receive a request's whole body (default: 10)",
    )
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=defaults.header_timeout,
        help=f"seconds to receive a request's head (default: {defaults.header_timeout:g})",
    )
    limits.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=defaults.keep_alive_timeout,
        help=f"seconds an idle connection is kept (default: {defaults.keep_alive_timeout:g})",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=defaults.max_connections,
        help=f"open connections at once, per worker (default: {defaults.max_connections})",
    )
    limits.add_argument(
        "--max-header-bytes",
        type=int,
        default=defaults.max_header_bytes,
        help=f"largest request head (default: {defaults.max_header_bytes})",
    )
    limits.add_argument(
        "--graceful-shutdown-timeout",
        type=float,
        default=defaults.graceful_shutdown_timeout,
        help=f"seconds in-flight requests get on shutdown (default: {defaults.graceful_shutdown_timeout:g})",
    )


def limits_from_args(args: argparse.Namespace) -> ServerLimits:
    """The :class:`ServerLimits` the options of :func:`add_listen_options` give; ``ValueError`` if invalid."""
    return ServerLimits(**{limit.name: getattr(args, limit.name) for limit in fields(ServerLimits)})


def exposure_problem(host: str, *, token: str | None, insecure_open: bool) -> str | None:
    """Why serving on ``host`` must not start, or ``None``: beyond loopback, a token or an explicit opt-in."""
    if token is None and not insecure_open and not is_loopback(host):
        return (
            f"refusing to listen on {host} without a token: anyone who can reach it could use it "
            "(set --token-env, or pass --insecure-open if it is meant to be open)"
        )
    return None


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
            "serving on %s without a token (--insecure-open): anyone who can reach it can %s",
            args.host,
            exposure,
        )
