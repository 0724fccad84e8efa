"""Retry policy for guardian requests, in the shape of the OS Protocol ``Retry`` object.

The OS Protocol (``@osprotocol/schema/runs/retry``) describes a retry as ``attempts`` (how many times to
*retry* after the first try fails), ``delayMs``, ``backoff`` (``none`` / ``linear`` / ``exponential``) and
``maxDelayMs``. Its delay table is the contract this module implements::

    retry number      1        2            3            4
    none              delay    delay        delay        delay
    linear            delay    2 * delay    3 * delay    4 * delay
    exponential       delay    2 * delay    4 * delay    8 * delay

and every delay is capped at ``max_delay_ms``. The schedule is the one a tool's
:class:`agentguard.runs.Retry` follows (:func:`agentguard.runs.backoff_delay_ms`): one function for both.

Example::

    >>> policy = GuardianRetry(attempts=4, delay_ms=100, backoff="exponential", max_delay_ms=500)
    >>> [policy.delay(n) for n in range(1, policy.attempts + 1)]
    [100, 200, 400, 500]

Until 0.2, ``agentguard.guardian.Retry`` is a deprecated name of :class:`GuardianRetry` (it was easy to
confuse with a tool's :class:`agentguard.runs.Retry`), and ``agentguard.guardian.backoff_delay_ms(retry, n)``
of ``retry.delay(n)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentguard.runs import Backoff, backoff_delay_ms

__all__ = ["RETRYABLE_FAILURES", "GuardianRetry"]

#: Failure kinds a :class:`GuardianRetry` may name in ``retry_on``. Only failures where the guardian never gave an
#: answer are retryable: a JSON-RPC error, a malformed reply or an unappliable ``modify`` *is* the guardian's
#: answer, and asking again would only repeat (or double-record) it.
RETRYABLE_FAILURES = frozenset({"timeout", "transport", "http-5xx", "http-429"})

_BACKOFFS: frozenset[str] = frozenset({"none", "linear", "exponential"})


@dataclass(frozen=True)
class GuardianRetry:
    """How often, and how patiently, to ask the guardian again when it did not answer.

    ``attempts`` is the number of *retries* after the first try (OS Protocol semantics), so a step makes at
    most ``attempts + 1`` requests. ``retry_on`` names which failures are retried: ``"timeout"``,
    ``"transport"`` (connection refused/reset, DNS, ...), ``"http-5xx"`` and ``"http-429"``.
    """

    attempts: int = 1
    delay_ms: int = 100
    backoff: Backoff = "exponential"
    max_delay_ms: int = 2000
    retry_on: frozenset[str] = frozenset({"timeout", "transport", "http-5xx"})

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ValueError(f"GuardianRetry.attempts must be >= 0, got {self.attempts}")
        if self.delay_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("GuardianGuardianRetry.delay_ms and GuardianRetry.max_delay_ms must be >= 0")
        if self.backoff not in _BACKOFFS:
            raise ValueError(
                f"GuardianRetry.backoff must be one of {sorted(_BACKOFFS)}, got {self.backoff!r}"
            )
        unknown = set(self.retry_on) - RETRYABLE_FAILURES
        if unknown:
            raise ValueError(
                f"GuardianGuardianRetry.retry_on has unknown failure kinds {sorted(unknown)}; "
                f"choose from {sorted(RETRYABLE_FAILURES)}"
            )
        # Accept any iterable of names (a set literal is the natural spelling) but store it immutably.
        object.__setattr__(self, "retry_on", frozenset(self.retry_on))

    def delay(self, retry_number: int) -> int:
        """Milliseconds to wait before retry number ``retry_number`` (1-based), capped at ``max_delay_ms``."""
        return backoff_delay_ms(self.delay_ms, self.backoff, self.max_delay_ms, retry_number)
