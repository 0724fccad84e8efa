"""The journal: how an Engagement record is shared by several processes through a store (Redis, a LangGraph
store), and survives a restart.

Every change to a shared record is an *event*, appended to the engagement's log in the store; a process
rebuilds the record by replaying the log, and keeps its copy current by applying the events other processes
appended since it last looked. Events are small JSON arrays, their first item the kind::

    ["b", token, name, kind, call_id, inputs, at]   a call began (recent / history / the loop detector)
    ["a", name]                                     an attempt refused before it became a call (loop detector)
    ["r", token, reason, attempted]                 the call was denied: take it back out
    ["c", token, outputs, status, error]            the call ended: completed, withheld or failed
    ["s", status, reason]                           the engagement stopped (short-circuit, guardrail, cancel, close)
    ["p", token, call_id, output, inputs]           the call paused in output review (its output kept for the resume,
                                                    the host's inputs of it, which a resumption must match)
    ["u", call_id]                                  the paused call was resumed: it must not be resumed again (and
                                                    the store scrubs the p's held output: see below)
    ["x"]                                           nothing (an event taken back before it was sent)

``token`` is a random name the call gets when it begins. Events point at their call by it, not by position,
so that an append whose answer was lost (a timeout: did it land?) can simply be sent again: a ``b`` event
seen twice is applied once. A store counts versions exactly however many old events it trims.

**Check and record at once.** A call's ``b`` event is appended *exclusively*: only if the log is still at the
version the checks saw. When another process got there first, nothing is appended, the events it missed come
back, and the pipeline applies them and checks the call again -- so two workers racing on one engagement can
never both pass a short-circuit or a count assertion. Every other event is appended at the end whatever came
before (it records what happened; there is nothing left to check), in the same round trip as the events it
missed.

**Sent again, counted once.** An append whose answer was lost may have landed; sent again -- alone, as a
prefix of what it held, or with newer events after it -- its ``b`` and ``r`` events would count in
``history._total`` twice (a ``b`` one too many, an ``r`` one too few: a count assertion would allow more
calls). A store therefore appends a call's ``b`` or ``r`` only if the events it holds after ``since`` (all
it keeps, after a gap) do not have it already, and takes each one it leaves out off the append's ``total``
(:func:`fresh_events`): the lost copy landed after the version the caller had seen, so that is where it is,
and the store keeps nothing more for it. Only a copy pushed out of the log before it was sent again
(``max_events`` events by others in between) counts again. The record does its share: events of its outbox
whose copy an answer shows in the log are not sent again from beyond it (see
:meth:`~agentguard.record.EngagementState.settle`).

**Behind a gap.** A process that missed more events than the store keeps must rebuild the record. A store
answers such an append with the record itself, read in the same atomic step as the append
(:attr:`Appended.reloaded`): a separate load would be a second round trip, in which the engagement could
expire and be opened anew, and the process would take that fresh record (its loop count restarted) for
the one it was behind in -- or the store would have to remember, per engagement, which life each gap was
found in until that load came. (A store that cannot answers ``gap=True`` and the caller loads the record:
then that window is the store's to close.)

**Held outputs do not outlive their review.** A ``p`` event holds the output of a call paused in review, so
that any process can resume it; once the call is resumed (its ``u`` event), nobody needs it, and whatever
the reviewer then decides -- refused, the output must not stay readable in the store for the engagement's
time to live. So a store that appends a ``u`` replaces every ``p`` event of that call id it still keeps by
``["x"]`` (nothing), in the same atomic step; :func:`held_outputs` names both kinds in an append's events.
Replaying the log is unchanged by it: the ``u`` takes the pause back out either way, and a ``u`` appended
without its ``p`` (which an earlier agentguard's store wrote, say) scrubs nothing.

**Refused for good.** A store may refuse an event it will never accept whatever is retried (larger than it
takes): it raises :class:`EventRefused` naming the events, having sent nothing. The record then replaces
them in its outbox (:meth:`~agentguard.record.EngagementState.refuse`) -- a call's ``b`` becomes its ``a``
(the attempt still counts for loop detection, the call does not), a ``c`` keeps the call's end without its
output -- and the step is denied whatever the store's ``on_failure``; later steps are appended as usual.
Left in the outbox, the event would be sent again, and refused again, by every later step of the
engagement in that process: one oversized tool output would deny them all.

A store implements :class:`Journal`: four methods, each with an ``a``-prefixed async twin, each one round
trip (a store that takes only so much in one says so: see :meth:`Journal.append`). A store that can send
a command without waiting for its answer also implements :class:`Pipelined`: then the events a guarded call
ends with are *posted* -- sent before its output is handed on, their answer read when the record next talks
to the store (the next call's begin, a refresh, a close) -- so that a call costs one round trip, not two.
Until that answer is read the posted events stay first in the outbox: an answer that never comes (the
connection dropped) fails the step that reads it, as a failed append would, and the events go again with
the next append (a re-sent event is applied once).

Values are encoded by :func:`encode_event` (JSON, with datetimes and bytes kept exactly); a store keeps the
strings as they are.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from agentguard.errors import StoreUnavailable

__all__ = [
    "Appended",
    "CommitBusy",
    "Event",
    "EventRefused",
    "Journal",
    "Pipelined",
    "Posted",
    "Snapshot",
    "decode_event",
    "encode_event",
    "fresh_events",
    "held_outputs",
    "tag",
    "untag",
]

Event = list[Any]
"""One change to a shared record (see the module's table)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a store holds of one engagement.

    ``events`` are the newest events it keeps, oldest first: versions ``version - len(events) + 1`` to
    ``version``. ``total`` is the number of calls ever invoked (``history._total``), exact however many
    events were trimmed.
    """

    meta: Mapping[str, Any]
    version: int
    total: int
    events: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Appended:
    """The answer to :meth:`Journal.append`.

    ``ok`` is false only for an exclusive append that found the log moved on: then nothing was appended.
    ``missed`` are the events others appended after ``since`` and before ours (all of them when not ``ok``),
    oldest first. When some of them were already trimmed, a partial list is of no use: the store answers
    with the whole record instead, read in the same atomic step (``reloaded``, at ``version``; ``missed``
    is then empty), and the caller rebuilds its copy from it -- or, a store that cannot, with ``gap``: the
    caller must load the record itself (see the module's docstring). ``version`` and ``total`` are the
    log's after the append (or now, when not ``ok``).
    """

    ok: bool
    version: int
    total: int
    missed: Sequence[str] = field(default_factory=tuple)
    gap: bool = False
    reloaded: Snapshot | None = None


class EventRefused(StoreUnavailable):
    """The store refused events it will never accept (too large), and sent nothing: sending them again is
    of no use. ``positions`` are their indices in the events given to the append (or post) that raised.

    Distinct from a store that cannot answer now, whose events go again with the next append: these are
    taken out of the record's outbox (see the module's docstring), or they would refuse every later step."""

    def __init__(self, message: str, positions: Sequence[int]) -> None:
        super().__init__(message)
        self.positions = tuple(positions)


class CommitBusy(StoreUnavailable):
    """This process could not take the engagement's commit lock within its bound: another commit of the same
    engagement (a thread's ``call``, a loop's ``acall``) held it, or a sync commit was made on the event loop's
    thread while an async one waits there; or the answer to an append another event loop posted cannot be
    read here. The store was not asked, so ``on_failure: allow`` does not apply: the step is denied (carrying
    on would run a call its compare-and-set never checked)."""


@runtime_checkable
class Journal(Protocol):
    """Where shared Engagement records live. Every method is one round trip; each raises
    :class:`~agentguard.errors.StoreUnavailable` when the store cannot be reached or answer in time.

    ``on_failure`` is what the pipeline does then: ``"deny"`` (the default) refuses the step (a recorded
    denial); ``"allow"`` carries on with the process's own copy, records a warning, and sends what the
    store missed with the next append that gets through.
    """

    on_failure: Literal["deny", "allow"]

    def open(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot:
        """The engagement's record, created with ``meta`` if it does not exist yet (``meta`` is kept only
        then). Refreshes the engagement's time to live."""
        ...

    def load(self, engagement_id: str) -> Snapshot | None:
        """The engagement's record, ``None`` if there is none (never created, or expired). The pipeline
        loads only after an append that answered ``gap`` (see :class:`Appended`)."""
        ...

    def append(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended:
        """Append ``events`` (encoded) atomically: all or none. ``since`` is the version the caller has seen;
        ``total`` how much the events change ``history._total`` by. With ``exclusive``, append only if the
        log is still at ``since``. A ``u`` event scrubs the ``p`` events of its call id (see the module's
        docstring). A call's ``b`` or ``r`` the log holds after ``since`` already is a copy of an append
        whose answer was lost: a store leaves it out, with its change to ``total``
        (:func:`fresh_events`), or counts it again. Raises :class:`KeyError` when the engagement does not
        exist (expired).

        A store that takes only so much in one round trip says so with the attributes ``max_append_bytes``
        (of encoded events) and ``max_append_events``, and may refuse a larger append (sending nothing).
        The pipeline then appends a larger outbox as several appends, each a prefix of it within them
        (:meth:`~agentguard.record.EngagementState.batch`, whose ``total`` is that prefix's alone) and settled
        on its own: those before the first call still to be checked non-exclusively, the rest -- the new
        call's begin -- in one exclusive append, or the calls are checked again when that rest is more than
        one round trip or the engagement changed meanwhile. A store never splits an append itself: its
        parts could not be one compare-and-set."""
        ...

    def claim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str:
        """Claim ``key`` for ``owner`` once and for all; returns the owner that holds it (``owner`` when this
        call won). For what must happen exactly once across processes: resuming a paused review. ``since``
        is the version the caller holds: as :meth:`append`, raises :class:`KeyError` when the engagement
        does not exist, or is not the one that version is of (it expired and was opened anew: a claim won
        in the new record's empty claims would resume a review the earlier one already resumed)."""
        ...

    async def aopen(self, engagement_id: str, meta: Mapping[str, Any]) -> Snapshot: ...

    async def aload(self, engagement_id: str) -> Snapshot | None: ...

    async def aappend(
        self, engagement_id: str, since: int, events: Sequence[str], total: int, *, exclusive: bool
    ) -> Appended: ...

    async def aclaim(self, engagement_id: str, key: str, owner: str, *, since: int) -> str: ...


class Posted(Protocol):
    """A non-exclusive append that was sent and whose answer is read later (see :class:`Pipelined`)."""

    def result(self) -> Appended:
        """The store's answer (read once, then kept); raises what :meth:`Journal.append` raises, and
        :class:`~agentguard.errors.StoreUnavailable` when the answer cannot be read here (it was posted from
        an event loop)."""
        ...

    async def aresult(self) -> Appended:
        """:meth:`result` without blocking the event loop."""
        ...


@runtime_checkable
class Pipelined(Journal, Protocol):
    """A journal that can send a non-exclusive append and read its answer later, so that the events a call
    ends with do not cost a round trip of their own. The store must keep the order of a process's commands
    per engagement: any later method for the same engagement reads the posted answer first."""

    def post(self, engagement_id: str, since: int, events: Sequence[str], total: int) -> Posted:
        """Send ``append(engagement_id, since, events, total, exclusive=False)`` without waiting for its
        answer. Raises :class:`~agentguard.errors.StoreUnavailable` when it cannot even be sent -- then the
        caller treats it as a failed append."""
        ...

    async def apost(self, engagement_id: str, since: int, events: Sequence[str], total: int) -> Posted:
        """:meth:`post` with the async client."""
        ...


# -- encoding -----------------------------------------------------------------------------------------
# JSON, except that the record's values may hold datetimes and bytes (agentguard.record.to_plain keeps
# them): those become one-key objects whose key starts with NUL, and a value's own object with such a key is
# wrapped, so that no tool input or output can pass itself off as a datetime on another worker.

_DATETIME = "\x00t"
_BYTES = "\x00b"
_ESCAPED = "\x00o"


def tag(value: Any) -> Any:
    """``value`` as plain JSON (datetimes and bytes tagged; see above); :func:`untag` undoes it."""
    kind = type(value)
    if kind is dict:
        out = {key: tag(item) for key, item in value.items()}
        if any(type(key) is str and key[:1] == "\x00" for key in value):
            return {_ESCAPED: out}
        return out
    if kind is list or kind is tuple:
        return [tag(item) for item in value]
    if isinstance(value, datetime):
        return {_DATETIME: value.isoformat()}
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    return value


def untag(value: Any) -> Any:
    """The value :func:`tag` was given."""
    kind = type(value)
    if kind is list:
        return [untag(item) for item in value]
    if kind is not dict:
        return value
    if len(value) == 1:
        ((key, item),) = value.items()
        if key == _DATETIME and type(item) is str:
            return datetime.fromisoformat(item)
        if key == _BYTES and type(item) is str:
            return base64.b64decode(item)
        if key == _ESCAPED and type(item) is dict:
            return {k: untag(v) for k, v in item.items()}
    return {k: untag(v) for k, v in value.items()}


def _untaggable(value: Any) -> Any:
    if isinstance(value, datetime | bytes):
        return tag(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_event(event: Event) -> str:
    """The event as the store keeps it: compact JSON, ASCII only (a lone surrogate in a tool's output is kept
    as its escape, not refused by the store's UTF-8); ``NaN`` and infinities are refused, as AOS does.

    Encoded directly first (copying the event through :func:`tag` costs more than the encoding); when the
    text shows a NUL at the start of a string -- a datetime or bytes, a key to escape, or only a value that
    starts with NUL -- it is encoded again through :func:`tag`, which tells them apart.
    """
    text = json.dumps(event, separators=(",", ":"), allow_nan=False, default=_untaggable)
    if '"\\u0000' in text:
        return json.dumps(tag(event), separators=(",", ":"), allow_nan=False)
    return text


_CALL_EVENT = re.compile(r'\["[br]","[^"\\]*",')
"""How :func:`encode_event` starts a ``b`` or an ``r`` event: its kind and its call's token, which name it
(a call begins once and is taken back at most once). The Lua of :class:`~agentguard.stores.RedisStore`
matches the same prefix."""


def call_event(text: str) -> str | None:
    """The name of a ``b`` or ``r`` event (encoded): its kind and token, as the encoded text starts; ``None``
    for any other event. One anchored match, whatever the event's size."""
    match = _CALL_EVENT.match(text)
    return match.group(0) if match is not None else None


def fresh_events(events: Sequence[str], logged: Iterable[str], total: int) -> tuple[list[str], int]:
    """What a store appends of ``events`` (encoded) and the change to ``history._total`` it counts (``total``:
    the caller's, for all of them), given the events the log holds after the caller's ``since`` (``logged``).

    A ``b`` or ``r`` the log holds already is a copy of an append whose answer was lost (see the module's
    docstring): it is left out, and so is its change (a ``b`` counted +1 in ``total``, an ``r`` -1). So is a
    second one in ``events`` itself. Everything else is appended as it is (it names no call, or may come
    twice: a call's ``c`` is sent again when its output was refused)."""
    seen = {name for name in map(call_event, logged) if name is not None}
    kept: list[str] = []
    for text in events:
        name = call_event(text)
        if name is not None:
            if name in seen:
                total -= 1 if name[2] == "b" else -1
                continue
            seen.add(name)
        kept.append(text)
    return kept, total


_HELD_KINDS = ('["p",', '["u",')
"""How :func:`encode_event` starts a ``p`` (an output held for a paused review) and a ``u`` (its release)."""


def held_outputs(events: Sequence[str]) -> list[tuple[int, str, bool]]:
    """``(index, call id, held)`` for each event of ``events`` (encoded) that holds a paused review's output
    (a ``p``: ``held`` true) or ends that review (a ``u``: false), in order: what a store needs to scrub the
    held output once the review was resumed (see the module's docstring). One string test per event; only
    those two kinds are decoded (a malformed one is left out: it holds or scrubs nothing)."""
    found: list[tuple[int, str, bool]] = []
    for index, text in enumerate(events):
        if text.startswith(_HELD_KINDS):
            try:
                event = decode_event(text)
            except ValueError:
                continue
            held = event[0] == "p"
            if held and len(event) in (4, 5) and type(event[2]) is str:
                found.append((index, event[2], True))
            elif not held and len(event) == 2 and type(event[1]) is str:
                found.append((index, event[1], False))
    return found


def decode_event(text: str | bytes) -> Event:
    """An event as :func:`encode_event` wrote it. Raises :class:`ValueError` on anything else (also on one
    nested too deep to decode, which another program may have written: a :class:`RecursionError` would
    escape the store's failure handling)."""
    try:
        event = untag(json.loads(text))
    except RecursionError:  # nested deeper than Python recurses: not what encode_event writes for a record
        raise ValueError(f"not a journal event (nested too deep): {str(text)[:80]!r}") from None
    if type(event) is not list or not event or type(event[0]) is not str:
        raise ValueError(f"not a journal event: {str(text)[:80]!r}")
    return event
