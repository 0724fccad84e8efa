"""A scripted chat model for tests, demos and benchmarks: no API key, no network, deterministic.

::

    from agentguard_langchain.testing import ScriptedChatModel, answer, calls

    model = ScriptedChatModel(script=[
        calls(("lookup_order", {"order_id": "A-1"})),     # first turn: ask for a tool
        answer("Order A-1 has shipped."),                  # then answer
    ])
    agent = create_agent(model, tools=[lookup_order], middleware=[AgentGuardMiddleware(guard)])

An entry of the script may also be a function of the messages the model was given (for replies that depend
on what came back from a tool). ``model.received`` keeps every list of messages the model was called with.
``latency_ms`` makes every reply take that long, as a hosted model's would: ``invoke`` sleeps, ``ainvoke``
awaits ``asyncio.sleep`` (the event loop runs on, as it would while a provider's HTTP call is in flight).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import Field, PrivateAttr

from agentguard_langchain._host import AIMessage, BaseMessage, ChatGeneration

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatResult
except ImportError as exc:  # pragma: no cover
    raise ImportError("agentguard_langchain.testing needs langchain-core>=1") from exc

__all__ = ["Reply", "ScriptedChatModel", "answer", "calls"]

Reply = AIMessage | Callable[[list[BaseMessage]], AIMessage]

_ids = itertools.count(1)


def calls(*tool_calls: tuple[str, dict[str, Any]], text: str = "") -> AIMessage:
    """An AI message asking for tool calls ``(name, args)``; each gets a fresh tool call id."""
    return AIMessage(
        content=text,
        tool_calls=[
            {"name": n, "args": a, "id": f"call_{next(_ids)}", "type": "tool_call"} for n, a in tool_calls
        ],
    )


def answer(text: str) -> AIMessage:
    """A final AI answer (no tool calls)."""
    return AIMessage(content=text)


class ScriptedChatModel(BaseChatModel):
    """A chat model that replies from a script, one entry per call; ``bind_tools`` returns the model."""

    script: list[Any] = Field(default_factory=list)
    """The replies in order: ``AIMessage`` or ``callable(messages) -> AIMessage``."""
    then: Any = None
    """What to reply once the script is used up (``None``: raise ``IndexError``)."""
    received: list[list[BaseMessage]] = Field(default_factory=list)
    latency_ms: float = 0.0
    """How long each reply takes."""

    _position: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "agentguard-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def reset(self, script: Sequence[Reply] | None = None) -> None:
        with self._lock:
            if script is not None:
                self.script = list(script)
            self._position = 0
            self.received.clear()

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.received.append(list(messages))
            if self._position < len(self.script):
                reply = self.script[self._position]
                self._position += 1
            elif self.then is not None:
                reply = self.then
            else:
                raise IndexError(f"the script has only {len(self.script)} replies")
        message = reply(messages) if callable(reply) else reply
        if not isinstance(message, AIMessage):
            raise TypeError(f"a script entry must give an AIMessage, not {type(message).__name__}")
        return message.model_copy(update={"id": None})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_ms:
            time.sleep(self.latency_ms / 1000)
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])
