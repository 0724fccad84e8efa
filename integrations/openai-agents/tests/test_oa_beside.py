"""Text a model returns beside its tool calls: the spec checks "any generative model response" before the user
sees it, and a failed check fails the execution before any more tools run. The SDK hands such text to the caller
(``result.new_items``, stream events) with no output guardrail ever run on it, then runs the tools; so the
adapter checks it first, in real ``Runner`` runs (``run``, ``run_sync``, ``run_streamed`` pulled in the run loop
or, with a model timeout, in a task of its own), with a real output guardrail tool and a real guardian on
127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, UncheckedStreamWarning, violation_of
from agentguard_openai_agents.testing import ModelStep, answer, calls
from agents import (
    Agent,
    AgentsException,
    Model,
    ModelProvider,
    ModelRetrySettings,
    ModelSettings,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
    StreamEvent,
)
from agents.testing import assistant_message, function_call
from openai.types.responses import (
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
)
from pydantic import BaseModel

from agentguard import Engagement, EngagementStatus, Guard, GuardianDenied, GuardrailViolation, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread

from .conftest import SPEC, Shop, make_tools, pii_check, toxicity_check
from .test_oa_streaming import NO_PROMISES, UNCHECKED, TokenModel, _carried, _delta, cut_off

MESSAGE_RULES = (
    NO_PROMISES
    + """\
  - name: mask-ssn
    methods: [steps/message]
    when: params.message.role == "agent" && params.message.content.exists(p, p.text.contains("SSN"))
    decision: modify
    message: SSN masked
    set:
      params.message.content: '[{"kind": "text", "text": "[masked]"}]'
"""
)
"""The streaming tests' guardian rules (no guarantees), and an SSN masked."""

MODES = ["run", "run_sync", "streamed", "streamed-timed"]
"""``Runner.run``, ``Runner.run_sync``, ``Runner.run_streamed`` (the SDK pulls the model's stream in its run loop,
or, with ``ModelSettings.timeout``, in a task of its own)."""

LOOKUP = ("lookup_order", {"order_id": "A-1"})

AGENT_STEPS = [
    "steps/message",  # the user's input
    "steps/message",  # the text beside the tool call, checked once
    "steps/toolCallRequest",
    "steps/message",  # the final answer, checked once
]


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    """The real reference guardian on 127.0.0.1: denies the agent's guarantees, masks what mentions an SSN."""
    with serve_in_thread(create_app(parse_rules(MESSAGE_RULES))) as server:
        yield server


def counted_guard() -> tuple[Guard, list[str]]:
    """The shop agent's guard, and every text its output guardrail tool is given, in order (the real tool,
    counted)."""
    seen: list[str] = []

    def check(text: str) -> dict[str, Any]:
        seen.append(text)
        return toxicity_check(text)

    guard = Guard.from_yaml(SPEC.replace("{retain}", "true"))
    guard.register("pii-check", pii_check)
    guard.register("toxicity-check", check)
    return guard, seen


class ByName(ModelProvider):
    """A run's model provider: resolves every model name to one model object (as a provider resolves
    ``Agent(model="gpt-4.1")``), out of the adapter's reach."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def get_model(self, model_name: str | None) -> Model:
        return self.model


@dataclass
class Outcome:
    """One run of a wrapped shop agent: what it handed the caller, what it ran, what the guardrail saw."""

    mode: str
    engagement: Engagement
    shop: Shop
    model: TokenModel
    checked: list[str]
    log: list[tuple[str, str]]
    events: list[StreamEvent] = field(default_factory=list)
    result: Any = None
    error: BaseException | None = None

    def seen(self) -> str:
        """Everything the run handed the caller, as one text: its stream events, its items and final output,
        and what its error carries as the run's data (items, raw model responses)."""
        parts = [_carried(event) for event in self.events]
        items = list(self.result.new_items) if self.result is not None else []
        responses = list(self.result.raw_responses) if self.result is not None else []
        run_data = getattr(self.error, "run_data", None) if isinstance(self.error, AgentsException) else None
        if run_data is not None:
            items += list(run_data.new_items)
            responses += list(run_data.raw_responses)
        for item in items:
            raw = item.raw_item
            parts.append(
                raw.model_dump_json() if isinstance(raw, BaseModel) else json.dumps(raw, default=str)
            )
            parts.append(str(getattr(item, "output", "")))
        parts += [json.dumps([o.model_dump() for o in r.output], default=str) for r in responses]
        if self.result is not None:
            parts.append(str(self.result.final_output))
        return "\n".join(parts)

    def messages(self) -> list[str]:
        """The text of each message item the run handed the caller."""
        return [
            "".join(getattr(p, "text", None) or getattr(p, "refusal", "") for p in item.raw_item.content)
            for item in self.result.new_items
            if item.type == "message_output_item"
        ]

    def deltas(self) -> str:
        return "".join(d for event in self.events if (d := _delta(event)))

    def model_input(self, call: int) -> str:
        """What the model was given on its ``call``-th call (0-based), as text."""
        return json.dumps(self.model.calls[call].input, default=str)


def run(
    script: list[Any],
    mode: str,
    *,
    guard: Guard | None = None,
    hooks: bool = True,
    by_name: bool = False,
    retry: ModelRetrySettings | None = None,
) -> Outcome:
    """Run a wrapped shop agent on ``script`` in ``mode``, inside an engagement. ``by_name``: the agent names its
    model and the run's provider resolves it (the adapter cannot wrap it)."""
    checked: list[str] = []
    if guard is None:
        guard, checked = counted_guard()
    log: list[tuple[str, str]] = []
    model = TokenModel(script, log)
    shop = Shop()
    guarded = AgentGuard(guard)
    settings = ModelSettings(timeout=30 if mode == "streamed-timed" else None, retry=retry)
    agent: Agent[Any] = Agent(
        name="shop", model="scripted" if by_name else model, tools=make_tools(shop), model_settings=settings
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedStreamWarning)
        agent = guarded.wrap(agent)
    options: dict[str, Any] = {"hooks": guarded.hooks} if hooks else {}
    if by_name:
        options["run_config"] = RunConfig(model_provider=ByName(model))
    with guard.engagement(user=User(id="u1")) as eng:
        outcome = Outcome(mode, eng, shop, model, checked, log)
        if mode == "run_sync":
            try:
                outcome.result = Runner.run_sync(agent, "Where is A-1?", **options)
            except Exception as exc:
                outcome.error = exc
        else:
            asyncio.run(_run(outcome, agent, options))
    return outcome


async def _run(outcome: Outcome, agent: Agent[Any], options: dict[str, Any]) -> None:
    try:
        if outcome.mode == "run":
            outcome.result = await Runner.run(agent, "Where is A-1?", **options)
            return
        streamed = Runner.run_streamed(agent, "Where is A-1?", **options)
        async for event in streamed.stream_events():
            outcome.events.append(event)
            if delta := _delta(event):
                outcome.log.append(("caller", delta))
        outcome.result = streamed
    except Exception as exc:
        outcome.error = exc


def message(*parts: str | tuple[str, str], item_id: str = "msg-said") -> ResponseOutputMessage:
    """An assistant message of several content parts: ``"text"`` an output text part, ``("refusal", text)`` a
    refusal part."""
    content: list[Any] = [
        ResponseOutputRefusal(type="refusal", refusal=p[1])
        if isinstance(p, tuple)
        else ResponseOutputText(type="output_text", text=p, annotations=[], logprobs=[])
        for p in parts
    ]
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed", content=content
    )


def lookup() -> Any:
    return function_call("lookup_order", {"order_id": "A-1"}, call_id="call-lookup")


# -- a failed check: the run ends before the response's tools run, the text reaches nobody ----------------------


@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "no-hooks"])
@pytest.mark.parametrize("mode", MODES)
def test_text_beside_tool_calls_that_fails_the_guardrail_ends_the_run_before_its_tools(
    mode: str, hooks: bool
) -> None:
    script = [calls(LOOKUP, text="What a stupid question. Looking it up."), answer("A-1 has shipped.")]
    out = run(script, mode, hooks=hooks)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(out.error), GuardrailViolation)
    assert out.shop.runs == {}  # no tool of the response ran
    assert len(out.model.calls) == 1
    assert "stupid" not in out.seen().lower()
    assert out.engagement.status is EngagementStatus.FAILED


@pytest.mark.parametrize("mode", MODES)
def test_a_guardian_denial_of_text_beside_tool_calls_ends_the_run_before_its_tools(
    guardian: RunningServer, mode: str
) -> None:
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    script = [calls(LOOKUP, text="I guarantee it has shipped; checking."), answer("Done.")]
    out = run(script, mode, guard=guard, hooks=False)
    assert isinstance(violation_of(out.error or Exception()), GuardianDenied)
    assert out.shop.runs == {}
    assert len(out.model.calls) == 1
    assert "guarantee" not in out.seen()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("output", "secret"),
    [
        pytest.param([message("Looking it up."), message("Stupid question.", item_id="msg-2"), lookup()],
                     "Stupid", id="second-of-two-messages"),
        pytest.param([message(("refusal", "I refuse, stupid."))], "refuse", id="refused-answer"),
        pytest.param([message(("refusal", "I refuse, stupid.")), lookup()], "refuse", id="refusal-beside-calls"),
        pytest.param([message("What a stu", "pid question"), lookup()], "pid question", id="split-over-text-parts"),
        pytest.param([message("What a stu", ("refusal", "pid question")), lookup()], "pid question",
                     id="split-over-text-and-refusal"),
        pytest.param([message("Stupid question."), message("A-1 has shipped.", item_id="msg-2")], "Stupid",
                     id="before-the-answer"),
    ],
)  # fmt: skip
def test_every_message_the_caller_would_get_is_checked(output: list[Any], secret: str, mode: str) -> None:
    """Attacker shapes of one response: a second message item, a refusal (which the SDK hands out as
    ``ModelRefusalError``, no guardrail run), a word split over content parts, a message before the answer.
    (A response showing a hosted tool's call ends the run before its messages are checked: test_oa_hosted.)"""
    out = run([output, answer("never")], mode)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert out.shop.runs == {}
    assert secret not in out.seen()


# -- a passed check: the text arrives as the model said it, checked once ---------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_text_beside_tool_calls_that_passes_reaches_the_caller_checked_once(mode: str) -> None:
    out = run([calls(LOOKUP, text="Let me look that up."), answer("A-1 has shipped.")], mode)
    assert out.error is None
    assert out.checked == ["Let me look that up.", "A-1 has shipped."]  # each once: hooks and model agree
    assert out.messages() == ["Let me look that up.", "A-1 has shipped."]
    assert out.shop.runs == {"lookup_order": 1}
    assert [s.kind for s in out.engagement.steps] == AGENT_STEPS
    if mode.startswith("streamed"):
        assert out.deltas() == "Let me look that up.A-1 has shipped."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "script",
    [
        pytest.param([calls(LOOKUP), answer("Done.")], id="only-tool-calls"),
        pytest.param([[assistant_message(""), lookup()], answer("Done.")], id="empty-text"),
    ],
)
def test_nothing_to_check_costs_no_check_and_the_answer_is_checked_once(script: list[Any], mode: str) -> None:
    out = run(script, mode)
    assert out.error is None
    assert out.checked == ["Done."]


@pytest.mark.parametrize("mode", MODES)
def test_a_guardian_modify_of_text_beside_tool_calls_reaches_the_caller_replaced(
    guardian: RunningServer, mode: str
) -> None:
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    script = [calls(LOOKUP, text="Your SSN is 123-45-6789; looking A-1 up."), answer("Done.")]
    out = run(script, mode, guard=guard)
    assert out.error is None
    assert out.messages() == ["[masked]", "Done."]
    assert [s.kind for s in out.engagement.steps] == AGENT_STEPS  # the hooks did not check "[masked]" again
    assert "123-45" not in out.seen()
    assert "123-45" not in out.model_input(1)  # the model's history holds the replacement too
    assert "[masked]" in out.model_input(1)
    assert out.shop.runs == {"lookup_order": 1}
    if mode.startswith("streamed"):
        assert out.deltas() == "[masked]Done."


def test_without_answer_checks_text_beside_tool_calls_streams_token_by_token() -> None:
    out = run(
        [calls(LOOKUP, text="Looking it up right now."), answer("Done.")],
        "streamed",
        guard=Guard.from_yaml(UNCHECKED),
    )
    assert out.error is None
    assert out.log.index(("caller", "Looking ")) < out.log.index(("model", "now."))
    assert [s.kind for s in out.engagement.steps] == [
        "steps/message",  # the user's input
        "steps/message",  # the message asking for the tool, recorded by the hooks as before
        "steps/toolCallRequest",
        "steps/message",  # the final answer
    ]


# -- a model the adapter does not hold: the run hooks check it, still before the tools --------------------------


@pytest.mark.parametrize("mode", ["run", "run_sync", "streamed"])
def test_a_model_given_by_name_is_checked_by_the_hooks_before_its_tools(mode: str) -> None:
    """Streamed, its tokens have gone out already (the README says so); the run still ends before the tools."""
    script = [calls(LOOKUP, text="What a stupid question. Looking it up."), answer("A-1 has shipped.")]
    out = run(script, mode, by_name=True)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert out.shop.runs == {}
    assert len(out.model.calls) == 1
    if mode != "streamed":
        assert "stupid" not in out.seen().lower()


@pytest.mark.parametrize("mode", ["run", "run_sync"])
def test_a_guardian_modify_through_the_hooks_replaces_the_text(guardian: RunningServer, mode: str) -> None:
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    script = [calls(LOOKUP, text="Your SSN is 123-45-6789; looking A-1 up."), answer("Done.")]
    out = run(script, mode, guard=guard, by_name=True)
    assert out.error is None
    assert out.messages() == ["[masked]", "Done."]
    assert [s.kind for s in out.engagement.steps] == AGENT_STEPS
    assert "123-45" not in out.seen()
    assert "123-45" not in out.model_input(1)
    assert out.shop.runs == {"lookup_order": 1}


# -- no second chance, no leak of an unfinished response -------------------------------------------------------


@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_a_retry_policy_does_not_ask_the_model_again_after_stopped_text(mode: str) -> None:
    retry = ModelRetrySettings(max_retries=3, policy=lambda context: True)
    script = [calls(LOOKUP, text="Stupid question."), calls(LOOKUP, text="Sorry."), answer("Done.")]
    out = run(script, mode, retry=retry)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert len(out.model.calls) == 1
    assert out.shop.runs == {}


def _cut_off_beside_a_call(text: str) -> ModelStep:
    """A response cut off by the provider after its text and its tool call: ``response.incomplete``."""
    return cut_off(text, [assistant_message(text, item_id="msg-cut"), lookup()], "msg-cut")


def test_a_streamed_response_that_never_completes_keeps_its_text_and_runs_no_tool() -> None:
    out = run([_cut_off_beside_a_call("What a stupid question")], "streamed")
    assert out.error is not None
    assert "stupid" not in out.seen()
    assert out.shop.runs == {}
