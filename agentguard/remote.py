"""Remote agents: a capability ``oagent://host[/path]/name`` is an agent served by another OpenAgentSpec server.

The OpenAgentSpec lets a server read such a reference as the URL ``https://host[/path]/name``: a GET there
returns the agent's definition (YAML), a POST of JSON input starts an engagement with it and answers 303
with where to read the engagement's state. :func:`attach_remote_agents` registers one callable per remote
capability of a guard that does exactly that, so a remote agent is called -- and checked and recorded --
like any other capability, by its agent name::

    from agentguard import Guard
    from agentguard.remote import attach_remote_agents

    guard = Guard.from_yaml('''
    kind: openagentspec:v1/agent
    name: front-desk
    description: The agent routes billing questions to the billing team's agent.
    intent: You answer customers, asking the billing agent about invoices.
    owner: support@corp.com
    capabilities:
      oagent://agents.corp.com/agents/billing-agent:
        input_restriction:
          assertion: recent["billing-agent"].inputs.input.amount <= 100
    ''')
    attach_remote_agents(guard, allow_hosts=["agents.corp.com"], tokens={"agents.corp.com": "s3cret"})

    with guard.engagement():
        result = guard.call("billing-agent", {"input": {"invoice": "A-1", "amount": 40}}, kind="agent")
        result["output"], result["exposes"]        # the remote agent's answer and its `exposes` values

The capability takes one argument, ``input`` (the JSON object posted to the remote agent), and returns
``{"output": ..., "exposes": {...}}`` -- what the remote engagement answered and the values its spec
exposes. That dict is the call's ``outputs`` in the Engagement, so this agent's own restrictions read it
(``recent["billing-agent"].outputs.exposes.total``). The remote agent enforces its own spec on its side;
when it denies, fails or is cancelled, the call raises :class:`RemoteAgentError` with the remote
``status`` and ``error`` (its rule and reason).

Safety, all fixed when the guard is set up:

- **HTTPS only.** ``allow_insecure_loopback=True`` lets references to a loopback host (``127.0.0.1``,
  ``::1``, ``localhost``) use plain HTTP -- for tests and sidecars; never any other host.
- **Host allow-list.** Every remote host of the spec must be in ``allow_hosts`` (``host`` allows any port,
  ``host:port`` only that one), or :func:`attach_remote_agents` refuses with a
  :class:`~agentguard.ConfigurationError`.
- **Same origin.** Redirects are not followed, except the engagement's 303, and only to the same scheme,
  host and port.
- **No credentials by default.** Nothing from the engagement (user, credentials) is sent. ``tokens`` sets a
  bearer token per host -- a string, or a function of the capability's resolved
  :class:`~agentguard.Credentials` (``user_identity`` / ``static_identity``) -- sent only to that host.
  Proxy and ``.netrc`` settings from the environment are ignored, so no credential leaks in from there.
- **Uncompressed.** Every request asks for ``Accept-Encoding: identity``; an answer with a content coding
  (gzip, br, zstd, ...) is refused before its body is read: httpx inflates each chunk it reads in one piece,
  so an 8 KiB zstd answer took 512 MiB of memory before the ``max_response_bytes`` check could see it.
- **Bounded.** Each response is read up to ``max_response_bytes``; each HTTP exchange has
  ``request_timeout`` and the whole call (definition, start, polling) ``call_timeout`` -- totals, not
  per-read timeouts -- after which the remote engagement is cancelled (``DELETE``) and the call fails.
  Loading the definition is bounded by ``definition_limits`` (see :class:`RemoteLimits`).

The definition is fetched on every call and revalidated with its ``ETag`` (a ``304`` costs one round trip),
so a remote agent whose definition breaks is noticed at once: it is validated like a local file
(:func:`~agentguard.spec.load_spec_text`) and must carry the name the reference asks for.

The engagement state is read the one way every standards parser reads it
(:func:`agentguard.aos.strict_json`): a state that is not UTF-8, that gives a key twice in any object, or
that holds ``NaN``, ``Infinity``, a number past a double or an integer beyond ±(2**53 - 1) is refused -- the
call fails and the remote engagement is cancelled -- rather than read as Python happens to read it (the
last of a repeated ``status``), because the caller's restrictions would check one state while the remote
server, its log or the caller's own caller read another. A ``status`` must be one of the statuses the
protocol has, as a string. A state must say it is JSON (``Content-Type: application/json``): the
``Location`` may name any URL of the origin, a file someone uploaded there among them.

What the remote server writes reaches the caller's error (the model, often) as one clipped line: its
refusal's text, the problems of its definition, what httpx quotes of an answer it cannot parse; its
engagement's ``error`` object is kept bounded as :attr:`RemoteAgentError.remote_error`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import httpx

from agentguard._deadline import (
    AsyncIdentityOnly,
    Compressed,
    IdentityOnly,
    TooLarge,
    deadline_transport,
    read_async,
    read_sync,
)
from agentguard._httputil import is_json_media_type, is_loopback
from agentguard._trampoline import adrive, drive
from agentguard.aos import AmbiguousJSON, strict_json
from agentguard.cel import CelBackend, get_backend
from agentguard.errors import AgentGuardError, ConfigurationError, SpecError
from agentguard.guard import Guard
from agentguard.policy import Credentials, current_credentials
from agentguard.record import to_plain
from agentguard.spec import DEFAULT_LIMITS, CompiledSpec, LoadLimits, Reference, load_spec_text

__all__ = [
    "RemoteAgent",
    "RemoteAgentError",
    "RemoteLimits",
    "TokenSource",
    "attach_remote_agents",
]

TokenSource: TypeAlias = "str | Callable[[Credentials | None], str | None]"
"""A bearer token for one host, or a function of the capability's resolved credentials giving one."""

# The statuses of an engagement's state (agentguard.server.RunStatus; not imported: the server imports this).
_FINISHED = frozenset({"completed", "failed", "denied", "cancelled"})
_UNFINISHED = frozenset({"running", "awaiting-review"})
_STATUSES = _FINISHED | _UNFINISHED
_T = TypeVar("_T")


class RemoteAgentError(AgentGuardError):
    """A remote agent could not be used, or its engagement did not complete.

    ``reason`` says what went wrong: unreachable, too slow, a refusal (``http_status``), an invalid
    definition (the :class:`~agentguard.SpecError` is the ``__cause__``), an answer that is not what the
    protocol says, a redirect to another origin -- or the remote engagement ended ``failed``, ``denied`` or
    ``cancelled`` (``remote_status``), with the remote server's ``remote_error`` (type, rule, reason),
    bounded as the remote server cannot bound it (:func:`_bounded_error`).
    """

    def __init__(
        self,
        agent: str,
        url: str,
        reason: str,
        *,
        http_status: int | None = None,
        remote_status: str | None = None,
        remote_error: Mapping[str, Any] | None = None,
    ) -> None:
        self.agent = agent
        self.url = url
        self.reason = reason
        self.http_status = http_status
        self.remote_status = remote_status
        self.remote_error = remote_error
        super().__init__(f"remote agent {agent!r} ({url}): {reason}")


@dataclass(frozen=True)
class RemoteLimits:
    """Size and time bounds of remote agent calls (seconds and bytes).

    ``request_timeout`` bounds each HTTP exchange as a whole (connect, send, headers and every byte of the
    answer) and ``call_timeout`` the whole call (definition, start, polling): both are totals, so a server
    that trickles its answer cannot stretch them. ``max_response_bytes`` caps every answer -- the
    definition and each engagement state -- read as a stream and dropped at the cap. ``definition_limits``
    bound the work of loading the definition (:class:`~agentguard.spec.LoadLimits`: nodes, alias expansion,
    CEL source); a definition past them is refused before the remote agent is called.

    ``poll_wait`` is how long the server is asked to hold each state request open until the engagement
    finishes (long polling); ``poll_interval`` is the pause after a state request that came back unfinished
    (so a server that does not long-poll is not hammered).
    """

    request_timeout: float = 10.0
    call_timeout: float = 300.0
    poll_wait: float = 10.0
    poll_interval: float = 0.25
    max_response_bytes: int = 1_048_576
    definition_limits: LoadLimits = DEFAULT_LIMITS

    def __post_init__(self) -> None:
        for name in ("request_timeout", "call_timeout", "max_response_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RemoteLimits.{name} must be positive")
        if self.poll_wait < 0 or self.poll_interval < 0:
            raise ValueError("RemoteLimits.poll_wait and poll_interval must not be negative")


# -- the protocol, without I/O -----------------------------------------------------------------------------
#
# A call is a generator that yields what it needs done -- send a request, pause -- and gets the reply sent
# back (or the transport error thrown in). The sync and async drivers below only perform those effects.


@dataclass(frozen=True, slots=True)
class _Send:
    """Send ``request`` and read its whole answer by ``deadline`` (``time.monotonic()``)."""

    request: httpx.Request
    deadline: float


@dataclass(frozen=True, slots=True)
class _Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    headers: httpx.Headers
    body: bytes
    location: str | None


_Flow: TypeAlias = Generator[_Send | _Pause, Any, _T]


@dataclass(frozen=True, slots=True)
class _Cached:
    etag: str
    spec: CompiledSpec


class RemoteAgent:
    """One remote agent capability of one guard: its URL, its settings, and its cached definition.

    :attr:`capability` is the callable registered on the guard. :meth:`call` / :meth:`acall` run one remote
    engagement to its end and return ``{"output": ..., "exposes": {...}}``.
    """

    def __init__(
        self,
        reference: Reference,
        *,
        token: TokenSource | None = None,
        insecure_loopback: bool = False,
        limits: RemoteLimits | None = None,
        verify: ssl.SSLContext | str | bool = True,
        backend: CelBackend | None = None,
    ) -> None:
        if reference.kind != "remote" or reference.url is None or reference.host is None:
            raise ConfigurationError(f"{reference.raw!r} is not a remote agent reference")
        self.reference = reference
        self.name = reference.name
        hostname = _split_host(reference.host)[0]
        plain = insecure_loopback and is_loopback(hostname)
        self.url = "http://" + reference.url.removeprefix("https://") if plain else reference.url
        self.limits = limits or RemoteLimits()
        self._origin = httpx.URL(self.url)
        self._token = token
        self._verify = _tls_context(verify)  # once per agent: loading a CA store takes milliseconds
        self._backend = backend
        self._cached: _Cached | None = None
        self.definition: CompiledSpec | None = None
        """The remote definition as last fetched and validated (``None`` before the first call)."""
        self.capability = self._capability_function()

    # -- entry points ------------------------------------------------------------------------------------

    def call(self, input: Mapping[str, Any], credentials: Credentials | None = None) -> dict[str, Any]:
        """Run one remote engagement with blocking I/O and return its output and exposed values."""
        transport = IdentityOnly(deadline_transport(verify=self._verify))
        hooks = {"response": [_redirected]}
        with httpx.Client(
            transport=transport, trust_env=False, follow_redirects=False, event_hooks=hooks
        ) as client:

            def perform(effect: _Send | _Pause) -> _Reply | None:
                if isinstance(effect, _Pause):
                    time.sleep(effect.seconds)
                    return None
                return _reply(read_sync(client, effect.request, **self._bounds(effect)))

            return drive(self._call_flow(input, self._bearer(credentials)), perform, Exception)

    async def acall(self, input: Mapping[str, Any], credentials: Credentials | None = None) -> dict[str, Any]:
        """Async twin of :meth:`call`."""
        transport = AsyncIdentityOnly(httpx.AsyncHTTPTransport(verify=self._verify))
        hooks = {"response": [_aredirected]}
        async with httpx.AsyncClient(
            transport=transport, trust_env=False, follow_redirects=False, event_hooks=hooks
        ) as client:

            async def perform(effect: _Send | _Pause) -> _Reply | None:
                if isinstance(effect, _Pause):
                    await asyncio.sleep(effect.seconds)
                    return None
                return _reply(await read_async(client, effect.request, **self._bounds(effect)))

            return await adrive(self._call_flow(input, self._bearer(credentials)), perform, Exception)

    def _capability_function(self) -> Callable[[dict[str, Any]], Any]:
        agent = self

        def call_remote_agent(input: dict[str, Any]) -> Any:
            # One callable serves both pipelines: from a thread without an event loop (guard.call) it does
            # blocking I/O; inside a running loop (guard.acall) it returns a coroutine that the async driver
            # awaits, so the loop is never blocked. Credentials are read now: the pipeline sets them only
            # for the duration of this call, not of the coroutine.
            credentials = current_credentials()
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return agent.call(input, credentials)
            return agent.acall(input, credentials)

        call_remote_agent.__name__ = call_remote_agent.__qualname__ = f"remote_agent_{self.name}"
        call_remote_agent.__doc__ = (
            f"Ask the remote agent {self.name!r} served at {self.url}.\n\n"
            "Args:\n"
            "    input: the JSON object that starts the remote agent's engagement\n"
        )
        return call_remote_agent

    def _bounds(self, effect: _Send) -> dict[str, Any]:
        return {"deadline": effect.deadline, "limit": self.limits.max_response_bytes}

    def _bearer(self, credentials: Credentials | None) -> str | None:
        token = self._token
        return token(credentials) if callable(token) else token

    # -- the protocol ------------------------------------------------------------------------------------

    def _error(self, reason: str, **details: Any) -> RemoteAgentError:
        return RemoteAgentError(self.name, self.url, reason, **details)

    def _call_flow(self, input: Mapping[str, Any], token: str | None) -> _Flow[dict[str, Any]]:
        deadline = time.monotonic() + self.limits.call_timeout
        if not isinstance(input, Mapping):
            raise self._error(f"input must be a JSON object, not {type(input).__name__}")
        try:
            body = json.dumps(to_plain(input), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise self._error(f"input is not JSON: {exc}") from exc
        yield from self._resolve(token, deadline)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        start = self._request("POST", self._origin, token, deadline, headers=headers, content=body)
        reply = yield from self._exchange(start, "starting an engagement", deadline)
        if 200 <= reply.status < 300 and reply.location:
            # Accepted, but not as the protocol says (303): the engagement it names may run on all the same.
            fate = yield from self._cancel_at(reply.location, token)
            raise self._error(f"answered HTTP {reply.status}, not 303, when starting an engagement; {fate}")
        if reply.status != 303:
            raise self._refused("starting an engagement", reply)
        location = yield from self._engagement_url(reply.location, token)
        try:
            return (yield from self._poll(location, token, deadline))
        except RemoteAgentError as error:
            if error.remote_status is None:  # the engagement may still be running over there
                yield from self._cancel_quietly(location, token)
            raise

    def _resolve(self, token: str | None, deadline: float) -> _Flow[CompiledSpec]:
        """Fetch and validate the definition, or confirm the cached one with ``If-None-Match``."""
        cached = self._cached
        headers = {"Accept": "application/yaml"}
        if cached is not None:
            headers["If-None-Match"] = cached.etag
        request = self._request("GET", self._origin, token, deadline, headers=headers)
        reply = yield from self._exchange(request, "fetching the definition", deadline)
        if reply.status == 304 and cached is not None:
            return cached.spec
        if reply.status != 200:
            raise self._refused("fetching the definition", reply)
        try:
            text = reply.body.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise self._error("the definition is not UTF-8 text") from exc
        backend = self._backend or get_backend()
        try:
            spec = load_spec_text(
                text, backend=backend, source=self.url, limits=self.limits.definition_limits
            )
        except SpecError as exc:
            # One clipped line: the problems quote the remote's text (a 50 KB name, 300 unknown fields), and
            # the message reaches the caller, the model often. The SpecError, whole, is the __cause__.
            raise self._error(f"the definition is not a valid OpenAgentSpec agent: {_said(exc)}") from exc
        if spec.spec.name != self.name:
            raise self._error(f"the definition is of agent {_clipped(spec.spec.name)}, not {self.name!r}")
        etag = reply.headers.get("etag")
        # Sent back as If-None-Match, where a header must be ASCII: any other ETag is not kept (httpx would
        # refuse to encode it, and every later call would fail before sending anything).
        self._cached = _Cached(etag, spec) if etag and etag.isascii() and etag.isprintable() else None
        self.definition = spec
        return spec

    def _poll(self, location: httpx.URL, token: str | None, deadline: float) -> _Flow[dict[str, Any]]:
        limits = self.limits
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._error(f"the call did not finish within {limits.call_timeout:g} s")
            # Ask the server to answer well before the deadline, so its answer is not cut off by it.
            wait = min(limits.poll_wait, remaining / 2)
            url = location.copy_merge_params({"wait": f"{wait:.3g}"})
            request = self._request(
                "GET", url, token, deadline, headers={"Accept": "application/json"}, extra=wait
            )
            reply = yield from self._exchange(request, "reading the engagement", deadline)
            if reply.status != 200:
                raise self._refused("reading the engagement", reply)
            state = self._json_object(reply, "the engagement state")
            status = state.get("status")
            if not isinstance(status, str) or status not in _STATUSES:
                raise self._error(f"the engagement state has an unknown status {_clipped(status)}")
            if status == "completed":
                return {"output": state.get("output"), "exposes": self._exposes(state)}
            if status in _FINISHED:
                error = state.get("error")
                remote_error = _bounded_error(error) if isinstance(error, dict) else None
                raise self._error(
                    f"the remote engagement ended {status}: {_describe(remote_error)}",
                    remote_status=status,
                    remote_error=remote_error,
                )
            yield _Pause(min(limits.poll_interval, max(deadline - time.monotonic(), 0.0)))

    def _exposes(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """A completed state's ``exposes``: an object, or nothing (absent or ``null``: the agent exposes none).

        The caller's output restrictions read it, so anything else is an error rather than read as ``{}``.
        """
        exposes = state.get("exposes")
        if exposes is None:
            return {}
        if not isinstance(exposes, dict):
            raise self._error(f"the engagement state's exposes is not a JSON object: {_clipped(exposes)}")
        return exposes

    def _cancel_quietly(self, location: httpx.URL, token: str | None) -> _Flow[None]:
        """Ask the remote server to cancel an engagement this call gave up on; a failure changes nothing."""
        send = self._request("DELETE", location, token, time.monotonic() + self.limits.request_timeout)
        try:
            yield send
        except Exception:
            return

    # -- helpers -----------------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        url: httpx.URL,
        token: str | None,
        deadline: float,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        extra: float = 0.0,
    ) -> _Send:
        """A request whose whole exchange takes at most ``request_timeout`` (+ ``extra`` for a long poll),
        and never goes past ``deadline``."""
        seconds = max(min(self.limits.request_timeout + extra, deadline - time.monotonic()), 0.001)
        # A compressed answer is refused unread (IdentityOnly): a small one inflates past max_response_bytes.
        all_headers = {"Accept-Encoding": "identity", **(headers or {})}
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        request = httpx.Request(
            method,
            url,
            headers=all_headers,
            content=content,
            extensions={"timeout": httpx.Timeout(seconds).as_dict()},
        )
        return _Send(request, time.monotonic() + seconds)

    def _exchange(self, send: _Send, what: str, deadline: float) -> _Flow[_Reply]:
        try:
            reply: _Reply = yield send
        except _Redirected as exc:  # unread: only its Location matters, and only after a POST
            return _Reply(exc.status, httpx.Headers(), b"", exc.location)
        except Compressed as exc:
            raise self._error(
                f"the answer when {what} is compressed ({', '.join(exc.codings)}): refused unread "
                "(the client asks for identity)"
            ) from exc
        except httpx.TimeoutException as exc:
            if time.monotonic() >= deadline:
                raise self._error(
                    f"the call did not finish within {self.limits.call_timeout:g} s ({what})"
                ) from exc
            raise self._error(f"no answer within {self.limits.request_timeout:g} s when {what}") from exc
        except httpx.HTTPError as exc:
            # httpx quotes what the server sent (h11: "illegal header line: bytearray(b'...')"), up to the
            # head's size: one clipped line of it.
            raise self._error(
                f"cannot reach the server when {what}: {_said(f'{type(exc).__name__}: {exc}')}"
            ) from exc
        except _TooLarge as exc:
            limit = self.limits.max_response_bytes
            raise self._error(f"the answer when {what} is larger than {limit} bytes") from exc
        return reply

    def _refused(self, what: str, reply: _Reply) -> RemoteAgentError:
        detail = ""
        try:
            body = strict_json(reply.body)
        except (ValueError, RecursionError):  # UnicodeDecodeError and AmbiguousJSON are ValueErrors
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            detail = f": {_said(body['error'])}"
        if 300 <= reply.status < 400:
            detail += " (redirects are not followed)"
        return self._error(f"answered HTTP {reply.status} when {what}{detail}", http_status=reply.status)

    def _engagement_url(self, location: str | None, token: str | None) -> _Flow[httpx.URL]:
        """The URL of the engagement a 303 started, from its ``Location``, on this agent's origin.

        A ``Location`` that is not followed has still started an engagement over there: the call fails, and
        the engagement is cancelled where it can be (:meth:`_cancel_at`); the error says which.
        """
        if not location:
            raise self._error(
                "answered 303 without a Location; the engagement it may have started is not cancelled"
            )
        try:
            target = self._origin.join(location)
        except httpx.InvalidURL:
            problem = f"answered 303 with an invalid Location {_clipped(location)}"
        else:
            if self._on_origin(target):
                return target
            problem = f"redirected to another origin ({_clipped(location)}): not followed"
        fate = yield from self._cancel_at(location, token)
        raise self._error(f"{problem}; {fate}")

    def _cancel_at(self, location: str, token: str | None) -> _Flow[str]:
        """Cancel the engagement ``location`` names, read as a browser reads it (control characters
        percent-encoded), if it is on this agent's origin; say which it was. Elsewhere nothing is sent: the
        token goes to this origin only."""
        try:
            target: httpx.URL | None = self._origin.join(_escape_controls(location))
        except httpx.InvalidURL:
            target = None
        if target is None or not self._on_origin(target):
            return "the engagement it may have started is not cancelled"
        yield from self._cancel_quietly(target, token)
        return "the engagement it started was asked to cancel"

    def _on_origin(self, target: httpx.URL) -> bool:
        origin = self._origin
        same = (target.scheme, target.host, target.port) == (origin.scheme, origin.host, origin.port)
        return same and not target.userinfo

    def _json_object(self, reply: _Reply, what: str) -> dict[str, Any]:
        """The answer as a JSON object, read strictly (:func:`agentguard.aos.strict_json`).

        ``json.loads`` would read a repeated key as its last value, ``NaN`` and ``1e400`` as floats, and bytes
        as UTF-16 or with encoded surrogates: not what every other reader of the same bytes reads. An answer
        that does not say it is JSON (``application/json``, UTF-8) is not read at all: a Location that
        pointed at a same-origin file someone uploaded, whose text reads as a completed state, is not one.
        """
        content_type = reply.headers.get("content-type")
        if not is_json_media_type(content_type):
            raise self._error(f"{what} is not JSON: its Content-Type is {_clipped(content_type)}")
        try:
            value = strict_json(reply.body)
        except UnicodeDecodeError as exc:
            raise self._error(f"{what} is not UTF-8") from exc
        except AmbiguousJSON as exc:
            raise self._error(f"{what} is JSON that parsers read differently: {exc}") from exc
        except (ValueError, RecursionError) as exc:
            raise self._error(f"{what} is not JSON") from exc
        if not isinstance(value, dict):
            raise self._error(f"{what} is not a JSON object")
        return value

    def __repr__(self) -> str:
        return f"<RemoteAgent {self.name!r} {self.url}>"


def _tls_context(verify: ssl.SSLContext | str | bool) -> ssl.SSLContext | bool:
    """``True``: httpx's CA store (certifi); a path: that CA bundle; an SSL context or ``False`` as given."""
    if isinstance(verify, ssl.SSLContext) or verify is False:
        return verify
    if verify is True:
        return httpx.create_ssl_context()
    return ssl.create_default_context(cafile=verify)


def _clipped(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a hostile answer's value in an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _said(value: object, limit: int = 500) -> str:
    """What a remote server wrote, for an error message: one line, cut to ``limit`` characters. It may be
    anything up to the answer's size limit, and the message reaches the caller (the model, often)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _escape_controls(location: str) -> str:
    """``location`` with every control character percent-encoded (UTF-8): the URL it names for a reader
    that does not refuse it."""
    return "".join(
        "".join(f"%{byte:02X}" for byte in char.encode()) if not char.isprintable() or char == " " else char
        for char in location
    )


_ERROR_MEMBERS = 16


def _bounded_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """A remote engagement's ``error`` as :attr:`RemoteAgentError.remote_error` keeps it: at most 16 members,
    each name one line of at most 80 characters, each string one line of at most 500 (:func:`_said`), and a
    nested value as its JSON text so clipped. The remote server writes it, up to the answer's size limit;
    it is kept in the caller's records and shown to whoever reads the error (the model, often)."""
    bounded: dict[str, Any] = {}
    for name, value in list(error.items())[:_ERROR_MEMBERS]:
        if isinstance(value, str):
            kept: Any = _said(value)
        elif value is None or isinstance(value, bool | int | float):
            kept = value
        else:
            try:
                kept = _said(json.dumps(value, allow_nan=False))
            except (ValueError, RecursionError):
                kept = "<not shown: not JSON text>"
        bounded[_said(name, 80)] = kept
    return bounded


def _describe(error: Mapping[str, Any] | None) -> str:
    if not error:
        return "no reason given"
    rule = error.get("rule")
    text = _said(error.get("reason") or error.get("message") or "no reason given")
    return f"[{_said(rule, 80)}] {text}" if rule else text


def _reply(answer: httpx.Response | TooLarge) -> _Reply:
    """The read answer as the flow sees it; raises :class:`_TooLarge` for one cut at the size limit."""
    if isinstance(answer, TooLarge):
        raise _TooLarge
    return _Reply(answer.status_code, answer.headers, answer.content, answer.headers.get("location"))


class _TooLarge(Exception):
    """A driver stopped reading a response at the size limit."""


class _Redirected(Exception):
    """A redirect answer (301, 302, 303, 307, 308 with a ``Location``), taken before httpx reads it."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(status, location)
        self.status = status
        self.location = location


def _redirected(response: httpx.Response) -> None:
    """A response hook: raises :class:`_Redirected` for a redirect, before httpx builds the request that
    would follow it. Though redirects are not followed, httpx builds that request for every redirect (for
    ``next_request``) and fails the exchange on a ``Location`` it cannot make one of -- a tab in it
    (``RemoteProtocolError``), ``mailto:x`` (``InvalidURL``, no ``HTTPError`` at all): the 303 of a started
    engagement read as a network error or escaped as an unknown exception, and the engagement was never
    cancelled. The flow gets the status and the Location as sent, and decides what to do with them."""
    if response.has_redirect_location:
        raise _Redirected(response.status_code, response.headers["location"])


async def _aredirected(response: httpx.Response) -> None:
    """:func:`_redirected` for the async client, whose hooks are awaited."""
    _redirected(response)


# -- attaching to a guard ----------------------------------------------------------------------------------


def _split_host(host: str) -> tuple[str, int | None]:
    """``"name:8800"`` → ``("name", 8800)``; hostnames compare case-insensitively."""
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit():
        return name.lower(), int(port)
    return host.lower(), None


def _entry_for(host: str, entries: Iterable[str]) -> str | None:
    """The allow-list or token entry that covers ``host``: ``name:port`` exactly, else ``name`` (any port)."""
    name, port = _split_host(host)
    fallback = None
    for entry in entries:
        entry_name, entry_port = _split_host(entry)
        if entry_name != name:
            continue
        if entry_port is not None and entry_port == port:
            return entry
        if entry_port is None:
            fallback = entry
    return fallback


def attach_remote_agents(
    guard: Guard,
    *,
    allow_hosts: Iterable[str],
    tokens: Mapping[str, TokenSource] | None = None,
    allow_insecure_loopback: bool = False,
    limits: RemoteLimits | None = None,
    verify: ssl.SSLContext | str | bool = True,
) -> dict[str, RemoteAgent]:
    """Register a callable for every remote agent capability of ``guard``; return them by agent name.

    Raises :class:`~agentguard.ConfigurationError` when a remote host of the spec is not in
    ``allow_hosts``, when ``tokens`` names a host that is not allowed, or when a callable of that name is
    already registered (attach once per guard). ``verify``: ``True`` (httpx's CA store), a CA bundle path,
    an :class:`ssl.SSLContext`, or ``False`` (no certificate check: never outside tests).
    """
    allowed = list(allow_hosts)
    references = guard.policy.remote_agents
    refused = sorted(ref.raw for ref in references.values() if _entry_for(ref.host or "", allowed) is None)
    if refused:
        raise ConfigurationError(
            f"remote agent host not in allow_hosts {sorted(allowed)}: {', '.join(refused)}"
        )
    token_map = dict(tokens or {})
    allowed_names = {_split_host(entry)[0] for entry in allowed}
    stray = sorted(host for host in token_map if _split_host(host)[0] not in allowed_names)
    if stray:
        raise ConfigurationError(f"tokens given for hosts that are not in allow_hosts: {', '.join(stray)}")
    backend = get_backend(guard.compiled.backend_name)
    agents: dict[str, RemoteAgent] = {}
    for name, reference in references.items():
        token_entry = _entry_for(reference.host or "", token_map)
        agent = RemoteAgent(
            reference,
            token=token_map[token_entry] if token_entry is not None else None,
            insecure_loopback=allow_insecure_loopback,
            limits=limits,
            verify=verify,
            backend=backend,
        )
        guard.register(name, agent.capability, kind="agent")
        agents[name] = agent
    return agents
