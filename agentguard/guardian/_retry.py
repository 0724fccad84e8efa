"""Retry policy for guardian requests, in the shape of the OS Protocol ``Retry`` object.

The OS Protocol (``@osprotocol/schema/runs/retry``) describes a retry as ``attempts`` (how many times to
*retry* after the first try fails), ``delayMs``, ``backoff`` (``none`` / ``linear`` / ``exponential``) and
``maxDelayMs``. Its delay table is the contract this module implements::

    retry number      1        2            3            4
    none              delay    delay        delay        delay
    linear            delay    2 * delay    3 * delay    4 * delay
    exponential       delay    2 * delay    4 * delay    8 * delay

and every delay is capped at ``max_delay_ms``. The schedule is a pure function of the policy
(:func:`backoff_delay_ms`), so it can be tested exactly and shared by the sync and async drivers.

Example::

    >>> policy = Retry(attempts=4, delay_ms=100, backoff="exponential", max_delay_ms=500)
    >>> [backoff_delay_ms(policy, n) for n in range(1, policy.attempts + 1)]
    [100, 200, 400, 500]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["RETRYABLE_FAILURES", "Backoff", "Retry", "backoff_delay_ms"]

Backoff = Literal["none", "linear", "exponential"]

#: Failure kinds a :class:`Retry` may name in ``retry_on``. Only failures where the guardian never gave an
#: answer are retryable: a JSON-RPC error, a malformed reply or an unappliable ``modify`` *is* the guardian's
#: answer, and asking again would only repeat (or double-record) it.
RETRYABLE_FAILURES = frozenset({"timeout", "transport", "http-5xx", "http-429"})

_BACKOFFS: frozenset[str] = frozenset({"none", "linear", "exponential"})


@dataclass(frozen=True)
class Retry:
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
            raise ValueError(f"Retry.attempts must be >= 0, got {self.attempts}")
        if self.delay_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("Retry.delay_ms and Retry.max_delay_ms must be >= 0")
        if self.backoff not in _BACKOFFS:
            raise ValueError(f"Retry.backoff must be one of {sorted(_BACKOFFS)}, got {self.backoff!r}")
        unknown = set(self.retry_on) - RETRYABLE_FAILURES
        if unknown:
            raise ValueError(
                f"Retry.retry_on has unknown failure kinds {sorted(unknown)}; "
                f"choose from {sorted(RETRYABLE_FAILURES)}"
            )
        # Accept any iterable of names (a set literal is the natural spelling) but store it immutably.
        object.__setattr__(self, "retry_on", frozenset(self.retry_on))


def backoff_delay_ms(retry: Retry, retry_number: int) -> int:
    """Milliseconds to wait before retry number ``retry_number`` (1-based), capped at ``max_delay_ms``."""
    if retry_number < 1:
        raise ValueError(f"retry_number is 1-based, got {retry_number}")
    if retry.backoff == "none":
        delay = retry.delay_ms
    elif retry.backoff == "linear":
        delay = retry.delay_ms * retry_number
    else:
        delay = retry.delay_ms * 2 ** (retry_number - 1)
    return min(delay, retry.max_delay_ms)
