"""GraphStore: the journal of shared engagements (:class:`agentguard.record.Journal`) in a LangGraph store.

::

    from langgraph.store.postgres import PostgresStore
    from agentguard import Guard
    from agentguard_langchain import AgentGuardMiddleware, GraphStore

    store = PostgresStore.from_conn_string(...)           # the store the graph already has
    guard = Guard.from_file("agent.yaml", store=GraphStore(store))
    agent = create_agent(model, tools, middleware=[AgentGuardMiddleware(guard)], store=store, checkpointer=...)

Any :class:`langgraph.store.base.BaseStore` works (``InMemoryStore``, ``PostgresStore``, langgraph's
``RedisStore``, the store of LangGraph Platform): a deployment keeps its engagements where it keeps the rest
of its long-term memory, and runs nothing more.

**Items.** One engagement is, with ``<id>`` the engagement id percent-encoded (UTF-8, lone surrogates kept,
every character but ``A-Z a-z 0-9 _ - ~`` written ``%XX``, and ``%`` alone for the empty id: namespace labels
may hold no ``.``, no NUL and not be empty, and no id can name another's items)::

    (prefix, <id>)            "meta"              {"meta": ["meta", meta] encoded, "version": n, "total": n}
    (prefix, <id>, "log")     "0000000000000042"  {"e": event}    one item per kept event, keyed by version
    (prefix, <id>, "claims")  <key, encoded>      {"owner": owner}

The version is counted in the meta item, so it stays exact however many old events were trimmed (the log
keeps the newest ``max_events``: each append deletes the items that fall out); ``total`` likewise. Items are
written with ``index=False``: a store configured for semantic search does not embed them.

**Round trips.** A ``BaseStore`` answers ``batch`` of gets, searches and puts, and nothing else: there is no
compare-and-set and no transaction across a read and a write. So ``load`` and ``open`` are two round trips
(the meta, then the kept events; ``open`` creating an engagement is three: the meta, the claims an earlier
engagement of the same id left, then the new meta with those claims deleted); ``append`` is one read (the
meta and the first few events after ``since``), a second only when more were missed, then one write (the
new events, then the meta, then the trimmed events' deletions, in that order in one ``batch``); ``claim`` is
a read, then a write when the key is free.

**What is atomic, and where.** Every method holds a lock of this process from its first read to its last
write (one of 64 striped locks, chosen by the engagement's prefix and id, shared by every GraphStore of the
process). So in one process -- its threads and its event loop's tasks, through any number of GraphStores
over the same store -- a check and its write have nothing in between: the exclusive append is a
compare-and-set, and a claim is won exactly once. With ``InMemoryStore``, which exists in one process only,
that is everything.

Across processes sharing a ``PostgresStore`` (or any other store), nothing makes two writers of one
engagement wait for each other: two appends at the same version would both succeed and one event would
overwrite the other. What holds there is LangGraph's own rule: **one run per thread at a time** (LangGraph
Platform's multitask strategies ``reject`` and ``enqueue``), and the adapter's engagement is the thread.
Parallel tool calls of one run are in one process, under the lock. So on such a deployment one engagement is
never appended to by two processes at once. Where that is not guaranteed -- the ``interrupt`` and
``rollback`` strategies (this journal does not know whether the cancelled run has stopped writing), or
several hosts that may take the same thread at once -- use a store with a real compare-and-set:
:class:`agentguard.stores.RedisStore`.

A write is one ``batch``; whether the store applies a batch all-or-none is its own matter. The order within
it is chosen so that a write cut short leaves the journal readable: events are written before the meta that
counts them (events past the meta's version are never read, and are overwritten by the next append), and the
trimmed ones are deleted after it.

**Expiry.** The journal sets no time to live of its own; a store configured with one (``ttl`` of
``PostgresStore``, LangGraph Platform's store TTL) expires its items one by one. ``open`` and ``load`` read
the meta and every kept event, which refreshes them where the store refreshes on read; ``append`` rewrites
the meta. Kept events that expired anyway count as trimmed (the record is rebuilt from those left); a newest
event missing under its meta is a journal that cannot be trusted (:class:`~agentguard.StoreUnavailable`). A
claim that expires while its review is still paused could be won again: give such a store a time to live
longer than any review may wait. A meta that expired is an engagement that does not exist (``append`` raises
:class:`KeyError`); opening it again starts afresh and deletes the claims the old one left.

**Failures.** Any exception of the store, and an item that is not the journal's (something else wrote the
namespace), becomes :class:`~agentguard.StoreUnavailable`, naming the store's class and the operation; so
does waiting more than ``timeout_seconds`` for the lock. :class:`KeyError` (no such engagement) is the only
other exception, and only from ``append``. ``on_failure`` (``"deny"`` by default, or ``"allow"``) is read by
the pipeline, as for every journal.

The async twins use the store's ``abatch`` (an ``AsyncPostgresStore`` answers only those: use the async
graph API with it), and wait for the lock without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from agentguard import StoreUnavailable
from agentguard.record import Appended, Snapshot, decode_event, encode_event
from agentguard_langchain._host import BaseStore, GetOp, Op, PutOp, Result, SearchOp

__all__ = ["GraphStore"]

_LOCKS = tuple(threading.Lock() for _ in range(64))
"""The process's striped locks: one engagement is always under the same one, whichever GraphStore asks."""

_AHEAD = 8
"""How many events after ``since`` an append reads with the meta, in its first round trip."""

_CLAIMS_PER_OPEN = 10_000
"""At most this many claims an earlier engagement of the same id left are deleted when it is opened anew."""

_Plan = Generator[list[Op], list[Any], Any]
"""One method's work: yields the batches it sends, gets their results back (``Item | None`` for a get, a
list of items for a search), returns the answer."""


class _NotOurs(Exception):
    """An item that is not what the journal writes."""


def _tag(text: str) -> str:
    """``text`` as a namespace label or key (see the module's docstring): injective, never ``.`` or empty."""
    return quote(text, safe="", errors="surrogatepass").replace(".", "%2E") or "%"


def _event_key(version: int) -> str:
    return f"{version:016d}"


class GraphStore:
    """The engagement journal in a LangGraph ``BaseStore`` (see the module's docstring for the items, the
    round trips and exactly what is atomic)."""

    on_failure: Literal["deny", "allow"]

    def __init__(
        self,
        store: BaseStore,
        *,
        prefix: str = "agentguard",
        max_events: int = 10_000,
        timeout_seconds: float = 5.0,
        on_failure: Literal["deny", "allow"] = "deny",
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(f"GraphStore needs a langgraph BaseStore, not {type(store).__name__}")
        if on_failure not in ("deny", "allow"):
            raise ValueError(f"on_failure must be 'deny' or 'allow', not {on_failure!r}")
        if type(max_events) is not int or max_events < 1:
            raise ValueError(f"max_events must be an integer of at least 1, not {max_events!r}")
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        if not prefix or "." in prefix or "\x00" in prefix or prefix == "langgraph":
            raise ValueError(
                f"prefix must be a namespace label (not empty, no '.', not 'langgraph'): {prefix!r}"
            )
        self.store = store
        self.prefix = prefix
        self.max_events = max_events
        self.timeout_seconds = timeout_seconds
        self.on_failure = on_failure

    def __repr__(self) -> str:
        return (
            f"GraphStore({type(self.store).__name__}, prefix={self.prefix!r}, on_failure={self.on_failure!r})"
        )

    # -- the plans: what each method reads and writes, for the sync and the async driver alike ----------

    def _namespaces(self, engagement_id: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        base = (self.prefix, _tag(engagement_id))
        return base, (*base, "log"), (*base, "claims")

    def _meta(self, item: object) -> tuple[dict[str, Any], int, int]:
        value = getattr(item, "value", None)
        if not isinstance(value, Mapping):
            raise _NotOurs(f"not an engagement's meta item: {item!r:.80}")
        version, total, encoded = value.get("version"), value.get("total"), value.get("meta")
        if type(version) is not int or version < 0 or type(total) is not int or type(encoded) is not str:
            raise _NotOurs(f"not an engagement's meta: {dict(value)!r:.80}")
        try:
            body = decode_event(encoded)
        except ValueError as exc:
            raise _NotOurs(str(exc)) from exc
        if len(body) != 2 or body[0] != "meta" or type(body[1]) is not dict:
            raise _NotOurs(f"not an engagement's meta: {encoded!r:.80}")
        return body[1], version, total

    @staticmethod
    def _event(item: object) -> str | None:
        if item is None:
            return None
        value = getattr(item, "value", None)
        event = value.get("e") if isinstance(value, Mapping) else None
        if type(event) is not str:
            raise _NotOurs(f"not a journal event item: {item!r:.80}")
        return event

    def _events(self, log: tuple[str, ...], first: int, last: int) -> _Plan:
        """The kept events of versions ``first`` to ``last``: the unbroken run that ends at ``last`` (older
        ones missing count as trimmed; the newest missing is not a journal)."""
        if last < first:
            return []
        results = yield [GetOp(log, _event_key(v)) for v in range(first, last + 1)]
        events: list[str] = []
        for item in reversed(results):
            event = self._event(item)
            if event is None:
                break
            events.append(event)
        if not events:
            raise _NotOurs(f"the newest event (version {last}) is missing")
        events.reverse()
        return events

    def _snapshot(self, namespaces: tuple[tuple[str, ...], ...], item: object) -> _Plan:
        meta, version, total = self._meta(item)
        first = max(1, version - self.max_events + 1)
        events = yield from self._events(namespaces[1], first, version)
        return Snapshot(meta=meta, version=version, total=total, events=events)

    def _open(self, engagement_id: str, meta: Mapping[str, Any]) -> _Plan:
        namespaces = self._namespaces(engagement_id)
        base, _, claims = namespaces
        (item,) = yield [GetOp(base, "meta")]
        if item is not None:
            return (yield from self._snapshot(namespaces, item))
        (left,) = yield [SearchOp(claims, limit=_CLAIMS_PER_OPEN)]
        encoded = encode_event(["meta", dict(meta)])
        writes: list[Op] = [PutOp(base, "meta", {"meta": encoded, "version": 0, "total": 0}, index=False)]
        writes += [PutOp(claims, old.key, None) for old in left or ()]
        yield writes
        return Snapshot(meta=decode_event(encoded)[1], version=0, total=0, events=[])

    def _load(self, engagement_id: str) -> _Plan:
        namespaces = self._namespaces(engagement_id)
        (item,) = yield [GetOp(namespaces[0], "meta")]
        if item is None:
            return None
        return (yield from self._snapshot(namespaces, item))

    def _append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, exclusive: bool
    ) -> _Plan:
        base, log, _ = self._namespaces(engagement_id)
        ahead = [GetOp(log, _event_key(v)) for v in range(since + 1, since + 1 + _AHEAD)]
        item, *read = yield [GetOp(base, "meta"), *ahead]
        if item is None:
            raise KeyError(engagement_id)
        _, version, now = self._meta(item)
        meta = item.value["meta"]  # kept as it is, encoded
        kept_first = max(1, version - self.max_events + 1)
        gap = since > version or since < kept_first - 1
        missed: list[str] = []
        if not gap and since < version:
            if version > since + _AHEAD:
                read += yield [GetOp(log, _event_key(v)) for v in range(since + 1 + _AHEAD, version + 1)]
            found = [self._event(got) for got in read[: version - since]]
            if None in found:  # expired in the store: as good as trimmed
                gap = True
            else:
                missed = [event for event in found if event is not None]
        if exclusive and since != version:
            return Appended(ok=False, version=version, total=now, missed=missed, gap=gap)
        new_version, new_total = version + len(events), now + int(total)
        if events or total:
            oldest = new_version - self.max_events + 1  # the oldest version kept after this append
            writes: list[Op] = [
                PutOp(log, _event_key(v), {"e": events[v - version - 1]}, index=False)
                for v in range(max(version + 1, oldest), new_version + 1)
            ]
            writes.append(
                PutOp(base, "meta", {"meta": meta, "version": new_version, "total": new_total}, index=False)
            )
            writes += [PutOp(log, _event_key(v), None) for v in range(kept_first, min(version + 1, oldest))]
            yield writes
        return Appended(ok=True, version=new_version, total=new_total, missed=missed, gap=gap)

    def _claim(self, engagement_id: str, key: str, owner: str) -> _Plan:
        claims = self._namespaces(engagement_id)[2]
        (item,) = yield [GetOp(claims, _tag(key))]
        if item is not None:
            holder = item.value.get("owner") if isinstance(item.value, Mapping) else None
            if type(holder) is not str:
                raise _NotOurs(f"not a claim: {item!r:.80}")
            return holder
        yield [PutOp(claims, _tag(key), {"owner": owner}, index=False)]
        return owner

    # -- the drivers -----------------------------------------------------------------------------------

    def _lock(self, engagement_id: str) -> threading.Lock:
        return _LOCKS[hash((self.prefix, engagement_id)) % len(_LOCKS)]

    def _unavailable(self, operation: str, engagement_id: str, why: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"LangGraph store {type(self.store).__name__}: {operation} of engagement {engagement_id!r:.80} "
            f"failed: {why}"
        )

    def _advance(
        self, operation: str, engagement_id: str, plan: _Plan, results: list[Result] | None
    ) -> tuple[bool, Any]:
        """The plan's next batch of operations (``False``, ops), or its answer (``True``, answer)."""
        try:
            return False, (plan.send(results) if results is not None else next(plan))
        except StopIteration as done:
            return True, done.value
        except _NotOurs as exc:
            raise self._unavailable(operation, engagement_id, f"not a journal's item: {exc}") from exc

    def _run(self, operation: str, engagement_id: str, plan: _Plan) -> Any:
        lock = self._lock(engagement_id)
        if not lock.acquire(timeout=self.timeout_seconds):
            raise self._unavailable(operation, engagement_id, f"busy for {self.timeout_seconds}s")
        try:
            results: list[Result] | None = None
            while True:
                done, value = self._advance(operation, engagement_id, plan, results)
                if done:
                    return value
                try:
                    results = self.store.batch(value)
                except Exception as exc:
                    raise self._unavailable(operation, engagement_id, f"{type(exc).__name__}: {exc}") from exc
        finally:
            lock.release()

    async def _arun(self, operation: str, engagement_id: str, plan: _Plan) -> Any:
        lock = self._lock(engagement_id)
        if not lock.acquire(blocking=False):
            deadline, delay = time.monotonic() + self.timeout_seconds, 0.0005
            while not lock.acquire(blocking=False):  # never block the event loop: its tasks hold it too
                if time.monotonic() > deadline:
                    raise self._unavailable(operation, engagement_id, f"busy for {self.timeout_seconds}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.01)
        try:
            results: list[Result] | None = None
            while True:
                done, value = self._advance(operation, engagement_id, plan, results)
                if done:
                    return value
                try:
                    results = await self.store.abatch(value)
                except Exception as exc:
                    raise self._unavailable(operation, engagement_id, f"{type(exc).__name__}: {exc}") from exc
        finally:
            lock.release()

    @staticmethod
    def _since(since: int) -> int:
        if type(since) is not int or since < 0:
            raise ValueError(f"since must be a version (an integer >= 0), not {since!r}")
        return since

    # -- the journal -----------------------------------------------------------------------------------

    def open(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        """The engagement's record, created with ``meta`` if absent."""
        snapshot: Snapshot = self._run("open", engagement_id, self._open(engagement_id, meta))
        return snapshot

    def load(self, engagement_id: str) -> Snapshot | None:
        """The engagement's record, ``None`` if there is none."""
        snapshot: Snapshot | None = self._run("load", engagement_id, self._load(engagement_id))
        return snapshot

    def append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        """Append ``events`` (see :meth:`agentguard.record.Journal.append`; with ``gap``, ``missed`` is
        empty). Raises :class:`KeyError` when the engagement does not exist."""
        plan = self._append(engagement_id, self._since(since), list(events), total, exclusive)
        appended: Appended = self._run("append", engagement_id, plan)
        return appended

    def claim(self, engagement_id: str, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` once and for all (in this process; see the module's docstring)."""
        holder: str = self._run("claim", engagement_id, self._claim(engagement_id, key, owner))
        return holder

    async def aopen(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        """:meth:`open` through the store's ``abatch``."""
        snapshot: Snapshot = await self._arun("open", engagement_id, self._open(engagement_id, meta))
        return snapshot

    async def aload(self, engagement_id: str) -> Snapshot | None:
        """:meth:`load` through the store's ``abatch``."""
        snapshot: Snapshot | None = await self._arun("load", engagement_id, self._load(engagement_id))
        return snapshot

    async def aappend(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        """:meth:`append` through the store's ``abatch``."""
        plan = self._append(engagement_id, self._since(since), list(events), total, exclusive)
        appended: Appended = await self._arun("append", engagement_id, plan)
        return appended

    async def aclaim(self, engagement_id: str, key: str, owner: str) -> str:
        """:meth:`claim` through the store's ``abatch``."""
        holder: str = await self._arun("claim", engagement_id, self._claim(engagement_id, key, owner))
        return holder
