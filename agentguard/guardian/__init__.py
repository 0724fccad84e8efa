"""Talk to a remote AOS guardian: ask it about each step (enforce) or report each step to it (observe).

The client works on wire JSON — an AOS JSON-RPC request as a ``dict`` in, a :class:`GuardianVerdict` out —
so that it does not depend on how the request was built. Guardian failures never raise: they come back as
``NO_DECISION`` verdicts carrying their cause, and ``on_failure`` (``"deny"`` by default) says whether the
step proceeds. Importing this package does not import the reference guardian server
(``agentguard.guardian.server``) or any web framework.

Example (enforce)::

    from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianRetry

    client = GuardianClient("https://guardian.example/aos", token="...", timeout=2.0,
                            retry=GuardianRetry(attempts=2, delay_ms=100, backoff="exponential"))
    verdict = client.decide(aos_request)          # or: await client.adecide(aos_request)
    if verdict.outcome is GuardianOutcome.MODIFY:
        aos_request = verdict.modified_request    # the guardian's complete replacement request
    elif not verdict.proceeded:
        ...                                       # denied, or no decision under on_failure="deny"

Example (observe)::

    client = GuardianClient(url, mode="observe", queue_size=10_000)
    client.submit(aos_request)                    # constant time; delivered in order by one thread
    client.flush(timeout=5)                       # e.g. at the end of an engagement
    client.stats                                  # sent, delivered, failed, dropped, queue_depth, ...
"""

import warnings
from typing import Any

from agentguard.guardian._client import EventCallback, GuardianClient
from agentguard.guardian._retry import GuardianRetry
from agentguard.guardian._types import GuardianOutcome, GuardianStats, GuardianUnavailable, GuardianVerdict

__all__ = [
    "EventCallback",
    "GuardianClient",
    "GuardianOutcome",
    "GuardianRetry",
    "GuardianStats",
    "GuardianUnavailable",
    "GuardianVerdict",
]


def _backoff_delay_ms(retry: GuardianRetry, retry_number: int) -> int:
    return retry.delay(retry_number)


_DEPRECATED = {
    "Retry": (GuardianRetry, "GuardianRetry"),
    "backoff_delay_ms": (_backoff_delay_ms, "GuardianRetry.delay"),
}


def __getattr__(name: str) -> Any:
    """Names renamed in 0.1 (deprecated; they go in 0.2)."""
    if name in _DEPRECATED:
        value, new = _DEPRECATED[name]
        warnings.warn(
            f"agentguard.guardian.{name} is deprecated: use {new} (a tool's retry is agentguard.runs.Retry)",
            DeprecationWarning,
            stacklevel=2,
        )
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
