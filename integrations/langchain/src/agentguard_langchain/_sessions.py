"""Engagements kept per conversation thread, bounded, and the adapter-side bookkeeping that goes with each.

One LangGraph thread (``configurable.thread_id``) is one conversation, hence one agentguard Engagement: its
id is the thread id, so the AOS session id and the LangSmith/LangGraph thread line up. The engagement
outlives a single ``invoke`` (a thread's turns accumulate in one Engagement record) unless the spec says
``retain_memory: false``; then each invocation opens a fresh one. The adapter keeps at most ``limit``
engagements in memory: the oldest are closed beyond it, or, when the Guard keeps them in a store shared by
several workers, only released (closing one would stop it for every worker; the next run continues it from
the store).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from agentguard import ConfigurationError, Engagement, GuardrailViolation, Phase, User
from agentguard.record import ValueLimits, unfaithful
from agentguard.runs import Cancel
from agentguard_langchain._content import canonical_json, field_values, input_text, snapshot
from agentguard_langchain._host import BaseMessage, RunnableConfig, ToolMessage

__all__ = [
    "DIGEST_VERSION",
    "Checked",
    "EngagementKey",
    "HeldResult",
    "Session",
    "Sessions",
    "Unreadable",
    "UserResolver",
    "aclose_quietly",
    "checked_as",
    "checked_limits",
    "close_quietly",
    "digest",
    "known_as",
    "read_input",
    "read_text",
    "thread_of",
    "unchanged",
    "unread",
    "user_from_context",
]

log = logging.getLogger("agentguard_langchain")

EngagementKey: TypeAlias = Callable[[RunnableConfig], "str | None"]
"""Which conversation a run belongs to, from its runnable config (default: ``configurable.thread_id``)."""

UserResolver: TypeAlias = Callable[[object], "User | None"]
"""Who the engagement acts for, from the run's ``context`` (default: :func:`user_from_context`)."""


class Checked(NamedTuple):
    """What :attr:`Session.checked` knows of a message (:func:`checked_as`): everything of it a model may be
    sent, as it was when the guardrail checked it or a guarded run produced it."""

    kind: type[BaseMessage]
    values: Callable[[BaseMessage], tuple[Any, ...]]
    """What gives a message of its class its content and the values of its other fields that may reach a model
    (:func:`~agentguard_langchain._content.field_values`)."""
    fields: tuple[Any, ...]
    """A copy of those (:func:`~agentguard_langchain._content.snapshot`) when it was known: its content, name,
    tool calls, ``additional_kwargs``, a ``ChatMessage``'s role, a ``ToolMessage``'s call id and status, ..."""
    digest: str
    """:func:`digest` of the message, which the checkpoint keeps."""


def checked_as(message: BaseMessage) -> Checked:
    """``message`` as :attr:`Session.checked` knows it: its class, a copy of its content and of its other
    fields a model may be sent (comparing them costs a model call's scan less than reading the message's
    text again), and its digest (:func:`digest`), taken once: the checkpoint's record of every known message
    is written as each run ends, and with a shared store by each model call."""
    kind = type(message)
    values = field_values(kind)
    return Checked(kind, values, snapshot(values(message)), digest(message))


class Unreadable(Exception):
    """A message the input guardrail cannot read whole: nested deeper, or holding more values, than the
    middleware's :class:`~agentguard.record.ValueLimits`, or failing to be read (its own code raising, a
    nesting too deep for Python inside an object). The reason names the bound or the error's type, never the
    message's text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def read_input(message: BaseMessage, limits: ValueLimits) -> tuple[str, Checked]:
    """The text the input guardrail reads of ``message`` (:func:`read_text`) and what :attr:`Session.checked` is
    to know of it once checked (:func:`checked_as`), read whole or not at all (:class:`Unreadable`)."""
    text = read_text(message, limits)
    try:
        return text, checked_as(message)
    except Exception as exc:  # as in read_text
        raise _unreadable(message, exc) from exc


def read_text(message: BaseMessage, limits: ValueLimits) -> str:
    """The text the input guardrail reads of ``message`` (:func:`~agentguard_langchain._content.input_text`), read
    whole or not at all: :class:`Unreadable` for a message beyond ``limits`` (measured first, without recursion:
    reading it would recurse once per level, and a client's message nested 700 deep ended the hook with a
    ``RecursionError``) or whose reading fails."""
    problem = unfaithful(field_values(type(message))(message), limits)
    if problem is not None:
        raise Unreadable(f"{type(message).__name__} {problem}")
    try:
        return input_text(message)
    except Exception as exc:  # an object's own data nested too deep (RecursionError), its code raising
        raise _unreadable(message, exc) from exc


def _unreadable(message: BaseMessage, exc: Exception) -> Unreadable:
    return Unreadable(f"{type(message).__name__} could not be read ({type(exc).__name__})")


def unread(eng: Engagement, exc: Unreadable) -> tuple[Cancel, GuardrailViolation]:
    """What ends a run whose input holds a message the guardrail cannot read whole (``exc``): the cancellation
    of its engagement, which records why and stops it as a failed guardrail would (it refuses every later
    step), and the guardrail's error to raise. Immediate: at a model call no call of the run is in flight."""
    reason = f"an input message cannot be read whole: {exc.reason}"
    return (
        Cancel(f"input guardrail failed: {reason}", graceful=False),
        GuardrailViolation(reason, phase=Phase.INPUT, engagement_id=eng.id),
    )


def checked_limits(limits: ValueLimits | None) -> ValueLimits:
    """The ``value_limits`` option of the middleware and the callback handler, checked: ``ValueLimits()`` by
    default, a :class:`~agentguard.ConfigurationError` for anything but a ``ValueLimits``."""
    if limits is not None and not isinstance(limits, ValueLimits):
        raise ConfigurationError(f"value_limits must be a ValueLimits, not {type(limits).__name__}")
    return limits or ValueLimits()


def known_as(message: BaseMessage) -> Checked | None:
    """:func:`checked_as` of a message a guarded run produced (or the checkpoint's sealed record vouches for),
    ``None`` when it cannot be taken (its reading raises: nested too deep for Python, its own code failing):
    it is then not known, and a model call reads it as input (where the guardrail fails on it), rather than
    the hook failing with its error. Not bound by the middleware's ``value_limits``: the run made it (a model's
    tool call nested 150 deep is denied by the Guard, and the model reads the denial beside it)."""
    try:
        return checked_as(message)
    except Exception:  # RecursionError, or an object's code raising
        return None


def unchanged(known: Checked, message: BaseMessage) -> bool:
    """Whether ``message`` is still what ``known`` says of it: the same class, content, and every other field
    a model may be sent. A change of any of them (a tool call's arguments, ``additional_kwargs``, a role, a
    name) makes it another message, which no guardrail read. Run for each message of the thread at every
    model call: the class first, then one comparison of tuples, in C (equal values compare element by
    element, each ``is`` itself first)."""
    kind, values, fields, _ = known  # unpacked: a NamedTuple's attributes cost a call each
    return kind is type(message) and fields == values(message)


DIGEST_VERSION = "agentguard-langchain/2"
"""What :func:`digest` hashes first. Version 1 hashed a message's class and text alone (no tool calls, no
``additional_kwargs``, no role): a record entry of that form matches no digest of this one, so the message it
names is checked again (fail closed), never taken for the one it was."""


def digest(message: BaseMessage) -> str:
    """How the checkpoint names a message (``agentguard_inputs``): a SHA-256 of its class, and of its content
    and every other field a model may be sent (:func:`~agentguard_langchain._content.field_values`, in the
    class's order) as canonical JSON. Another worker compares its message with it without the message itself
    being kept there; a change of anything the model would read is another digest (so is a field a later
    langchain-core adds: its messages are checked again, not taken for known)."""
    kind = type(message)
    text = "\0".join((DIGEST_VERSION, kind.__name__, canonical_json(field_values(kind)(message))))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(eq=False, slots=True)
class HeldResult:
    """A tool result held by the adapter while the pipeline decides about it (output review may pause)."""

    result: ToolMessage
    """The call's own message, as the tool (or inner middleware) made it."""
    output: Any
    stored: bool = False
    """Also kept in the graph's store, for a resume on another worker (see ``_toolcall``)."""
    interrupts: int = 0
    """How many interrupts had been answered before the tool ran: a re-run of the node replays as many
    (see ``_review``)."""


@dataclass(eq=False, slots=True)
class Session:
    """One engagement and what the adapter remembers about it between hooks."""

    engagement: Engagement
    thread: str | None
    checked: dict[str, Checked] = field(default_factory=dict)
    """Id -> the messages the model may read as they are: those that went (or are going) through the input
    guardrail, and those a guarded run produced (the model's answers as the checks let them out, the tools'
    results). All of each a model may be sent too (:class:`Checked`): a run's input may carry an earlier
    message's id with other text, other tool calls or ``additional_kwargs``, or the same text as another kind
    of message (a tool's result as a system message), and LangGraph then puts it in that message's place; it
    has not been through the guardrail."""
    replaced: dict[str, str] = field(default_factory=dict)
    """Message id -> the text a guardrail or guardian put in its place."""
    held: dict[str, HeldResult] = field(default_factory=dict)
    """Tool call id -> the result of a tool that ran and whose output review is paused (an interrupt)."""
    produced: list[BaseMessage] = field(default_factory=list)
    """The tools' messages since the last model call. ToolNode gives its messages no id, and LangGraph gives
    each one as it adds it to the state: the next model call (or the run's end) enters them in
    :attr:`checked` (a list append is all a tool call pays)."""


def thread_of(config: Mapping[str, Any] | None) -> str | None:
    """The default engagement key: ``configurable.thread_id``, if the run has one."""
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)


def user_from_context(context: object) -> User | None:
    """The default user resolver: a ``User``, or ``user_id`` / ``user_email`` of a context object or dict."""
    if context is None:
        return None
    if isinstance(context, User):
        return context
    getter: Callable[[str], object]
    if isinstance(context, Mapping):
        getter = context.get
    else:

        def getter(key: str) -> object:
            return getattr(context, key, None)

    user = getter("user")
    if isinstance(user, User):
        return user
    user_id = getter("user_id")
    if user_id is None or user_id == "":
        return None
    email = getter("user_email")
    return User(id=str(user_id), email=None if email is None else str(email))


class Sessions:
    """Open engagements by id and by thread: a bounded LRU; evicting one closes its engagement, or with
    ``shared`` (the Guard's store is shared by other workers) only forgets it here."""

    def __init__(self, limit: int, *, shared: bool = False) -> None:
        if limit < 1:
            raise ValueError("max_engagements must be at least 1")
        self._limit = limit
        self._shared = shared
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._by_thread: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, engagement_id: str | None) -> Session | None:
        if engagement_id is None:
            return None
        with self._lock:
            session = self._by_id.get(engagement_id)
            if session is not None:
                self._by_id.move_to_end(engagement_id)
            return session

    def for_thread(self, thread: str | None) -> Session | None:
        if thread is None:
            return None
        with self._lock:
            engagement_id = self._by_thread.get(thread)
        return self.get(engagement_id)

    def add(self, session: Session) -> list[Session]:
        """Make ``session`` its thread's current one; returns the sessions the caller must close (see
        :func:`close_quietly`): the thread's previous one, and the oldest ones over the limit unless the store
        is shared (those are only released)."""
        evicted: list[Session] = []
        with self._lock:
            if session.thread is not None:
                previous = self._by_thread.get(session.thread)
                if previous is not None and previous != session.engagement.id:
                    old = self._by_id.pop(previous, None)
                    if old is not None:
                        evicted.append(old)
                self._by_thread[session.thread] = session.engagement.id
            self._by_id[session.engagement.id] = session
            while len(self._by_id) > self._limit:
                _, old = self._by_id.popitem(last=False)
                if old.thread is not None and self._by_thread.get(old.thread) == old.engagement.id:
                    del self._by_thread[old.thread]
                if not self._shared:
                    evicted.append(old)
        return evicted

    def discard(self, session: Session) -> None:
        """Forget ``session`` and close its engagement."""
        self._forget(session)
        close_quietly(session)

    async def adiscard(self, session: Session) -> None:
        self._forget(session)
        await aclose_quietly(session)

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._by_id.pop(session.engagement.id, None)
            if session.thread is not None and self._by_thread.get(session.thread) == session.engagement.id:
                del self._by_thread[session.thread]

    def close_thread(self, thread: str) -> bool:
        session = self.for_thread(thread)
        if session is None:
            return False
        self.discard(session)
        return True

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._by_id.values())
            self._by_id.clear()
            self._by_thread.clear()
        for session in sessions:
            close_quietly(session)


def close_quietly(session: Session) -> None:
    """Close the session's engagement; a failure is logged, never raised into the host."""
    try:
        session.engagement.close()
    except Exception:  # closing flushes an observe-mode guardian: never break the host for it
        log.exception("agentguard: closing engagement %s failed", session.engagement.id)


async def aclose_quietly(session: Session) -> None:
    try:
        await session.engagement.aclose()
    except Exception:
        log.exception("agentguard: closing engagement %s failed", session.engagement.id)
