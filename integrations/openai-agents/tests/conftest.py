"""Fixtures for the agentguard-openai-agents tests: the shop agent spec, its function tools (with run counters)
and a factory that wraps a real SDK ``Agent`` around a scripted model."""

from __future__ import annotations

import textwrap
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel
from agents import Agent, FunctionTool, Model, function_tool, set_tracing_disabled

from agentguard import Guard
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.guardian_server.support import SHOP_GUARDIAN_RULES

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
      billing:
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

set_tracing_disabled(True)  # the SDK would try to export traces to OpenAI


@dataclass
class Shop:
    """The shop's tools and how often each really ran (with which arguments)."""

    runs: Counter[str] = field(default_factory=Counter)
    args: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def ran(self, name: str, **args: Any) -> None:
        self.runs[name] += 1
        self.args.append((name, args))


def make_tools(shop: Shop) -> list[FunctionTool]:
    @function_tool
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look an order up by its id."""
        shop.ran("lookup_order", order_id=order_id)
        return {"order_id": order_id, "status": "shipped"}

    @function_tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        shop.ran("send_email", to=to, body=body)
        return f"sent to {to}"

    @function_tool
    def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order."""
        shop.ran("refund", order_id=order_id, amount=amount)
        return {"order_id": order_id, "refunded": amount}

    @function_tool
    def web_search(query: str) -> dict[str, Any]:
        """Search the web."""
        shop.ran("web_search", query=query)
        count = 5 if "many" in query else 1
        return {"results": [f"SECRET-{query}-{i}" for i in range(count)]}

    @function_tool
    def export_data(table: str) -> dict[str, Any]:
        """Export a table."""
        shop.ran("export_data", table=table)
        return {"rows": [f"{table}-row-1", f"{table}-row-2"]}

    @function_tool
    def wire_money(to: str, amount: float) -> dict[str, Any]:
        """Wire money."""
        shop.ran("wire_money", to=to, amount=amount)
        return {"wired": amount, "to": to}

    @function_tool
    def delete_everything() -> str:
        """Not a capability of the shop agent."""
        shop.ran("delete_everything")
        return "deleted"

    return [lookup_order, send_email, refund, web_search, export_data, wire_money, delete_everything]


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
    guarded: AgentGuard
    model: ScriptedModel
    agent: Agent[Any]
    shop: Shop

    def tool_outputs(self, result: Any) -> list[str]:
        """What the model was given as tool output, in order."""
        return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


BuildAgent = Callable[..., Harness]


@pytest.fixture
def build_agent() -> BuildAgent:
    """``build_agent(script, retain=, guard=, handoffs=)``: a wrapped shop agent on a scripted model."""

    def build(
        script: Sequence[Any],
        *,
        retain: bool = True,
        guard: Guard | None = None,
        handoffs: Sequence[Agent[Any]] = (),
    ) -> Harness:
        shop = Shop()
        guard = guard or make_guard(retain=retain)
        model = ScriptedModel(list(script))
        guarded = AgentGuard(guard)
        agent = Agent(name="shop", model=model, tools=make_tools(shop), handoffs=list(handoffs))
        return Harness(guard, guarded, model, guarded.wrap(agent), shop)

    return build


@pytest.fixture
def shop_guard() -> Callable[..., Guard]:
    return make_guard


@pytest.fixture(scope="session")
def guardian() -> Iterator[RunningServer]:
    """The real reference guardian on 127.0.0.1, with rules that deny and modify."""
    with serve_in_thread(create_app(parse_rules(SHOP_GUARDIAN_RULES))) as server:
        yield server


def reachable(root: object, text: str) -> list[str]:
    """Where ``text`` can be read from ``root`` by following attributes, items and an exception's args, cause and
    context: what an app that logs or reports ``root`` could record. Agents and models are not followed (a scripted
    model holds its script), nor code (functions, methods, classes, modules)."""
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("", root)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if text in value:
                found.append(path)
            continue
        skipped = (Agent, Model, type, types.FunctionType, types.MethodType, types.ModuleType)
        if id(value) in seen or isinstance(value, skipped):
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            stack += [(f"{path}[{key!r}]", item) for key, item in value.items()]
        elif isinstance(value, list | tuple | set | frozenset):
            stack += [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        if isinstance(value, BaseException):
            stack += [
                (f"{path}.{name}", getattr(value, name)) for name in ("args", "__cause__", "__context__")
            ]
        stack += [(f"{path}.{name}", item) for name, item in getattr(value, "__dict__", {}).items()]
    return found
