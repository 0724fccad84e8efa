"""Fixtures for the guardian client tests: the fault-injecting guardian on a real socket, and a dead port.

The fault guardian itself is described in :mod:`tests.guardian_client.guardian_client_support`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from tests.guardian_client.guardian_client_support import WAIT_LIMIT, FaultGuardian, FaultServer, FaultState


@pytest.fixture(scope="session")
def fault_server() -> Iterator[FaultServer]:
    app = FaultGuardian()
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP; without it every response waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    starlette_app = Starlette(routes=[Route("/{mode}", app.endpoint, methods=["POST"])])
    config = uvicorn.Config(
        starlette_app, log_level="warning", log_config=None, lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(2000):  # bounded wait for uvicorn to accept connections
        if server.started or not thread.is_alive():
            break
        time.sleep(0.005)
    if not server.started:
        pytest.fail("the fault guardian did not start")
    yield FaultServer(f"http://127.0.0.1:{port}", app)
    app.state.release_all()
    server.should_exit = True
    thread.join(WAIT_LIMIT)
    sock.close()


@pytest.fixture
def fault(fault_server: FaultServer) -> Iterator[FaultServer]:
    """The fault guardian with a fresh state for this test; its waiting handlers are released afterwards."""
    fault_server.app.state = FaultState()
    yield fault_server
    fault_server.state.release_all()


@pytest.fixture(scope="session")
def dead_url() -> Iterator[str]:
    """A URL on a port that is bound but not listening: connections are refused, and no one can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/aos"
    sock.close()
