"""Fixtures of the store tests (the redis-server itself is tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the same server, to look at (and spoil) the store's keys."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    client.close()
