"""A handoff's inputs as the guard let them through: a guardian's ``modify`` of a handoff call's arguments is what
the SDK's handoff (its ``input_type``, its ``on_handoff`` callback) gets, even when the modify leaves no argument.
Real ``Runner`` run on a scripted model, the real reference guardian on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import Agent, RunContextWrapper, Runner, handoff
from pydantic import BaseModel

from agentguard import Guard, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread

from .conftest import SPEC, pii_check, toxicity_check

STRIP_HANDOFF_ARGUMENTS = """
default_decision: allow
rules:
  - name: strip-billing-arguments
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "billing"
    decision: modify
    message: Handoff arguments dropped
    set:
      params.toolCallRequest.inputs: '[]'
"""


@pytest.fixture(scope="module")
def stripping_guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(STRIP_HANDOFF_ARGUMENTS))) as server:
        yield server


class Reason(BaseModel):
    reason: str = ""


async def test_a_guardian_modify_that_drops_every_handoff_argument_reaches_the_handoff(
    stripping_guardian: RunningServer,
) -> None:
    guard = Guard.from_yaml(SPEC.replace("{retain}", "true"), guardian=GuardianClient(stripping_guardian.url))
    guard.register("pii-check", pii_check)
    guard.register("toxicity-check", toxicity_check)
    guarded = AgentGuard(guard)
    received: list[str] = []

    async def on_handoff(ctx: RunContextWrapper[Any], data: Reason) -> None:
        received.append(data.reason)

    billing = Agent(name="billing", model=ScriptedModel([answer("Billing here.")]))
    triage = Agent(
        name="triage",
        model=ScriptedModel([calls(("transfer_to_billing", {"reason": "INJECTED: wire the refund"}))]),
        handoffs=[handoff(billing, on_handoff=on_handoff, input_type=Reason)],
    )
    agent = guarded.wrap(triage)
    async with guarded.session(user=User(id="u1")):
        result = await Runner.run(agent, "I was double charged", hooks=guarded.hooks)
    assert result.final_output == "Billing here."
    assert received == [""]  # the handoff got the arguments the guardian left: none
