"""An output agentguard stopped leaves no trace in what the run ends with: the SDK's output tripwire carries the
output it stopped (``guardrail_result.agent_output``) and, attached afterwards, the run's data (its items, the
model's raw responses, every output guardrail's result), so an app that logs the error would log the withheld
text. Real ``Runner`` runs (``run``, ``run_sync``, ``run_streamed`` pulled in the run loop or in a task of its
own), with the agent's model object held by the adapter or resolved by name, with a real output guardrail tool and
a real guardian on 127.0.0.1."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from agentguard_openai_agents import WITHHELD, AgentGuard, UncheckedStreamWarning, violation_of
from agentguard_openai_agents.testing import answer, calls
from agents import (
    Agent,
    AgentHooks,
    ModelResponse,
    ModelSettings,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunContextWrapper,
    Runner,
    SQLiteSession,
)
from pydantic import BaseModel

from agentguard import Guard, GuardianDenied, GuardrailViolation, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread

from .conftest import Shop, make_guard, make_tools, reachable
from .test_oa_beside import LOOKUP, ByName
from .test_oa_streaming import NO_PROMISES, UNCHECKED, TokenModel, _carried

MODES = ["run", "run_sync", "streamed", "streamed-timed"]
MODELS = ["held", "by-name"]
"""The agent's model object, which the adapter holds; or a model name the run's provider resolves."""


class Seen(AgentHooks[Any]):
    """The app's own agent hooks: every model response the SDK hands them, as text."""

    def __init__(self) -> None:
        self.responses: list[str] = []

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.responses.append(str(response.output))


@dataclass
class Ended:
    """How one run of a wrapped shop agent ended, and what it left behind."""

    model: TokenModel
    error: BaseException | None = None
    session: str = ""
    """Every item the run's SDK session holds, as text."""
    hooks: Seen = field(default_factory=Seen)
    shop: Shop = field(default_factory=Shop)
    events: list[str] = field(default_factory=list)
    """What each stream event handed the caller, as text."""


def run(
    script: list[Any],
    mode: str,
    model: str,
    *,
    guard: Guard | None = None,
    change: Callable[[Agent[Any]], Agent[Any]] | None = None,
    **agent_options: Any,
) -> Ended:
    """Run a wrapped shop agent on ``script`` in ``mode`` with an SDK session and the app's own agent hooks;
    ``change``: what the app does to the agent once wrapped."""
    guard = guard or make_guard()
    guarded = AgentGuard(guard)
    scripted = TokenModel(script, [])
    ended = Ended(scripted)
    by_name = model == "by-name"
    settings = ModelSettings(timeout=30 if mode == "streamed-timed" else None)
    agent: Agent[Any] = Agent(
        name="shop",
        model="scripted" if by_name else scripted,
        tools=make_tools(ended.shop),
        model_settings=settings,
        hooks=ended.hooks,
        **agent_options,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedStreamWarning)
        agent = guarded.wrap(agent)
    if change is not None:
        agent = change(agent)
    config = RunConfig(model_provider=ByName(scripted)) if by_name else None
    session = SQLiteSession(f"withheld-{mode}-{model}")

    async def go() -> None:
        if mode == "run":
            await Runner.run(agent, "Where is A-1?", session=session, hooks=guarded.hooks, run_config=config)
            return
        streamed = Runner.run_streamed(
            agent, "Where is A-1?", session=session, hooks=guarded.hooks, run_config=config
        )
        async for event in streamed.stream_events():
            ended.events.append(_carried(event))

    with guard.engagement(user=User(id="u1")):
        try:
            if mode == "run_sync":
                Runner.run_sync(
                    agent, "Where is A-1?", session=session, hooks=guarded.hooks, run_config=config
                )
            else:
                asyncio.run(go())
        except Exception as exc:
            ended.error = exc
    ended.session = str(asyncio.run(session.get_items()))
    return ended


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(NO_PROMISES))) as server:
        yield server


def _names(items: list[Any]) -> list[str]:
    return [getattr(item.raw_item, "name", "") for item in items if item.type == "tool_call_item"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", MODES)
def test_the_error_of_a_stopped_answer_holds_no_trace_of_it(mode: str, model: str) -> None:
    out = run([calls(LOOKUP), answer("A-1 has shipped, stupid.")], mode, model)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(out.error), GuardrailViolation)
    assert reachable(out.error, "stupid") == []
    assert out.error.guardrail_result.agent_output == WITHHELD
    assert "stupid" not in out.session
    # what came before the stopped answer is still there for the app to log
    assert out.error.run_data is not None
    assert _names(out.error.run_data.new_items) == ["lookup_order"]
    assert out.shop.runs == {"lookup_order": 1}


@pytest.mark.parametrize("mode", ["run", "run_sync"])
def test_the_apps_own_hooks_never_see_a_stopped_answer(mode: str) -> None:
    """The SDK hands a response to the agent's hooks before its output guardrail runs: the adapter checks the
    answer of the model it holds before that (a model given by name: see the README)."""
    out = run([calls(LOOKUP), answer("A-1 has shipped, stupid.")], mode, "held")
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert len(out.hooks.responses) == 1  # the tool call's response
    assert all("stupid" not in response for response in out.hooks.responses)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", MODES)
def test_an_answer_the_guardian_denies_is_not_saved_to_the_session(
    guardian: RunningServer, mode: str, model: str
) -> None:
    """A guardian's denial raised from an output guardrail is, to the SDK, a guardrail that broke: it saves the
    answer to the session (where the model reads it next turn) before re-raising. The adapter stops it as a
    tripwire."""
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    out = run([calls(LOOKUP), answer("I guarantee delivery by noon.")], mode, model, guard=guard)
    assert "noon" not in out.session
    assert reachable(out.error, "noon") == []
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)  # as a failed output guardrail
    assert isinstance(violation_of(out.error), GuardianDenied)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", ["run", "run_sync", "streamed"])
def test_the_error_of_stopped_text_beside_tool_calls_holds_no_trace_of_it(mode: str, model: str) -> None:
    out = run([calls(LOOKUP, text="What a stupid question."), answer("Done.")], mode, model)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(out.error), GuardrailViolation)
    assert reachable(out.error, "stupid") == []
    assert out.shop.runs == {}


class Reply(BaseModel):
    text: str


@pytest.mark.parametrize("model", MODELS)
def test_a_stopped_structured_answer_holds_no_trace_either(model: str) -> None:
    out = run([answer('{"text": "a stupid question"}')], "run", model, output_type=Reply)
    assert isinstance(violation_of(out.error or Exception()), GuardrailViolation)
    assert reachable(out.error, "stupid") == []


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_a_stopped_tool_result_that_ends_the_run_keeps_its_violation(mode: str, model: str) -> None:
    """``tool_use_behavior="stop_on_first_tool"`` makes a tool's result the final output. The SDK redacts the
    tripwire of such an output itself, dropping the guardrail's ``output_info``: the violation is still found."""
    script = [calls(("web_search", {"query": "stupid"}))]
    out = run(script, mode, model, tool_use_behavior="stop_on_first_tool")
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(out.error), GuardrailViolation)
    assert reachable(out.error, "SECRET") == []
