"""Value types the guardian client returns: outcomes, verdicts, statistics, and its one exception.

A verdict is a frozen value so that the Guard can keep it in the step record and hand it to telemetry
without anyone changing it afterwards. Every way a guardian exchange can end is one
:class:`GuardianVerdict`; failures are values (``NO_DECISION`` plus a ``failure`` cause), not exceptions,
because the Guard must *record* a failure and then apply its failure policy, never crash the agent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentguard.errors import AgentGuardError

__all__ = ["GuardianOutcome", "GuardianStats", "GuardianUnavailable", "GuardianVerdict"]


class GuardianOutcome(enum.StrEnum):
    """How a guardian exchange ended."""

    ALLOW = "allow"
    DENY = "deny"
    MODIFY = "modify"
    NO_DECISION = "no-decision"
    """The guardian gave no usable decision; :attr:`GuardianVerdict.failure` says why."""


@dataclass(frozen=True, kw_only=True)
class GuardianVerdict:
    """The result of asking the guardian about one step.

    ``proceeded`` says whether the step goes ahead: true for ``ALLOW`` and ``MODIFY`` (with the modified
    request), false for ``DENY``, and for ``NO_DECISION`` whatever ``on_failure`` chose (``"allow"`` → true),
    except for a refused reply that says deny (false, and ``failure`` ends ``"(the reply says deny: ...)"``)
    or nests too deeply to tell. ``failure`` is one line: what the guardian wrote that it quotes (an error
    message, a value of the wrong kind) is shown as ``repr`` shows it, cut to a few hundred characters,
    because it becomes the step's recorded reason.
    ``modified_request`` is the guardian's *complete replacement* AOS request (same ``id`` and ``method``,
    full ``params``); it is only set for ``MODIFY``. ``attempts`` counts the HTTP requests made for the step
    (retries included, a start-up ping excluded); ``latency_ms`` is the wall time of the whole exchange,
    back-off sleeps included.
    """

    outcome: GuardianOutcome
    message: str | None = None
    reasoning: str | None = None
    reason_codes: tuple[str, ...] = ()
    modified_request: dict[str, object] | None = None
    failure: str | None = None
    proceeded: bool = False
    latency_ms: float = 0.0
    attempts: int = 0
    data: dict[str, object] | None = None


@dataclass(frozen=True)
class GuardianStats:
    """A snapshot of what a client has done so far.

    ``sent`` counts the steps the client took on (``decide``/``adecide`` calls and steps taken off the
    observe queue); each of them ends ``delivered`` (the guardian answered allow/deny/modify) or ``failed``
    (no decision — including a failed start-up ping or a closed client; ``last_failure`` holds the most
    recent cause). ``dropped`` counts observed steps that were never sent: the queue was full, the client
    was closed, or the request could not be serialised. ``queue_depth`` is the number of observed steps
    still waiting.
    """

    sent: int
    delivered: int
    failed: int
    dropped: int
    queue_depth: int
    last_failure: str | None


class GuardianUnavailable(AgentGuardError):
    """:meth:`GuardianClient.ping` got no healthy answer from the guardian. ``cause`` says why."""

    def __init__(self, cause: str) -> None:
        self.cause = cause
        super().__init__(f"guardian unavailable: {cause}")
