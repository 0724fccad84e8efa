"""A streamed model answer is held until agentguard has checked it.

``Runner.run_streamed`` puts every event of the model's stream on the caller's queue as it arrives (the token
deltas, as ``raw_response_event``) and the parsed answer as ``message_output_created``, all *before* the SDK runs
the agent's output guardrails, which only see the final output. So with the output guardrail alone, a stopped
answer would already have reached the caller, token by token.

:class:`CheckedModel` sits between the SDK and the agent's model. When the guard checks answers
(:attr:`agentguard.Guard.checks_answers`: an output guardrail, a guardian), it reads each streamed response
whole before handing any of it on. If the response is the run's answer (a message, no tool or handoff call), it
is checked there, with the text the output guardrail would check. A stopped answer ends the run with the SDK's
``OutputGuardrailTripwireTriggered`` before a single event of it is queued. A passed answer is handed on as the
model sent it (its deltas in one burst), and the output guardrail does not check it a second time. Responses
that call tools are handed on unchecked once complete, as the non-streamed run shows them. When nothing checks
answers, the stream passes through untouched, token by token. ``get_response`` (``Runner.run``) is not changed:
there the output guardrail runs before the caller sees anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agentguard import PolicyViolation
from agentguard_openai_agents._host import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    ItemHelpers,
    Model,
    ModelResponse,
    ModelRetryAdvice,
    ModelRetryAdviceRequest,
    ModelSettings,
    ModelTracing,
    OutputGuardrailResult,
    OutputGuardrailTripwireTriggered,
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponsePromptParam,
    Tool,
    TResponseInputItem,
    TResponseOutputItem,
    TResponseStreamEvent,
)

if TYPE_CHECKING:
    from agentguard_openai_agents._adapter import AgentGuard

__all__ = ["CheckedModel"]

_FAILED = frozenset({"response.incomplete", "response.failed", "error", "response.error"})
"""Terminal events of a response that did not complete (the SDK raises on them)."""


class CheckedModel(Model):
    """The agent's model, its streamed answers held until checked (see the module docstring).

    Every other attribute is the wrapped model's, so what the SDK looks up on a model (prompt cache keys, the
    model name) still finds it.
    """

    def __init__(self, adapter: AgentGuard, inner: Model, agent: Agent[Any]) -> None:
        self.adapter = adapter
        self.inner = inner
        self.agent = agent
        """The guarded agent, named in the tripwire when its answer is stopped."""

    def __getattr__(self, name: str) -> Any:
        if name in {"adapter", "inner", "agent"}:  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """Not streamed: the output guardrail checks the answer before the caller sees any of it, so it is
        passed on as the model gives it (with whatever the SDK passes, in any version)."""
        self.adapter.forget_answer()
        return await self.inner.get_response(*args, **kwargs)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        self.adapter.forget_answer()
        checked = self.adapter.guard.checks_answers  # asked per call: a guardian may be set at any time
        stream = self.inner.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        try:
            if not checked:
                async for event in stream:
                    yield event
                return
            held = [event async for event in stream]
        finally:
            aclose = getattr(stream, "aclose", None)
            if callable(aclose):
                await aclose()
        for event in await self._release(held, output_schema):
            yield event

    async def _release(
        self, held: list[TResponseStreamEvent], output_schema: AgentOutputSchemaBase | None
    ) -> list[TResponseStreamEvent]:
        """The events of one whole response the caller may see; raises the tripwire for a stopped answer."""
        completed = next((e for e in reversed(held) if isinstance(e, ResponseCompletedEvent)), None)
        if completed is None:
            # The response failed: the SDK raises on its terminal event. The partial answer before it is unchecked.
            last = held[-1] if held else None
            return [_without_output(last)] if last is not None and last.type in _FAILED else []
        output = list(completed.response.output) or [
            e.item for e in held if isinstance(e, ResponseOutputItemDoneEvent)
        ]
        final = _final_output(output, output_schema)
        if final is not _NOT_AN_ANSWER:
            verdict = await self.adapter.check_answer(final)
            if verdict.tripwire_triggered:
                guardrail = self.adapter.output_guardrail
                raise OutputGuardrailTripwireTriggered(
                    OutputGuardrailResult(
                        guardrail=guardrail, agent_output=final, agent=self.agent, output=verdict
                    )
                )
        return held

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """A stopped answer is final: no retry policy may ask the model again for another one. (The check
        raises the tripwire, or agentguard's own error, e.g. a guardian's denial; the model raises neither.)"""
        error = request.error
        ours = (
            isinstance(error, OutputGuardrailTripwireTriggered)
            and error.guardrail_result.guardrail is self.adapter.output_guardrail
        )
        if ours or isinstance(error, PolicyViolation):
            return ModelRetryAdvice(
                suggested=False, replay_safety="unsafe", reason="agentguard stopped the answer"
            )
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        await self.inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        # The SDK releases run-scoped resources (e.g. a websocket) through this hook of the model it resolved.
        await self.inner._cleanup_on_run_end(owner)


_NOT_AN_ANSWER: Any = object()


def _final_output(output: list[TResponseOutputItem], schema: AgentOutputSchemaBase | None) -> Any:
    """The final output the SDK makes of a response that ends the run, as its output guardrail receives it;
    ``_NOT_AN_ANSWER`` when the response calls a function tool or a handoff (the run goes on) or says nothing.

    Mirrors the SDK (0.24): the text of the last message, parsed by the output schema unless it is plain text.
    Text the schema rejects is checked as it stands: the SDK fails the run then, after the text was streamed.
    """
    if any(isinstance(item, ResponseFunctionToolCall) for item in output):
        return _NOT_AN_ANSWER
    messages = [item for item in output if isinstance(item, ResponseOutputMessage)]
    if not messages:
        return _NOT_AN_ANSWER
    text = ItemHelpers.extract_text(messages[-1]) or ""
    if schema is None or schema.is_plain_text():
        return text
    try:
        return schema.validate_json(text)
    except Exception:
        return text


def _without_output(event: TResponseStreamEvent) -> TResponseStreamEvent:
    """A failed response's terminal event without the partial output it carries."""
    response = getattr(event, "response", None)
    if isinstance(response, Response):
        return event.model_copy(update={"response": response.model_copy(update={"output": []})})
    return event
