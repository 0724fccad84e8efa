"""The support agent on the OpenAI Agents SDK, guarded by agentguard: ``python examples/openai_agents_support.py``.

Runs offline: a scripted model (``agentguard_openai_agents.testing``) plays the LLM. The spec is
``examples/support-agent/agent.yaml``. Three conversations show each part of the adapter:

1. a restriction denies an email to a foreign address; the model reads the denial and recovers;
2. ``require_review: supervisor`` pauses the run (``result.interruptions``); the paused state goes through
   ``to_json`` (as it would to a database), a supervisor approves, the run resumes and the refund runs once;
3. the model loops on one tool; the third identical call stops the run with ``ShortCircuitViolation``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentguard_openai_agents import AgentGuard, RunStopped, format_timeline
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import Agent, Runner, RunState, SQLiteSession, function_tool, set_tracing_disabled

from agentguard import Guard, User

SPEC = Path(__file__).with_name("support-agent") / "agent.yaml"


@function_tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool
def send_email(to: str, body: str) -> str:
    """Email someone."""
    return f"sent to {to}"


@function_tool
def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order."""
    print(f"  (refund tool ran: {order_id} {amount})")
    return {"order_id": order_id, "refunded": amount}


def build_guard() -> Guard:
    guard = Guard.from_file(SPEC, telemetry=False)
    guard.register("pii-check", lambda text: {"ok": "4111" not in text})
    guard.register("toxicity-check", lambda text: {"ok": True, "score": 0.1})
    return guard


async def main() -> int:
    set_tracing_disabled(True)  # no OpenAI key: keep the SDK from exporting traces
    guarded = AgentGuard(build_guard())
    model = ScriptedModel(
        [
            calls(
                ("lookup_order", {"order_id": "A-1"}), ("send_email", {"to": "eve@evil.test", "body": "A-1"})
            ),
            calls(("send_email", {"to": "support@corp.com", "body": "A-1 has shipped"})),
            answer("A-1 has shipped; I emailed support (I can only email corp.com addresses)."),
            calls(("refund", {"order_id": "A-1", "amount": 30})),
            answer("I refunded 30 for A-1."),
            *(calls(("lookup_order", {"order_id": "A-1"})) for _ in range(3)),
        ]
    )
    agent = guarded.wrap(Agent(name="support", model=model, tools=[lookup_order, send_email, refund]))
    ann = User(id="u-42", email="ann@example.com")

    print("== 1: a denied email, and the model recovers")
    async with guarded.session(SQLiteSession("ann"), user=ann) as session:
        result = await Runner.run(
            agent, "Where is A-1? Email the team.", session=session, hooks=guarded.hooks
        )
        print(result.final_output)
        print(format_timeline(session.engagement))

    print("\n== 2: a refund waits for the supervisor")
    async with guarded.session(SQLiteSession("ann"), user=ann) as session:
        result = await Runner.run(agent, "Refund 30 for A-1", session=session, hooks=guarded.hooks)
        print("supervisor asked:", [(i.tool_name, i.arguments) for i in result.interruptions])
        stored = result.to_state().to_json()  # e.g. into a database until someone answers
        state = await RunState.from_json(agent, stored)
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state, session=session, hooks=guarded.hooks)
        print(result.final_output)
        print(format_timeline(session.engagement))

    print("\n== 3: a loop is stopped")
    async with guarded.session(SQLiteSession("ann"), user=ann) as session:
        try:
            await Runner.run(agent, "Check A-1 again and again", session=session, hooks=guarded.hooks)
        except RunStopped as stopped:
            print("run stopped:", type(stopped.violation).__name__, stopped.violation)
        print(format_timeline(session.engagement))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
