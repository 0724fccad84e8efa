"""Shared test helpers: spec text builders, and one real redis-server for the session (tests/redis_support.py),
emptied before each test that asks for ``redis_url``. No server binary is a failure, never a skip."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_support import RedisServer, start_redis

ROOT = Path(__file__).resolve().parents[1]


def spec_text(body: str = "", *, name: str = "test-agent") -> str:
    """A valid OpenAgentSpec document with the required header and ``body`` (YAML, dedented) appended."""
    head = (
        "kind: openagentspec:v1/agent\n"
        f"name: {name}\n"
        "description: The agent is used in tests.\n"
        "intent: You help the tests pass.\n"
        "owner: tests@corp.com\n"
    )
    return head + textwrap.dedent(body)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's url, its data flushed (restarted first if a test left it stopped or paused)."""
    import redis

    if not redis_server.running:
        redis_server.restart()
    redis_server.resume()
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url
