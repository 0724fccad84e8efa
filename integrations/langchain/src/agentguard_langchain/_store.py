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

    (prefix, <id>)            "meta"              {"meta": ["meta", meta] encoded, "life": life,
                                                   "version": n, "total": n, "held": {call id: [n]}}
    (prefix, <id>, "log")     "0000000000000042"  {"e": event, "l": life}   one item per kept event, keyed by n
    (prefix, <id>, "claims")  <key, encoded>      {"owner": owner, "l": life}

The count ``n`` is kept in the meta item, so it stays exact however many old events were trimmed (the log
keeps the newest ``max_events``: each append deletes the items that fall out); ``total`` likewise. Items are
written with ``index=False``: a store configured for semantic search does not embed them.

An append leaves out a call's ``b`` or ``r`` the log holds after ``since`` already (a copy of an append
whose answer was lost, sent again), with its change to ``total``
(:func:`agentguard.record.fresh_events`): ``history._total`` counts each call once.

``held`` (absent when empty) counts, by call id, the kept ``p`` events: each holds the output of a call
paused in review. The append that carries the call's ``u`` (it was resumed) overwrites them with ``["x"]``
(nothing) and drops the id, so that the output -- which the reviewer may then refuse -- does not stay in
the store (see :class:`agentguard.record.Journal`); replaying the log is the same either way.

**Lives.** An engagement whose items expired (or were deleted) and whose id is opened again is a new *life*
of it, as in :class:`agentguard.stores.RedisStore`: ``life`` is a random number (1 to 10**15) written when the
meta is created, and every version this journal answers with is ``life * 10**15 + n``. A worker still
holding the earlier life appends with a version of it: the append compares the life with the meta's (in
the same locked step as its write) and answers "no such engagement" (:class:`KeyError`, which the pipeline
turns into a recorded denial), so the call does not run, and the worker neither merges its events into the
new record nor reloads it as its own (its loop count restarted). An append that finds a gap (the caller
missed more than the log keeps) answers with the record, read under the same lock, rather than leave the
caller to load it later, when it might be another life's; nothing is kept per engagement. Each event and
claim item carries its life: an event of another life where this life's should be (an earlier life's
writer racing the new one, see below) is not a journal's item, and a claim an earlier life left is free
again. A claim, like an append, is refused (:class:`KeyError`) when the meta is missing or of another life
than the caller's version: a worker of the earlier life would otherwise win a claim in the new life's
empty claims, and resume a review the earlier one already resumed. Metas written before lives
existed (no ``life``) are refused as not a journal's: give an upgraded deployment a new ``prefix``.

**Sizes.** An event (or the meta) larger than ``max_event_bytes`` (8 MiB) is not written: it would sit in
the store and be read by every worker that opens the engagement. An append's are refused for good
(:class:`~agentguard.record.EventRefused`, naming them; nothing is sent): a call whose inputs are that large
is denied, one whose output is, withheld, and the record's later steps go on.

**Round trips.** A ``BaseStore`` answers ``batch`` of gets, searches and puts, and nothing else: there is no
compare-and-set and no transaction across a read and a write. So ``load`` and ``open`` are two round trips
(the meta, then the kept events; ``open`` creating an engagement is three: the meta, the claims an earlier
engagement of the same id left, then the new meta with those claims deleted); ``append`` is one read (the
meta and the first few events after ``since``), a second only when more were missed, then one write (the
new events and scrubbed held outputs, then the meta, then the trimmed events' deletions, in that order in
one ``batch``), and after a gap one more read (the kept events, for the answer's record); ``claim`` is
a read (the meta and the key), then a write when the key is free.

**What is atomic, and where.** Every method holds a lock of this process from its first read to its last
write (one of 64 striped locks, chosen by the engagement's prefix and id, shared by every GraphStore of the
process). So in one process -- its threads and its event loop's tasks, through any number of GraphStores
over the same store -- a check and its write have nothing in between: the exclusive append is a
compare-and-set, and a claim is won exactly once. With ``InMemoryStore``, which exists in one process only,
that is everything.

Across processes sharing a ``PostgresStore`` (or any other store), nothing makes two writers of one
engagement wait for each other: two appends at the same version would both succeed and one event would
overwrite the other. Likewise for lives: a worker of the earlier life that read the meta just before it
expired and writes just after a new life was created overwrites the new meta with its own life (then the
new life's workers are refused: "no such engagement") and the new life's events of the same counts (then
whoever reads them finds an event of another life: not a journal's item); and two processes creating the
same engagement at once each write a life, the later one wins, and the other's first append is refused.
Each race ends in a refusal, never in two lives merged, but the refusal may fall on the wrong worker.

What holds there is LangGraph's own rule: **one run per thread at a time** (LangGraph Platform's multitask
strategies ``reject`` and ``enqueue``), and the adapter's engagement is the thread.
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
:class:`KeyError`); opening it again starts a new life (see above) and deletes the claims the old one left.

**Failures.** Any exception of the store, and an item that is not the journal's (something else wrote the
namespace), becomes :class:`~agentguard.StoreUnavailable`, naming the store's class and the operation; so
does waiting more than ``timeout_seconds`` for the lock or for one batch's answer (a sync batch runs in a
worker thread so that it can be waited for; a batch that overruns, or whose caller is cancelled, keeps the
engagement's lock until it ends -- it may still write, and nothing else of the engagement may run in
between -- so the engagement's next steps are refused as busy meanwhile), and an event larger than
``max_event_bytes``.
:class:`KeyError` (no such engagement, or another life of it) is the only other exception, and only from
``append`` and ``claim``. ``on_failure`` (``"deny"`` by default, or ``"allow"``) is read by
the pipeline, as for every journal.

The async twins use the store's ``abatch`` (an ``AsyncPostgresStore`` answers only those: use the async
graph API with it), and wait for the lock without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from agentguard import StoreUnavailable
from agentguard.record import (
    Appended,
    EventRefused,
    Snapshot,
    decode_event,
    encode_event,
    fresh_events,
    held_outputs,
)
from agentguard_langchain._host import BaseStore, GetOp, Op, PutOp, Result, SearchOp

__all__ = ["GraphStore"]

_LOCKS = tuple(threading.Lock() for _ in range(64))
"""The process's striped locks: one engagement is always under the same one, whichever GraphStore asks."""

_AHEAD = 8
"""How many events after ``since`` an append reads with the meta, in its first round trip."""

_CLAIMS_PER_OPEN = 10_000
"""At most this many claims an earlier engagement of the same id left are deleted when it is opened anew."""

_LIFE = 10**15
"""A version is ``life * _LIFE + n``: the engagement's ``n``-th event in the life that ``life`` names."""

_Plan = Generator[list[Op], list[Any], Any]
"""One method's work: yields the batches it sends, gets their results back (``Item | None`` for a get, a
list of items for a search), returns the answer."""


class _Refused(Exception):
    """Why a plan stops: the driver raises :class:`~agentguard.StoreUnavailable` with ``why`` and the text."""

    why = "refused"


class _NotOurs(_Refused):
    """An item that is not what the journal writes."""

    why = "not a journal's item"


class _TooLarge(_Refused):
    """An event (or meta) larger than ``max_event_bytes``: it is not written."""


_BATCHES = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="agentguard-graph-store")
"""Where sync batches run, so that one can be waited for at most ``timeout_seconds`` (a store that hangs
fills at most these threads; further batches queue, and their callers give up in time)."""


def _releasing(lock: threading.Lock) -> Callable[[Any], None]:
    """A done-callback that releases ``lock`` when a batch that overran ends (its error, if any, was the
    caller's to see, and the caller has gone)."""

    def release(done: Any) -> None:
        if not done.cancelled():
            done.exception()  # retrieved: an async task's error is not reported as never retrieved
        lock.release()

    return release


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
        max_event_bytes: int = 8 * 1024 * 1024,
        timeout_seconds: float = 5.0,
        on_failure: Literal["deny", "allow"] = "deny",
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(f"GraphStore needs a langgraph BaseStore, not {type(store).__name__}")
        if on_failure not in ("deny", "allow"):
            raise ValueError(f"on_failure must be 'deny' or 'allow', not {on_failure!r}")
        if type(max_events) is not int or max_events < 1:
            raise ValueError(f"max_events must be an integer of at least 1, not {max_events!r}")
        if type(max_event_bytes) is not int or max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be an integer of at least 1, not {max_event_bytes!r}")
        if not 0 < timeout_seconds < math.inf:  # an infinite wait is no bound (and the lock refuses it)
            raise ValueError(f"timeout_seconds must be positive and finite, not {timeout_seconds!r}")
        if not prefix or "." in prefix or "\x00" in prefix or prefix == "langgraph":
            raise ValueError(
                f"prefix must be a namespace label (not empty, no '.', not 'langgraph'): {prefix!r}"
            )
        self.store = store
        self.prefix = prefix
        self.max_events = max_events
        self.max_event_bytes = max_event_bytes
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

    @staticmethod
    def _meta(item: object) -> tuple[str, int, int, int]:
        """The meta item's encoded meta, life, count of events and total (checked, not decoded)."""
        value = getattr(item, "value", None)
        if not isinstance(value, Mapping):
            raise _NotOurs(f"not an engagement's meta item: {item!r:.80}")
        encoded, life, count, total = (value.get(k) for k in ("meta", "life", "version", "total"))
        if (
            type(encoded) is not str
            or type(life) is not int
            or not 1 <= life <= _LIFE
            or type(count) is not int
            or not 0 <= count < _LIFE
            or type(total) is not int
        ):
            raise _NotOurs(f"not an engagement's meta: {dict(value)!r:.80}")
        return encoded, life, count, total

    @staticmethod
    def _held(item: object) -> dict[str, list[int]]:
        """The meta item's held outputs: call id -> the counts of the ``p`` events that hold its output (see
        :meth:`_append`); none when the meta has no such field."""
        value = getattr(item, "value", None)
        held = value.get("held") if isinstance(value, Mapping) else None
        if held is None:
            return {}
        if not isinstance(held, Mapping) or not all(
            type(call_id) is str and isinstance(counts, list) and all(type(n) is int for n in counts)
            for call_id, counts in held.items()
        ):
            raise _NotOurs(f"not an engagement's held outputs: {held!r:.80}")
        return {call_id: list(counts) for call_id, counts in held.items()}

    @staticmethod
    def _body(encoded: str) -> dict[str, Any]:
        try:
            body = decode_event(encoded)
        except ValueError as exc:
            raise _NotOurs(str(exc)) from exc
        if len(body) != 2 or body[0] != "meta" or type(body[1]) is not dict:
            raise _NotOurs(f"not an engagement's meta: {encoded!r:.80}")
        return body[1]

    @staticmethod
    def _event(item: object, life: int) -> str | None:
        """The event an item of the log holds, ``None`` for no item; an item that is not an event of this
        life (another life's writer overwrote this one's, see the module's docstring) is not the journal's."""
        if item is None:
            return None
        value = getattr(item, "value", None)
        event, its_life = (value.get("e"), value.get("l")) if isinstance(value, Mapping) else (None, None)
        if type(event) is not str or type(its_life) is not int:
            raise _NotOurs(f"not a journal event item: {item!r:.80}")
        if its_life != life:
            raise _NotOurs(f"an event of another life of the engagement: {item!r:.80}")
        return event

    def _events(
        self, log: tuple[str, ...], life: int, first: int, last: int, known: Mapping[int, str] | None = None
    ) -> _Plan:
        """The kept events ``first`` to ``last`` of ``life``: the unbroken run that ends at ``last`` (older
        ones missing count as trimmed; the newest missing is not a journal). ``known``: events by count that
        this plan has just written, not read again."""
        if last < first:
            return []
        known = known or {}
        wanted = [n for n in range(first, last + 1) if n not in known]
        results = (yield [GetOp(log, _event_key(n)) for n in wanted]) if wanted else []
        read = dict(zip(wanted, results, strict=True))
        events: list[str] = []
        for n in range(last, first - 1, -1):
            event = known[n] if n in known else self._event(read[n], life)
            if event is None:
                break
            events.append(event)
        if not events:
            raise _NotOurs(f"the newest event ({last}) is missing")
        events.reverse()
        return events

    def _snapshot(self, namespaces: tuple[tuple[str, ...], ...], item: object) -> _Plan:
        encoded, life, count, total = self._meta(item)
        meta = self._body(encoded)
        first = max(1, count - self.max_events + 1)
        events = yield from self._events(namespaces[1], life, first, count)
        return Snapshot(meta=meta, version=life * _LIFE + count, total=total, events=events)

    def _reloaded(
        self, log: tuple[str, ...], meta: str, life: int, version: int, total: int, new: Mapping[int, str]
    ) -> _Plan:
        """The record after an append that found a gap, read under the same lock as the append (see the
        module's docstring): the kept events up to ``version``, and ``new`` (this append's writes by count:
        its events, and the ``["x"]`` of the held outputs it scrubbed)."""
        last = max((version, *new))
        events = yield from self._events(log, life, max(1, last - self.max_events + 1), last, new)
        return Snapshot(meta=self._body(meta), version=life * _LIFE + last, total=total, events=events)

    def _open(self, engagement_id: str, meta: Mapping[str, Any]) -> _Plan:
        namespaces = self._namespaces(engagement_id)
        base, _, claims = namespaces
        encoded = self._bounded(encode_event(["meta", dict(meta)]))
        (item,) = yield [GetOp(base, "meta")]
        if item is not None:
            return (yield from self._snapshot(namespaces, item))
        (left,) = yield [SearchOp(claims, limit=_CLAIMS_PER_OPEN)]
        life = secrets.randbelow(_LIFE) + 1
        new = {"meta": encoded, "life": life, "version": 0, "total": 0}
        writes: list[Op] = [PutOp(base, "meta", new, index=False)]
        writes += [PutOp(claims, old.key, None) for old in left or ()]  # free anyway (another life's)
        yield writes
        return Snapshot(meta=self._body(encoded), version=life * _LIFE, total=0, events=[])

    def _load(self, engagement_id: str) -> _Plan:
        namespaces = self._namespaces(engagement_id)
        (item,) = yield [GetOp(namespaces[0], "meta")]
        if item is None:
            return None
        return (yield from self._snapshot(namespaces, item))

    @staticmethod
    def _holding(
        held: dict[str, list[int]], events: Sequence[str], version: int, oldest: int
    ) -> tuple[dict[str, list[int]], list[int]]:
        """The held outputs after appending ``events`` at ``version`` (see :meth:`_held`; only those still
        kept from ``oldest`` on), and the counts of the ``p`` events to scrub: those of each call id whose
        review a ``u`` among ``events`` resumed (see :class:`agentguard.record.Journal`)."""
        scrubbed: list[int] = []
        for index, call_id, holds in held_outputs(events):
            if holds:
                held.setdefault(call_id, []).append(version + 1 + index)
            else:
                scrubbed += held.pop(call_id, ())
        kept = {call_id: [n for n in counts if n >= oldest] for call_id, counts in held.items()}
        return {call_id: counts for call_id, counts in kept.items() if counts}, [
            n for n in scrubbed if n >= oldest
        ]

    def _append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, exclusive: bool
    ) -> _Plan:
        base, log, _ = self._namespaces(engagement_id)
        life, since = divmod(since, _LIFE)
        ahead = [GetOp(log, _event_key(n)) for n in range(since + 1, since + 1 + _AHEAD)]
        item, *read = yield [GetOp(base, "meta"), *ahead]
        if item is None:
            raise KeyError(engagement_id)
        meta, its_life, version, now = self._meta(item)
        if its_life != life:  # an earlier (or unknown) life: that engagement does not exist any more
            raise KeyError(engagement_id)
        kept_first = max(1, version - self.max_events + 1)
        gap = since > version or since < kept_first - 1
        missed: list[str] = []
        if not gap and since < version:
            if version > since + _AHEAD:
                read += yield [GetOp(log, _event_key(v)) for v in range(since + 1 + _AHEAD, version + 1)]
            found = [self._event(got, life) for got in read[: version - since]]
            if None in found:  # expired in the store: as good as trimmed
                gap = True
            else:
                missed = [event for event in found if event is not None]
        if exclusive and since != version:
            if gap:  # the record as it is, read under the same lock: nothing is kept for a load to follow
                reloaded = yield from self._reloaded(log, meta, life, version, now, {})
                return Appended(ok=False, version=reloaded.version, total=now, reloaded=reloaded)
            return Appended(ok=False, version=life * _LIFE + version, total=now, missed=missed)
        # A call's b or r the log holds after since is a copy of an append whose answer was lost: appended and
        # counted once (agentguard.record.fresh_events). After a gap, that is all the log keeps: read before
        # the write rather than after it for the answer's record, so no round trip is added.
        logged: dict[int, str] = {}
        if gap and events and version:
            kept = range(kept_first, version + 1)
            items = yield [GetOp(log, _event_key(n)) for n in kept]
            for n, got in zip(kept, items, strict=True):
                event = self._event(got, life)  # one missing is judged by the answer's read, as before
                if event is not None:
                    logged[n] = event
        events, total = fresh_events(events, logged.values() if gap else missed, int(total))
        new_version, new_total = version + len(events), now + total
        written: dict[int, str] = {}
        if events or total:
            oldest = new_version - self.max_events + 1  # the oldest version kept after this append
            written = {n: events[n - version - 1] for n in range(max(version + 1, oldest), new_version + 1)}
            held, scrubbed = self._holding(self._held(item), events, version, oldest)
            # A resumed review's output goes from the log (see agentguard.record.Journal).
            written.update((n, '["x"]') for n in scrubbed if n >= kept_first)
            writes: list[Op] = [
                PutOp(log, _event_key(n), {"e": event, "l": life}, index=False)
                for n, event in written.items()
            ]
            new: dict[str, Any] = {"meta": meta, "life": life, "version": new_version, "total": new_total}
            if held:
                new["held"] = held
            writes.append(PutOp(base, "meta", new, index=False))
            writes += [PutOp(log, _event_key(v), None) for v in range(kept_first, min(version + 1, oldest))]
            yield writes
        if gap:
            reloaded = yield from self._reloaded(log, meta, life, version, new_total, {**logged, **written})
            return Appended(ok=True, version=reloaded.version, total=new_total, reloaded=reloaded)
        return Appended(ok=True, version=life * _LIFE + new_version, total=new_total, missed=missed)

    def _claim(self, engagement_id: str, key: str, owner: str, since: int) -> _Plan:
        base, _, claims = self._namespaces(engagement_id)
        meta, item = yield [GetOp(base, "meta"), GetOp(claims, _tag(key))]
        life = since // _LIFE
        if meta is None or self._meta(meta)[1] != life:  # as for an append: no such engagement
            raise KeyError(engagement_id)
        if item is not None:
            value = item.value
            holder, its_life = (value.get("owner"), value.get("l")) if isinstance(value, Mapping) else (0, 0)
            if type(holder) is not str or type(its_life) is not int:
                raise _NotOurs(f"not a claim: {item!r:.80}")
            if its_life == life:
                return holder
        yield [PutOp(claims, _tag(key), {"owner": owner, "l": life}, index=False)]
        return owner

    # -- the drivers -----------------------------------------------------------------------------------

    def _lock(self, engagement_id: str) -> threading.Lock:
        return _LOCKS[hash((self.prefix, engagement_id)) % len(_LOCKS)]

    def _says(self, operation: str, engagement_id: str, why: str) -> str:
        return (
            f"LangGraph store {type(self.store).__name__}: {operation} of engagement {engagement_id!r:.80} "
            f"failed: {why}"
        )

    def _unavailable(self, operation: str, engagement_id: str, why: str) -> StoreUnavailable:
        return StoreUnavailable(self._says(operation, engagement_id, why))

    def _advance(
        self, operation: str, engagement_id: str, plan: _Plan, results: list[Result] | None
    ) -> tuple[bool, Any]:
        """The plan's next batch of operations (``False``, ops), or its answer (``True``, answer)."""
        try:
            return False, (plan.send(results) if results is not None else next(plan))
        except StopIteration as done:
            return True, done.value
        except _Refused as exc:
            raise self._unavailable(operation, engagement_id, f"{exc.why}: {exc}") from exc

    def _late(self, operation: str, engagement_id: str) -> StoreUnavailable:
        return self._unavailable(
            operation,
            engagement_id,
            f"no answer within {self.timeout_seconds}s (the engagement stays busy until the store answers)",
        )

    def _run(self, operation: str, engagement_id: str, plan: _Plan) -> Any:
        """Run ``plan`` under the engagement's lock, each batch in a worker thread waited for at most
        ``timeout_seconds``. A batch that overruns keeps the lock until it ends (it may still write: nothing
        else of the engagement may run in between), and the caller gets :class:`StoreUnavailable` now."""
        lock = self._lock(engagement_id)
        if not lock.acquire(timeout=self.timeout_seconds):
            raise self._unavailable(operation, engagement_id, f"busy for {self.timeout_seconds}s")
        held = True
        try:
            results: list[Result] | None = None
            while True:
                done, value = self._advance(operation, engagement_id, plan, results)
                if done:
                    return value
                future = _BATCHES.submit(self.store.batch, value)
                try:
                    results = future.result(timeout=self.timeout_seconds)
                except Exception as exc:
                    if not future.done():
                        held = False
                        future.add_done_callback(_releasing(lock))
                        raise self._late(operation, engagement_id) from None
                    raise self._unavailable(operation, engagement_id, f"{type(exc).__name__}: {exc}") from exc
        finally:
            if held:
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
        held = True
        try:
            results: list[Result] | None = None
            while True:
                done, value = self._advance(operation, engagement_id, plan, results)
                if done:
                    return value
                task = asyncio.ensure_future(self.store.abatch(value))
                try:
                    await asyncio.wait({task}, timeout=self.timeout_seconds)
                finally:  # overran, or the caller was cancelled: the batch goes on, and keeps the lock
                    if not task.done():
                        held = False
                        task.add_done_callback(_releasing(lock))
                if not task.done():
                    raise self._late(operation, engagement_id)
                try:
                    results = task.result()
                except Exception as exc:
                    raise self._unavailable(operation, engagement_id, f"{type(exc).__name__}: {exc}") from exc
        finally:
            if held:
                lock.release()

    @staticmethod
    def _size(event: str) -> int:
        return len(event) if event.isascii() else len(event.encode("utf-8", "surrogatepass"))

    def _too_large(self, size: int) -> str:
        return f"an event of {size} bytes is larger than max_event_bytes ({self.max_event_bytes})"

    def _bounded(self, event: str) -> str:
        """The meta ``event``, unless it is larger than ``max_event_bytes`` (see the module's docstring)."""
        size = self._size(event)
        if size > self.max_event_bytes:
            raise _TooLarge(self._too_large(size))
        return event

    def _events_bounded(self, engagement_id: str, events: Sequence[str]) -> list[str]:
        """``events`` as a list, unless some are larger than ``max_event_bytes``: then nothing is sent and they
        are refused for good (:class:`~agentguard.record.EventRefused`, naming them)."""
        sizes = [self._size(event) for event in events]
        refused = [index for index, size in enumerate(sizes) if size > self.max_event_bytes]
        if refused:
            why = f"refused: {self._too_large(max(sizes[index] for index in refused))}"
            raise EventRefused(self._says("append", engagement_id, why), refused)
        return list(events)

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
        plan = self._append(
            engagement_id, self._since(since), self._events_bounded(engagement_id, events), total, exclusive
        )
        appended: Appended = self._run("append", engagement_id, plan)
        return appended

    def claim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        """Claim ``key`` for ``owner`` once and for all (in this process; see the module's docstring). Raises
        :class:`KeyError` when the engagement does not exist, or is of another life than ``since``."""
        plan = self._claim(engagement_id, key, owner, self._since(since))
        holder: str = self._run("claim", engagement_id, plan)
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
        plan = self._append(
            engagement_id, self._since(since), self._events_bounded(engagement_id, events), total, exclusive
        )
        appended: Appended = await self._arun("append", engagement_id, plan)
        return appended

    async def aclaim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        """:meth:`claim` through the store's ``abatch``."""
        plan = self._claim(engagement_id, key, owner, self._since(since))
        holder: str = await self._arun("claim", engagement_id, plan)
        return holder
