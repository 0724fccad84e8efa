"""The transport that sends what uvicorn writes in one turn of the event loop with one ``send``."""

from __future__ import annotations

import asyncio
from typing import Any

from agentguard.guardian.server import create_app, parse_rules, serve_in_thread
from agentguard.guardian.server._thread import Coalescing
from tests.guardian_server.hostile import connect, head


class _Recording:
    """A transport that records the calls made to it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def close(self) -> None:
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))

    def is_closing(self) -> bool:
        return False


async def test_the_writes_of_one_turn_go_out_together_and_closing_sends_them_first() -> None:
    recording = _Recording()
    transport = Coalescing(recording, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"")
    transport.write(b"{}")
    assert recording.calls == []
    await asyncio.sleep(0)
    assert recording.calls == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}")]
    transport.write(b"last")
    transport.close()
    assert recording.calls[1:] == [("write", b"last"), ("close", None)]
    await asyncio.sleep(0)
    assert len(recording.calls) == 3  # nothing held is sent twice
    assert transport.is_closing() is False  # the rest is the wrapped transport's


async def test_an_abort_drops_what_is_held() -> None:
    recording = _Recording()
    transport = Coalescing(recording, asyncio.get_running_loop())
    transport.write(b"never")
    transport.abort()
    await asyncio.sleep(0)
    assert recording.calls == [("abort", None)]


def test_each_answer_arrives_in_one_piece() -> None:
    # Without coalescing some answers' bodies arrive after their heads (7 in 50 where this was written).
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2025-07-01T12:00:00Z"}}'
    with serve_in_thread(create_app(parse_rules("rules: []"))) as server, connect(server.url) as sock:
        for _ in range(30):
            sock.sendall(head("/", len(body)) + body)
            answer = sock.recv(65536)
            status, _, payload = answer.partition(b"\r\n\r\n")
            assert status.startswith(b"HTTP/1.1 200")
            assert payload.startswith(b'{"jsonrpc":"2.0","id":1,"result":{"status":"connected"')
            assert payload.endswith(b"}")
