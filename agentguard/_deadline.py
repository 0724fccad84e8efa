"""Total deadlines and size caps for one HTTP exchange: connect, send and every read share one clock.

Why this exists: an httpx timeout bounds each socket operation, not the exchange. A peer that trickles its
answer a byte at a time (headers included) keeps every read under the timeout and the exchange alive for
ever -- a guardian client with ``timeout=1`` waited 81 s. Here the deadline is a point in time held in a
context variable; the blocking network backend clamps every connect, TLS handshake, read and write to the
time left before it, so the exchange ends at the deadline whatever the peer does. asyncio code needs no
backend: :func:`read_async` runs the whole exchange under :func:`asyncio.timeout_at`.

Answers are read as a stream and dropped as soon as they pass ``limit`` bytes (decoded), so a huge answer
costs at most ``limit`` bytes of memory::

    with httpx.Client(transport=deadline_transport()) as client:
        answer = read_sync(client, request, deadline=time.monotonic() + 2.0, limit=1 << 20)
        # an httpx.Response with its body read, or TooLarge; httpx.ReadTimeout at the deadline

The clamp works on the transport :func:`deadline_transport` builds; a caller-supplied transport (a mock,
custom TLS, a proxy mount) still gets the deadline checked between the chunks of the body.

The cap counts decoded bytes, but httpx inflates each chunk it reads in one piece: an 8 KiB zstd body took
512 MiB of memory before a 1 MiB cap could see it. So a client asks for ``Accept-Encoding: identity`` and
wraps its transport in :class:`IdentityOnly` (:class:`AsyncIdentityOnly`), which refuses an answer with any
other content coding (:class:`Compressed`) before its body is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from agentguard._httputil import content_codings, declared_too_large

__all__ = [
    "AsyncIdentityOnly",
    "Compressed",
    "IdentityOnly",
    "TooLarge",
    "deadline_transport",
    "read_async",
    "read_sync",
]

_DEADLINE: ContextVar[float | None] = ContextVar("agentguard_http_deadline", default=None)


@dataclass(frozen=True, slots=True)
class TooLarge:
    """The answer was longer than ``limit`` bytes; reading stopped there."""

    limit: int


def _time_left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` shortened to what is left before the current deadline; raise ``expired`` past it."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise expired("the exchange's total deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every operation ends by the deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """Opens :class:`_Stream` connections through the backend it wraps."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport(*, verify: Any = True) -> httpx.HTTPTransport:
    """An httpx transport whose socket operations all end by the deadline :func:`read_sync` sets.

    httpx has no parameter for a network backend, so the one of its connection pool is wrapped in place.
    Should a future httpx build its pool differently, the wrap is skipped and only the checks between body
    chunks remain (the deadline tests would then fail, which is why they exist).
    """
    transport = httpx.HTTPTransport(verify=verify)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if isinstance(pool, httpcore.ConnectionPool) and isinstance(inner, httpcore.NetworkBackend):
        pool._network_backend = _Backend(inner)
    return transport


@contextmanager
def _until(deadline: float) -> Iterator[None]:
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class _Body:
    """An answer's body as it arrives, refused past ``limit`` bytes and past the deadline."""

    def __init__(self, request: httpx.Request, deadline: float, limit: int) -> None:
        self._request = request
        self._deadline = deadline
        self._limit = limit
        self._parts = bytearray()

    def too_large(self, response: httpx.Response) -> TooLarge | None:
        if declared_too_large(response.headers.get("content-length"), self._limit):
            return TooLarge(self._limit)
        return None

    def add(self, chunk: bytes) -> TooLarge | None:
        self._parts += chunk
        if len(self._parts) > self._limit:
            return TooLarge(self._limit)
        if time.monotonic() >= self._deadline:
            raise httpx.ReadTimeout("the exchange's total deadline passed", request=self._request)
        return None

    def answer(self, response: httpx.Response) -> httpx.Response:
        # The body is already decoded: a Content-Encoding (or the encoded length) kept with it would be
        # applied a second time. The headers are copied as the bytes they arrived as: httpx decodes a
        # non-ASCII value (latin-1 or UTF-8) to text but encodes text headers as ASCII only, so a rebuilt
        # ``X-Reason: Überweisung`` raised, and a deny sent with it was lost.
        headers = [
            (name, value)
            for name, value in response.headers.raw
            if name.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")
        ]
        return httpx.Response(
            response.status_code, headers=headers, content=bytes(self._parts), request=self._request
        )


def read_sync(
    client: httpx.Client, request: httpx.Request, *, deadline: float, limit: int
) -> httpx.Response | TooLarge:
    """Send ``request`` and read the answer, all of it by ``deadline`` (``time.monotonic()``) and ``limit``.

    Raises what httpx raises (``httpx.TimeoutException`` when the deadline passes).
    """
    body = _Body(request, deadline, limit)
    with _until(deadline):
        response = client.send(request, stream=True)
        try:
            refused = body.too_large(response)
            if not refused:
                for chunk in response.iter_bytes():
                    refused = body.add(chunk)
                    if refused:
                        break
        finally:
            response.close()
    return refused or body.answer(response)


async def read_async(
    client: httpx.AsyncClient, request: httpx.Request, *, deadline: float, limit: int
) -> httpx.Response | TooLarge:
    """:func:`read_sync` for asyncio: the whole exchange is cancelled at ``deadline``."""
    body = _Body(request, deadline, limit)
    try:
        async with asyncio.timeout_at(_loop_time(deadline)):
            response = await client.send(request, stream=True)
            try:
                refused = body.too_large(response)
                if not refused:
                    async for chunk in response.aiter_bytes():
                        refused = body.add(chunk)
                        if refused:
                            break
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise httpx.ReadTimeout("the exchange's total deadline passed", request=request) from exc
    return refused or body.answer(response)


def _loop_time(deadline: float) -> float:
    """``deadline`` (on ``time.monotonic``'s clock) on the running event loop's clock."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


class Compressed(httpx.DecodingError):
    """An answer came with a content coding (gzip, br, zstd, ...): refused before its body was read."""

    def __init__(self, codings: list[str], request: httpx.Request) -> None:
        super().__init__(
            f"content-encoding {', '.join(codings)} refused (the client asks for identity)", request=request
        )
        self.codings = codings


def _refuse_coding(request: httpx.Request, response: httpx.Response) -> None:
    refused = content_codings(response.headers.get_list("content-encoding"))
    if refused:
        raise Compressed(refused, request)


class IdentityOnly(httpx.BaseTransport):
    """The transport it wraps, refusing a compressed answer unread (:class:`Compressed`)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        try:
            _refuse_coding(request, response)
        except Compressed:
            response.close()
            raise
        return response

    def close(self) -> None:
        self._inner.close()


class AsyncIdentityOnly(httpx.AsyncBaseTransport):
    """:class:`IdentityOnly` for asyncio."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        try:
            _refuse_coding(request, response)
        except Compressed:
            await response.aclose()
            raise
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
