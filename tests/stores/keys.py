"""What the store tests share about a RedisStore's keys: their names, and a plain client to look at them."""

from __future__ import annotations

from agentguard.stores._redis import _tag


def keys_of(engagement_id: str, prefix: str = "agentguard") -> tuple[str, str, str]:
    """The meta, log and claims keys of ``engagement_id`` (see agentguard/stores/_redis.py)."""
    base = f"{prefix}:{{{_tag(engagement_id)}}}:"
    return base + "meta", base + "log", base + "claims"
