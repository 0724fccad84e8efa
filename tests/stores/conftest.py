"""Fixtures of the store tests: one real redis-server for the session (tests/redis_support.py), emptied before
each test that asks for ``redis_url``. No server binary is a failure, never a skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_support import RedisServer, start_redis


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
