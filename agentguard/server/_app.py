"""The OpenAgentSpec server as an ASGI application (Starlette).

Every agent's definition is its own GET endpoint, and a POST to the same URL starts an engagement with it
(the Server section of the OpenAgentSpec)::

    GET    /agents                        the index: [{name, description, url, reference}] (JSON)
    GET    /agents/{name}                 the definition as written (application/yaml; ETag, 304)
    POST   /agents/{name}                 JSON object input -> 303 See Other, Location: /engagements/{id}
    GET    /engagements/{id}[?wait=S]     the engagement's state (JSON); ``wait`` (<= 30 s) holds the
                                          request until the engagement finishes (long polling)
    DELETE /engagements/{id}              cancel it (also ``POST /engagements/{id}/cancel``)

``url`` in the index is under the ``public_url`` the app was given, and ``reference`` its ``oagent://``
form, which another server resolves back to this endpoint; without a ``public_url``, ``url`` is relative
(``/agents/{name}``) and ``reference`` is ``null``. Never the request's ``Host``: any client names any host
there, and an index that echoed it would point a cache or a peer at the client's choice.

Refusals carry a JSON body ``{"error": "..."}``::

    400  the body is not UTF-8 JSON, or JSON that parsers read differently (a key given twice in an object,
         NaN, Infinity, a number past a double or an integer beyond ±(2**53 - 1):
         :func:`agentguard.aos.strict_json`), or not an object; a bad ``wait``
    401  no or wrong bearer token, when the app has one (``WWW-Authenticate: Bearer ...``); checked before
         anything else, so no other answer (404, 405, 413, ...) tells an unauthenticated client anything
    404  no such agent or engagement
    405  wrong method (``Allow``)
    408  the whole body did not arrive within ``body_timeout`` seconds
    409  cancelling an engagement that has finished, or that runs in another process
    413  the body is larger than ``max_body_bytes`` (declared or as it streams in)
    415  the Content-Type is not application/json (UTF-8), or the body has a content coding (gzip, ...):
         it is never inflated (``Accept-Encoding: identity`` says what is accepted)
    422  the input does not satisfy the agent's input schema (``problems`` lists why)
    429  ``max_concurrency`` engagements are running (``Retry-After``); nothing was started
    503  the engagement store failed

The input's JSON is parsed and checked against the agent's input schema on a worker thread (the context
copied), so a large or deeply nested input does not stall the server's other requests. It is read strictly,
because the input schema and the runner see Python's reading of it -- the last value of a repeated key,
``inf`` for ``1e400`` -- while the client that checked it, a proxy or a log may read another. Every answer
is strict JSON too: no ``NaN`` or ``Infinity`` (see :mod:`agentguard.server._runs` for an output that holds
one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

try:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the OpenAgentSpec server needs Starlette and uvicorn: pip install 'agentguard[server]'"
    ) from exc

from agentguard._httputil import (
    content_codings,
    declared_too_large,
    excerpt,
    is_json_media_type,
    read_limited,
)
from agentguard.aos import AmbiguousJSON, strict_json
from agentguard.errors import ConfigurationError
from agentguard.guard import Guard
from agentguard.policy import Reviewer
from agentguard.serving import RequireBearerToken, require_bounds

from ._agents import ServedAgent, load_agents
from ._runs import Runner, Runs
from ._store import EngagementStore, MemoryEngagementStore

__all__ = ["MAX_WAIT", "create_app"]

logger = logging.getLogger("agentguard.server")

MAX_WAIT = 30.0
"""The longest a ``GET /engagements/{id}?wait=...`` is held open, in seconds."""

_REALM = "agentguard-server"


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    # allow_nan=False: "NaN" is not JSON, and strict clients (agentguard's own) refuse it. Records hold none
    # (agentguard.server._runs); should one slip through, the request fails rather than send it.
    body = json.dumps(data, default=str, allow_nan=False)
    return Response(body, status, headers, media_type="application/json")


def _refuse(status: int, message: str, headers: Mapping[str, str] | None = None, **extra: Any) -> Response:
    return _json({"error": message, **extra}, status, headers)


def _json_object(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """The body as a JSON object read strictly (:func:`agentguard.aos.strict_json`), or ``None`` and why not."""
    try:
        value = strict_json(body)
    except UnicodeDecodeError:
        return None, "the body is not UTF-8"
    except AmbiguousJSON as exc:
        return None, f"the body is JSON that parsers read differently: {exc}"
    except (ValueError, RecursionError) as exc:
        return None, f"the body is not JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"the input must be a JSON object, not {type(value).__name__}"
    return value, ""


def _checked_input(agent: ServedAgent, body: bytes) -> tuple[dict[str, Any] | None, str, list[str]]:
    """The body as the agent's input, or ``None`` and why not; and the input schema's problems with it.

    Run off the event loop: parsing and checking cost up to the body's size."""
    value, why = _json_object(body)
    if value is None:
        return None, why, []
    try:
        return value, "", agent.input_problems(value)
    except RecursionError:
        return None, "the input is nested too deeply to check", []


def _etag_matches(header: str | None, etag: str) -> bool:
    """``If-None-Match`` against ``etag`` (weak comparison, as RFC 9110 says for this header)."""
    if header is None:
        return False
    tags = [tag.strip() for tag in header.split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)


def _refusal(status: int, message: str, headers: list[tuple[bytes, bytes]]) -> Response:
    """A refusal of :class:`~agentguard.serving.RequireBearerToken`, written as this server writes its own."""
    fields = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers}
    return _refuse(status, message.lower(), fields)


class _Api:
    """The request handlers, with the served agents and settings bound once."""

    def __init__(
        self,
        agents: Mapping[str, ServedAgent],
        runs: Runs,
        max_body_bytes: int,
        body_timeout: float,
        public_url: str,
    ) -> None:
        self.agents = agents
        self.runs = runs
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.public_url = public_url

    async def index(self, request: Request) -> Response:
        # Never built from the request's Host (or X-Forwarded-Host): a client names any host it likes there,
        # and a cached index, or a peer that follows it, would send inputs and tokens to that host. The
        # configured public URL, or a URL relative to this server, says where the agent is.
        entries = []
        for name, agent in self.agents.items():
            url = (
                self.public_url + request.app.url_path_for("agent", name=name)
                if self.public_url
                else request.url_for("agent", name=name).path  # with the server's root path, if any
            )
            entries.append(
                {
                    "name": name,
                    "description": agent.description,
                    "url": url,
                    "reference": "oagent://" + url.partition("://")[2] if self.public_url else None,
                }
            )
        return _json(entries)

    async def agent(self, request: Request) -> Response:
        agent = self.agents.get(request.path_params["name"])
        if agent is None:
            return _refuse(404, "no such agent")
        if request.method == "POST":
            return await self._start(request, agent)
        headers = {"ETag": agent.etag, "Cache-Control": "no-cache"}
        if _etag_matches(request.headers.get("if-none-match"), agent.etag):
            return Response(status_code=304, headers=headers)
        return Response(agent.document, headers=headers, media_type="application/yaml")

    async def _start(self, request: Request, agent: ServedAgent) -> Response:
        limit = self.max_body_bytes
        if not is_json_media_type(request.headers.get("content-type")):
            return _refuse(415, "send the input as application/json")
        codings = content_codings(request.headers.getlist("content-encoding"))
        if codings:
            # Never inflated: a small compressed body can inflate far past max_body_bytes. Nor read as if it
            # were not compressed: the client and the server would mean two different inputs.
            message = (
                f"content-encoding {excerpt(', '.join(codings))} is not accepted: send the input uncompressed"
            )
            return _refuse(415, message, {"Accept-Encoding": "identity"})
        if declared_too_large(request.headers.get("content-length"), limit):
            return _refuse(413, f"the body is larger than {limit} bytes")
        try:
            async with asyncio.timeout(self.body_timeout):  # a total: trickling bytes does not extend it
                body = await read_limited(request.stream(), limit)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening any more
        except TimeoutError:
            message = f"the body did not arrive within {self.body_timeout:g} s"
            return _refuse(408, message, {"Connection": "close"})
        if body is None:
            return _refuse(413, f"the body is larger than {limit} bytes", {"Connection": "close"})
        value, why, problems = await asyncio.to_thread(_checked_input, agent, body)
        if value is None:
            return _refuse(400, why)
        if problems:
            return _refuse(422, "the input does not match the agent's input schema", problems=problems)
        try:
            record = await self.runs.start(agent, value)
        except Exception:
            logger.exception("could not start an engagement with %s", agent.name)
            return _refuse(503, "the engagement could not be started")
        if record is None:
            return _refuse(429, "too many engagements are running; try again later", {"Retry-After": "1"})
        location = request.url_for("engagement", engagement_id=record.id).path
        return _json(record.to_json(), 303, {"Location": location})

    async def engagement(self, request: Request) -> Response:
        engagement_id = request.path_params["engagement_id"]
        if request.method == "DELETE":
            return await self._cancel(engagement_id)
        raw = request.query_params.get("wait", "0")
        try:
            wait = float(raw)
        except ValueError:
            wait = math.nan
        if not (math.isfinite(wait) and wait >= 0):
            return _refuse(400, f"wait must be a number of seconds, not {raw!r}")
        try:
            record = await self.runs.get(engagement_id, min(wait, MAX_WAIT))
        except Exception:
            logger.exception("could not read engagement %s", engagement_id)
            return _refuse(503, "the engagement store failed")
        if record is None:
            return _refuse(404, "no such engagement")
        return _json(record.to_json())

    async def cancel(self, request: Request) -> Response:
        return await self._cancel(request.path_params["engagement_id"])

    async def _cancel(self, engagement_id: str) -> Response:
        try:
            outcome, record = await self.runs.cancel(engagement_id, "cancelled by the client")
        except Exception:
            logger.exception("could not cancel engagement %s", engagement_id)
            return _refuse(503, "the engagement store failed")
        if record is None:
            return _refuse(404, "no such engagement")
        if outcome == "cancelled":
            return _json(record.to_json())
        message = (
            f"the engagement has already {record.status.value}"
            if outcome == "finished"
            else "the engagement runs in another server process; cancel it there"
        )
        return _refuse(409, message, engagement=record.to_json())


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, wrong method) as JSON, like every other refusal."""
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        raise exc
    return _refuse(exc.status_code, exc.detail, exc.headers)


def _served(agents: str | os.PathLike[str] | Iterable[Guard | ServedAgent]) -> dict[str, ServedAgent]:
    items = (
        load_agents(agents)
        if isinstance(agents, str | os.PathLike)
        else [a if isinstance(a, ServedAgent) else ServedAgent.from_guard(a) for a in agents]
    )
    served: dict[str, ServedAgent] = {}
    for agent in items:
        if agent.name in served:
            raise ConfigurationError(f"two served agents are named {agent.name!r}")
        served[agent.name] = agent
    if not served:
        raise ConfigurationError("no agents to serve")
    return served


def _public_base(url: str) -> str:
    """``url`` without its trailing ``/``; :class:`~agentguard.ConfigurationError` unless it is an absolute
    ``http(s)`` URL with a host and nothing a URL of the index could not carry on (credentials, query,
    fragment, control characters)."""
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or not url.isascii()
        or not url.isprintable()
        or " " in url
    ):
        raise ConfigurationError(f"public_url must be an http(s) URL with a host and no query: {url!r}")
    return url.rstrip("/")


def create_app(
    agents: str | os.PathLike[str] | Iterable[Guard | ServedAgent],
    runner: Runner,
    *,
    token: str | None = None,
    max_body_bytes: int = 1_048_576,
    body_timeout: float = 10.0,
    max_concurrency: int = 16,
    run_timeout: float = 300.0,
    store: EngagementStore | None = None,
    reviewers: Mapping[str, Reviewer] | None = None,
    public_url: str | None = None,
) -> Starlette:
    """The OpenAgentSpec server for ``agents``: a spec directory (see :func:`load_agents`) or guards.

    ``runner(guard, engagement, input)`` runs one engagement (sync or async); its return value is the
    engagement's ``output``. ``token``: the bearer token every request must carry (constant-time compare).
    ``max_body_bytes`` and ``body_timeout`` bound an input's size and the seconds it may take to arrive.
    ``max_concurrency`` engagements run at once (more are refused with 429); each may run ``run_timeout``
    seconds. ``store`` keeps the engagement records (default: :class:`MemoryEngagementStore`, bounded by
    count and bytes). The connection limits are the server's (:func:`serve_in_thread`, the command line).
    ``reviewers`` are installed on
    every served agent's guard, by reviewer id, so that ``require_review`` shows as ``awaiting-review``.
    ``public_url`` (``https://agents.corp.com`` or with a path prefix) is where clients reach this app's
    root: the index gives each agent's ``url`` and ``oagent://`` ``reference`` under it. Without it the
    index gives a relative ``url`` and no ``reference``: the request's ``Host`` is never used, a client
    names any host there.

    Raises :class:`~agentguard.SpecError` listing every problem of a spec directory, and
    :class:`~agentguard.ConfigurationError` for two agents of one name.
    """
    require_bounds(
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        max_concurrency=max_concurrency,
        run_timeout=run_timeout,
    )
    base = _public_base(public_url) if public_url is not None else ""
    served = _served(agents)
    if store is None:  # not `store or ...`: an empty store is falsy
        store = MemoryEngagementStore()
    runs = Runs(runner, store, max_concurrency=max_concurrency, run_timeout=run_timeout)
    for agent in served.values():
        for reviewer_id, reviewer in (reviewers or {}).items():
            agent.guard.add_reviewer(reviewer_id, runs.tracked(reviewer))
    api = _Api(served, runs, max_body_bytes, body_timeout, base)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await runs.shutdown()

    app = Starlette(
        routes=[
            Route("/agents", api.index, methods=["GET"]),
            Route("/agents/{name}", api.agent, methods=["GET", "POST"], name="agent"),
            Route(
                "/engagements/{engagement_id}", api.engagement, methods=["GET", "DELETE"], name="engagement"
            ),
            Route("/engagements/{engagement_id}/cancel", api.cancel, methods=["POST"]),
        ],
        middleware=[Middleware(RequireBearerToken, token=token, realm=_REALM, refuse=_refusal)]
        if token is not None
        else [],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.open_without_token = token is None  # type: ignore[attr-defined]  # read by serve_in_thread
    return app
