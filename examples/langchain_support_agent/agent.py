"""A LangChain support agent guarded by agentguard: a scripted conversation, every step on a timeline.

Run it with ``python examples/langchain_support_agent/agent.py`` (after
``pip install -e 'integrations/langchain'``). No API key, no network: the chat model replies from a script,
so each rule of ``examples/support-agent/agent.yaml`` can be seen firing in a real ``create_agent`` graph:

1. allowed tool calls, and a denied restriction the model recovers from (it may only email corp.com);
2. a refund that needs the supervisor's review: the graph pauses with ``interrupt()``, a scripted reviewer
   answers, the run resumes with ``Command(resume=...)``;
3. an answer the output guardrail stops before it reaches the user;
4. a loop of identical lookups stopped by ``lifespan.short_circuit``.

The spec says ``retain_memory: false``, so every turn is a fresh engagement: the timeline is printed per turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentguard_langchain import AgentGuardMiddleware, format_timeline
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agentguard import Guard, PolicyViolation

SPEC = Path(__file__).resolve().parents[1] / "support-agent" / "agent.yaml"
THREAD = {"configurable": {"thread_id": "support-demo"}}
CUSTOMER = {"user_id": "u-42", "user_email": "ann@example.com"}


def build_guard() -> Guard:
    guard = Guard.from_file(SPEC)

    @guard.tool(name="pii-check")
    def pii_check(text: str) -> dict[str, bool]:
        """Input guardrail: refuse text that looks like it carries a card number."""
        return {"ok": not any(word.isdigit() and len(word) >= 12 for word in text.split())}

    @guard.tool(name="toxicity-check")
    def toxicity_check(text: str) -> dict[str, object]:
        """Output guardrail: a stand-in for a real classifier."""
        return {"ok": True, "score": 0.9 if "stupid" in text.lower() else 0.05}

    return guard


@tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "shipped"}


@tool
def send_email(to: str, body: str) -> dict[str, str]:
    """Email someone about an order."""
    return {"status": "sent"}


@tool
def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund (part of) an order."""
    return {"order_id": order_id, "refunded": amount}


SCRIPT = [
    # turn 1: look the order up, email the team, try to email an outside address, recover
    calls(("lookup_order", {"order_id": "A-1"}), text="Let me look that up."),
    calls(("send_email", {"to": "bob@corp.com", "body": "A-1 has shipped"})),
    calls(("send_email", {"to": "eve@evil.test", "body": "A-1 has shipped"})),
    answer("Order A-1 has shipped. I told the support team; I can only email corp.com addresses."),
    # turn 2: a refund the supervisor reviews
    calls(("refund", {"order_id": "A-1", "amount": 30})),
    answer("I refunded 30 on order A-1."),
    # turn 3: an answer the output guardrail stops
    answer("That is a stupid question."),
    # turn 4: a loop
    calls(("lookup_order", {"order_id": "A-2"})),
    calls(("lookup_order", {"order_id": "A-2"})),
    calls(("lookup_order", {"order_id": "A-2"})),
    answer("never reached"),
]


def scripted_supervisor(payload: dict[str, Any]) -> dict[str, Any]:
    """Stands in for a person answering the review in a UI: approves refunds up to 50."""
    action = payload["action_requests"][0]
    approve = action["args"].get("amount", 0) <= 50
    print(
        f"  review    {payload['agentguard']['reviewer']} asked: "
        f"{action['name']} {json.dumps(action['args'])}"
    )
    print(f"            -> {'approve' if approve else 'reject'}")
    decision = {"type": "approve"} if approve else {"type": "reject", "message": "over 50"}
    return {"decisions": [{**decision, "approved_by": "sam@corp.com"}]}


def build_agent(guard: Guard) -> tuple[Any, AgentGuardMiddleware]:
    middleware = AgentGuardMiddleware(guard)
    model = ScriptedChatModel(script=list(SCRIPT))
    agent = create_agent(
        model,
        tools=[lookup_order, send_email, refund],
        system_prompt=guard.spec.intent,
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    return agent, middleware


def turn(agent: Any, middleware: AgentGuardMiddleware, number: int, text: str) -> None:
    print(f"\n== turn {number}: user: {text}")
    payload: Any = {"messages": [{"role": "user", "content": text}]}
    try:
        while True:
            result = agent.invoke(payload, THREAD, context=CUSTOMER)
            pending = result.get("__interrupt__")
            if not pending:
                break
            payload = Command(resume=scripted_supervisor(pending[0].value))
        print(f"  agent:    {result['messages'][-1].content}")
    except PolicyViolation as error:
        print(f"  STOPPED   {error}")
    engagement = middleware.engagement_for("support-demo")
    if engagement is not None:
        print(f"  timeline ({engagement.status.value}):")
        for line in format_timeline(engagement).splitlines():
            print(f"    {line}")


def main() -> None:
    guard = build_guard()
    agent, middleware = build_agent(guard)
    print(f"agent {guard.name!r} guarded by {SPEC.name}; capabilities: {sorted(guard.spec.capabilities)}")
    turn(agent, middleware, 1, "Where is order A-1? Email the news to bob@corp.com and to eve@evil.test.")
    turn(agent, middleware, 2, "Please refund 30 on A-1.")
    turn(agent, middleware, 3, "What do you think of my question?")
    turn(agent, middleware, 4, "Keep checking A-2 until it ships.")
    middleware.close()


if __name__ == "__main__":
    main()
