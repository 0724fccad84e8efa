"""The limits and the token rule every agentguard server listens under; nothing here imports a web server::

>>> ServerLimits().max_connections
1000
>>> exposure_problem("0.0.0.0", token=None, insecure_open=False) is not None
True
>>> exposure_problem("::1", token=None, insecure_open=False) is None
True
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, fields

from agentguard._httputil import is_loopback

__all__ = [
    "ServerLimits",
    "add_limit_options",
    "exposure_problem",
    "limits_from_args",
    "require_bounds",
    "token_from_env",
]


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

    The body's deadline and size are the application's (``create_app(body_timeout=, max_body_bytes=)``, or
    :class:`~agentguard.serving.BodyDeadline` around an app that does not bound them): they are checked where
    the body is read.
    """

    header_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 1000
    max_header_bytes: int = 65_536
    graceful_shutdown_timeout: float = 10.0

    def __post_init__(self) -> None:
        require_bounds(**{limit.name: getattr(self, limit.name) for limit in fields(self)})


def require_bounds(**limits: float) -> None:
    """``ValueError`` naming the first of ``limits`` that bounds nothing: a limit must be a number above zero
    and finite. ``nan <= 0`` is false, so a check written as ``limit <= 0`` lets NaN through, and a deadline
    of NaN or infinity never expires; ``True`` is 1 to Python, never meant as a limit."""
    for name, value in limits.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (value > 0 and math.isfinite(value))
        ):
            raise ValueError(f"{name} must be positive and finite, not {value!r}")


def exposure_problem(
    host: str, *, token: str | None, insecure_open: bool, what: str = "use it"
) -> str | None:
    """Why serving on ``host`` must not start, or ``None``: beyond loopback, a token or an explicit opt-in.
    ``what`` says what anyone who can reach the server could do (``"call the guarded tools"``)."""
    if token is None and not insecure_open and not is_loopback(host):
        return (
            f"refusing to listen on {host} without a token: anyone who can reach it could {what} "
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


def add_limit_options(
    parser: argparse.ArgumentParser,
    *,
    max_body_bytes: int = 1_048_576,
    body_timeout: float = 10.0,
    workers: bool = False,
) -> None:
    """A ``limits`` group of options: ``--max-body-bytes`` and ``--body-timeout`` (the app's, with these
    defaults), then one option per :class:`ServerLimits` field (:func:`limits_from_args` reads them).
    ``workers``: the connection cap is counted per worker process, and its help says so."""
    defaults = ServerLimits()
    per_worker = ", per worker" if workers else ""
    options: list[tuple[str, type, float, str]] = [
        ("--max-body-bytes", int, max_body_bytes, "largest request body, in bytes"),
        ("--body-timeout", float, body_timeout, "seconds to receive a request's whole body"),
        ("--header-timeout", float, defaults.header_timeout, "seconds to receive a request's head"),
        ("--keep-alive-timeout", float, defaults.keep_alive_timeout, "seconds an idle connection is kept"),
        ("--max-connections", int, defaults.max_connections, f"open connections at once{per_worker}"),
        ("--max-header-bytes", int, defaults.max_header_bytes, "largest request head, in bytes"),
        (
            "--graceful-shutdown-timeout",
            float,
            defaults.graceful_shutdown_timeout,
            "seconds in-flight requests get on shutdown",
        ),
    ]
    group = parser.add_argument_group("limits")
    for flag, kind, default, what in options:
        shown = f"{default:,}" if kind is int else f"{default:g}"
        group.add_argument(flag, type=kind, default=default, help=f"{what} (default: {shown})")


def limits_from_args(args: argparse.Namespace) -> ServerLimits:
    """The :class:`ServerLimits` the options of :func:`add_limit_options` give; ``ValueError`` if invalid."""
    return ServerLimits(**{limit.name: getattr(args, limit.name) for limit in fields(ServerLimits)})
