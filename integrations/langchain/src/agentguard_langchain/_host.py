"""The one place that imports the host framework: a missing or too-old LangChain fails with one clear error.

Every other module of this package imports LangChain, LangGraph and langchain-core names from here.
"""

from __future__ import annotations

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
        ToolCallRequest,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.outputs import ChatGeneration, LLMResult
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.config import var_child_runnable_config
    from langchain_core.tools import BaseTool, tool
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.config import get_config
    from langgraph.constants import TAG_NOSTREAM
    from langgraph.errors import GraphBubbleUp, ParentCommand
    from langgraph.runtime import Runtime
    from langgraph.store.base import BaseStore, GetOp, Op, PutOp, Result, SearchOp
    from langgraph.types import Command, interrupt
    from langsmith.utils import tracing_is_enabled as langsmith_tracing
except ImportError as exc:  # pragma: no cover - exercised only without the host installed
    raise ImportError(
        f"agentguard-langchain needs langchain>=1, langchain-core>=1 and langgraph>=1 ({exc}): "
        "pip install agentguard-langchain"
    ) from exc

__all__ = [
    "CONFIG_KEY_RUNTIME",
    "TAG_NOSTREAM",
    "AIMessage",
    "AgentMiddleware",
    "AgentState",
    "AnyMessage",
    "BaseCallbackHandler",
    "BaseChatModel",
    "BaseMessage",
    "BaseStore",
    "BaseTool",
    "ChatGeneration",
    "ChatMessage",
    "Command",
    "Document",
    "ExtendedModelResponse",
    "GetOp",
    "GraphBubbleUp",
    "HumanMessage",
    "JsonPlusSerializer",
    "LLMResult",
    "ModelRequest",
    "ModelResponse",
    "Op",
    "ParentCommand",
    "PrivateStateAttr",
    "PutOp",
    "Result",
    "RunnableConfig",
    "Runtime",
    "SearchOp",
    "SystemMessage",
    "ToolCallRequest",
    "ToolMessage",
    "get_config",
    "interrupt",
    "langsmith_tracing",
    "streamed",
    "tool",
    "var_child_runnable_config",
]


def streamed() -> tuple[bool, bool]:
    """Whether the current run streams with ``stream_mode="tools"``, and whether with ``"messages"``.

    ``"tools"``: LangGraph gives every tool run a callback handler that puts the tool's result (and the deltas
    it emits) on the stream as the tool ends, before any middleware has it: a result the guard withholds would
    be streamed all the same. ``"messages"``: its handler puts the tokens of every chat model run inside the
    graph on the stream, a model a tool calls included. The handlers are LangGraph's private
    ``StreamToolCallHandler`` and ``StreamMessagesHandler``, recognised by their class names (a subclass too),
    so that a move of the classes cannot hide them.
    """
    config = var_child_runnable_config.get()
    if config is None:  # not inside a run
        return False, False
    callbacks = config.get("callbacks")
    handlers = (
        callbacks
        if isinstance(callbacks, list)
        else [*getattr(callbacks, "handlers", ()), *getattr(callbacks, "inheritable_handlers", ())]
    )
    names = {cls.__name__ for handler in handlers for cls in type(handler).__mro__}
    return "StreamToolCallHandler" in names, "StreamMessagesHandler" in names
