"""The effects a pipeline flow yields: what has to happen outside the flow, performed by the driver.

A flow decides; :mod:`agentguard.pipeline._driver` performs each effect it yields (run the tool, ask a
reviewer, ask the guardian, wait) and sends back the result or throws back the exception.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentguard.policy._identity import Credentials
from agentguard.policy._review import (
    Reviewer,
    ReviewRequest,
)

if TYPE_CHECKING:
    from agentguard.guardian import GuardianClient
    from agentguard.record import EngagementState


@dataclass(slots=True)
class Invoke:
    """Effect: run the tool (or guardrail tool) with these arguments and credentials.

    With ``timeout_ms`` the driver raises :class:`InvokeTimedOut` when the call overruns; it cancels an
    async call first unless ``keep_running``; ``on_late`` is told the outcome of a call that finishes after
    its caller stopped waiting (a sync tool in its worker thread).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    credentials: Credentials | None = None
    timeout_ms: int | None = None
    keep_running: bool = False
    on_late: Callable[[str], None] | None = None


class InvokeTimedOut(Exception):
    """Raised by a driver into the flow when an :class:`Invoke` overran; ``handle`` awaits the call."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        super().__init__("the call overran its timeout")


@dataclass(slots=True)
class CallUser:
    """Effect: call user code that is not the tool -- a credential resolver, a Python rule, a run hook.

    The driver calls ``fn(*args)`` and, like a tool's, awaits what an async callable returns (the sync
    driver runs it when no event loop runs in the thread). What it raises is thrown back into the flow,
    which decides what a failure means; ``what`` names the callable in errors.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    what: str


@dataclass(slots=True)
class AwaitLate:
    """Effect: keep waiting for a call that overran its timeout (``on_timeout: continue``)."""

    handle: Any


@dataclass(slots=True)
class Sleep:
    """Effect: wait ``ms`` milliseconds (between retries)."""

    ms: int


@dataclass(slots=True)
class AskReviewer:
    """Effect: ask one reviewer; the driver enforces ``timeout_ms`` and raises ``TimeoutError`` past it."""

    reviewer: Reviewer
    request: ReviewRequest
    timeout_ms: int | None


@dataclass(slots=True)
class AskGuardian:
    """Effect: send an AOS request to the guardian in enforce mode and wait for the verdict."""

    client: GuardianClient
    request: dict[str, Any]


@dataclass(slots=True)
class Observe:
    """Effect: hand an AOS request to an observe-mode guardian, which delivers it later and decides nothing.

    The driver enqueues it (constant time, never waits); a full queue or a closed client is the client's to
    record (its listeners hear of the drop), not the step's.
    """

    client: GuardianClient
    request: dict[str, Any]


@dataclass(slots=True)
class Commit:
    """Effect: append the record's unsent events to its store, one round trip, and apply the answer.

    Sends back whether they were appended: ``False`` only when ``exclusive`` and another process changed
    the engagement first (the record has applied what it missed; the calls begun in it are to be checked
    again). Raises :class:`~agentguard.errors.StoreUnavailable` when the store cannot answer.

    With ``post`` and a :class:`~agentguard.record.Pipelined` store, the events are sent and ``True`` sent
    back at once; their answer is read at the record's next commit (the events stay in the outbox until
    then, and go again with that commit when no answer came).
    """

    state: EngagementState
    exclusive: bool
    fetch: bool = False  # with nothing to append, still ask for what was missed (Engagement.refresh)
    post: bool = False  # send without waiting for the answer (the events a successful call ends with)


@dataclass(slots=True)
class Claim:
    """Effect: claim ``key`` of the record's engagement in its store for ``owner``; sends back the owner
    that holds it."""

    state: EngagementState
    key: str
    owner: str


Effect = Invoke | CallUser | AskReviewer | AskGuardian | Observe | AwaitLate | Sleep | Commit | Claim
T = TypeVar("T")
Flow = Generator[Effect, Any, T]
"""A policy flow that yields effects and returns a ``T``."""
