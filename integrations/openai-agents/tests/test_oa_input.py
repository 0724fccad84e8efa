"""The input guardrail reads every user message the model will read, not only the newest: a run's input may be a
list (an app's own history, ``result.to_input_list()`` fed back) or carry a session's history, and an earlier user
message in it that no guardrail saw would reach the model unchecked. Real ``Runner`` runs on a scripted model, the
real ``pii-check`` guardrail tool."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, violation_of
from agentguard_openai_agents.testing import ScriptedModel, answer
from agents import Agent, InputGuardrailTripwireTriggered, Runner, SQLiteSession

from agentguard import Guard, GuardrailViolation, User

from .conftest import SPEC, BuildAgent, pii_check, toxicity_check

CARD = "my card is 4111 1111 1111 1111"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def counted(script: list[Any]) -> tuple[AgentGuard, Agent[Any], ScriptedModel, list[str]]:
    """A wrapped agent on ``script``, and every text its input guardrail tool is given, in order."""
    seen: list[str] = []

    def check(text: str) -> dict[str, bool]:
        seen.append(text)
        return pii_check(text)

    guard = Guard.from_yaml(SPEC.replace("{retain}", "true"))
    guard.register("pii-check", check)
    guard.register("toxicity-check", toxicity_check)
    guarded = AgentGuard(guard)
    model = ScriptedModel(script)
    return guarded, guarded.wrap(Agent(name="shop", model=model)), model, seen


def parts(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.mark.parametrize(
    "history",
    [
        pytest.param([user(CARD), {"role": "assistant", "content": "Noted."}], id="mapping"),
        pytest.param([parts(CARD)], id="input-text-parts"),
    ],
)
async def test_an_earlier_user_message_of_the_input_list_is_checked(
    build_agent: BuildAgent, history: list[dict[str, Any]]
) -> None:
    h = build_agent([answer("Hello.")])
    with h.guard.engagement(user=User(id="u1")), pytest.raises(InputGuardrailTripwireTriggered) as caught:
        await Runner.run(h.agent, [*history, user("hi")], hooks=h.guarded.hooks)
    assert isinstance(violation_of(caught.value), GuardrailViolation)
    assert not h.model.calls  # the model never read the card number


async def test_a_user_item_injected_into_a_fed_back_input_list_is_checked(build_agent: BuildAgent) -> None:
    h = build_agent([answer("A-1 has shipped."), answer("never")])
    with h.guard.engagement(user=User(id="u1")):
        first = await Runner.run(h.agent, "Where is A-1?", hooks=h.guarded.hooks)
        fed_back = [user(CARD), *first.to_input_list(), user("thanks")]
        with pytest.raises(InputGuardrailTripwireTriggered):
            await Runner.run(h.agent, fed_back, hooks=h.guarded.hooks)
    assert len(h.model.calls) == 1


async def test_a_session_history_item_no_guardrail_saw_is_checked() -> None:
    """An item written to the session outside a guarded run (another app, a tampered store) is read by the model
    with the history: the next run checks it."""
    guarded, agent, model, seen = counted([answer("Shipped."), answer("never")])
    store = SQLiteSession("tampered")
    async with guarded.session(store, user=User(id="u1")) as session:
        await Runner.run(agent, "Where is A-1?", session=session)
    await store.add_items([user(CARD)])  # not through a guarded run
    with pytest.raises(InputGuardrailTripwireTriggered):
        async with guarded.session(store, user=User(id="u1")) as session:
            await Runner.run(agent, "thanks", session=session)
    assert len(model.calls) == 1
    assert seen == ["Where is A-1?", CARD]  # the passed history is not checked again


async def test_a_stopped_input_the_sdk_saved_to_the_session_is_stopped_again_after_a_fresh_start() -> None:
    """The SDK saves the input of a run its input guardrail stopped to the run's session. Once the app started
    the session afresh, the next run's model would read it with the history; and ``Engagement.close`` (the
    README's way to start afresh) left the failed engagement failed, so the session refused every run."""
    guarded, agent, model, _ = counted([answer("Hello."), answer("never")])
    store = SQLiteSession("stopped")
    with pytest.raises(InputGuardrailTripwireTriggered):
        async with guarded.session(store, user=User(id="u1")) as session:
            await Runner.run(agent, CARD, session=session)
    assert CARD in str(await store.get_items())  # the SDK kept it
    failed = guarded.engagement_for("stopped")
    guarded.close_session("stopped")
    with pytest.raises(InputGuardrailTripwireTriggered):
        async with guarded.session(store, user=User(id="u1")) as session:
            await Runner.run(agent, "hi", session=session)
    assert session.engagement is not failed  # a fresh engagement, whose guardrail read the saved input
    assert not model.calls
    guarded.close_session("stopped")
    await store.clear_session()
    async with guarded.session(store, user=User(id="u1")) as session:
        result = await Runner.run(agent, "hi", session=session)
    assert result.final_output == "Hello."
