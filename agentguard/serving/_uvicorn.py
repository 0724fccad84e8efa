"""Run an ASGI app with uvicorn, bounded by :class:`~agentguard.serving.ServerLimits`: every agentguard server
uses this.

:func:`serve` runs in the foreground (the command lines, ``--workers N`` included); :func:`aserve` in an event
loop already running (the MCP proxy's); :func:`serve_in_thread` on a background thread, for tests, demos and
benchmarks in one process. Either way the connections are bounded by a uvicorn HTTP protocol that adds what
uvicorn lacks (as of 0.5x):

- a **head deadline**: a connection that has not delivered a complete request head ``header_timeout``
  seconds after it opened, or after its previous response, is closed. uvicorn only times the idle gap
  after a response, and any byte (one every few seconds) restarts it;
- a **connection cap**: past ``max_connections`` open connections, a new one is answered ``503`` and
  closed before anything of it is read (uvicorn's ``limit_concurrency`` only counts once a request head has
  arrived, so slow heads could still take every file descriptor).

uvicorn's own settings carry the rest: ``timeout_keep_alive``, ``h11_max_incomplete_event_size`` (the head's
size), ``timeout_graceful_shutdown``, and the access log (off unless asked).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Any

try:
    import uvicorn
    from starlette.types import ASGIApp
    from uvicorn.protocols.http.auto import AutoHTTPProtocol
    from uvicorn.supervisors import Multiprocess
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("serving needs uvicorn and Starlette: pip install 'agentguard[server]'") from exc

from agentguard._httputil import is_loopback
from agentguard.serving._limits import ServerLimits

__all__ = ["BoundedConfig", "RunningServer", "aserve", "bounded_config", "serve", "serve_in_thread"]

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
)


class BoundedConfig(uvicorn.Config):
    """A uvicorn configuration that carries :class:`ServerLimits` to :class:`_BoundedProtocol` (picklable,
    so that ``workers`` processes get them too)."""

    def __init__(self, app: ASGIApp | str, *, limits: ServerLimits, **kwargs: Any) -> None:
        super().__init__(
            app,
            http=_BoundedProtocol,
            timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]  # a float works
            timeout_graceful_shutdown=limits.graceful_shutdown_timeout,  # type: ignore[arg-type]
            h11_max_incomplete_event_size=limits.max_header_bytes,
            **kwargs,
        )
        self.limits = limits


class _BoundedProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]  # h11 or httptools, as uvicorn picks
    """uvicorn's HTTP protocol with the head deadline and the connection cap (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._limits: ServerLimits = getattr(config, "limits", ServerLimits())
        # One timer per connection, moved on lazily: a timer armed and cancelled at every response costs a
        # busy server more than the rest of this class. ``_head_cycle`` is the request cycle when the head
        # was last awaited (a new head starts a new one), ``_head_due`` when that wait ends.
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_cycle: object = None
        self._head_due = 0.0
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self.connections) >= self._limits.max_connections:
            self._refused = True
            transport.write(_BUSY)  # type: ignore[attr-defined]
            transport.close()
            return
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        # Before uvicorn goes on: a pipelined request it starts now is a new cycle, not timed out.
        self._await_head()
        super().on_response_complete()

    def _await_head(self) -> None:
        self._head_cycle = self.cycle
        self._head_due = self.loop.time() + self._limits.header_timeout
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_due, self._head_overdue, self._head_due)

    def _head_overdue(self, armed_for: float) -> None:
        self._head_timer = None
        if self._head_due > armed_for:  # the head was awaited again since: wait until then
            self._head_timer = self.loop.call_at(self._head_due, self._head_overdue, self._head_due)
        elif self.cycle is self._head_cycle and not self.transport.is_closing():  # no head arrived since
            self.transport.close()


def bounded_config(
    app: ASGIApp | str, host: str, port: int, limits: ServerLimits, **kwargs: Any
) -> BoundedConfig:
    """The uvicorn configuration agentguard's servers run with: ``limits``, no access log unless asked."""
    kwargs.setdefault("access_log", False)
    return BoundedConfig(app, limits=limits, host=host, port=port, **kwargs)


def serve(config: BoundedConfig) -> None:
    """Serve until interrupted: in this process, or in ``config.workers`` processes sharing one socket."""
    if config.workers > 1:
        Multiprocess(config, sockets=[_bind(config.host, config.port)]).run()
    else:
        uvicorn.Server(config).run()


async def aserve(config: BoundedConfig) -> None:
    """Serve in the running event loop until it is cancelled or the process is interrupted (one process: a
    loop cannot be shared with workers, ``ValueError``)."""
    if config.workers > 1:
        raise ValueError("aserve runs in this process's event loop: serve workers with serve()")
    await uvicorn.Server(config).serve()


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, created with ``IPPROTO_TCP``: asyncio sets ``TCP_NODELAY`` on
    the connections it accepts only then (uvicorn's own ``bind_socket`` leaves it 0, and every answer then
    waits out the peer's delayed ACK, some 40 ms)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class RunningServer:
    """A uvicorn server running on a daemon thread. ``url`` ends with ``/``; :meth:`stop` is idempotent.

    Use it as a context manager (``with serve_in_thread(app) as server: ...``) or call :meth:`stop`.
    """

    def __init__(
        self, server: uvicorn.Server, thread: threading.Thread, sock: socket.socket, url: str
    ) -> None:
        self._server = server
        self._thread = thread
        self._socket = sock
        self.url = url

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to finish the requests in flight and exit, wait up to ``timeout`` seconds for it."""
        self._server.should_exit = True
        self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve_in_thread(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    log_level: str = "warning",
    startup_timeout: float = 10.0,
    limits: ServerLimits | None = None,
    insecure_open: bool = False,
) -> RunningServer:
    """Start ``app`` on ``host:port`` (``port=0``: a free port) and return once it accepts connections.

    ``limits`` bound the connections (default :class:`ServerLimits`). An app made by agentguard's
    ``create_app`` without a token is refused (``ValueError``) on a non-loopback ``host`` unless
    ``insecure_open``. Raises ``RuntimeError`` when uvicorn does not start within ``startup_timeout``
    seconds. uvicorn's logging configuration is left alone (``log_config=None``): an embedded server must
    not reconfigure the host process's logging.
    """
    if not is_loopback(host) and not insecure_open and requires_no_token(app):
        raise ValueError(f"refusing to serve on {host} without a token (pass insecure_open=True if meant)")
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    config = bounded_config(
        app, host, bound_port, limits or ServerLimits(), log_level=log_level, log_config=None, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{host}:{bound_port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(1.0)
            sock.close()
            raise RuntimeError(f"uvicorn did not start on {host}:{bound_port}")
        time.sleep(0.005)
    authority = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return RunningServer(server, thread, sock, f"http://{authority}:{bound_port}/")


def requires_no_token(app: object) -> bool:
    """Whether ``app`` is one of agentguard's servers made without a bearer token (it says so on its
    ``open_without_token`` attribute; any other app is the caller's business)."""
    return getattr(app, "open_without_token", False) is True
