"""The AOS guardian client: ask a remote guardian about each step (enforce) or tell it (observe).

The client speaks wire JSON: it takes an AOS JSON-RPC request as a ``dict`` (camelCase, as the
``agentguard.aos`` models dump it) and returns a :class:`GuardianVerdict`. It never raises for a guardian
problem — a timeout, a refused connection, an HTTP error, a JSON-RPC error, a malformed reply or a ``modify``
that cannot be applied all come back as ``NO_DECISION`` with the cause in ``failure``, and ``proceeded``
set by ``on_failure`` (``"deny"`` by default) -- except that a refused reply (malformed, or under an error
status) whose decision reads as deny never proceeds. Even an exception the exchange raises (a broken custom
transport) ends as such a verdict. Nothing proceeds without a recorded reason.

All wire logic lives in :mod:`agentguard.guardian._flow` as sans-I/O flows; this module only performs their
effects, once synchronously (:func:`_drive_sync`) and once with asyncio (:func:`_drive_async`).

    >>> import json, httpx
    >>> def guardian(http_request: httpx.Request) -> httpx.Response:
    ...     step = json.loads(http_request.content)
    ...     result = {"decision": "deny", "message": "no email to outsiders", "reasonCode": ["external"]}
    ...     return httpx.Response(200, json={"jsonrpc": "2.0", "id": step["id"], "result": result})
    >>> step = {"jsonrpc": "2.0", "id": "step-1", "method": "steps/toolCallRequest", "params": {}}
    >>> with GuardianClient("http://guardian.test/aos", transport=httpx.MockTransport(guardian)) as client:
    ...     verdict = client.decide(step)
    >>> verdict.outcome, verdict.message, verdict.reason_codes, verdict.proceeded
    (<GuardianOutcome.DENY: 'deny'>, 'no email to outsiders', ('external',), False)

A guardian that cannot be reached ends in the failure policy instead of an exception:

    >>> def down(http_request: httpx.Request) -> httpx.Response:
    ...     raise httpx.ConnectError("connection refused")
    >>> with GuardianClient("http://guardian.test/aos", on_failure="allow",
    ...                     transport=httpx.MockTransport(down)) as client:
    ...     verdict = client.decide(step)
    >>> verdict.outcome, verdict.failure, verdict.proceeded
    (<GuardianOutcome.NO_DECISION: 'no-decision'>, "transport: ConnectError: 'connection refused'", True)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Literal, Self, TypeVar

import httpx
from opentelemetry.trace import TracerProvider

from agentguard._deadline import AsyncIdentityOnly, IdentityOnly, deadline_transport, read_async, read_sync
from agentguard._trampoline import adrive, drive
from agentguard.aos import known_method
from agentguard.guardian._flow import (
    DEFAULT_MAX_REPLY_BYTES,
    Flow,
    Reply,
    Send,
    Settings,
    Sleep,
    Step,
    decision_flow,
    describe,
    encode_step,
    no_decision,
    ping_flow,
    request_identity,
)
from agentguard.guardian._logged import logged
from agentguard.guardian._observe import Backlog, RateLimitedLog
from agentguard.guardian._retry import GuardianRetry
from agentguard.guardian._tracing import RequestTracing
from agentguard.guardian._types import GuardianOutcome, GuardianStats, GuardianUnavailable, GuardianVerdict

__all__ = ["DEFAULT_MAX_REPLY_BYTES", "EventCallback", "GuardianClient"]

T = TypeVar("T")

_logger = logging.getLogger("agentguard.guardian")

EventCallback = Callable[[str, dict[str, object]], None]
"""``on_event(name, data)``: ``"delivered"`` / ``"failed"`` (data: ``id``, ``method``, ``verdict``) for
observed steps that reached / did not reach a guardian decision, ``"dropped"`` (``id``, ``method``,
``reason``) for observed steps that were never sent."""


def _label(request: httpx.Request, step: Step | None) -> tuple[str, str | int | None]:
    """The AOS method and request id an HTTP request carries: the step's, or else a ``ping``'s.

    A step's flow may ping first (``ping_on_start``); the ping has a body of its own, so comparing bodies
    tells the two apart without the flow having to say which is which.
    """
    if step is not None and request.content == step.body:
        return step.method, step.request_id
    return "ping", None


def _drive_sync(flow: Flow[T], client: httpx.Client, tracing: RequestTracing, step: Step | None) -> T:
    """Perform a flow's effects with blocking I/O, each HTTP request in a CLIENT span.

    A transport error is the flow's to judge: it is sent in as the reply, not thrown.
    """

    def perform(effect: Send | Sleep) -> Reply:
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        with tracing.request(effect.request, *_label(effect.request, step)) as traced:
            reply: Reply
            try:
                reply = read_sync(
                    client, effect.request, deadline=time.monotonic() + effect.timeout, limit=effect.limit
                )
            except httpx.RequestError as exc:
                reply = exc
            traced.finish(reply)
        return reply

    return drive(flow, perform, ())


async def _drive_async(
    flow: Flow[T], client: httpx.AsyncClient, tracing: RequestTracing, step: Step | None
) -> T:
    """Perform a flow's effects with asyncio, each HTTP request in a CLIENT span."""

    async def perform(effect: Send | Sleep) -> Reply:
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        with tracing.request(effect.request, *_label(effect.request, step)) as traced:
            reply: Reply
            try:
                reply = await read_async(
                    client, effect.request, deadline=time.monotonic() + effect.timeout, limit=effect.limit
                )
            except httpx.RequestError as exc:
                reply = exc
            traced.finish(reply)
        return reply

    return await adrive(flow, perform, ())


class _Core:
    """Connections, counters and the observe queue — everything except the public face.

    It is separate from :class:`GuardianClient` so that the observe worker thread, which needs all of this,
    does not keep the client alive: when the client is garbage-collected, its finalizer stops the queue, the
    worker drains what is left and exits, and the connections are closed.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        ping_on_start: bool,
        queue_size: int,
        on_event: EventCallback | None,
        transport: httpx.BaseTransport | None,
        async_transport: httpx.AsyncBaseTransport | None,
        tracing: RequestTracing,
    ) -> None:
        self.settings = settings
        self.tracing = tracing
        self._transport = transport
        self._async_transport = async_transport
        self._listeners: tuple[EventCallback, ...] = () if on_event is None else (on_event,)
        self._lock = threading.Lock()
        self._sync_http: httpx.Client | None = None
        # An AsyncClient's pooled connections belong to the event loop that opened them, so the client is
        # kept per loop (an agent may call asyncio.run once per request).
        self._async_http: tuple[weakref.ref[asyncio.AbstractEventLoop], httpx.AsyncClient] | None = None
        self._ping_pending = ping_on_start
        self._closed = False
        self._sent = self._delivered = self._failed = self._dropped = 0
        self._last_failure: str | None = None
        self._failure_log = RateLimitedLog(_logger)
        self._drop_log = RateLimitedLog(_logger)
        self._event_log = RateLimitedLog(_logger)
        self.backlog = Backlog(
            queue_size,
            deliver=self._deliver_observed,
            discard=lambda request: self._drop(request, "client closed"),
            on_stop=self.close_sync_http,
            name=f"agentguard-guardian-observe[{settings.url}]",
        )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- one step ---------------------------------------------------------------------------------------

    def begin(self, step: Step) -> GuardianVerdict | Flow[GuardianVerdict]:
        """Count the step and return the flow that asks about it (or the verdict, if the client is closed)."""
        with self._lock:
            self._sent += 1
            if self._closed:
                return no_decision(self.settings, "client closed", time.perf_counter(), attempts=0)
            ping_first, self._ping_pending = self._ping_pending, False
        return decision_flow(self.settings, step, ping_first=ping_first)

    def run_sync(self, step: Step) -> GuardianVerdict:
        started = self.begin(step)
        if isinstance(started, GuardianVerdict):
            return started
        began = time.perf_counter()
        try:
            return _drive_sync(started, self.sync_http(), self.tracing, step)
        except Exception as exc:
            return self._internal_error(exc, began)

    async def run_async(self, step: Step) -> GuardianVerdict:
        started = self.begin(step)
        if isinstance(started, GuardianVerdict):
            return started
        began = time.perf_counter()
        try:
            return await _drive_async(started, self.async_http(), self.tracing, step)
        except Exception as exc:
            return self._internal_error(exc, began)

    def _internal_error(self, exc: Exception, started: float) -> GuardianVerdict:
        """The verdict of an exchange that raised what the flow does not judge: a broken custom transport, or
        an answer httpx cannot carry (a header that is not ASCII). It ends like any other missing decision --
        counted, logged, and proceeding only under ``on_failure="allow"`` -- rather than as an exception that
        leaves the step unrecorded and the policy to whoever catches it."""
        return no_decision(self.settings, f"internal error: {describe(exc)}", started, attempts=0)

    def settle(self, step: Step, verdict: GuardianVerdict) -> GuardianVerdict:
        """Count how the step ended; a missing decision is also logged (rate-limited)."""
        failed = verdict.outcome is GuardianOutcome.NO_DECISION
        with self._lock:
            if failed:
                self._failed += 1
                self._last_failure = verdict.failure
            else:
                self._delivered += 1
        if failed:
            # The method and id are the caller's to choose (a host relaying an A2A peer passes the peer's):
            # shown as spans show a method, and bounded, so that one step cannot forge or flood log lines.
            self._failure_log.warning(
                "guardian gave no decision on %s %s: %s",
                known_method(step.method),
                logged(step.request_id),
                verdict.failure,
            )
        return verdict

    # -- observe mode -----------------------------------------------------------------------------------

    def submit(self, request: dict[str, object]) -> None:
        request_identity(request)  # a malformed request is the caller's bug: say so at the caller
        queued = self.backlog.offer(request)
        if queued != "queued":
            self._drop(request, "queue full" if queued == "full" else "client closed")

    def _deliver_observed(self, request: dict[str, object]) -> None:
        try:
            step = encode_step(request)
        except (TypeError, ValueError) as exc:
            self._drop(request, f"unsendable request: {exc}")
            return
        verdict = self.settle(step, self.run_sync(step))
        event = "failed" if verdict.outcome is GuardianOutcome.NO_DECISION else "delivered"
        self._emit(event, {"id": step.request_id, "method": step.method, "verdict": verdict})

    def _drop(self, request: dict[str, object], reason: str) -> None:
        with self._lock:
            self._dropped += 1
        self._drop_log.warning(
            "guardian observe: %s %s not sent (%s)",
            known_method(str(request.get("method"))),
            logged(request.get("id")),
            reason,
        )
        self._emit("dropped", {"id": request.get("id"), "method": request.get("method"), "reason": reason})

    def add_listener(self, callback: EventCallback) -> None:
        with self._lock:
            if callback not in self._listeners:
                self._listeners = (*self._listeners, callback)

    def _emit(self, event: str, data: dict[str, object]) -> None:
        for listener in self._listeners:
            try:
                listener(event, data)
            except Exception:  # telemetry never breaks the agent
                self._event_log.warning("guardian on_event callback raised on %r", event, exc_info=True)

    def stats(self) -> GuardianStats:
        with self._lock:
            return GuardianStats(
                sent=self._sent,
                delivered=self._delivered,
                failed=self._failed,
                dropped=self._dropped,
                queue_depth=self.backlog.depth,
                last_failure=self._last_failure,
            )

    # -- connections ------------------------------------------------------------------------------------

    def sync_http(self) -> httpx.Client:
        client = self._sync_http
        if client is not None:
            return client
        with self._lock:
            if self._sync_http is None:
                transport = self._transport if self._transport is not None else deadline_transport()
                self._sync_http = httpx.Client(transport=IdentityOnly(transport))
            return self._sync_http

    def async_http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._async_http is not None and self._async_http[0]() is loop:
                return self._async_http[1]
            # A client from an earlier loop cannot be closed from this one; it is left to the collector.
            # The default transport is made here, as the blocking one is: a given transport also keeps httpx
            # from routing the guardian through proxies named in the environment, as the blocking client
            # never did.
            transport = (
                self._async_transport if self._async_transport is not None else httpx.AsyncHTTPTransport()
            )
            client = httpx.AsyncClient(transport=AsyncIdentityOnly(transport))
            self._async_http = (weakref.ref(loop), client)
            return client

    def close_sync_http(self) -> None:
        with self._lock:
            client, self._sync_http = self._sync_http, None
        if client is not None:
            client.close()

    async def close_async_http(self) -> None:
        with self._lock:
            current, self._async_http = self._async_http, None
        if current is not None and current[0]() is asyncio.get_running_loop():
            await current[1].aclose()

    def shut(self) -> None:
        """Refuse further steps and release the blocking connections (after the queue is done)."""
        with self._lock:
            self._closed = True
        self.close_sync_http()

    def release(self) -> None:
        """Finalizer of a collected client: let the worker drain and clean up, or clean up now."""
        if not self.backlog.stop(discard_pending=False):
            self.close_sync_http()


class GuardianClient:
    """A client for one AOS guardian endpoint.

    ``mode`` says how the Guard uses the client: ``"enforce"`` steps wait for :meth:`decide` /
    :meth:`adecide`; ``"observe"`` steps are handed to :meth:`submit` and delivered in the background. The
    client itself serves both entry points in either mode.

    ``timeout`` (seconds) bounds each HTTP attempt as a whole -- connecting, sending, and reading the status,
    headers and every byte of the answer together -- so a guardian that trickles its answer cannot stretch
    it. With ``retry`` a step can take up to ``(retry.attempts + 1) * timeout`` plus the back-off delays
    (and one more ``timeout`` for ``ping_on_start``'s ping); ``retry=None`` means a single attempt. An
    answer longer than ``max_reply_bytes`` (default 16 MiB) is not read further: the step ends
    ``NO_DECISION`` with the cause ``"reply too large: ..."`` (never retried), and ``on_failure`` decides.
    ``token`` is sent as ``Authorization: Bearer <token>``; ``headers`` are added to every request
    (``Content-Type: application/json`` is always set, as AOS requires, and ``Accept-Encoding: identity``:
    an answer with a content coding such as gzip is refused unread, a malformed answer, because a small
    compressed body can inflate far past ``max_reply_bytes`` in memory before its size is known).

    ``ping_on_start`` pings the guardian (AOS ``ping``, ``timeout`` = the client's timeout) before the
    *first step*, not at construction: construction cannot know whether the agent is synchronous or
    asynchronous, and a blocking ping inside a running event loop would stall it. If that ping fails, the
    first step is not sent; it ends ``NO_DECISION`` with a ``"ping: ..."`` cause, so ``on_failure`` decides
    whether it proceeds. Later steps are sent normally.

    ``transport`` / ``async_transport`` replace httpx's network transports (tests, custom TLS, a proxy:
    ``httpx.HTTPTransport(proxy=...)``); a transport that implements both interfaces, like
    ``httpx.MockTransport``, serves both when ``async_transport`` is not given. Proxies named in the
    environment (``HTTP_PROXY``, ``ALL_PROXY``, ...) are not used, by the blocking and the asyncio client
    alike: whoever answers the guardian's requests decides the agent's steps.

    ``on_event`` (and any callback given to :meth:`add_listener`) hears what happens to observed steps:
    see :data:`EventCallback`. Each HTTP request is an OpenTelemetry CLIENT span (``rpc.system=jsonrpc``,
    span name = the AOS method) made with ``tracer_provider`` (default: the global one) and carries the
    W3C ``traceparent`` of the step it belongs to, so a guardian that reads it continues the agent's trace.

    ``flush_timeout`` (seconds, default 5) bounds :meth:`flush` when it is given no timeout -- which is how
    an engagement's close waits for an observe-mode client -- so that a slow guardian or a queue filled by
    other engagements cannot hold the agent: what is still queued then is delivered later, and a warning
    says how many steps were waiting.

    Close the client (or use it as a context manager) to deliver what is queued and release connections;
    use :meth:`aclose` / ``async with`` if :meth:`adecide` was used, so that the asyncio connections are
    closed on their own event loop.
    """

    def __init__(
        self,
        url: str,
        *,
        mode: Literal["enforce", "observe"] = "enforce",
        timeout: float = 5.0,
        retry: GuardianRetry | None = None,
        on_failure: Literal["deny", "allow"] = "deny",
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        queue_size: int = 10_000,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        flush_timeout: float = 5.0,
        ping_on_start: bool = False,
        on_event: EventCallback | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if mode not in ("enforce", "observe"):
            raise ValueError(f"mode must be 'enforce' or 'observe', got {mode!r}")
        if on_failure not in ("deny", "allow"):
            raise ValueError(f"on_failure must be 'deny' or 'allow', got {on_failure!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size!r}")
        if max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be >= 1, got {max_reply_bytes!r}")
        if not flush_timeout >= 0:
            raise ValueError(f"flush_timeout must be >= 0 seconds, got {flush_timeout!r}")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"invalid guardian url {url!r}: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"the guardian url must be an http(s) URL (AOS runs over HTTP), got {url!r}")
        merged = httpx.Headers({"Accept": "application/json"})
        merged.update(headers or {})
        if token is not None:
            if "authorization" in merged:
                raise ValueError("pass either token= or an Authorization header, not both")
            merged["Authorization"] = f"Bearer {token}"
        merged["Content-Type"] = "application/json"
        merged["Accept-Encoding"] = "identity"  # a compressed answer is refused: see IdentityOnly
        if async_transport is None and isinstance(transport, httpx.AsyncBaseTransport):
            async_transport = transport
        self._mode: Literal["enforce", "observe"] = mode
        self._flush_timeout = flush_timeout
        self._flush_log = RateLimitedLog(_logger)
        self._core = _Core(
            Settings(
                url=url,
                headers=merged,
                timeout=timeout,
                retry=retry,
                on_failure=on_failure,
                max_reply_bytes=max_reply_bytes,
            ),
            ping_on_start=ping_on_start,
            queue_size=queue_size,
            on_event=on_event,
            transport=transport,
            async_transport=async_transport,
            tracing=RequestTracing(tracer_provider),
        )
        self._finalizer = weakref.finalize(self, self._core.release)
        self._finalizer.atexit = False  # interpreter exit is handled by the observe queue's own hook

    @property
    def url(self) -> str:
        return self._core.settings.url

    @property
    def mode(self) -> Literal["enforce", "observe"]:
        return self._mode

    @property
    def on_failure(self) -> Literal["deny", "allow"]:
        return self._core.settings.on_failure

    @property
    def stats(self) -> GuardianStats:
        return self._core.stats()

    def add_listener(self, callback: EventCallback) -> None:
        """Also report observe-mode events to ``callback`` (the same events as ``on_event``).

        For parties that arrive after construction, such as a Guard's telemetry counting dropped steps.
        Adding the same callback again does nothing; a callback that raises is logged and skipped.
        """
        self._core.add_listener(callback)

    def decide(self, request: dict[str, object]) -> GuardianVerdict:
        """Send one AOS request and wait for the guardian's verdict.

        Raises ``TypeError``/``ValueError`` only if ``request`` is not a JSON-serialisable JSON-RPC request
        with an ``id`` and a ``method``; every guardian problem is a ``NO_DECISION`` verdict.
        """
        step = encode_step(request)
        return self._core.settle(step, self._core.run_sync(step))

    async def adecide(self, request: dict[str, object]) -> GuardianVerdict:
        """:meth:`decide` for asyncio code."""
        step = encode_step(request)
        return self._core.settle(step, await self._core.run_async(step))

    def submit(self, request: dict[str, object]) -> None:
        """Queue one AOS request for background delivery and return at once.

        The dict is serialised later, on the delivery thread: do not mutate it after submitting. If the
        queue is full (``queue_size``) or the client is closed, the step is dropped, counted in
        ``stats.dropped``, logged (rate-limited) and reported to ``on_event``. Raises only ``TypeError`` /
        ``ValueError`` for a request that is not a dict with an ``id`` and a ``method``.
        """
        self._core.submit(request)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every step submitted before this call was delivered or failed; False on timeout.

        ``timeout=None`` waits at most the client's ``flush_timeout``. Steps still queued when the wait
        ends are not lost -- the worker goes on delivering them -- and a (rate-limited) warning says how
        many there were.
        """
        limit = self._flush_timeout if timeout is None else timeout
        backlog = self._core.backlog
        if backlog.flush(limit):
            return True
        self._flush_log.warning(
            "guardian observe: flush gave up after %g s with %d steps not yet delivered",
            limit,
            backlog.unfinished,
        )
        return False

    # The timeout bounds a wait on a worker thread, mirroring flush(); asyncio.timeout cannot cancel that.
    async def aflush(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """:meth:`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def ping(self, timeout_ms: int = 5000) -> dict[str, object]:
        """Check that the guardian is alive; return its ``PingRequestResult`` (``status``, ``version``, ...).

        Raises :class:`GuardianUnavailable` if it does not answer ``connected`` within ``timeout_ms``
        (per attempt; the client's ``retry`` applies).
        """
        if self._core.closed:
            raise GuardianUnavailable("client closed")
        core = self._core
        return _drive_sync(ping_flow(core.settings, timeout_ms), core.sync_http(), core.tracing, None)

    async def aping(self, timeout_ms: int = 5000) -> dict[str, object]:
        """:meth:`ping` for asyncio code."""
        if self._core.closed:
            raise GuardianUnavailable("client closed")
        core = self._core
        return await _drive_async(ping_flow(core.settings, timeout_ms), core.async_http(), core.tracing, None)

    def close(self, timeout: float | None = 30.0) -> None:
        """Deliver what is queued (waiting at most ``timeout`` seconds), then release connections.

        Steps still queued after ``timeout`` are dropped and counted; the delivery in progress is allowed
        to finish, which takes at most one step's time (``timeout`` of the client per attempt, see the class
        documentation). Later :meth:`decide` calls return ``NO_DECISION`` (``"client closed"``); later
        :meth:`submit` calls drop. Closing twice is harmless.
        """
        backlog = self._core.backlog
        drained = backlog.flush(timeout)
        backlog.stop(discard_pending=not drained)
        backlog.join()
        self._core.shut()
        self._finalizer.detach()

    async def aclose(self, timeout: float | None = 30.0) -> None:  # noqa: ASYNC109 (as aflush)
        """:meth:`close` for asyncio code; also closes the asyncio connections of the running loop."""
        await asyncio.to_thread(self.close, timeout)
        await self._core.close_async_http()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
