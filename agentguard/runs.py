"""Run control for guarded calls, in OS Protocol terms: ``Timeout``, ``Retry`` and ``Cancel``.

A tool can be given a time limit and a retry policy where it is registered::

    from agentguard.runs import Retry, Timeout

    @guard.tool(timeout=Timeout(ms=2_000, on_timeout="fail"), retry=Retry(attempts=2, delay_ms=200,
                backoff="exponential", retry_on=(ConnectionError,)))
    def fetch_invoice(invoice_id: str) -> dict: ...

and an engagement can be cancelled (``eng.cancel("user hung up")``): from then on it refuses every step.
Every timeout, retry and cancellation is recorded as a decision (rule ``run`` / ``engagement``), so it
reaches ``eng.steps``, the trace and the audit report.

What happens to a tool that overruns its timeout:

- an **async** tool is cancelled (``asyncio.CancelledError`` is raised inside it) unless ``on_timeout`` is
  ``continue``;
- a **sync** tool runs in a worker thread when it has a timeout, because Python cannot interrupt a
  function from outside. On ``fail`` / ``cancel`` the caller gets :class:`ToolTimeout` at once; the thread
  runs on until the function returns, and its late result is discarded and *recorded* on the step
  (``late result discarded``), so it never goes unseen. Give sync tools that can hang their own I/O
  timeouts too.
- ``continue`` records a warning and keeps waiting for the result.

Retries reset the timeout clock (each attempt gets the full ``ms``), and respect cancellation: a cancelled
engagement starts no further attempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from agentguard.errors import AgentGuardError

__all__ = ["Backoff", "Cancel", "Retry", "Timeout", "TimeoutAction", "ToolTimeout", "backoff_delay_ms"]

Backoff = Literal["none", "linear", "exponential"]
TimeoutAction = Literal["fail", "cancel", "continue"]
_BACKOFFS = frozenset({"none", "linear", "exponential"})


def backoff_delay_ms(delay_ms: int, backoff: Backoff, max_delay_ms: int | None, retry_number: int) -> int:
    """The OS Protocol delay before retry ``retry_number`` (1-based): ``delay``, ``delay * n`` or
    ``delay * 2**(n-1)``, capped at ``max_delay_ms``."""
    if retry_number < 1:
        raise ValueError(f"retry_number is 1-based, got {retry_number}")
    if backoff == "none":
        delay = delay_ms
    elif backoff == "linear":
        delay = delay_ms * retry_number
    else:
        delay = delay_ms * 2 ** (retry_number - 1)
    return delay if max_delay_ms is None else min(delay, max_delay_ms)


class ToolTimeout(AgentGuardError):
    """A guarded call did not finish within its :class:`Timeout` (``on_timeout`` ``fail`` or ``cancel``)."""

    def __init__(self, capability: str, ms: int, *, engagement_id: str | None = None) -> None:
        self.capability = capability
        self.ms = ms
        self.engagement_id = engagement_id
        super().__init__(f"{capability!r} did not finish within {ms} ms")


@dataclass(frozen=True)
class Timeout:
    """OS Protocol ``Timeout``: ``ms``, ``on_timeout`` (``fail`` default, ``cancel``, ``continue``)."""

    ms: int
    on_timeout: TimeoutAction = "fail"
    on_timeout_callback: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if self.ms <= 0:
            raise ValueError(f"Timeout.ms must be positive, got {self.ms}")
        if self.on_timeout not in ("fail", "cancel", "continue"):
            raise ValueError(f"Timeout.on_timeout must be fail, cancel or continue, not {self.on_timeout!r}")


@dataclass(frozen=True)
class Retry:
    """OS Protocol ``Retry`` for a tool: ``attempts`` retries after the first try (so at most
    ``attempts + 1`` calls), ``delay_ms`` with ``backoff``, capped at ``max_delay_ms``.

    Which errors retry: instances of ``retry_on`` (default: ``Exception``) for which ``should_retry`` (if
    given) returns true. A policy decision (a denied output, say) is never retried: it is not an error of
    the tool. ``on_retry(error, retry_number)`` is called before each retry.
    """

    attempts: int
    delay_ms: int = 0
    backoff: Backoff = "none"
    max_delay_ms: int | None = None
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    should_retry: Callable[[BaseException], bool] | None = None
    on_retry: Callable[[BaseException, int], None] | None = None

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ValueError(f"Retry.attempts must be >= 0, got {self.attempts}")
        if self.delay_ms < 0 or (self.max_delay_ms is not None and self.max_delay_ms < 0):
            raise ValueError("Retry.delay_ms and Retry.max_delay_ms must be >= 0")
        if self.backoff not in _BACKOFFS:
            raise ValueError(f"Retry.backoff must be one of {sorted(_BACKOFFS)}, got {self.backoff!r}")

    def retries(self, error: BaseException) -> bool:
        if not isinstance(error, self.retry_on):
            return False
        return self.should_retry is None or bool(self.should_retry(error))

    def delay(self, retry_number: int) -> int:
        return backoff_delay_ms(self.delay_ms, self.backoff, self.max_delay_ms, retry_number)


@dataclass(frozen=True)
class Cancel:
    """OS Protocol ``Cancel``: why, whether to wait for calls in flight, and hooks around it.

    ``before_cancel`` may return ``False`` to refuse the cancellation. ``graceful`` waits up to
    ``graceful_timeout_ms`` for calls in flight to finish (their results are delivered); without it, a
    call in flight finishes but its result is withheld. ``after_cancel`` runs last.
    """

    reason: str = "cancelled"
    graceful: bool = True
    graceful_timeout_ms: int | None = 5_000
    before_cancel: Callable[[], bool | Awaitable[bool]] | None = None
    after_cancel: Callable[[], None] | None = None
