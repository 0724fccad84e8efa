"""Clients that misbehave on purpose, over raw sockets, for the tests of both servers' limits.

Each helper talks HTTP/1.1 by hand to ``127.0.0.1`` so that it can do what no HTTP client library will:
stop halfway through a request head, trickle a body, or hold a connection open without a word.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit


def address(url: str) -> tuple[str, int]:
    """``(host, port)`` of a server URL."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    """An open TCP connection to the server of ``url``."""
    return socket.create_connection(address(url), timeout=timeout)


def closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> tuple[bool, bytes]:
    """Whether the server closes ``sock`` within ``seconds`` (while we send ``trickle`` a byte every 0.1 s),
    and what it sent before closing."""
    received = b""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.1)
    position = 0
    while time.monotonic() < deadline:
        if position < len(trickle):
            try:
                sock.sendall(trickle[position : position + 1])
            except OSError:
                return True, received
            position += 1
        try:
            chunk = sock.recv(65_536)
        except TimeoutError:
            continue
        except OSError:
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received


def head(path: str, content_length: int, *, method: str = "POST", extra: str = "") -> bytes:
    """A request head with a JSON content type and ``content_length``."""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n{extra}\r\n"
    ).encode()


def slow_body(url: str, path: str, content_length: int, *, extra: str = "") -> tuple[bytes, float]:
    """Send a request head, then trickle its body a byte every 0.1 s: what the server sent before it closed
    the connection, and after how many seconds (fails when it is still open after 5 s)."""
    with connect(url) as sock:
        sock.sendall(head(path, content_length, extra=extra))
        started = time.monotonic()
        closed, received = closed_within(sock, 5.0, trickle=b"{" + b" " * 100)
    assert closed, "the server kept the connection of a trickled body open"
    return received, time.monotonic() - started


@contextlib.contextmanager
def guardian_process(rules: Path, *options: str) -> Iterator[tuple[str, int]]:
    """``agentguard guardian --rules rules *options`` in its own process on a free loopback port: yields its
    URL and process id once it accepts connections. Its own process, so that its event loop and the test's
    clients do not share a GIL, and its memory can be read."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "agentguard", "guardian", "--rules", str(rules), "--port", str(port)]
    process = subprocess.Popen([*command, "--log-level", "error", *options], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert process.poll() is None, "the guardian exited"
                assert time.monotonic() < deadline, "the guardian did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/", process.pid
    finally:
        process.terminate()
        process.wait(10)


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
