"""A store that answers a little at a time: ``timeout_seconds`` bounds the whole answer, not each read.

The server is a real TCP server on 127.0.0.1 that speaks just enough RESP: it answers the client's handshake
at once, then sends the answer to the store's script one byte at a time, each byte well within the timeout
(as a large snapshot over a slow link does)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from agentguard.errors import StoreUnavailable
from agentguard.stores import RedisStore

SNAPSHOT = b'*5\r\n$11\r\n["meta",{}]\r\n$1\r\n1\r\n$1\r\n0\r\n$1\r\n0\r\n*0\r\n'


@pytest.fixture
def trickling() -> Iterator[str]:
    """The url of a server that trickles its answer to every script, a byte each 50 ms."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # accept() wakes up to see that the test is over
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                while b"EVALSHA" not in (data := conn.recv(65536)):
                    if not data:
                        return
                    conn.sendall(b"+OK\r\n" * data.count(b"CLIENT"))
                for index in range(len(SNAPSHOT)):
                    if stop.wait(0.05):
                        return
                    conn.sendall(SNAPSHOT[index : index + 1])
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    server.close()
    thread.join(5)


def test_an_answer_trickled_past_the_timeout_is_store_unavailable(trickling: str) -> None:
    store = RedisStore(trickling, timeout_seconds=0.3)  # the whole answer takes about 2.4 s
    # The old sync client waited for it all (each byte came within the timeout) and returned it. (The async
    # client bounds the whole answer.)
    with pytest.raises(
        StoreUnavailable, match=r"load of engagement 'e' failed: TimeoutError: no whole answer"
    ):
        store.load("e")
    store.close()
