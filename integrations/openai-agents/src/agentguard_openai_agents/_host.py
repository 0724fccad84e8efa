"""The one place that imports the OpenAI Agents SDK: a missing or too-old ``openai-agents`` fails with one
clear error. Every other module of this package imports SDK names from here."""

from __future__ import annotations

try:
    from agents import (
        Agent,
        AgentOutputSchemaBase,
        AgentsException,
        FunctionTool,
        GuardrailFunctionOutput,
        Handoff,
        InputGuardrail,
        InputGuardrailTripwireTriggered,
        ItemHelpers,
        Model,
        ModelResponse,
        ModelRetryAdvice,
        ModelRetryAdviceRequest,
        ModelSettings,
        ModelTracing,
        OutputGuardrail,
        OutputGuardrailResult,
        OutputGuardrailTripwireTriggered,
        RunContextWrapper,
        RunErrorDetails,
        RunHooks,
        Session,
        Tool,
        TResponseInputItem,
        handoff,
    )
    from agents.items import TResponseOutputItem, TResponseStreamEvent
    from agents.memory import SessionSettings
    from agents.tool import invoke_function_tool
    from agents.tool_context import ToolContext
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseContentPartAddedEvent,
        ResponseContentPartDoneEvent,
        ResponseFunctionToolCall,
        ResponseOutputItemAddedEvent,
        ResponseOutputItemDoneEvent,
        ResponseOutputMessage,
        ResponseOutputRefusal,
        ResponseOutputText,
        ResponseReasoningItem,
        ResponseRefusalDeltaEvent,
        ResponseRefusalDoneEvent,
        ResponseTextDeltaEvent,
        ResponseTextDoneEvent,
    )
    from openai.types.responses.response_prompt_param import ResponsePromptParam
    from openai.types.responses.response_reasoning_item import Summary as ReasoningSummary
except ImportError as exc:  # pragma: no cover - exercised only without the host installed
    raise ImportError(
        f"agentguard-openai-agents needs openai-agents>=0.24 ({exc}): pip install agentguard-openai-agents"
    ) from exc

__all__ = [
    "Agent",
    "AgentOutputSchemaBase",
    "AgentsException",
    "FunctionTool",
    "GuardrailFunctionOutput",
    "Handoff",
    "InputGuardrail",
    "InputGuardrailTripwireTriggered",
    "ItemHelpers",
    "Model",
    "ModelResponse",
    "ModelRetryAdvice",
    "ModelRetryAdviceRequest",
    "ModelSettings",
    "ModelTracing",
    "OutputGuardrail",
    "OutputGuardrailResult",
    "OutputGuardrailTripwireTriggered",
    "ReasoningSummary",
    "Response",
    "ResponseCompletedEvent",
    "ResponseContentPartAddedEvent",
    "ResponseContentPartDoneEvent",
    "ResponseFunctionToolCall",
    "ResponseOutputItemAddedEvent",
    "ResponseOutputItemDoneEvent",
    "ResponseOutputMessage",
    "ResponseOutputRefusal",
    "ResponseOutputText",
    "ResponsePromptParam",
    "ResponseReasoningItem",
    "ResponseRefusalDeltaEvent",
    "ResponseRefusalDoneEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "RunContextWrapper",
    "RunErrorDetails",
    "RunHooks",
    "Session",
    "SessionSettings",
    "TResponseInputItem",
    "TResponseOutputItem",
    "TResponseStreamEvent",
    "Tool",
    "ToolContext",
    "handoff",
    "invoke_function_tool",
]
