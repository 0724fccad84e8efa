"""Serving an ASGI app the way agentguard's own servers are served: bounded connections, the loopback rule,
bearer tokens, a body's deadline.

The reference guardian (``agentguard guardian``), the OpenAgentSpec server (``agentguard serve``) and the MCP
proxy (``agentguard-mcp-proxy --listen``) all listen through this package, so that a limit or a token rule
decided here holds for each of them:

- :class:`ServerLimits`: what one client may hold of a server (a deadline for each request head, a cap on
  open connections, keep-alive, head size, graceful shutdown), applied by the uvicorn protocol
  :class:`BoundedConfig` installs; :func:`add_limit_options` / :func:`limits_from_args` on a command line;
  :func:`require_bounds` for an app's own limits (a body's size and deadline);
- :func:`exposure_problem`: a server without a token listens on loopback only, unless told it is open;
- :class:`RequireBearerToken` and :class:`BodyDeadline`: ASGI middleware for an app that does not check the
  token or bound its body's time itself;
- :func:`serve` (foreground, ``workers`` processes), :func:`aserve` (in a running event loop) and
  :func:`serve_in_thread` (a background thread: tests, demos) run an app with its limits::

    from agentguard.serving import ServerLimits, aserve, bounded_config

    await aserve(bounded_config(app, "127.0.0.1", 8000, ServerLimits(max_connections=100), lifespan="on"))

Everything but the limits and the loopback rule needs the ``server`` extra (``pip install
'agentguard[server]'``: uvicorn, Starlette) and is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentguard._httputil import bearer_challenge, is_loopback
from agentguard._lazy import lazy_attributes

from ._limits import (
    ServerLimits,
    add_limit_options,
    exposure_problem,
    limits_from_args,
    require_bounds,
    token_from_env,
)

if TYPE_CHECKING:
    from ._asgi import BodyDeadline, Refusal, RequireBearerToken, json_refusal, plain_refusal
    from ._uvicorn import BoundedConfig, RunningServer, aserve, bounded_config, serve, serve_in_thread

__all__ = [
    "BodyDeadline",
    "BoundedConfig",
    "Refusal",
    "RequireBearerToken",
    "RunningServer",
    "ServerLimits",
    "add_limit_options",
    "aserve",
    "bearer_challenge",
    "bounded_config",
    "exposure_problem",
    "is_loopback",
    "json_refusal",
    "limits_from_args",
    "plain_refusal",
    "require_bounds",
    "serve",
    "serve_in_thread",
    "token_from_env",
]

_LAZY = {
    "BodyDeadline": "._asgi",
    "Refusal": "._asgi",
    "RequireBearerToken": "._asgi",
    "json_refusal": "._asgi",
    "plain_refusal": "._asgi",
    "BoundedConfig": "._uvicorn",
    "RunningServer": "._uvicorn",
    "aserve": "._uvicorn",
    "bounded_config": "._uvicorn",
    "serve": "._uvicorn",
    "serve_in_thread": "._uvicorn",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
