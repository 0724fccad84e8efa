"""Issue 13 item 1 for reviews: ``ApprovalConfig.timeout_ms`` bounds the whole review, sync and async."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentguard import ApprovalConfig, Guard, ReviewDenied
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      refund:
        input_restriction:
          require_review: supervisor
    """
)


def _slow(seconds: float) -> Any:
    def reviewer(request: Any) -> bool:
        time.sleep(seconds)
        return True

    return reviewer


def test_the_timeout_bounds_every_approver_together() -> None:
    config = ApprovalConfig(timeout_ms=600, approvers=("a", "b", "c"), required_approvals=4)
    reviewers = {name: _slow(0.25) for name in ("supervisor", "a", "b", "c")}
    guard = Guard.from_yaml(SPEC, reviewers=reviewers, approvals={"supervisor": config})
    guard.tool(name="refund")(lambda: None)
    started = time.monotonic()
    with guard.engagement(), pytest.raises(ReviewDenied, match="no answer within"):
        guard.call("refund", {})
    assert time.monotonic() - started < 0.6 + 0.5  # four approvers of 0.25 s each would take 1.0 s


def test_an_awaitable_from_a_sync_reviewer_is_bounded_too() -> None:
    async def forever() -> bool:
        await asyncio.sleep(30)
        return True

    config = ApprovalConfig(timeout_ms=300)
    guard = Guard.from_yaml(SPEC, reviewers={"supervisor": lambda request: forever()}, approval=config)
    ran: list[int] = []
    guard.tool(name="refund")(lambda: ran.append(1))

    async def main() -> None:
        async with guard.engagement():
            with pytest.raises(ReviewDenied, match="no answer within"):
                await guard.acall("refund", {})

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 0.3 + 2
    assert ran == []


OUTPUT_REVIEWED = spec_text(
    """
    capabilities:
      lookup:
        output_restriction:
          require_review: supervisor
    """
)


@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_raising_reviewer_is_reported_by_its_error_type_only(phase: str) -> None:
    """A reviewer's error often quotes what it was shown (the withheld output, the inputs); the denial's reason
    reaches the caller, the decisions and the spans while the output is withheld: the type alone is reported."""
    secret = "ssn 078-05-1120"

    def crashes(request: Any) -> bool:
        raise ValueError(f"cannot file {request.outputs if phase == 'output' else request.inputs}")

    guard = Guard.from_yaml(OUTPUT_REVIEWED if phase == "output" else SPEC, reviewers={"supervisor": crashes})
    name = "lookup" if phase == "output" else "refund"
    guard.tool(name=name)(lambda note: secret if phase == "output" else "ok")
    with (
        guard.engagement() as eng,
        pytest.raises(ReviewDenied, match=r"reviewer failed: ValueError\)") as caught,
    ):
        guard.call(name, {"note": secret})
    assert secret not in caught.value.reason
    assert all(secret not in d.reason for s in eng.steps for d in s.decisions)
