"""A hostile HTTP peer on a real loopback socket: it trickles, floods or stalls, as a test scripts it.

Real frameworks refuse to misbehave at the byte level, so this is a few dozen lines of raw sockets. Each
connection's request is read (head and ``Content-Length`` body), handed to ``script(method, path)``, and the
byte strings it yields are written one after another with ``pause`` seconds between them::

    def script(method: str, path: str) -> Iterator[bytes]:
        yield from trickle(http_response(b'{"ok": true}'))      # one byte at a time

    with HostileServer(script, pause=0.2) as server:
        ...  # server.url

Stopping the server closes every connection it holds, so a client still reading gets a reset, and no
thread outlives the test.

``HostileServer(answer=...)`` instead hands each decoded request to ``answer``, which returns the whole
response: a guardian that writes exact bytes (a key twice, ``NaN``, an encoding) under the request's own
``id``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Self

import zstandard

Script = Callable[[str, str], Iterable[bytes]]
Answer = Callable[[dict[str, object]], bytes]
"""``answer(request)``: the whole HTTP response (head and body) to send for one decoded JSON-RPC request."""


def http_response(
    body: bytes,
    *,
    status: str = "200 OK",
    content_type: str = "application/json",
    length: bool = True,
    encoding: str | None = None,
) -> bytes:
    """A whole HTTP/1.1 response; without ``length`` the body is delimited by closing the connection.
    ``encoding`` is sent as its ``Content-Encoding`` (``body`` as given: see :func:`compression_bomb`)."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
    if encoding is not None:
        head += f"Content-Encoding: {encoding}\r\n"
    head += f"Content-Length: {len(body)}\r\n" if length else "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


@functools.cache
def compression_bomb(encoding: str, size: int = 256 << 20) -> bytes:
    """``size`` bytes of spaces compressed with ``encoding`` (``gzip`` or ``zstd``): 256 MiB make 256 KiB of
    gzip or 8 KiB of zstd, which httpx would inflate a chunk at a time, each chunk whole."""
    block = b" " * (1 << 20)
    if encoding == "gzip":
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(compressor.compress(block) for _ in range(size >> 20)) + compressor.flush()
    writer = zstandard.ZstdCompressor(level=19).compressobj()
    return b"".join(writer.compress(block) for _ in range(size >> 20)) + writer.flush()


def trickle(data: bytes) -> Iterator[bytes]:
    """``data`` one byte at a time."""
    for index in range(len(data)):
        yield data[index : index + 1]


def flood(total: int, *, chunk: int = 1 << 16, content_type: str = "application/json") -> Iterator[bytes]:
    """A 200 response whose close-delimited body is ``total`` bytes of JSON-looking filler."""
    yield f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n".encode()
    sent = 0
    block = b" " * chunk
    while sent < total:
        yield block
        sent += chunk


class HostileServer:
    """Serves ``script`` on 127.0.0.1 until the ``with`` block ends; counts the requests it received."""

    def __init__(
        self, script: Script | None = None, *, pause: float = 0.0, answer: Answer | None = None
    ) -> None:
        if (script is None) == (answer is None):
            raise TypeError("give exactly one of script and answer")
        self._script = script
        self._answer = answer
        self._pause = pause
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self._connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> Self:
        self._spawn(self._accept)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        for thread in list(self._threads):
            thread.join(5)
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(connection)
            self._spawn(self._serve, connection)

    def _respond(self, method: str, path: str, body: bytes) -> Iterable[bytes]:
        if self._script is not None:
            return self._script(method, path)
        assert self._answer is not None
        request = json.loads(body)
        return [self._answer(request if isinstance(request, dict) else {})]

    def _serve(self, connection: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                request = _read_request(connection)
                if request is None:
                    return
                method, path, headers, body = request
                with self._lock:
                    self.requests.append((method, path))
                    self.headers.append(headers)
                    self.bodies.append(body)
                for data in self._respond(method, path, body):
                    if self._stop.wait(self._pause):
                        return
                    connection.sendall(data)
        except OSError:
            return  # the client gave up (as it should) or the test ended


def _read_request(connection: socket.socket) -> tuple[str, str, dict[str, str], bytes] | None:
    """Method, path, headers (lower-case names) and body of the next request on ``connection``; None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return method, path, headers, rest[:length]
