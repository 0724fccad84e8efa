"""RedisStore: the journal of shared engagements in Redis (or Valkey, which speaks the same protocol).

::

    from agentguard.stores import RedisStore

    store = RedisStore("redis://redis.internal:6379/0", ttl_seconds=24 * 3600)

The ``redis`` package (``pip install agentguard[redis]``, redis-py 5 or later) is imported when a store is
made, never by ``import agentguard``.

**Keys.** One engagement is three keys, all with the same hash tag so that Redis Cluster keeps them in one
slot (a script may only touch keys of one slot)::

    {prefix}:{<id>}:meta      hash: meta (the first open's, as the event ["meta", meta]), life, version,
                              total, trimmed, claims (how many the claims hash holds), held:<call id>
                              (the versions of the p events that hold that paused review's output),
                              held@<version> (the call id of that p event) and holding (how many
                              held@ fields there are): only for p events the log still keeps
    {prefix}:{<id>}:log       list: the newest ``max_events`` encoded events, oldest first (newest right)
    {prefix}:{<id>}:claims    hash: claimed key -> owner (see claim)

``<id>`` is the engagement id percent-encoded (UTF-8, lone surrogates kept, every byte but ``A-Z a-z 0-9
_ . - ~`` written ``%XX``), and ``%`` alone for the empty id (which would otherwise make the empty hash tag
``{}``, which Cluster ignores). The encoding is injective and never contains ``{``, ``}`` or ``:``, so no id
-- ``}``, ``:log``, ``*``, NUL, 10 KB of anything -- can name another engagement's keys or shift the hash
tag; the prefix may not contain braces either. ``redis-cli --scan --pattern 'agentguard:{*'`` lists them.

The version is counted in the meta hash and not read off the list's length, so it stays exact however many
old events ``LTRIM`` dropped; ``total`` is ``history._total``, likewise exact; ``trimmed`` is how many events
``LTRIM`` dropped, so the log must hold exactly ``version - trimmed``: a log evicted under ``maxmemory``
(the ``volatile-*`` and ``allkeys-*`` policies evict one key at a time), deleted, cut or pushed to by another
program is refused as not a journal's, never replayed short (a loop count, a history, started over). The
meta is encoded by the record's :func:`~agentguard.record.encode_event` (as ``["meta", meta]``), so datetimes
and bytes in it come back as they went in.

**Lives.** An engagement whose keys expired (or were deleted) and whose id is opened again is a new *life*
of it: ``life`` is a random number (1 to 10**15) written when the record is created, and every version the
store answers with is ``life * 10**15 + n`` (the ``n``-th event of that life). A worker still holding the
earlier life appends with a version of it: the script compares the life (in the same atomic step as the
append) and answers "no such engagement" (:class:`KeyError`, which the pipeline turns into a recorded
denial): the call does not run, and the worker neither merges its events into the new record nor reloads
it as its own (its loop count restarted). An append that finds a gap answers with the record, read by the
same script (see ``append``): the caller reloads the life it was behind in, never one opened after, and the
store keeps nothing per engagement. Records written before lives existed (no ``life`` field) are refused as
not a journal's: give an upgraded fleet a new ``prefix``.

**One round trip, atomically.** Each method is one Lua script (``EVALSHA``, written straight onto a pooled
connection; when the server answers ``NOSCRIPT``, after a restart or a failover, nothing ran and redis-py's
``Script`` sends it again, loading it): Redis runs a script
alone, so reading the version, comparing it with the caller's, appending, trimming, counting and refreshing
the time to live happen with nothing in between, which is what makes the exclusive append a compare-and-set.

* ``open`` creates the meta hash (a new life, at its first version, total 0) when it is absent -- and then
  deletes whatever log or claims an earlier engagement of the same id left (its meta expired first, by a
  millisecond) -- and returns meta, version, total and the kept events; it refreshes the time to live of all
  three keys.
* ``load`` is the same without creating anything and without refreshing the time to live (it only reads).
* ``append`` raises :class:`KeyError` when the meta hash is missing (never opened, or expired), or is of
  another life than ``since``. It returns
  the events appended after ``since`` and before its own (``missed``). When some of those are no longer
  kept -- ``since`` older than the oldest kept event, or newer than the log (the engagement expired and was
  opened again since the caller last looked) -- a partial list is of no use to the caller: it returns the
  record instead (meta, and the kept events after the append: ``Appended.reloaded``), and no missed
  events. An exclusive append whose ``since`` is not the version appends nothing and returns ``ok=False``
  with the missed events (or the record). Any other append pushes the events -- but a call's ``b`` or
  ``r`` that the log holds after ``since`` already, a copy of an append whose answer was lost, sent again
  (see :func:`~agentguard.record.fresh_events`) --, adds their count to the version and ``total`` (less
  what the copies left out change) to the total, trims the list to the newest ``max_events`` and refreshes the time to
  live of all three keys. A ``p`` event's version is noted under ``held:<call id>`` in the meta hash; a
  ``u`` event of that call id (it was resumed) overwrites each such ``p`` still in the log with ``["x"]``
  and drops the field, so that the output the review held -- refused, perhaps -- does not stay in Redis
  (see :class:`~agentguard.record.Journal`). The versions ``LTRIM`` drops leave those fields too: a pause
  never resumed keeps no field once its ``p`` left the log (as ``GraphStore`` drops its held counts). An
  append of more than ``max_append_bytes`` of events or more than ``max_append_events`` events raises
  :class:`ValueError`, sending nothing: sent whole, it may be more than the server takes (its query
  buffer, its memory) or can receive within ``timeout_seconds``, and the store does not split it (its parts
  could not be one compare-and-set). The pipeline reads both bounds off the store and appends a larger
  outbox -- what a worker recorded while the store was away, under ``on_failure="allow"`` -- as several
  appends (:meth:`~agentguard.record.EngagementState.batch`): the call's own begin in the last, exclusive
  one.
* ``post`` (:class:`~agentguard.record.Pipelined`) sends a non-exclusive ``append`` on a connection it takes
  out of the pool and returns without reading the answer; the pipeline reads it at the record's next commit,
  so the events a call ends with do not cost a round trip of their own. Every method first reads the answer
  of this store's posted append for the same engagement, so this process's commands for one engagement keep
  their order (and another record of it opened here sees the events); at most 64 answers wait unread (each
  holds a connection), past that the oldest is read. A posted script the server no longer knows
  (``NOSCRIPT``, after a restart) is sent again as a round trip that loads it.
* ``claim`` is ``HSETNX`` then ``HGET`` on the claims hash, and refreshes the time to live. Claims are fields
  of one hash rather than a key each so that every refresh (open, append, claim) keeps them alive as long as
  the engagement: a claim key with its own time to live could expire under a long-lived engagement and let
  a paused review be resumed twice. Like ``append``, it raises :class:`KeyError` when the meta hash is
  missing or of another life than the caller's version (``since``): a worker holding the earlier life would
  otherwise win a claim in the new life's empty claims hash, and resume a review that was resumed already.
  When an engagement is opened anew, the old claims go with its old log. Its meta hash counts the claims,
  and a claims hash that does not hold that many (evicted under ``maxmemory``, deleted) is refused as not a
  journal's: a claim it lost would be won again.

**Failures.** Every fault of the store becomes :class:`~agentguard.errors.StoreUnavailable`, naming the store
(``host:port``, never a password) and the operation; no redis-py exception escapes:

* connection refused or reset, a timeout, ``LOADING``, ``BUSY``, authentication, TLS: redis-py's
  ``RedisError`` and ``OSError``;
* any other error reply -- ``WRONGTYPE`` because something else wrote our keys, a script error -- since a
  store that answers with an error cannot record the step either (failing closed under
  ``on_failure="deny"``);
* a reply that is not the script's (another program's data in our keys, a list where a hash should be, a
  version that is not a number, more events than versions): the store does not guess;
* an event (or meta) larger than ``max_event_bytes``: it is not sent (it would sit in Redis for the time to
  live and be read by every worker that opens the engagement); a call whose inputs are that large is
  denied, one whose output is, withheld. For an append this is :class:`~agentguard.record.EventRefused`
  (naming the events), as is the server refusing an argument larger than its ``proto-max-bulk-len``
  (512 MB by default; then the append's largest event is the one refused): sent again, they would be
  refused again, so the record replaces them in its outbox and only that step is denied.

The pipeline turns ``StoreUnavailable`` into a denial or a warning by ``on_failure`` (``EventRefused``:
always a denial). :class:`KeyError` (no such engagement, or not the caller's life) is the only other
exception, and only from ``append`` and ``claim``.

Reconnecting is redis-py's job: the pool notices a connection the server closed before it sends on it, so
the first call after the server comes back works (for the async client, once its event loop has run since
the server closed the connection: only the running loop reads the close; a loop that was blocked all along
gets one ``StoreUnavailable``). The clients this store builds never retry a command
(redis-py 6 and later retry three times by default): a script that ran but whose reply was lost would run
twice -- a non-exclusive append recorded twice, an exclusive one finding its own events as "missed" -- and
three retries with backoff would also break the time bound. They speak RESP2 (``protocol=2``): in redis-py 8
a RESP3 connection turns on "maintenance notifications" (``"auto"``), and with them on the async pool no
longer checks a pooled connection before using it, so the first call after a server restart failed. Clients
given to the constructor keep their own settings; give them ``retry=Retry(NoBackoff(), 0)`` and
``protocol=2`` for the same guarantees.

**Settings.** ``url``: ``redis://``, ``rediss://`` or ``unix://`` (redis-py's forms, credentials and ``?db``
included); both clients are built from it on first use, with ``socket_timeout`` and
``socket_connect_timeout`` at ``timeout_seconds`` (a call fails within about that, even against a stopped
server, and against one that sends its answer a little at a time: a sync answer not read whole within it has
its socket shut, see ``_Deadlines``). Or ``client`` (a ``redis.Redis``) and ``async_client`` (a
``redis.asyncio.Redis``), each used as given and closed by their owner; ``url`` then builds only the one not
given. A store without an async client raises :class:`~agentguard.errors.ConfigurationError` from the
``a``-methods, and likewise without a sync one.
Both clients must be made with ``decode_responses=False`` (the default): the store encodes and decodes
itself, so that any string round-trips. ``max_events``: how many events the log keeps (a process further
behind reloads the record). ``max_event_bytes``: the largest event sent, encoded (8 MiB).
``max_append_bytes``: the most bytes of events one round trip carries (8 MiB, at least ``max_event_bytes``;
the events only: a ``p`` or ``u`` event's call id goes once more beside it, at most that event's size
again). Sent within ``timeout_seconds`` (2 s), 8 MiB needs about 4 MB/s; raise one with the other.
``max_append_events``: the most events one round trip carries (100,000, the most allowed). ``ttl_seconds``:
how long an engagement lives after its last open, append or claim. ``on_failure``: ``"deny"`` or
``"allow"``, read by the pipeline (:class:`~agentguard.record.Journal`).

The async client built from ``url`` belongs to the event loop that first used it; called from another loop
(a second ``asyncio.run``), the store builds a fresh one for that loop. ``close()`` closes the sync client it
built, ``aclose()`` both.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, cast
from urllib.parse import quote, urlsplit

from agentguard.errors import ConfigurationError, StoreUnavailable
from agentguard.record import (
    Appended,
    CommitBusy,
    EventRefused,
    Posted,
    Snapshot,
    decode_event,
    encode_event,
    held_outputs,
)

_T = TypeVar("_T")
_H = TypeVar("_H", "_Posted", "_APosted")

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    from redis.commands.core import AsyncScript, Script

__all__ = ["RedisStore"]

# -- the scripts ---------------------------------------------------------------------------------------
# KEYS are always meta, log, claims (one hash tag). ARGV values arrive as strings.

_TOUCH = """
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
"""

# Reads the record (whose meta hash exists) and checks it: m = meta, life, version, total, trimmed. The log
# holds the events after the first ``trimmed`` (LTRIM dropped those): a log that is shorter or longer than
# that (evicted under maxmemory, deleted, pushed to by someone else) is not this record's.
_CHECK = """
local m = redis.call('HMGET', KEYS[1], 'meta', 'life', 'version', 'total', 'trimmed')
local version, trimmed = tonumber(m[3]), tonumber(m[5])
local length = redis.call('LLEN', KEYS[2])
if not m[2] or not version or not trimmed or version - length ~= trimmed then
  return redis.error_reply('agentguard: not a journal: ' .. KEYS[1])
end
"""

# ARGV: max_events, ttl_ms, meta, life (a fresh one, kept only when the record is created)
_OPEN = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'meta', ARGV[3], 'life', ARGV[4], 'version', 0, 'total', 0, 'trimmed', 0,
    'claims', 0)
end
"""
    + _CHECK
    + """
local events = redis.call('LRANGE', KEYS[2], -tonumber(ARGV[1]), -1)
"""
    + _TOUCH
    + """
return {m[1], m[2], m[3], m[4], events}
"""
)

# ARGV: max_events
_LOAD = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
"""
    + _CHECK
    + """
local events = redis.call('LRANGE', KEYS[2], -tonumber(ARGV[1]), -1)
return {m[1], m[2], m[3], m[4], events}
"""
)

# ARGV: max_events, ttl_ms, life, since, total, exclusive ('1' or '0'), held (how many pairs follow), the pairs
# (a p event's position among the events, or minus a u event's; its call id), events...
# Reply: {0} no such engagement (or not the life the caller saw); {1, life, version, total, gap, missed}
# appended; {2, ...} exclusive conflict; after a gap, meta and the kept events follow: the record as it is now
# (missed is empty). A call's b or r event (named by its kind and token, the prefix the pattern matches) that
# the log already holds after since -- all of the log, after a gap -- is a copy of an append whose answer was
# lost: it is not pushed again, and its change (+1 for a b, -1 for an r) is taken off the caller's total, so
# history._total counts each call once (agentguard.record.fresh_events does the same in Python). It costs one
# anchored match per missed event, nothing when the caller missed none. A p event's versions are kept in the
# meta hash (field held:<call id>, and held@<version> naming the call id, counted by 'holding'); a u event of
# that call id replaces each one still in the log by ["x"]: the held output goes with its review. The
# versions LTRIM drops leave the held fields too (a pause never resumed must not keep a field after its event
# is gone): each version is trimmed once, so this costs one HGET per trimmed version, and nothing when no p
# event is kept.
_APPEND = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
"""
    + _CHECK
    + """
if m[2] ~= ARGV[3] then return {0} end
local since, first = tonumber(ARGV[4]), 8 + 2 * tonumber(ARGV[7])
local gap = 0
local missed = {}
if since > version or since < version - length then
  gap = 1
elseif since < version then
  missed = redis.call('LRANGE', KEYS[2], since - version + length, -1)
end
local code, total = 2, m[4]
if ARGV[6] ~= '1' or since == version then
  code = 1
  local named, change = '^%["[br]","[^"\\\\]*",', tonumber(ARGV[5])
  local seen, push, at = {}, {}, {}
  if #ARGV >= first then
    local logged = missed
    if gap == 1 then logged = redis.call('LRANGE', KEYS[2], 0, -1) end
    for _, event in ipairs(logged) do
      local name = string.match(event, named)
      if name then seen[name] = true end
    end
    for i = first, #ARGV do
      local name = string.match(ARGV[i], named)
      if name and seen[name] then
        if string.sub(name, 3, 3) == 'b' then change = change - 1 else change = change + 1 end
      else
        if name then seen[name] = true end
        push[#push + 1] = ARGV[i]
        at[i - first + 1] = #push
      end
    end
  end
  if #push > 0 then
    for i = 1, #push, 1000 do
      redis.call('RPUSH', KEYS[2], unpack(push, i, math.min(i + 999, #push)))
    end
    local before = version
    version = redis.call('HINCRBY', KEYS[1], 'version', #push)
    for h = 8, first - 1, 2 do
      local position, field = tonumber(ARGV[h]), 'held:' .. ARGV[h + 1]
      local kept = redis.call('HGET', KEYS[1], field)
      if position > 0 then
        local held = string.format('%d', before + at[position])
        redis.call('HSET', KEYS[1], field, kept and (kept .. ',' .. held) or held, 'held@' .. held, ARGV[h + 1])
        redis.call('HINCRBY', KEYS[1], 'holding', 1)
      elseif kept then
        for held in string.gmatch(kept, '%d+') do
          local index = tonumber(held) - trimmed - 1
          if index >= 0 then redis.call('LSET', KEYS[2], index, '["x"]') end
        end
        redis.call('HDEL', KEYS[1], field)
      end
    end
    redis.call('LTRIM', KEYS[2], -tonumber(ARGV[1]), -1)
    local now = version - redis.call('LLEN', KEYS[2])
    redis.call('HSET', KEYS[1], 'trimmed', now)
    local holding = tonumber(redis.call('HGET', KEYS[1], 'holding') or '0')
    if holding > 0 and now > trimmed then
      for n = trimmed + 1, now do
        local held_at = string.format('%d', n)
        local call = redis.call('HGET', KEYS[1], 'held@' .. held_at)
        if call then
          holding = holding - 1
          redis.call('HDEL', KEYS[1], 'held@' .. held_at)
          local field = 'held:' .. call
          local kept = redis.call('HGET', KEYS[1], field)
          if kept then
            local left = {}
            for held in string.gmatch(kept, '%d+') do
              if tonumber(held) > now then left[#left + 1] = held end
            end
            if #left == 0 then
              redis.call('HDEL', KEYS[1], field)
            else
              redis.call('HSET', KEYS[1], field, table.concat(left, ','))
            end
          end
          if holding == 0 then break end
        end
      end
      redis.call('HSET', KEYS[1], 'holding', holding)
    end
  end
  total = redis.call('HINCRBY', KEYS[1], 'total', change)
"""
    + _TOUCH
    + """
end
if gap == 1 then
  return {code, m[2], version, total, gap, {}, m[1], redis.call('LRANGE', KEYS[2], -tonumber(ARGV[1]), -1)}
end
return {code, m[2], version, total, gap, missed}
"""
)

# ARGV: life, ttl_ms, key, owner
# Reply: false when there is no such engagement (or not the life the caller saw), else the holder. The meta
# hash counts the claims: a claims hash evicted or deleted would let a paused review be resumed a second time.
_CLAIM = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local m = redis.call('HMGET', KEYS[1], 'life', 'claims')
local counted = tonumber(m[2])
if not m[1] or not counted or counted ~= redis.call('HLEN', KEYS[3]) then
  return redis.error_reply('agentguard: not a journal: ' .. KEYS[3])
end
if m[1] ~= ARGV[1] then return false end
if redis.call('HSETNX', KEYS[3], ARGV[3], ARGV[4]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'claims', 1)
end
local holder = redis.call('HGET', KEYS[3], ARGV[3])
"""
    + _TOUCH
    + """
return holder
"""
)

_Arg = bytes | str | int
"""A script's argument, as redis-py sends it."""

_POSTED_MAX = 64
"""Posted appends whose answer waits unread, at most per client (each holds a connection)."""

_HEADER = 7
"""The append script's arguments before its held pairs and events (``ARGV[1]`` to ``ARGV[7]`` in Lua); the
last of them is how many held pairs follow."""

_APPEND_EVENTS = 100_000
"""The default of ``max_append_events``: Redis before 7 refuses a command of more than 1024 * 1024 arguments
(``invalid multibulk length``), whatever their size; an append's arguments are at most three per event (a
``p`` or ``u`` event adds its position and call id) and a few more."""

_BULK_FLOOR = 1024 * 1024
"""The least ``proto-max-bulk-len`` Redis may be configured with: the largest argument every server takes."""

_NO_ENGAGEMENT = 0
_APPENDED = 1
_CONFLICT = 2


# -- keys ----------------------------------------------------------------------------------------------


_CACHED_ID = 256
"""Ids up to this length have their tag cached: the cache holds 4096 of them, whatever their length, so a
caller naming engagements by megabyte ids would otherwise keep gigabytes alive."""


def _encode(engagement_id: str) -> str:
    return quote(engagement_id, safe="", errors="surrogatepass") or "%"


_cached_tag = lru_cache(maxsize=4096)(_encode)


def _tag(engagement_id: str) -> str:
    """The engagement id as it appears between the braces of its keys (see the module's docstring)."""
    return _cached_tag(engagement_id) if len(engagement_id) <= _CACHED_ID else _encode(engagement_id)


def _bulk(value: _Arg) -> bytes:
    data = value if type(value) is bytes else str(value).encode("utf-8", "surrogatepass")
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _pack(sha: str, keys: list[str], args: list[_Arg]) -> list[bytes]:
    """``EVALSHA sha 3 keys... args...`` in RESP, as ``send_packed_command`` takes it."""
    items = [sha, 3, *keys, *args]
    return [b"*%d\r\n$7\r\nEVALSHA\r\n" % (len(items) + 1) + b"".join([_bulk(item) for item in items])]


# -- replies -------------------------------------------------------------------------------------------


class _NotOurs(Exception):
    """A reply that is not what the script returns."""


def _int(value: object) -> int:
    if type(value) is int:
        return value
    if type(value) is bytes and value.lstrip(b"-").isdigit():
        return int(value)
    raise _NotOurs(f"not an integer: {value!r:.80}")


def _text(value: object) -> str:
    if type(value) is not bytes:
        raise _NotOurs(f"not a string: {value!r:.80}")
    return value.decode("utf-8", "surrogatepass")


def _texts(value: object) -> list[str]:
    if type(value) is not list:
        raise _NotOurs(f"not a list: {value!r:.80}")
    return [_text(item) for item in value]


_LIFE = 10**15
"""A version is ``life * _LIFE + n``: the engagement's ``n``-th event in the life that ``life`` names."""


def _split(since: int) -> tuple[int, int]:
    """``since``, a version this store answered with, as (life, n): see the module's docstring."""
    if type(since) is not int or since < 0:
        raise ValueError(f"since must be a version (an integer >= 0), not {since!r}")
    return divmod(since, _LIFE)


def _version(life: object, n: object) -> int:
    """The version the caller sees: the record's life and its count of events, in one number."""
    life_number, count = _int(life), _int(n)
    if life_number < 1 or not 0 <= count < _LIFE:
        raise _NotOurs(f"not a version: life {life!r:.40}, {count} events")
    return life_number * _LIFE + count


def _snapshot(reply: object) -> Snapshot:
    if type(reply) is not list or len(reply) != 5:
        raise _NotOurs(f"not a snapshot: {reply!r:.80}")
    meta, life, version, total, events = reply
    body = decode_event(_text(meta))
    if len(body) != 2 or body[0] != "meta" or type(body[1]) is not dict:
        raise _NotOurs(f"not an engagement's meta: {meta!r:.80}")
    snapshot = Snapshot(
        meta=body[1], version=_version(life, version), total=_int(total), events=_texts(events)
    )
    if len(snapshot.events) > _int(version):
        raise _NotOurs(f"{len(snapshot.events)} events at version {_int(version)}")
    return snapshot


def _appended(reply: object) -> Appended | None:
    """The append's answer, ``None`` when the engagement does not exist (or is not the caller's life). After
    a gap it holds the record as the same script read it (``reloaded``), not a gap for the caller to load."""
    if type(reply) is not list or not reply:
        raise _NotOurs(f"not an append's answer: {reply!r:.80}")
    code = reply[0]
    if code == _NO_ENGAGEMENT and len(reply) == 1:
        return None
    if code not in (_APPENDED, _CONFLICT) or len(reply) not in (6, 8):
        raise _NotOurs(f"not an append's answer: {reply!r:.80}")
    _, life, version, total, gap, missed = reply[:6]
    if gap != (1 if len(reply) == 8 else 0):  # after a gap the script answers with the record, never a gap
        raise _NotOurs(f"not an append's answer: {reply!r:.80}")
    if len(reply) == 8:
        reloaded = _snapshot([reply[6], life, version, total, reply[7]])
        return Appended(
            ok=code == _APPENDED, version=reloaded.version, total=reloaded.total, reloaded=reloaded
        )
    return Appended(
        ok=code == _APPENDED, version=_version(life, version), total=_int(total), missed=_texts(missed)
    )


def _holder(reply: object) -> str | None:
    """The claim's holder, ``None`` when the engagement does not exist (or is not the caller's life)."""
    return None if reply is None or reply is False else _text(reply)


# -- posted appends ------------------------------------------------------------------------------------


_Answer = tuple[Appended | None, BaseException | None]
"""A posted append's answer: ``(appended, None)`` or ``(None, the error to raise)``."""


def _unpack(answer: _Answer) -> Appended:
    appended, error = answer
    if error is not None:
        raise error
    assert appended is not None
    return appended


class _Posted:
    """A non-exclusive append sent with the sync client on a connection taken out of the pool; the answer is
    read once (by the pipeline, or by the store before its next command for the engagement), then kept."""

    __slots__ = ("_answer", "_args", "_conn", "_id", "_lock", "_pool", "_store")

    def __init__(self, store: RedisStore, engagement_id: str, args: list[_Arg], pool: Any, conn: Any) -> None:
        self._store, self._id, self._args, self._pool, self._conn = store, engagement_id, args, pool, conn
        self._lock = threading.Lock()
        self._answer: _Answer | None = None

    def settle(self) -> None:
        """Read the answer if nobody has yet (a failure is kept for :meth:`result`)."""
        with self._lock:
            if self._answer is None:
                self._answer = self._store._answer(self._id, self._args, self._pool, self._conn)
                self._conn = None

    def result(self) -> Appended:
        self.settle()
        assert self._answer is not None
        return _unpack(self._answer)

    async def aresult(self) -> Appended:
        # Posted from sync code onto a sync connection: read it off the event loop.
        return await asyncio.to_thread(self.result)


class _APosted:
    """:class:`_Posted` for the async client: read on the loop that sent it, once (later awaiters share the
    read, and a cancelled awaiter does not cancel it)."""

    __slots__ = ("_args", "_conn", "_id", "_loop", "_pool", "_read", "_store")

    def __init__(self, store: RedisStore, engagement_id: str, args: list[_Arg], pool: Any, conn: Any) -> None:
        self._store, self._id, self._args, self._pool, self._conn = store, engagement_id, args, pool, conn
        self._loop = asyncio.get_running_loop()
        self._read: asyncio.Future[_Answer] | None = None

    def _unreadable(self, why: str) -> StoreUnavailable:
        """Not a store down (under ``on_failure: allow`` the step would go on, its compare-and-set never made):
        the answer is there, on another event loop; the step is denied (:class:`CommitBusy`)."""
        return self._store._unavailable("posted append", self._id, RuntimeError(why), CommitBusy)

    async def settle(self) -> None:
        if self._read is None:
            if asyncio.get_running_loop() is not self._loop:
                raise self._unreadable("its answer can only be read on the event loop that sent it")
            self._read = asyncio.ensure_future(
                self._store._aanswer(self._id, self._args, self._pool, self._conn)
            )
            self._conn = None
        await asyncio.shield(self._read)

    async def aresult(self) -> Appended:
        await self.settle()
        assert self._read is not None
        return _unpack(self._read.result())

    def result(self) -> Appended:
        if self._read is None or not self._read.done():
            raise self._unreadable("posted from an event loop: its answer is read there")
        return _unpack(self._read.result())


# -- deadlines of sync answers -------------------------------------------------------------------------


class _Deadlines:
    """Shuts the socket of a sync connection whose answer is not read within the store's timeout.

    redis-py's ``socket_timeout`` bounds each read from the socket, not the answer: a server (or anything
    between) that trickles a byte now and then holds a call as long as it likes. The async client bounds the
    whole answer; for the sync one, one daemon thread per process keeps the deadlines of the answers being
    read and shuts a socket whose answer is late, so that its read fails at once (``ConnectionError``).

    Deadlines of one timeout come in the order they end, so each timeout has a queue (oldest first): starting
    and stopping a clock is a lock and an append; an answer read in time leaves its entry to be dropped when
    the thread next looks."""

    def __init__(self) -> None:
        self._reset()
        # A forked child has none of the parent's threads, and may have its lock taken: it starts afresh.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._queues: dict[float, collections.deque[tuple[float, int]]] = {}
        self._reading: dict[int, Any] = {}  # key -> the connection whose answer is being read
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, conn: Any, seconds: float) -> int:
        """Start the clock on ``conn``'s answer; the key to :meth:`unwatch` it with."""
        with self._lock:
            key = next(self._keys)
            self._reading[key] = conn
            queue = self._queues.get(seconds)
            if queue is None:
                queue = self._queues[seconds] = collections.deque()
            queue.append((time.monotonic() + seconds, key))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="agentguard-redis-deadlines", daemon=True
                )
                self._thread.start()
            elif len(queue) == 1:  # it may end before whatever the thread waits for
                self._lock.notify()
            return key

    def unwatch(self, key: int) -> bool:
        """Stop the clock; ``False`` when the answer was late and its socket shut."""
        with self._lock:
            return self._reading.pop(key, None) is not None

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                wait: float | None = None
                for queue in self._queues.values():
                    while queue and (queue[0][0] <= now or queue[0][1] not in self._reading):
                        late = self._reading.pop(queue.popleft()[1], None)
                        sock = getattr(late, "_sock", None)
                        if sock is not None:
                            with contextlib.suppress(OSError):
                                sock.shutdown(socket.SHUT_RDWR)
                    if queue and (wait is None or queue[0][0] - now < wait):
                        wait = queue[0][0] - now
                self._lock.wait(wait)


_DEADLINES = _Deadlines()


# -- the store -----------------------------------------------------------------------------------------


class RedisStore:
    """The engagement journal in Redis or Valkey (see the module's docstring for the keys, the scripts and
    the failure modes)."""

    on_failure: Literal["deny", "allow"]

    def __init__(
        self,
        url: str | None = None,
        *,
        client: redis.Redis | None = None,
        async_client: redis.asyncio.Redis | None = None,
        prefix: str = "agentguard",
        max_events: int = 10_000,
        max_event_bytes: int = 8 * 1_048_576,
        max_append_bytes: int = 8 * 1_048_576,
        max_append_events: int = _APPEND_EVENTS,
        ttl_seconds: float = 7 * 24 * 3600,
        timeout_seconds: float = 2.0,
        on_failure: Literal["deny", "allow"] = "deny",
    ) -> None:
        try:
            import redis.exceptions
        except ImportError as exc:  # pragma: no cover - the test extra installs redis
            raise ImportError("RedisStore needs the redis package: pip install 'agentguard[redis]'") from exc

        if url is None and client is None and async_client is None:
            raise ValueError("RedisStore needs a url, a client or an async_client")
        if on_failure not in ("deny", "allow"):
            raise ValueError(f"on_failure must be 'deny' or 'allow', not {on_failure!r}")
        if type(max_events) is not int or max_events < 1:
            raise ValueError(f"max_events must be an integer of at least 1, not {max_events!r}")
        if type(max_event_bytes) is not int or max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be an integer of at least 1, not {max_event_bytes!r}")
        if type(max_append_bytes) is not int or max_append_bytes < max_event_bytes:
            raise ValueError(
                f"max_append_bytes must be an integer of at least max_event_bytes ({max_event_bytes}: every "
                f"event must fit in one round trip), not {max_append_bytes!r}"
            )
        if type(max_append_events) is not int or not 1 <= max_append_events <= _APPEND_EVENTS:
            raise ValueError(
                f"max_append_events must be an integer from 1 to {_APPEND_EVENTS} (Redis before 7 takes no "
                f"command of more than 1024 * 1024 arguments), not {max_append_events!r}"
            )
        if not ttl_seconds > 0 or int(ttl_seconds * 1000) < 1:
            raise ValueError(f"ttl_seconds must be positive (1 ms or more), not {ttl_seconds!r}")
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix may not contain braces (they would move the hash tag): {prefix!r}")
        where = "redis"
        if url is not None:
            from redis.connection import parse_url

            # A malformed url fails here (ValueError), not at the first call.
            parse_url(url)  # type: ignore[no-untyped-call]  # untyped in redis-py 8
            where = _describe_url(url)
        elif client is not None:
            where = _describe_client(client)
        elif async_client is not None:
            where = _describe_client(async_client)

        self.on_failure = on_failure
        self.prefix = prefix
        self.max_events = max_events
        self.max_event_bytes = max_event_bytes
        self.max_append_bytes = max_append_bytes
        self.max_append_events = max_append_events
        self.ttl_seconds = ttl_seconds
        self.timeout_seconds = timeout_seconds
        self._url = url
        self._where = where
        self._faults: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        self._error_reply = redis.exceptions.ResponseError
        self._connection_lost = (redis.exceptions.ConnectionError, ConnectionError)
        self._noscript = redis.exceptions.NoScriptError
        self._posted: dict[str, _Posted] = {}  # by engagement id, oldest first (see post)
        self._aposted: dict[str, _APosted] = {}
        self._max = str(max_events)
        self._ttl = str(int(ttl_seconds * 1000))
        self._lock = threading.Lock()
        self._client = client
        self._own_client = False
        self._scripts: tuple[Script, Script, Script, Script] | None = None
        if client is not None:
            self._scripts = _register(client)
        self._aclient = async_client
        self._own_aclient = False
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._ascripts: tuple[AsyncScript, AsyncScript, AsyncScript, AsyncScript] | None = None
        if async_client is not None:
            self._ascripts = _aregister(async_client)

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, prefix={self.prefix!r}, on_failure={self.on_failure!r})"

    # -- keys and clients ------------------------------------------------------------------------------

    def _keys(self, engagement_id: str) -> list[str]:
        base = f"{self.prefix}:{{{_tag(engagement_id)}}}:"
        return [base + "meta", base + "log", base + "claims"]

    def _sync(self) -> tuple[Script, Script, Script, Script]:
        scripts = self._scripts
        if scripts is not None:
            return scripts
        if self._url is None:
            raise ConfigurationError(f"{self!r} has no sync client: give it client= or a url")
        with self._lock:
            if self._scripts is None:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry

                self._client = redis.Redis.from_url(
                    self._url, retry=Retry(NoBackoff(), 0), **self._client_options()
                )
                self._own_client = True
                self._scripts = _register(self._client)
            return self._scripts

    def _client_options(self) -> dict[str, Any]:
        """How the store's own clients talk to Redis, sync and async alike (each adds its own ``retry``: none,
        the pipeline's failure policy decides what a failed round trip means)."""
        return {
            "socket_timeout": self.timeout_seconds,
            "socket_connect_timeout": self.timeout_seconds,
            "decode_responses": False,
            "protocol": 2,
        }

    def _async(self) -> tuple[AsyncScript, AsyncScript, AsyncScript, AsyncScript]:
        scripts = self._ascripts
        if scripts is not None and (not self._own_aclient or self._aloop is asyncio.get_running_loop()):
            return scripts
        if self._url is None:
            raise ConfigurationError(f"{self!r} has no async client: give it async_client= or a url")
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # Built for this loop; one built for another loop is dropped (its connections belong to that loop).
        self._aclient = redis.asyncio.Redis.from_url(
            self._url, retry=Retry(NoBackoff(), 0), **self._client_options()
        )
        self._own_aclient = True
        self._aloop = asyncio.get_running_loop()
        self._ascripts = scripts = _aregister(self._aclient)
        return scripts

    def close(self) -> None:
        """Close the sync client this store built (one given to it is its owner's to close)."""
        for handle in self._unpark(self._posted):
            handle.settle()
        client = self._client
        if client is not None and self._own_client:
            self._client = None
            self._scripts = None
            self._own_client = False
            client.close()

    async def aclose(self) -> None:
        """Close the clients this store built, async and sync."""
        self.close()
        for handle in self._unpark(self._aposted):
            with contextlib.suppress(StoreUnavailable):  # posted on another loop: its connection went with it
                await handle.settle()
        aclient = self._aclient
        if aclient is not None and self._own_aclient:
            self._aclient = None
            self._ascripts = None
            self._own_aclient = False
            self._aloop = None
            await aclient.aclose()

    # -- faults ----------------------------------------------------------------------------------------

    def _unavailable(
        self,
        operation: str,
        engagement_id: str,
        exc: BaseException,
        kind: type[StoreUnavailable] = StoreUnavailable,
    ) -> StoreUnavailable:
        return kind(
            f"Redis store {self._where}: {operation} of engagement {engagement_id!r:.80} failed: "
            f"{type(exc).__name__}: {exc}"
        )

    def _not_ours(self, operation: str, engagement_id: str, exc: BaseException) -> NoReturn:
        raise StoreUnavailable(
            f"Redis store {self._where}: {operation} of engagement {engagement_id!r:.80}: the store's answer "
            f"is not a journal's (something else wrote its keys?): {exc}"
        ) from exc

    def _appending(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, exclusive: bool
    ) -> list[_Arg]:
        """The append script's arguments. Raises :class:`~agentguard.record.EventRefused`, sending nothing,
        for events larger than ``max_event_bytes``, and :class:`ValueError` for more events than one round
        trip carries (``max_append_bytes``, ``max_append_events``): the store does not split an append (its
        parts could not be one compare-and-set); the pipeline appends a larger outbox as several prefixes,
        each within these bounds (read off the store), the call's own begin in the last, exclusive one."""
        encoded = [event.encode("utf-8", "surrogatepass") for event in events]
        refused = [index for index, data in enumerate(encoded) if len(data) > self.max_event_bytes]
        if refused:
            largest = max(len(encoded[index]) for index in refused)
            raise EventRefused(self._too_large("append", engagement_id, largest), refused)
        size = sum(map(len, encoded))
        if len(encoded) > self.max_append_events or size > self.max_append_bytes:
            raise ValueError(
                f"Redis store {self._where}: append of engagement {engagement_id!r:.80} refused: "
                f"{len(encoded)} events of {size} bytes are more than one round trip carries "
                f"(max_append_events {self.max_append_events}, max_append_bytes {self.max_append_bytes}); "
                "append them in several (EngagementState.batch takes these bounds)"
            )
        return self._append_args(since, events, encoded, total, exclusive)

    def _append_args(
        self, since: int, events: Sequence[str], encoded: Sequence[bytes], total: int, exclusive: bool
    ) -> list[_Arg]:
        """One round trip's arguments (see the script): with the positions and call ids of the events that
        hold a paused review's output or end that review, so that the script scrubs the held output."""
        life, n = _split(since)
        held = held_outputs(events)
        args: list[_Arg] = [
            self._max,
            self._ttl,
            life,
            n,
            int(total),
            b"1" if exclusive else b"0",
            len(held),
        ]
        for index, call_id, holds in held:
            args += [index + 1 if holds else -index - 1, call_id.encode("utf-8", "surrogatepass")]
        args.extend(encoded)
        return args

    def _open_args(self, engagement_id: str, meta: Mapping[str, Any]) -> list[_Arg]:
        life = secrets.randbelow(_LIFE) + 1  # kept only if this open creates the record: see the docstring
        encoded = encode_event(["meta", dict(meta)]).encode("ascii")
        if len(encoded) > self.max_event_bytes:
            # Nothing is sent (a huge meta would sit in Redis for the time to live, and be read by every
            # worker that opens the engagement): the step fails as for a store that cannot record it.
            raise StoreUnavailable(self._too_large("open", engagement_id, len(encoded)))
        return [self._max, self._ttl, encoded, life]

    def _too_large(self, operation: str, engagement_id: str, size: int) -> str:
        return (
            f"Redis store {self._where}: {operation} of engagement {engagement_id!r:.80} refused: an event of "
            f"{size} bytes is larger than max_event_bytes ({self.max_event_bytes})"
        )

    def _failed(
        self, operation: str, engagement_id: str, exc: BaseException, args: list[_Arg]
    ) -> StoreUnavailable:
        """What a fault of the store is. The server refusing an argument larger than it takes (its
        ``proto-max-bulk-len``, 512 MB by default, set lower than ``max_event_bytes``) refuses the append's
        largest event for good (:class:`~agentguard.record.EventRefused`): sent again it would be refused
        again, by every later step. The server answers that with an error and closes the connection, often
        while the argument is still being written: so a connection lost during an append that carries an
        event larger than the least ``proto-max-bulk-len`` Redis allows (1 MiB) counts as that refusal too
        (were it a network fault after all, the step is denied either way, and the event is replaced in the
        outbox by what can be kept of it). Anything else may be over next time."""
        first = _HEADER + 2 * cast(int, args[_HEADER - 1]) if operation == "append" else len(args)
        if len(args) > first:
            sizes = [len(cast(bytes, arg)) for arg in args[first:]]  # the events, encoded by _append_args
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            refused = (isinstance(exc, self._error_reply) and "invalid bulk length" in str(exc)) or (
                isinstance(exc, self._connection_lost) and sizes[largest] > _BULK_FLOOR
            )
            if refused:
                why = (
                    f"{self._unavailable(operation, engagement_id, exc)} (an event of {sizes[largest]} bytes)"
                )
                return EventRefused(why, [largest])
        return self._unavailable(operation, engagement_id, exc)

    def _claim_args(self, since: int, key: str, owner: str) -> list[_Arg]:
        life = _split(since)[0]
        return [life, self._ttl, key.encode("utf-8", "surrogatepass"), owner.encode("utf-8", "surrogatepass")]

    # Commands go straight onto a connection of the client's pool -- packed here, the answer read by redis-py's
    # parser -- not through ``Script.__call__``/``execute_command``: those add about 30 µs of CPU a command
    # (the retry wrapper, observability hooks), and a posted append needs the connection in hand anyway.

    def _send(self, script: int, engagement_id: str, args: list[_Arg]) -> tuple[Any, Any]:
        """Send script number ``script`` (open, load, append, claim) on a connection taken out of the sync
        client's pool; the pool and the connection, whose answer is to be read by :meth:`_receive`."""
        sha = self._sync()[script].sha
        assert self._client is not None  # made by _sync
        pool: Any = self._client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(_pack(sha, self._keys(engagement_id), args))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return pool, conn

    def _receive(self, pool: Any, conn: Any, script: int, engagement_id: str, args: list[_Arg]) -> Any:
        """The answer to :meth:`_send`; the connection goes back to the pool (disconnected unless an answer
        was read). A script the server no longer knows (``NOSCRIPT``, after a restart) did not run: it is
        sent again by redis-py's ``Script``, which loads it."""
        try:
            try:
                return self._read_answer(conn)
            except self._error_reply as exc:
                if _closing(exc):
                    conn.disconnect()
                raise
            except BaseException:
                conn.disconnect()
                raise
            finally:
                pool.release(conn)
        except self._noscript:
            return self._sync()[script](self._keys(engagement_id), args)

    def _read_answer(self, conn: Any) -> Any:
        """``conn``'s answer, read within ``timeout_seconds`` in all (see :class:`_Deadlines`)."""
        key = _DEADLINES.watch(conn, self.timeout_seconds)
        try:
            answer = conn.read_response()
        except BaseException as exc:
            if _DEADLINES.unwatch(key):
                raise
            raise TimeoutError(f"no whole answer within timeout_seconds ({self.timeout_seconds})") from exc
        if not _DEADLINES.unwatch(key):
            conn.disconnect()  # read in time after all, but its socket was shut
        return answer

    async def _asend(self, script: int, engagement_id: str, args: list[_Arg]) -> tuple[Any, Any]:
        """:meth:`_send` with the async client."""
        sha = self._async()[script].sha
        assert self._aclient is not None  # made by _async
        pool: Any = self._aclient.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(_pack(sha, self._keys(engagement_id), args))
        except BaseException:
            await conn.disconnect()
            await pool.release(conn)
            raise
        return pool, conn

    async def _areceive(self, pool: Any, conn: Any, script: int, engagement_id: str, args: list[_Arg]) -> Any:
        """:meth:`_receive` with the async client."""
        try:
            try:
                return await conn.read_response()
            except self._error_reply as exc:
                if _closing(exc):
                    await conn.disconnect()
                raise
            except BaseException:
                await conn.disconnect()
                raise
            finally:
                await pool.release(conn)
        except self._noscript:
            return await self._async()[script](self._keys(engagement_id), args)

    def _run(self, operation: str, engagement_id: str, script: int, args: list[_Arg]) -> Any:
        """One round trip with the sync client, after reading the answer to an append posted for the same
        engagement."""
        self._drain(engagement_id)
        try:
            return self._receive(*self._send(script, engagement_id, args), script, engagement_id, args)
        except self._faults as exc:
            raise self._failed(operation, engagement_id, exc, args) from exc

    async def _arun(self, operation: str, engagement_id: str, script: int, args: list[_Arg]) -> Any:
        """:meth:`_run` with the async client."""
        await self._adrain(engagement_id)
        try:
            pool, conn = await self._asend(script, engagement_id, args)
            return await self._areceive(pool, conn, script, engagement_id, args)
        except self._faults as exc:
            raise self._failed(operation, engagement_id, exc, args) from exc

    def _append_reply(self, engagement_id: str, reply: Any) -> Appended:
        """An append's answer; :class:`KeyError` when the engagement does not exist (or is of another life).
        After a gap it holds the record, read by the same script (``reloaded``): nothing is kept here for a
        load to follow."""
        return _present(self._read("append", engagement_id, _appended, reply), engagement_id)

    def _loaded(self, engagement_id: str, reply: Any) -> Snapshot | None:
        """The load script's reply: ``None`` for no record (``False`` is RESP3's answer to the script's
        false)."""
        if reply is None or reply is False:
            return None
        return self._read("load", engagement_id, _snapshot, reply)

    def _read(self, operation: str, engagement_id: str, parse: Callable[[Any], _T], reply: Any) -> _T:
        """The script's reply parsed; anything that is not what the script returns fails closed."""
        try:
            return parse(reply)
        except Exception as exc:
            self._not_ours(operation, engagement_id, exc)

    # -- posted appends --------------------------------------------------------------------------------

    def _park(self, parked: dict[str, _H], engagement_id: str, handle: _H) -> _H | None:
        """Keep ``handle`` until its answer is read; the oldest one to read now when too many wait."""
        with self._lock:
            parked[engagement_id] = handle
            if len(parked) <= _POSTED_MAX:
                return None
            return parked.pop(next(iter(parked)))

    def _unpark(self, parked: dict[str, _H]) -> list[_H]:
        with self._lock:
            handles = list(parked.values())
            parked.clear()
            return handles

    def _drain(self, engagement_id: str) -> None:
        handle = self._posted.pop(engagement_id, None)
        if handle is not None:
            handle.settle()

    async def _adrain(self, engagement_id: str) -> None:
        handle = self._aposted.pop(engagement_id, None)
        if handle is not None:
            with contextlib.suppress(StoreUnavailable):  # kept for whoever posted it
                await handle.settle()
        sync_handle = self._posted.pop(engagement_id, None)
        if sync_handle is not None:
            await asyncio.to_thread(sync_handle.settle)

    def _answer(self, engagement_id: str, args: list[_Arg], pool: Any, conn: Any) -> _Answer:
        """The answer to an append posted on ``conn``: ``(appended, None)`` or ``(None, the error)``."""
        try:
            return self._append_reply(engagement_id, self._receive(pool, conn, 2, engagement_id, args)), None
        except self._faults as exc:
            return None, self._failed("append", engagement_id, exc, args)
        except (StoreUnavailable, KeyError) as exc:
            return None, exc

    async def _aanswer(self, engagement_id: str, args: list[_Arg], pool: Any, conn: Any) -> _Answer:
        """:meth:`_answer` with the async client."""
        try:
            reply = await self._areceive(pool, conn, 2, engagement_id, args)
            return self._append_reply(engagement_id, reply), None
        except self._faults as exc:
            return None, self._failed("append", engagement_id, exc, args)
        except (StoreUnavailable, KeyError) as exc:
            return None, exc

    def post(self, engagement_id: str, since: int, events: Sequence[str], total: int) -> Posted:
        """Send a non-exclusive :meth:`append` and return without its answer (see the module's docstring).
        Raises :class:`~agentguard.errors.StoreUnavailable` when it cannot be sent. Events more than one round
        trip carries raise :class:`ValueError` (see :meth:`append`)."""
        args = self._appending(engagement_id, since, events, total, False)
        self._drain(engagement_id)
        try:
            pool, conn = self._send(2, engagement_id, args)
        except self._faults as exc:
            raise self._failed("append", engagement_id, exc, args) from exc
        handle = _Posted(self, engagement_id, args, pool, conn)
        oldest = self._park(self._posted, engagement_id, handle)
        if oldest is not None:
            oldest.settle()
        return handle

    async def apost(self, engagement_id: str, since: int, events: Sequence[str], total: int) -> Posted:
        """:meth:`post` with the async client."""
        args = self._appending(engagement_id, since, events, total, False)
        await self._adrain(engagement_id)
        try:
            pool, conn = await self._asend(2, engagement_id, args)
        except self._faults as exc:
            raise self._failed("append", engagement_id, exc, args) from exc
        handle = _APosted(self, engagement_id, args, pool, conn)
        oldest = self._park(self._aposted, engagement_id, handle)
        if oldest is not None:
            with contextlib.suppress(StoreUnavailable):
                await oldest.settle()
        return handle

    # -- the journal, sync -----------------------------------------------------------------------------

    def open(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        """The engagement's record, created with ``meta`` if absent; refreshes its time to live."""
        reply = self._run("open", engagement_id, 0, self._open_args(engagement_id, meta))
        return self._read("open", engagement_id, _snapshot, reply)

    def load(self, engagement_id: str) -> Snapshot | None:
        """The engagement's record, ``None`` if there is none (never opened, or expired)."""
        return self._loaded(engagement_id, self._run("load", engagement_id, 1, [self._max]))

    def append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        """Append ``events`` atomically (see :meth:`Journal.append` and the module's docstring: after a gap,
        the answer holds the record). Raises :class:`KeyError` when the engagement does not exist, and
        :class:`ValueError` for more events than one round trip carries (see :meth:`_appending`)."""
        args = self._appending(engagement_id, since, events, total, exclusive)
        return self._append_reply(engagement_id, self._run("append", engagement_id, 2, args))

    def claim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        """Claim ``key`` for ``owner`` once and for all; the owner that holds it. Raises :class:`KeyError`
        when the engagement does not exist, or is of another life than ``since``."""
        reply = self._run("claim", engagement_id, 3, self._claim_args(since, key, owner))
        return _present(self._read("claim", engagement_id, _holder, reply), engagement_id)

    # -- the journal, async ----------------------------------------------------------------------------

    async def aopen(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        """:meth:`open` with the async client."""
        reply = await self._arun("open", engagement_id, 0, self._open_args(engagement_id, meta))
        return self._read("open", engagement_id, _snapshot, reply)

    async def aload(self, engagement_id: str) -> Snapshot | None:
        """:meth:`load` with the async client."""
        return self._loaded(engagement_id, await self._arun("load", engagement_id, 1, [self._max]))

    async def aappend(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        """:meth:`append` with the async client."""
        args = self._appending(engagement_id, since, events, total, exclusive)
        return self._append_reply(engagement_id, await self._arun("append", engagement_id, 2, args))

    async def aclaim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        """:meth:`claim` with the async client."""
        reply = await self._arun("claim", engagement_id, 3, self._claim_args(since, key, owner))
        return _present(self._read("claim", engagement_id, _holder, reply), engagement_id)


def _closing(exc: BaseException) -> bool:
    """Whether an error reply is a protocol error after which the server closes the connection (an argument
    past its ``proto-max-bulk-len``): that connection must not go back to the pool as if it were usable, or
    the next command on it fails (the server reset it)."""
    return "invalid bulk length" in str(exc) or "Protocol error" in str(exc)


def _present(answer: _T | None, engagement_id: str) -> _T:
    if answer is None:  # the script found no engagement (of the caller's life)
        raise KeyError(engagement_id)
    return answer


def _register(client: redis.Redis) -> tuple[Script, Script, Script, Script]:
    return (
        client.register_script(_OPEN),
        client.register_script(_LOAD),
        client.register_script(_APPEND),
        client.register_script(_CLAIM),
    )


def _aregister(client: redis.asyncio.Redis) -> tuple[AsyncScript, AsyncScript, AsyncScript, AsyncScript]:
    return (
        client.register_script(_OPEN),
        client.register_script(_LOAD),
        client.register_script(_APPEND),
        client.register_script(_CLAIM),
    )


def _describe_url(url: str) -> str:
    """The url without credentials or query: ``redis://host:port/db``, ``unix:///path``."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"


def _describe_client(client: object) -> str:
    """Where a given client connects, from its pool's settings (never the password)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return type(client).__name__
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    host = str(kwargs.get("host", "localhost"))
    if ":" in host:
        host = f"[{host}]"
    return f"redis://{host}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
