"""The OpenAgentSpec server stays up for good clients (issue 13, items 2 and 5), against a real server.

Slow heads and bodies are cut off at their deadlines, the token is checked before any other answer, a
server without a token refuses a non-loopback address, and the engagement store is bounded by bytes.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from agentguard import Guard
from agentguard.guard import Engagement
from agentguard.server import EngagementRecord, MemoryEngagementStore, RunStatus, create_app, serve_in_thread
from agentguard.serving import ServerLimits
from tests.guardian_server.hostile import closed_within, connect, slow_body

SPEC = """
kind: openagentspec:v1/agent
name: big-agent
description: The agent answers with as much text as it is asked for.
intent: You answer.
owner: big@corp.com
capabilities:
  echo:
"""


def _app(**options: Any) -> Any:
    """A server for ``big-agent``, whose run calls its guarded ``echo`` tool with the input's ``size``."""
    guard = Guard.from_yaml(SPEC)

    @guard.tool(name="echo")
    def echo(size: int) -> str:
        return "x" * size

    def runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
        return echo(input["size"])

    return create_app([guard], runner, **options)


def _record(index: int, output: Any, status: RunStatus = RunStatus.COMPLETED) -> EngagementRecord:
    now = datetime.now(UTC)
    return EngagementRecord(f"e{index}", "big-agent", status, now, now, now, output=output)


def test_the_store_is_bounded_by_bytes_and_drops_an_oversized_output() -> None:
    store = MemoryEngagementStore(max_bytes=50_000, max_record_bytes=20_000)

    async def fill() -> None:
        for index in range(40):
            await store.save(_record(index, "x" * 9_000))
        await store.save(_record(99, "y" * 30_000))

    asyncio.run(fill())
    assert store.stored_bytes <= 50_000
    kept = [index for index in range(40) if asyncio.run(store.load(f"e{index}")) is not None]
    assert kept == list(range(40 - len(kept), 40))  # the most recently updated ones
    assert 1 <= len(kept) < 6
    oversized = asyncio.run(store.load("e99"))
    assert oversized is not None
    assert (oversized.status, oversized.output) == (RunStatus.FAILED, None)
    assert oversized.error is not None
    assert oversized.error["type"] == "RecordTooLarge"
    with pytest.raises(ValueError, match="max_bytes"):
        MemoryEngagementStore(max_bytes=0)


def test_the_served_store_stays_within_its_bytes() -> None:
    store = MemoryEngagementStore(max_bytes=200_000)
    with serve_in_thread(_app(store=store)) as server, httpx.Client(base_url=server.url) as http:
        for _ in range(12):
            started = http.post("/agents/big-agent", json={"size": 60_000})
            assert started.status_code == 303, started.text
            deadline = time.monotonic() + 10
            while http.get(started.headers["location"], params={"wait": 5}).json()["status"] == "running":
                assert time.monotonic() < deadline
    assert 0 < store.stored_bytes <= 200_000


def test_a_slow_head_and_a_slow_body_are_cut_off() -> None:
    limits = ServerLimits(header_timeout=0.5, keep_alive_timeout=0.5)
    with serve_in_thread(_app(body_timeout=0.5), limits=limits) as server:
        with connect(server.url) as slow_head:
            assert closed_within(slow_head, 5.0, trickle=b"GET /agents HTTP/1.1\r\nX-Slow: " + b"a" * 60)[0]
        received, _ = slow_body(server.url, "/agents/big-agent", 1000)
        assert received.startswith(b"HTTP/1.1 408")
        assert httpx.get(server.url + "agents").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/nowhere"), ("DELETE", "/agents"), ("POST", "/agents/big-agent")]
)
def test_the_token_is_checked_before_anything_else_answers(method: str, path: str) -> None:
    with serve_in_thread(_app(token="s3cret", max_body_bytes=10)) as server:
        answer = httpx.request(method, server.url.rstrip("/") + path, content=b"x" * 100)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")


def test_serving_beyond_loopback_needs_a_token_or_insecure_open() -> None:
    with pytest.raises(ValueError, match="without a token"):
        serve_in_thread(_app(), host="0.0.0.0")
