"""Fixtures for the agentguard-langchain tests: a shop agent spec, its tools (with call counters) and a
factory that builds a real ``create_agent`` graph around a scripted chat model."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.testing import ScriptedChatModel
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver

from agentguard import Engagement, Guard

SPEC = textwrap.dedent(
    """
    kind: openagentspec:v1/agent
    name: shop-agent
    description: The agent helps shop customers with their orders.
    intent: You help a customer with an order.
    owner: shop-team@corp.com
    capabilities:
      lookup-order:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      refund:
        input_restriction:
          require_review: supervisor
          assertion: recent["refund"].inputs.amount <= 100
      web-search:
        output_restriction:
          assertion: size(recent["web-search"].outputs.results) <= 2
      export-data:
        output_restriction:
          require_review: auditor
      wire-money:
        input_restriction:
          require_review: supervisor
        output_restriction:
          require_review: auditor
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok == true
      output:
        tool_name: toxicity-check
        assertion: output.ok == true && output.score < 0.5
    lifespan:
      retain_memory: {retain}
      short_circuit: 3
    """
)


@dataclass
class Shop:
    """The shop's tools and how often each really ran."""

    runs: Counter[str] = field(default_factory=Counter)
    tools: list[BaseTool] = field(default_factory=list)


def make_tools(shop: Shop) -> list[BaseTool]:
    @tool
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look an order up by its id."""
        shop.runs["lookup_order"] += 1
        return {"order_id": order_id, "status": "shipped"}

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        shop.runs["send_email"] += 1
        return f"sent to {to}"

    @tool
    def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order."""
        shop.runs["refund"] += 1
        return {"order_id": order_id, "refunded": amount}

    @tool
    def web_search(query: str) -> dict[str, Any]:
        """Search the web."""
        shop.runs["web_search"] += 1
        count = 5 if "many" in query else 1
        return {"results": [f"SECRET-{query}-{i}" for i in range(count)]}

    @tool
    def export_data(table: str) -> dict[str, Any]:
        """Export a table."""
        shop.runs["export_data"] += 1
        return {"rows": [f"{table}-row-1", f"{table}-row-2"]}

    @tool
    def wire_money(to: str, amount: float) -> dict[str, Any]:
        """Wire money."""
        shop.runs["wire_money"] += 1
        return {"wired": amount, "to": to, "reference": "W-1"}

    @tool
    def delete_everything() -> str:
        """Not a capability of the shop agent."""
        shop.runs["delete_everything"] += 1
        return "deleted"

    @tool
    def broken(reason: str) -> str:
        """A tool that fails."""
        shop.runs["broken"] += 1
        raise RuntimeError(reason)

    return [lookup_order, send_email, refund, web_search, export_data, wire_money, delete_everything, broken]


def pii_check(text: str) -> dict[str, bool]:
    return {"ok": "4111" not in text}


def toxicity_check(text: str) -> dict[str, Any]:
    return {"ok": True, "score": 0.9 if "stupid" in text.lower() else 0.1}


def make_guard(*, retain: bool = True, **options: Any) -> Guard:
    guard = Guard.from_yaml(SPEC.replace("{retain}", "true" if retain else "false"), **options)
    guard.register("pii-check", pii_check)
    guard.register("toxicity-check", toxicity_check)
    return guard


@dataclass
class Harness:
    guard: Guard
    model: ScriptedChatModel
    middleware: AgentGuardMiddleware
    agent: Any
    shop: Shop


BuildAgent = Callable[..., Harness]


@pytest.fixture
def build_agent() -> BuildAgent:
    """``build_agent(script, retain=, checkpointer=, extra_tools=, guard=, then=, inner=, **middleware options)``;
    ``inner``: middleware placed after the guard's (inside it)."""

    def build(
        script: Sequence[Any],
        *,
        retain: bool = True,
        checkpointer: bool = True,
        extra_tools: Sequence[BaseTool] = (),
        guard: Guard | None = None,
        then: Any = None,
        inner: Sequence[AgentMiddleware[Any, Any, Any]] = (),
        **options: Any,
    ) -> Harness:
        shop = Shop()
        shop.tools = [*make_tools(shop), *extra_tools]
        guard = guard or make_guard(retain=retain)
        model = ScriptedChatModel(script=list(script), then=then)
        middleware = AgentGuardMiddleware(guard, **options)
        agent = create_agent(
            model,
            tools=shop.tools,
            middleware=[middleware, *inner],
            checkpointer=InMemorySaver() if checkpointer else None,
        )
        return Harness(guard, model, middleware, agent, shop)

    return build


def config(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def user_says(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def spy_inputs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the input guardrail is run on (sync and async), in order."""
    seen: list[str] = []
    check, acheck = Engagement.check_input, Engagement.acheck_input

    def check_input(self: Engagement, text: str) -> str:
        seen.append(text)
        return check(self, text)

    async def acheck_input(self: Engagement, text: str) -> str:
        seen.append(text)
        return await acheck(self, text)

    monkeypatch.setattr(Engagement, "check_input", check_input)
    monkeypatch.setattr(Engagement, "acheck_input", acheck_input)
    return seen


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server (tests/redis_support.py) for the module's tests: each module that asks has its own."""
    from tests.redis_support import start_redis

    server = start_redis(Path(tmp_path_factory.mktemp("redis")))
    try:
        yield server.url
    finally:
        server.stop()
