"""Human review through LangGraph ``interrupt()``: ``require_review`` as a pause of the graph.

When the spec says ``require_review: supervisor`` and no ``supervisor`` reviewer is registered on the Guard,
:class:`~agentguard_langchain.AgentGuardMiddleware` registers one that pauses the graph with an interrupt
whose value has the shape of LangChain's ``HumanInTheLoopMiddleware`` request, so the same UI can answer it::

    result = agent.invoke({"messages": [...]}, config)            # pauses: result["__interrupt__"]
    payload = result["__interrupt__"][0].value
    # {"action_requests": [{"name": "refund", "args": {...}, "description": "..."}],
    #  "review_configs": [{"action_name": "refund", "allowed_decisions": ["approve", "reject"]}],
    #  "agentguard": {"reviewer": "supervisor", "phase": "input", "capability": "refund", ...}}
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    agent.invoke(Command(resume={"decisions": [{"type": "reject", "message": "too much"}]}), config)

The answer becomes an OS Protocol :class:`~agentguard.Approval`, which the core records on the step.

LangGraph re-runs the whole tool node on resume and hands back interrupt answers *by position* within it.
The pipeline skips steps it already took (an approved input review is not asked again once the tool ran),
so the adapter counts the interrupts answered before a tool ran and replays as many on re-run: the output
review's answer then lands on the output review.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from agentguard import Approval, Guard, Phase, Reviewer, ReviewRequest
from agentguard_langchain._host import interrupt
from agentguard_langchain._scope import current_scope

__all__ = [
    "approval_from_resume",
    "install_interrupt_reviewers",
    "interrupt_reviewer",
    "replay_interrupts",
    "review_payload",
]

ALLOWED_DECISIONS = ("approve", "reject")


def replay_interrupts(count: int) -> None:
    """Consume the answers of ``count`` interrupts already answered in an earlier run of this tool node."""
    if not count:  # the common case: a call that was never paused
        return
    scope = current_scope()
    for _ in range(count):
        interrupt({"agentguard": {"replay": True}})  # returns the stored answer; never pauses
        if scope is not None:
            scope.interrupts += 1


def review_payload(request: ReviewRequest, tool_name: str | None = None) -> dict[str, Any]:
    """The interrupt value: a ``HumanInTheLoopMiddleware``-shaped request plus agentguard's own details."""
    name = tool_name or request.capability
    args = dict(request.inputs)
    description = f"{request.message}\n\nArguments: {_dump(args)}"
    details: dict[str, Any] = {
        "reviewer": request.reviewer,
        "capability": request.capability,
        "phase": request.phase.value,
        "tool_call_id": request.call_id,
        "approval_request": request.as_dict(),
    }
    if request.phase is Phase.OUTPUT:
        description += f"\n\nResult: {_dump(request.outputs)}"
        details["outputs"] = request.outputs
    return {
        "action_requests": [{"name": name, "args": args, "description": description}],
        "review_configs": [{"action_name": name, "allowed_decisions": list(ALLOWED_DECISIONS)}],
        "agentguard": details,
    }


def approval_from_resume(value: object, reviewer: str) -> Approval:
    """Turn a ``Command(resume=...)`` answer into an :class:`~agentguard.Approval`.

    Accepted: a ``HumanInTheLoopMiddleware`` response (``{"decisions": [{"type": "approve"}]}``), a single
    decision (``{"type": "reject", "message": "..."}``), ``"approve"`` / ``"reject"``, a ``bool``, or an
    ``Approval``. ``approved_by`` in a decision names who answered (default: the reviewer id). Anything
    else, including ``edit`` and ``respond`` decisions, is a rejection that says why.
    """
    if isinstance(value, Approval):
        return value
    if isinstance(value, bool):
        return Approval(approved=value, approved_by=reviewer)
    if isinstance(value, Mapping) and "decisions" in value:
        decisions = value["decisions"]
        value = decisions[0] if isinstance(decisions, list | tuple) and decisions else None
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, Mapping):
        return Approval(False, f"unrecognised review answer of type {type(value).__name__}", reviewer)
    kind = value.get("type")
    by = value.get("approved_by") or value.get("reviewer") or reviewer
    message = value.get("message")
    reason = None if message is None else str(message)
    if kind == "approve":
        return Approval(True, reason, str(by))
    if kind == "reject":
        return Approval(False, reason or "rejected by the reviewer", str(by))
    return Approval(False, f"review decision {kind!r} is not supported (use approve or reject)", str(by))


def interrupt_reviewer(reviewer_id: str) -> Reviewer:
    """A reviewer that pauses the graph with :func:`langgraph.types.interrupt`; the resume answers it."""

    def review(request: ReviewRequest) -> Approval:
        scope = current_scope()
        if scope is not None:
            scope.interrupts += 1
        answer = interrupt(review_payload(request, scope.name if scope is not None else None))
        return approval_from_resume(answer, reviewer_id)

    review.__agentguard_interrupt__ = reviewer_id  # type: ignore[attr-defined]
    review.__name__ = f"interrupt_reviewer[{reviewer_id}]"
    return review


_install_lock = threading.Lock()


def install_interrupt_reviewers(guard: Guard) -> tuple[str, ...]:
    """Register an interrupt reviewer for each reviewer id the Guard may ask and nobody answers (idempotent).

    Those are the spec's ``require_review`` ids and the gates added with ``guard.add_review_gate``.
    """
    installed: list[str] = []
    with _install_lock:
        for reviewer_id in sorted(guard.required_reviewers()):
            existing, _ = guard.reviewer_for(reviewer_id)
            if existing is None:
                guard.add_reviewer(reviewer_id, interrupt_reviewer(reviewer_id))
                installed.append(reviewer_id)
            elif getattr(existing, "__agentguard_interrupt__", None) == reviewer_id:
                installed.append(reviewer_id)
    return tuple(installed)


def _dump(value: object) -> str:
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
