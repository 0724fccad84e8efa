"""``require_review`` through the SDK's human-in-the-loop: interruptions, approve / reject, resume (also from
``to_json``), output review with the held result, and exactly-once tool runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import (
    Agent,
    Runner,
    RunState,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    tool_input_guardrail,
)

from agentguard import Approval, Outcome, Rule, User

from .conftest import BuildAgent, Harness, Shop, make_guard, make_tools


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


@tool_input_guardrail
def frozen(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    """The app's own guardrail on a tool: it rejects every call."""
    return ToolGuardrailFunctionOutput.reject_content("frozen today")


def _with_frozen(shop: Shop, name: str) -> list[Any]:
    tools = make_tools(shop)
    next(t for t in tools if t.name == name).tool_input_guardrails = [frozen]
    return tools


@pytest.mark.parametrize(("name", "reviewers"), [("refund", {"supervisor"}), ("export_data", set())])
def test_a_reviewed_tool_with_its_own_input_guardrails_is_refused_at_wrap(
    name: str, reviewers: set[str]
) -> None:
    """The SDK asks ``needs_approval`` before it runs a tool's input guardrails, and the review runs the call right
    there when nobody need be asked first (a reviewer on the Guard) or its result must be held (output review):
    the tool would run before its own guardrail rejected the call."""
    guard = make_guard(reviewers={r: (lambda request: Approval(True, "fine")) for r in reviewers})
    agent = Agent(name="shop", model=ScriptedModel([]), tools=_with_frozen(Shop(), name))
    with pytest.raises(ValueError, match="tool_input_guardrails"):
        AgentGuard(guard).wrap(agent)


async def test_an_unreviewed_tool_keeps_its_own_input_guardrails_before_it_runs() -> None:
    shop = Shop()
    guarded = AgentGuard(make_guard())
    model = ScriptedModel([calls(("lookup_order", {"order_id": "A-1"})), answer("Frozen.")])
    agent = guarded.wrap(Agent(name="shop", model=model, tools=_with_frozen(shop, "lookup_order")))
    async with guarded.session(user=User(id="u1")):
        result = await Runner.run(agent, "Where is A-1?", hooks=guarded.hooks)
    assert shop.runs["lookup_order"] == 0
    assert [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"] == ["frozen today"]


async def test_a_call_decided_before_the_sdk_invoked_it_answers_no_other_call_of_its_id() -> None:
    """A reviewed call runs in ``needs_approval`` and its outcome waits for the SDK to invoke the tool. An
    outcome the SDK never collected was kept by call id alone, a value the model writes: a call of the same id
    in another engagement (another user's session) or of another tool got it, unchecked and unrecorded."""
    from agents import RunContextWrapper
    from agents.tool_context import ToolContext

    shop = Shop()
    guard = make_guard(reviewers={"supervisor": lambda request: Approval(True, "fine")})
    guard.add_review_gate(
        "billing", "gatekeeper"
    )  # answered through the SDK: every call runs in needs_approval
    guarded = AgentGuard(guard)
    agent = guarded.wrap(Agent(name="shop", model=ScriptedModel([]), tools=make_tools(shop)))
    tools = {t.name: t for t in agent.tools}
    refund, lookup = tools["refund"], tools["lookup_order"]
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)

    def invoked(name: str, arguments: dict[str, Any]) -> ToolContext[Any]:
        text = json.dumps(arguments)
        return ToolContext.from_agent_context(context, "call-1", tool_name=name, tool_arguments=text)

    async with guarded.session(user=User(id="alice")):
        approval = refund.needs_approval
        assert callable(approval)
        assert await approval(context, {"order_id": "A-1", "amount": 40}, "call-1") is False
    assert shop.runs["refund"] == 1  # ran in Alice's engagement; the SDK never came for its outcome

    async with guarded.session(user=User(id="bob")) as bob:
        output = await lookup.on_invoke_tool(
            invoked("lookup_order", {"order_id": "B-7"}), '{"order_id": "B-7"}'
        )
        assert output["order_id"] == "B-7"
        arguments = {"order_id": "B-9", "amount": 10}
        output = await refund.on_invoke_tool(invoked("refund", arguments), json.dumps(arguments))
        assert output["order_id"] == "B-9"
    assert (shop.runs["lookup_order"], shop.runs["refund"]) == (1, 2)
    assert bob.engagement.view()["history"]["_list"] == ["lookup-order", "refund"]


async def test_a_decided_call_answers_no_call_of_its_id_with_other_arguments() -> None:
    """The same engagement and tool, the same call id (the model's to write; some providers number calls) and
    other arguments: the SDK does not ask ``needs_approval`` again of a call it holds an approval for, and the
    earlier outcome answered this call, its inputs never checked (a refund of 40's result for a refund of 500,
    which the input restriction refuses). Arguments equal in Python but not in JSON (``1`` and ``true``) are
    other arguments too."""
    from agents import RunContextWrapper
    from agents.tool_context import ToolContext

    shop = Shop()
    guard = make_guard(reviewers={"supervisor": lambda request: Approval(True, "fine")})
    guard.add_review_gate("billing", "gatekeeper")  # as above: every call runs in needs_approval
    guarded = AgentGuard(guard)
    agent = guarded.wrap(Agent(name="shop", model=ScriptedModel([]), tools=make_tools(shop)))
    tools = {t.name: t for t in agent.tools}
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)
    approval = tools["refund"].needs_approval
    assert callable(approval)

    async def invoke(arguments: dict[str, Any], name: str = "refund") -> Any:
        text = json.dumps(arguments)
        ctx = ToolContext.from_agent_context(context, "call-1", tool_name=name, tool_arguments=text)
        return await tools[name].on_invoke_tool(ctx, text)

    async with guarded.session(user=User(id="alice")) as alice:
        assert await approval(context, {"order_id": "A-1", "amount": 40}, "call-1") is False
        output = await invoke({"order_id": "A-1", "amount": 500})
        assert output.startswith("agentguard denied this tool call: [restriction input] refund")
        await invoke({"order_id": "A-1"}, "lookup_order")  # not three refunds in a row (short_circuit: 3)
        assert await approval(context, {"order_id": "A-1", "amount": 1}, "call-1") is False
        output = await invoke({"order_id": "A-1", "amount": True})  # CEL has no bool <= int: refused
        assert output.startswith("agentguard denied this tool call: [restriction input] refund")
    assert shop.args == [
        ("refund", {"order_id": "A-1", "amount": 40}),
        ("lookup_order", {"order_id": "A-1"}),
        ("refund", {"order_id": "A-1", "amount": 1}),
    ]
    assert alice.engagement.view()["history"]["_list"] == ["refund", "lookup-order", "refund"]
