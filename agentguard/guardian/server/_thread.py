"""Run an ASGI app with uvicorn on a background thread: for tests, demos and benchmarks in one process.

The socket is bound before uvicorn starts, so the port (0 = any free one) is known and listening by the
time :func:`serve_in_thread` returns -- no polling a port, no race with another process taking it.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

try:
    import uvicorn
    from starlette.types import ASGIApp
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "serve_in_thread needs uvicorn and Starlette: pip install 'agentguard[server]'"
    ) from exc

__all__ = ["RunningServer", "serve_in_thread"]


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
) -> RunningServer:
    """Start ``app`` on ``host:port`` (``port=0``: a free port) and return once it accepts connections.

    Raises ``RuntimeError`` when uvicorn does not start within ``startup_timeout`` seconds. uvicorn's
    logging configuration is left alone (``log_config=None``): an embedded server must not reconfigure
    the host process's logging.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only then
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, log_config=None, lifespan="off", access_log=False)
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
    authority = f"[{host}]" if family == socket.AF_INET6 else host
    return RunningServer(server, thread, sock, f"http://{authority}:{bound_port}/")
