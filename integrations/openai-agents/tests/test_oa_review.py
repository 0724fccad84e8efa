"""``require_review`` through the SDK's human-in-the-loop: interruptions, approve / reject, resume (also from
``to_json``), output review with the held result, and exactly-once tool runs."""

from __future__ import annotations

from typing import Any

from agentguard_openai_agents.testing import answer, calls
from agents import Runner, RunState

from agentguard import Outcome, Rule

from .conftest import BuildAgent, Harness


async def _resume(h: Harness, result: Any, *, approve: bool, via_json: bool = False) -> Any:
    state = result.to_state()
    if via_json:
        state = await RunState.from_json(h.agent, state.to_json())
    for item in state.get_interruptions():
        state.approve(item) if approve else state.reject(item)
    return await Runner.run(h.agent, state, hooks=h.guarded.hooks)


async def test_input_review_approve_resumes_and_runs_the_tool_once(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 40})), answer("Refunded.")])
    async with h.guarded.session() as session:
        result = await Runner.run(h.agent, "Refund A-1", hooks=h.guarded.hooks)
        assert [i.tool_name for i in result.interruptions] == ["refund"]
        assert h.shop.runs["refund"] == 0
        result = await _resume(h, result, approve=True, via_json=True)
    assert result.final_output == "Refunded."
    assert h.shop.runs["refund"] == 1
    outcomes = [d.outcome for d in session.engagement.decisions if d.rule is Rule.REVIEW]
    assert outcomes == [Outcome.REVIEW_PENDING, Outcome.REVIEW_APPROVED]


async def test_input_review_reject_reaches_the_model_and_is_recorded(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("refund", {"order_id": "A-1", "amount": 40})), answer("The refund was declined.")]
    )
    async with h.guarded.session() as session:
        result = await Runner.run(h.agent, "Refund A-1", hooks=h.guarded.hooks)
        result = await _resume(h, result, approve=False)
    assert result.final_output == "The refund was declined."
    assert h.shop.runs["refund"] == 0
    assert any(d.outcome is Outcome.REVIEW_REJECTED for d in session.engagement.decisions)


async def test_a_locally_denied_call_is_never_sent_for_review(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 900})), answer("Too much.")])
    async with h.guarded.session():
        result = await Runner.run(h.agent, "Refund A-1", hooks=h.guarded.hooks)
    assert result.interruptions == []
    assert "agentguard denied" in h.tool_outputs(result)[0]
    assert h.shop.runs["refund"] == 0


async def test_output_review_holds_the_result_until_approved(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("export_data", {"table": "orders"})), answer("Exported.")])
    async with h.guarded.session():
        result = await Runner.run(h.agent, "Export orders", hooks=h.guarded.hooks)
        assert [i.tool_name for i in result.interruptions] == ["export_data"]
        assert h.shop.runs["export_data"] == 1  # it ran; the model has not seen the result
        assert all("orders-row" not in str(c.input) for c in h.model.calls)
        result = await _resume(h, result, approve=True, via_json=True)
    assert h.shop.runs["export_data"] == 1  # resuming did not run it again
    assert "orders-row-1" in h.tool_outputs(result)[0]


async def test_output_review_reject_withholds_the_result(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("export_data", {"table": "orders"})), answer("Not allowed.")])
    async with h.guarded.session() as session:
        result = await Runner.run(h.agent, "Export orders", hooks=h.guarded.hooks)
        result = await _resume(h, result, approve=False)
    assert h.shop.runs["export_data"] == 1
    assert all("orders-row" not in str(c.input) for c in h.model.calls)
    assert session.engagement.view()["history"]["export-data"][0]["outputs"] is None
    assert any(d.outcome is Outcome.REVIEW_REJECTED for d in session.engagement.decisions)


async def test_input_and_output_review_of_one_call_fails_closed_on_the_output(
    build_agent: BuildAgent,
) -> None:
    h = build_agent([calls(("wire_money", {"to": "bob", "amount": 5})), answer("Wired, result unseen.")])
    async with h.guarded.session():
        result = await Runner.run(h.agent, "Wire", hooks=h.guarded.hooks)
        result = await _resume(h, result, approve=True)
    assert h.shop.runs["wire_money"] == 1
    (output,) = h.tool_outputs(result)
    assert "withheld" in output
    assert "approves a call once" in output
