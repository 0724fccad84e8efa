"""Engagement stores: where the records of engagements shared by several processes live.

A store implements :class:`agentguard.record.Journal` (an append-only log of events per engagement,
each method one round trip). :class:`RedisStore` keeps them in Redis or Valkey; it needs the ``redis`` extra
(``pip install agentguard[redis]``), imported only when a store is made.
"""

from agentguard.stores._memory import MemoryStore
from agentguard.stores._redis import RedisStore

__all__ = ["MemoryStore", "RedisStore"]
