"""A scripted model for tests, demos and benchmarks: no API key, no network, deterministic.

::

    from agents import Agent, Runner
    from agentguard_openai_agents.testing import ScriptedModel, answer, calls

    model = ScriptedModel([
        calls(("lookup_order", {"order_id": "A-1"}), text="Let me look."),  # ask for a tool, saying so
        answer("Order A-1 has shipped."),                                  # then answer
    ])
    agent = Agent(name="support", model=model, tools=[lookup_order])

It is the SDK's own :class:`agents.testing.ScriptedModel` (``get_response`` and ``stream_response``, so
``Runner.run``, ``run_sync`` and ``run_streamed`` all work), plus ``latency_ms``: each reply awaits that long,
as a hosted model's HTTP call would. An entry may also be a function of the :class:`~agents.testing.ModelCall`
(for replies that depend on what a tool returned): wrap it with ``ModelStep.respond``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable
from typing import Any

try:
    from agents.items import TResponseOutputItem, TResponseStreamEvent
    from agents.testing import ModelStep, assistant_message, function_call
    from agents.testing import ScriptedModel as _SDKScriptedModel
    from agents.testing.model import ModelScriptItem
except ImportError as exc:  # pragma: no cover
    raise ImportError("agentguard_openai_agents.testing needs openai-agents>=0.24") from exc

__all__ = ["ModelStep", "ScriptedModel", "answer", "calls"]

_ids = itertools.count(1)


def calls(*tool_calls: tuple[str, dict[str, Any]], text: str = "") -> list[TResponseOutputItem]:
    """One model reply asking for tool calls ``(name, args)``; each gets a fresh call id. With ``text``, the
    reply also says something: an assistant message (with a fresh item id) before the calls, as a model
    that explains what it is about to do returns it."""
    said = [assistant_message(text, item_id=f"msg_{next(_ids)}")] if text else []
    return said + [function_call(name, args, call_id=f"call_{next(_ids)}") for name, args in tool_calls]


def answer(text: str) -> list[TResponseOutputItem]:
    """A final answer (no tool calls)."""
    return [assistant_message(text)]


class ScriptedModel(_SDKScriptedModel):
    """The SDK's scripted model; every reply takes ``latency_ms`` (default 0)."""

    def __init__(self, steps: Iterable[ModelScriptItem] = (), *, latency_ms: float = 0) -> None:
        super().__init__(steps)
        self.latency_ms = latency_ms

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        async for event in super().stream_response(*args, **kwargs):
            yield event
