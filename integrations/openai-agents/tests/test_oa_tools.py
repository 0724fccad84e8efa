"""Function tools through the guard in real ``Runner`` runs: allowed, denied and recovered, withheld, loops,
guardrails, and what the adapter refuses to wrap."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, RunStopped, violation_of
from agentguard_openai_agents.testing import answer, calls
from agents import (
    Agent,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    Runner,
    WebSearchTool,
)
from agents.testing import function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import EasyInputMessage, ResponseInputText
from openai.types.responses.response_input_item import Message

from agentguard import GuardrailViolation, Outcome, Rule, ShortCircuitViolation, User

from .conftest import BuildAgent

DEEP = json.loads("[" * 150 + '"A-1"' + "]" * 150)


async def test_allowed_call_runs_once_and_is_recorded(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("A-1 has shipped.")])
    async with h.guarded.session(user=User(id="u1")) as session:
        result = await Runner.run(h.agent, "Where is A-1?", hooks=h.guarded.hooks)
    assert result.final_output == "A-1 has shipped."
    assert h.shop.runs["lookup_order"] == 1
    assert "shipped" in h.tool_outputs(result)[0]
    eng = session.engagement
    assert eng.state.names == ["lookup-order"]
    assert [s.kind for s in eng.steps] == [
        "steps/message",  # the user's input, through the input guardrail
        "steps/message",  # the model's message asking for the tool (hooks)
        "steps/toolCallRequest",
        "steps/message",  # the final answer, through the output guardrail
    ]


def test_restriction_denial_reaches_the_model_which_recovers(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("send_email", {"to": "eve@evil.test", "body": "hi"})),
            calls(("send_email", {"to": "bob@corp.com", "body": "hi"})),
            answer("Sent to Bob instead."),
        ]
    )
    with h.guard.engagement(user=User(id="u1")) as eng:
        result = Runner.run_sync(h.agent, "Email the update", hooks=h.guarded.hooks)
    denied, sent = h.tool_outputs(result)
    assert "agentguard denied this tool call" in denied
    assert "not run" in denied
    assert sent == "sent to bob@corp.com"
    assert h.shop.args == [("send_email", {"to": "bob@corp.com", "body": "hi"})]
    assert result.final_output == "Sent to Bob instead."
    assert any(d.rule is Rule.RESTRICTION and d.outcome is Outcome.DENY for d in eng.decisions)


def test_arguments_nested_too_deep_are_a_denial_the_model_reads(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": DEEP})), answer("I could not look it up.")])
    with h.guard.engagement() as eng:
        result = Runner.run_sync(h.agent, "Where is my order?", hooks=h.guarded.hooks)
    (denied,) = h.tool_outputs(result)
    assert "nested deeper than 100 levels (ValueLimits.max_depth)" in denied
    assert h.shop.runs.get("lookup_order", 0) == 0
    assert any(d.rule is Rule.RESTRICTION and d.outcome is Outcome.DENY for d in eng.decisions)
    assert result.final_output == "I could not look it up."


def test_arguments_the_parser_cannot_read_are_checked_as_one_text_input() -> None:
    from agentguard_openai_agents._tools import _inputs

    too_deep = "[" * 100_000 + "]" * 100_000
    assert _inputs(too_deep) == {"input": too_deep}
    assert _inputs("{not json") == {"input": "{not json"}
    assert _inputs('{"a": 1}') == {"a": 1}


def test_unknown_capability_is_denied(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("delete_everything", {})), answer("I may not do that.")])
    with h.guard.engagement():
        result = Runner.run_sync(h.agent, "Delete it all")
    assert h.shop.runs["delete_everything"] == 0
    assert "agentguard denied" in h.tool_outputs(result)[0]


async def test_withheld_output_never_reaches_the_model(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("web_search", {"query": "many things"})), answer("Nothing to share.")])
    async with h.guarded.session() as session:
        result = await Runner.run(h.agent, "Search", hooks=h.guarded.hooks)
    assert h.shop.runs["web_search"] == 1
    (output,) = h.tool_outputs(result)
    assert "SECRET" not in output
    assert "withheld" in output
    assert all("SECRET" not in str(item) for call in h.model.calls for item in call.input)
    assert session.engagement.view()["history"]["web-search"][0]["outputs"] is None


async def test_loop_stop_ends_the_run_with_the_typed_error(build_agent: BuildAgent) -> None:
    h = build_agent([*(calls(("lookup_order", {"order_id": "A-1"})) for _ in range(3)), answer("never")])
    async with h.guarded.session() as session:
        with pytest.raises(RunStopped) as raised:
            await Runner.run(h.agent, "Loop", hooks=h.guarded.hooks)
    assert isinstance(violation_of(raised.value), ShortCircuitViolation)
    assert h.shop.runs["lookup_order"] == 2
    assert session.engagement.status.value == "stopped"


def test_input_guardrail_blocks_before_the_model_sees_the_input(build_agent: BuildAgent) -> None:
    h = build_agent([answer("never")])
    with h.guard.engagement(), pytest.raises(InputGuardrailTripwireTriggered) as raised:
        Runner.run_sync(h.agent, "My card is 4111 1111 1111 1111")
    assert isinstance(violation_of(raised.value), GuardrailViolation)
    assert h.model.calls == ()


PII = "My card is 4111 1111 1111 1111"


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": PII},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PII}]},
        EasyInputMessage(role="user", content=PII),
        Message(role="user", content=[ResponseInputText(type="input_text", text=PII)]),
    ],
    ids=["dict", "dict-parts", "EasyInputMessage", "Message"],
)
def test_input_guardrail_reads_the_user_message_in_any_form_the_sdk_takes(
    build_agent: BuildAgent, message: Any
) -> None:
    """The SDK hands the model input items given as the OpenAI client's models as well as dicts: a message the
    guardrail could not read must not pass as an empty one."""
    h = build_agent([answer("never")])
    with h.guard.engagement(), pytest.raises(InputGuardrailTripwireTriggered):
        Runner.run_sync(h.agent, [{"role": "user", "content": "Hello"}, message])
    assert h.model.calls == ()


async def test_output_guardrail_trips_on_the_final_answer(build_agent: BuildAgent) -> None:
    h = build_agent([answer("That is a stupid question.")])
    async with h.guarded.session():
        with pytest.raises(OutputGuardrailTripwireTriggered) as raised:
            await Runner.run(h.agent, "Hello")
    assert isinstance(violation_of(raised.value), GuardrailViolation)


async def test_streamed_run_is_guarded_the_same_way(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("send_email", {"to": "eve@evil.test", "body": "hi"})),
            calls(("lookup_order", {"order_id": "A-1"})),
            answer("Done."),
        ]
    )
    async with h.guarded.session():
        streamed = Runner.run_streamed(h.agent, "Go", hooks=h.guarded.hooks)
        async for _ in streamed.stream_events():
            pass
    assert streamed.final_output == "Done."
    assert h.shop.runs == {"lookup_order": 1}
    assert "agentguard denied" in h.tool_outputs(streamed)[0]


def test_a_tool_outside_an_engagement_does_not_run(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("x")])
    with pytest.raises(Exception, match="outside an engagement"):
        Runner.run_sync(h.agent, "Where is A-1?")
    assert h.shop.runs["lookup_order"] == 0


def test_wrap_is_idempotent_and_refuses_what_it_cannot_guard(build_agent: BuildAgent) -> None:
    h = build_agent([])
    assert h.guarded.wrap(h.agent) is h.agent
    with pytest.raises(ValueError, match="cannot be guarded"):
        h.guarded.wrap(Agent(name="searcher", tools=[WebSearchTool()]))
    assert AgentGuard(h.guard).guard is h.guard  # a second adapter on the same guard installs nothing twice


_VALUES = st.sampled_from(
    [
        '"eve@evil.test"',
        '"bob@corp.com"',
        "NaN",
        "-Infinity",
        "1e999",
        "null",
        '["bob@corp.com"]',
    ]
)


@st.composite
def _argument_texts(draw: st.DrawFn) -> str:
    """Argument texts a model could send: duplicate and escaped keys, non-standard numbers, a BOM, trailing data.
    (A lone surrogate the SDK refuses itself, before it plans any call.)"""
    keys = st.sampled_from(['"to"', '"\\u0074o"', '"body"', '"to "'])
    pairs = draw(st.lists(st.tuples(keys, _VALUES), max_size=4))
    body = "{" + ",".join(f"{key}:{value}" for key, value in pairs) + "}"
    return draw(st.sampled_from(["", "\ufeff", " "])) + body + draw(st.sampled_from(["", "\n", "{}", "x"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=_argument_texts())
def test_a_tool_runs_only_with_the_arguments_the_guard_checked(
    build_agent: BuildAgent, arguments: str
) -> None:
    """Whatever text the model sends, the tool runs only with inputs the pipeline checked and recorded: no reading
    of the text differs between the guard and the tool. (A recorded call may not run: the SDK's own validation
    refuses one missing a parameter.)"""
    h = build_agent([[function_call("send_email", arguments, call_id="c1")], answer("Done.")])
    with h.guard.engagement() as eng:
        Runner.run_sync(h.agent, "Email Bob")
        recorded = [call["inputs"] for call in eng.view()["history"].get("send-email", [])]
    # Each run got what a recorded call holds (the SDK drops a key no parameter takes, "to " say).
    assert all(any(args.items() <= call.items() for call in recorded) for _, args in h.shop.args)
    assert all(args["to"].endswith("@corp.com") for _, args in h.shop.args)
