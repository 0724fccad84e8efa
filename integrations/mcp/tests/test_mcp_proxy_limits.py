"""The proxy over HTTP stays up for good clients, as agentguard's other servers do: a real proxy process on
127.0.0.1, and clients that misbehave on purpose over raw sockets.

Before it listened through ``agentguard.serving``, a connection that never finished its request head was kept
open for good (checked at 15 s), and nothing capped the open connections: one client could take every file
descriptor of the proxy.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from tests.guardian_server.hostile import closed_within, connect, slow_body

from .conftest import SHOP_SERVER, SPEC, free_port, start_http, stop
from .test_mcp_proxy import PROXY

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'


@contextmanager
def _proxy(*options: str) -> Iterator[str]:
    """A proxy process for the shop spec in front of the shop server, with ``options``: its MCP URL."""
    assert PROXY is not None
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = [PROXY, "--spec", str(SPEC), "--elicit-reviews", "--listen", f"127.0.0.1:{port}", *options]
    proc = start_http([*argv, "--", sys.executable, str(SHOP_SERVER)], url)
    try:
        yield url
    finally:
        stop(proc)


def test_slow_heads_and_bodies_are_cut_off_and_a_large_body_refused() -> None:
    options = ("--header-timeout", "0.5", "--body-timeout", "0.5", "--max-body-bytes", "1000")
    with _proxy(*options) as url:
        with connect(url) as slow_head:
            started = time.monotonic()
            closed, _ = closed_within(slow_head, 5.0, trickle=b"POST /mcp HTTP/1.1\r\nX-Slow: " + b"a" * 60)
        assert closed
        assert 0.4 < time.monotonic() - started < 4.0
        received, seconds = slow_body(
            url, "/mcp", 500, extra="Accept: application/json, text/event-stream\r\n"
        )
        assert received.startswith(b"HTTP/1.1 408")
        assert b'"code":-32000' in received
        assert 0.4 < seconds < 4.0
        large = httpx.post(
            url,
            content=b" " * 2000 + INITIALIZE,
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
        assert large.status_code == 413
        answered = httpx.post(
            url,
            content=INITIALIZE,
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
        assert answered.status_code != 408  # a good client is still served (the SDK judges its request)


def test_the_connection_cap_holds_and_frees_up() -> None:
    with _proxy("--max-connections", "3", "--header-timeout", "30") as url, ExitStack() as held:
        idle = [held.enter_context(connect(url)) for _ in range(3)]
        time.sleep(0.3)  # the proxy has accepted them
        with connect(url) as extra:
            closed, received = closed_within(extra, 5.0)
        assert closed
        assert received.startswith(b"HTTP/1.1 503")
        for sock in idle:
            sock.close()
        deadline = time.monotonic() + 5
        while httpx.get(url).status_code == 503:
            assert time.monotonic() < deadline
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--header-timeout", "0", "header_timeout must be positive"),
        ("--max-connections", "-1", "max_connections must be positive"),
        ("--body-timeout", "nan", "--body-timeout must be positive and finite"),
        ("--body-timeout", "inf", "--body-timeout must be positive and finite"),
        ("--header-timeout", "inf", "header_timeout must be positive and finite"),
        ("--max-body-bytes", "0", "--max-body-bytes must be positive"),
    ],
)
def test_a_limit_that_bounds_nothing_is_refused_at_start(option: str, value: str, why: str) -> None:
    assert PROXY is not None
    argv = [PROXY, "--spec", str(SPEC), "--listen", f"127.0.0.1:{free_port()}", option, value]
    done = subprocess.run([*argv, "--", sys.executable, str(SHOP_SERVER)], capture_output=True, text=True)
    assert done.returncode == 2
    assert why in done.stderr
