"""Human (or agent) review gates: ``require_review`` in the OpenAgentSpec, approvals in OS Protocol terms.

A restriction with ``require_review: supervisor`` means: before continuing, ask the reviewer registered under
``"supervisor"`` and continue only on its approval (decision 7). The vocabulary is the OS Protocol's
``runs/approval``: a :class:`ReviewRequest` (an ``ApprovalRequest``) goes out, :class:`Approval` answers come
back, and an :class:`ApprovalConfig` says how long to wait, whether silence approves, who may approve and how
many approvals are needed.

Reviewers are plain callables, sync or async, taking a :class:`ReviewRequest` and returning an
:class:`Approval` or a ``bool``::

    from agentguard import Approval, Guard

    def supervisor(request):
        return Approval(approved=request.inputs.get("amount", 0) <= 50, approved_by="policy-bot")

    guard = Guard.from_file("agent.yaml", reviewers={"supervisor": supervisor})

No reviewer, a timeout without ``auto_approve_on_timeout``, or a reviewer that raises: the step is denied.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from agentguard.errors import Phase

__all__ = [
    "Approval",
    "ApprovalConfig",
    "ReviewRequest",
    "Reviewer",
    "TerminalReviewer",
    "approval_tally",
    "coerce_approval",
]


@dataclass(frozen=True, slots=True)
class Approval:
    """OS Protocol ``Approval``: the answer of one reviewer."""

    approved: bool
    reason: str | None = None
    approved_by: str | None = None
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_dict(self) -> dict[str, Any]:
        """The OS Protocol wire shape (camelCase)."""
        out: dict[str, Any] = {"approved": self.approved, "timestamp": self.timestamp.isoformat()}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.approved_by is not None:
            out["approvedBy"] = self.approved_by
        return out


@dataclass(frozen=True, slots=True)
class ApprovalConfig:
    """OS Protocol ``ApprovalConfig``.

    ``approvers``: who may approve besides the reviewer named in the spec (asked in order after it).
    ``required_approvals``: how many approvals are needed; one rejection that makes the count unreachable
    denies at once. ``timeout_ms``: how long each reviewer may take; ``auto_approve_on_timeout`` turns a
    timeout into an approval (recorded as such) instead of a denial.
    """

    timeout_ms: int | None = None
    auto_approve_on_timeout: bool = False
    approvers: Sequence[str] = ()
    required_approvals: int = 1

    def __post_init__(self) -> None:
        if self.required_approvals < 1:
            raise ValueError("required_approvals must be at least 1")
        if self.timeout_ms is not None and self.timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")

    def reviewers_for(self, named: str) -> list[str]:
        """The reviewers to ask, in order: the one the spec names, then the configured approvers."""
        return list(dict.fromkeys([named, *self.approvers]))  # each asked once


@dataclass(frozen=True)
class ReviewRequest:
    """OS Protocol ``ApprovalRequest`` plus what a reviewer needs to decide.

    ``engagement`` is the Engagement view (the spec says the reviewer decides "given the current Engagement
    object"); ``inputs`` / ``outputs`` are the call's, for convenience.
    """

    reviewer: str
    capability: str
    phase: Phase
    message: str
    execution_id: str
    inputs: Mapping[str, Any]
    outputs: Any
    engagement: Mapping[str, Any]
    call_id: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    timeout_ms: int | None = None
    responses: tuple[Approval, ...] = ()

    @property
    def expires_at(self) -> datetime | None:
        if self.timeout_ms is None:
            return None
        return self.created_at + timedelta(milliseconds=self.timeout_ms)

    def as_dict(self) -> dict[str, Any]:
        """The OS Protocol ``ApprovalRequest`` wire shape."""
        out: dict[str, Any] = {
            "id": self.id,
            "message": self.message,
            "executionId": self.execution_id,
            "createdAt": self.created_at.isoformat(),
            "responses": [r.as_dict() for r in self.responses],
        }
        if self.expires_at is not None:
            out["expiresAt"] = self.expires_at.isoformat()
        return out


Reviewer = Callable[[ReviewRequest], "Approval | bool | Awaitable[Approval | bool]"]


def coerce_approval(answer: object, reviewer: str) -> Approval:
    """Accept ``Approval`` or ``bool`` from a reviewer; anything else is a reviewer error (a denial).

    Only ``approved is True`` approves: ``"false"``, ``1``, ``[0]`` or ``None`` in an ``Approval`` (which is
    not validated when built) are rejections, and are recorded as ``False``.
    """
    if isinstance(answer, Approval):
        approved = answer.approved is True
        if approved is answer.approved and isinstance(answer.approved_by, str) and answer.approved_by:
            return answer
        by = answer.approved_by if isinstance(answer.approved_by, str) and answer.approved_by else reviewer
        reason = (
            answer.reason if isinstance(answer.reason, str) or answer.reason is None else str(answer.reason)
        )
        if answer.approved is not approved and answer.approved is not False:
            reason = f"not approved: approved was {type(answer.approved).__name__}, not True"
        return Approval(approved, reason, by, answer.timestamp)
    if isinstance(answer, bool):
        return Approval(approved=answer, approved_by=reviewer)
    raise TypeError(f"reviewer {reviewer!r} returned {type(answer).__name__}, expected Approval or bool")


def approval_tally(responses: Sequence[Approval], remaining: int, required: int) -> bool | None:
    """``True`` once enough approvals are in, ``False`` once they can no longer be reached, else ``None``.

    Approvals count by distinct approver: one person approving twice is one approval.
    """
    approvals = len({r.approved_by for r in responses if r.approved is True})
    if approvals >= required:
        return True
    if approvals + remaining < required:
        return False
    return None


class TerminalReviewer:
    """Ask a person at the terminal. For interactive runs and demos, not for servers.

    ``TerminalReviewer()`` prints the request and reads ``y``/``n``; anything but ``y``/``yes`` rejects.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        self._name = name
        self._stdin = stdin
        self._stdout = stdout

    def __call__(self, request: ReviewRequest) -> Approval:
        out = self._stdout or sys.stdout
        inp = self._stdin or sys.stdin
        what = "call" if request.phase is Phase.INPUT else "result of"
        out.write(f"\n[review] {request.reviewer}: approve {what} {request.capability}?\n")
        out.write(f"  inputs:  {dict(request.inputs)!r}\n")
        if request.phase is Phase.OUTPUT:
            out.write(f"  outputs: {request.outputs!r}\n")
        out.write("  approve? [y/N] ")
        out.flush()
        answer = inp.readline().strip().lower()
        approved = answer in ("y", "yes")
        return Approval(
            approved=approved,
            reason="approved at terminal" if approved else "rejected at terminal",
            approved_by=self._name or request.reviewer,
        )
