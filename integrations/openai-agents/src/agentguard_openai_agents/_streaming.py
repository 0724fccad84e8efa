"""A streamed model answer is held until agentguard has checked it; text beside tool calls is checked too.

``Runner.run_streamed`` puts every event of the model's stream on the caller's queue as it arrives (the token
deltas, as ``raw_response_event``) and the parsed answer as ``message_output_created``, all *before* the SDK runs
the agent's output guardrails, which only see the final output. So with the output guardrail alone, a stopped
answer would already have reached the caller, token by token.

:class:`CheckedModel` sits between the SDK and the agent's model. When the guard checks answers
(:attr:`agentguard.Guard.checks_answers`: an output guardrail, a guardian), it reads each streamed response
whole before handing any of it on. If the response is the run's answer (a message, no tool or handoff call), it
is checked there, with the text the output guardrail would check. A stopped answer ends the run with the SDK's
``OutputGuardrailTripwireTriggered`` before a single event of it is queued. A passed answer is handed on as the
model sent it (its deltas in one burst), and the output guardrail does not check it a second time. What is
checked is the completed response's output (as the SDK takes it), so only that is handed on: a malformed stream's
events of other items, or text that differs from it, are dropped or replaced (:func:`_of_the_output`,
:func:`_streamed`). When nothing
checks answers, the stream passes through untouched, token by token. Not streamed (``Runner.run``, ``run_sync``),
the SDK still hands the response out before its output guardrail runs (to the run's hooks, into the run data an
error carries), so ``get_response`` checks the answer the same way, before the SDK sees the response.

Every other message of a response reaches the caller too, with no output guardrail ever run on it: the text a
model writes beside its tool calls, a message before its answer, a refusal, a reasoning item's summary (see
:mod:`agentguard_openai_agents._messages`). So ``stream_response`` and ``get_response`` (``Runner.run``,
``run_sync``) both check each such message before the SDK sees the response: before it makes items or events of
it, and before it runs any of the response's tools. A failed check ends the run there (the SDK's output tripwire,
or the guardian's denial); a guardian's ``modify`` puts its text in the message's place, in the response and,
streamed, in the events (the message's own text events are replaced by the new text's).
"""

from __future__ import annotations

import dataclasses
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
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponsePromptParam,
    ResponseReasoningItem,
    ResponseRefusalDeltaEvent,
    ResponseRefusalDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    Tool,
    TResponseInputItem,
    TResponseOutputItem,
    TResponseStreamEvent,
)
from agentguard_openai_agents._messages import Shown, answer_message, beside_answer
from agentguard_openai_agents._tools import UnguardedTool
from agentguard_openai_agents._withheld import OutputWithheld

if TYPE_CHECKING:
    from agentguard_openai_agents._adapter import AgentGuard

__all__ = ["CheckedModel"]

_FAILED = frozenset({"response.incomplete", "response.failed", "error", "response.error"})
"""Terminal events of a response that did not complete (the SDK raises on them)."""


class CheckedModel(Model):
    """The agent's model, its streamed answers held until checked, the text beside its tool calls checked
    before the SDK sees it (see the module docstring).

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

    async def get_response(
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
    ) -> ModelResponse:
        """Not streamed, the SDK still hands a response out before its output guardrail runs: to the run's hooks
        (``on_llm_end``), and into the run's data that an error carries. So the response is checked here, whole,
        before the SDK sees it, as a streamed one is: its answer (the output guardrail's check, made once) and the
        text beside its tool calls, a guardian's replacement taking that text's place."""
        self.adapter.forget_answer()
        self.adapter.check_tools(self.agent.name, tools, handoffs)
        response = await self.inner.get_response(
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
        self.adapter.check_provider_run(self.agent, response.output)
        if not self.adapter.guard.checks_answers:
            return response
        output = list(response.output)
        replaced = await self._check(output, output_schema)
        if not replaced:
            return response
        return dataclasses.replace(
            response, output=[replaced[i][1] if i in replaced else item for i, item in enumerate(output)]
        )

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
        self.adapter.check_tools(self.agent.name, tools, handoffs)
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
                    self.adapter.check_provider_run(self.agent, _items(event))
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
        """The events of one whole response the caller may see; raises :class:`OutputWithheld` for a stopped
        answer."""
        completed = next((e for e in reversed(held) if isinstance(e, ResponseCompletedEvent)), None)
        if completed is None:
            # The response failed: the SDK raises on its terminal event. The partial answer before it is unchecked.
            last = held[-1] if held else None
            return [_without_output(last)] if last is not None and last.type in _FAILED else []
        # (output index, item): the SDK takes the output of the completed response, else that of the done events.
        indexed = list(enumerate(completed.response.output)) or [
            (e.output_index, e.item) for e in held if isinstance(e, ResponseOutputItemDoneEvent)
        ]
        output = [item for _, item in indexed]
        self.adapter.check_provider_run(self.agent, output)
        checked = await self._check(output, output_schema)
        replaced = {indexed[position][0]: pair for position, pair in checked.items()}
        items = dict(indexed)
        held = [e for event in held if (e := _of_the_output(event, items, completed)) is not None]
        for index, item in items.items():
            if index not in replaced and isinstance(item, Shown) and not _streamed(held, index, item):
                replaced[index] = (item, item)  # its events carry other text than was checked: this instead
            elif isinstance(item, ResponseFunctionToolCall) and not _arguments_streamed(held, index, item):
                # Other arguments than the call's: its output_item.done carries the call as checked.
                held = [
                    e
                    for e in held
                    if getattr(e, "output_index", None) != index or not e.type.startswith(_ARGUMENT_EVENTS)
                ]
        return _with_replaced(held, replaced, output) if replaced else held

    async def _check(
        self, output: list[TResponseOutputItem], output_schema: AgentOutputSchemaBase | None
    ) -> dict[int, tuple[Shown, Shown]]:
        """Check one whole response before the SDK sees any of it: each message the output guardrail will not see,
        then the run's answer if the response is one (:class:`OutputWithheld` when it is stopped). Returns the
        messages a guardian's ``modify`` replaced, with their replacements, by position in ``output``."""
        replaced: dict[int, tuple[Shown, Shown]] = {}
        for position, message in beside_answer(output):
            passed = await self.adapter.check_message(self.agent, message)
            if passed is not message:
                replaced[position] = (message, passed)
        final = _final_output(output, output_schema)
        if final is not _NOT_AN_ANSWER:
            await self.adapter.check_answer(self.agent, final)
        return replaced

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """A stopped answer is final: no retry policy may ask the model again for another one. (The check
        raises :class:`OutputWithheld`, or agentguard's own error, e.g. a guardian's denial of text beside tool
        calls; the model raises neither.)"""
        if isinstance(request.error, OutputWithheld | PolicyViolation | UnguardedTool):
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
    ``_NOT_AN_ANSWER`` when the response keeps the run going (a function tool or handoff call), says nothing, or
    refuses (see :func:`~agentguard_openai_agents._messages.answer_message`).

    Mirrors the SDK (0.24): the text of the last message, parsed by the output schema unless it is plain text.
    Text the schema rejects is checked as it stands: the SDK fails the run then, after the text was streamed.
    """
    answer = answer_message(output)
    if answer is None:
        return _NOT_AN_ANSWER
    text = ItemHelpers.extract_text(answer) or ""
    if schema is None or schema.is_plain_text():
        return text
    try:
        return schema.validate_json(text)
    except Exception:
        return text


def _items(event: TResponseStreamEvent) -> list[Any]:
    """The output items a stream event carries: its item (``output_item.added`` / ``done``: the first event of each
    item), or the output of its response (``response.completed``)."""
    response = getattr(event, "response", None)
    return [getattr(event, "item", None), *(response.output if isinstance(response, Response) else ())]


_TEXT_EVENTS = ("response.output_text.", "response.refusal.", "response.content_part.", "response.reasoning")
"""Event types that carry an item's text, which the checks read only of messages and reasoning items."""


_RESPONSE_EVENTS = frozenset(
    {"response.created", "response.in_progress", "response.queued", "response.completed"}
)
"""The events of the response itself (no output index) that the caller is handed; any other event without an
output index (an error event beside a completed response, an audio transcript) carries what no check read."""

_PLACE = frozenset({"type", "item_id", "output_index", "content_index", "summary_index", "sequence_number"})
"""The fields of a stream event that say where it belongs, not what the model wrote."""

_ARGUMENT_EVENTS = ("response.function_call_arguments.",)


def _of_the_output(
    event: TResponseStreamEvent, items: dict[int, TResponseOutputItem], completed: ResponseCompletedEvent
) -> TResponseStreamEvent | None:
    """``event`` as the caller may see it of a checked response (``items``: its output, by output index), else
    ``None``: denied unless known. The checks read the completed response's output, so the caller is handed
    the response's own events (its output, if any, only in the completed one), each item's ``output_item``
    events carrying the item as checked, the text events of a message or reasoning item (their token
    alternatives, ``logprobs``, left out: no check read them; that they add up to the checked text is
    :func:`_streamed`'s), a function call's argument events (:func:`_arguments_streamed`), and any other
    event of an item that carries nothing but where it belongs. Everything else a malformed or hostile stream
    may send -- events of an item the output lacks or under another item's id, text at a tool call's index,
    events of no item, payloads of kinds this does not know -- is dropped."""
    index = getattr(event, "output_index", None)
    if index is None:
        if event.type not in _RESPONSE_EVENTS:
            return None
        response = getattr(event, "response", None)
        if event is completed or not isinstance(response, Response) or not response.output:
            return event
        return _without_output(event)
    item = items.get(index)
    if item is None or getattr(event, "item_id", None) not in (None, getattr(item, "id", None)):
        return None
    if isinstance(event, ResponseOutputItemDoneEvent):
        return event if event.item == item else event.model_copy(update={"item": item})
    if isinstance(event, ResponseOutputItemAddedEvent):
        started = _started(item) if isinstance(item, Shown) else item
        return event if event.item == started else event.model_copy(update={"item": started})
    if isinstance(item, Shown) and event.type.startswith(_TEXT_EVENTS):
        return event.model_copy(update={"logprobs": []}) if getattr(event, "logprobs", None) else event
    if isinstance(item, ResponseFunctionToolCall) and event.type.startswith(_ARGUMENT_EVENTS):
        return event
    return None if _carries(event) else event


def _carries(event: TResponseStreamEvent) -> bool:
    """Does ``event`` carry anything beyond where it belongs (a text, a list, an object)?"""
    for name in type(event).model_fields:
        if name not in _PLACE:
            value = getattr(event, name, None)
            if value is not None and not isinstance(value, bool | int | float):
                return True
    return False


def _arguments_streamed(held: list[TResponseStreamEvent], index: int, call: ResponseFunctionToolCall) -> bool:
    """Do ``held``'s argument events of the function call at ``index`` carry its arguments as checked: deltas
    that add up to them, a done event with them?"""
    pieces = ""
    for event in held:
        if getattr(event, "output_index", None) != index or not event.type.startswith(_ARGUMENT_EVENTS):
            continue
        if event.type.endswith(".delta"):
            delta = getattr(event, "delta", None)
            if not isinstance(delta, str):
                return False
            pieces += delta
        elif getattr(event, "arguments", None) != call.arguments:
            return False
    return pieces in ("", call.arguments)


_DELTAS = {
    "response.output_text.delta": "c",
    "response.refusal.delta": "c",
    "response.reasoning_text.delta": "c",
    "response.reasoning_summary_text.delta": "s",
}
_WHOLE = {
    "response.output_text.done": "c",
    "response.refusal.done": "c",
    "response.reasoning_text.done": "c",
    "response.content_part.added": "c",
    "response.content_part.done": "c",
    "response.reasoning_summary_text.done": "s",
    "response.reasoning_summary_part.added": "s",
    "response.reasoning_summary_part.done": "s",
}
"""The text events of a message or reasoning item, by the text they carry: a content part's (``c``, by
``content_index``) or a summary part's (``s``, by ``summary_index``), a piece (a delta) or the whole of it."""


def _streamed(held: list[TResponseStreamEvent], index: int, item: Shown) -> bool:
    """Do ``held``'s text events of the item at ``index`` carry the text that was checked, and nothing else? Its
    deltas add up, part by part, to the part's text; each event with a whole part carries that text (a part
    just added, none). Any other text event of the item (one this does not know) is not vouched for."""
    expected: dict[tuple[str, int], str] = {
        ("c", n): _text(part) for n, part in enumerate(item.content or ())
    }
    if isinstance(item, ResponseReasoningItem):
        expected.update((("s", n), part.text) for n, part in enumerate(item.summary))
    pieces: dict[tuple[str, int], str] = {}
    for event in held:
        if getattr(event, "output_index", None) != index or not event.type.startswith(_TEXT_EVENTS):
            continue
        channel = _DELTAS.get(event.type) or _WHOLE.get(event.type)
        if channel is None:
            return False
        key = (channel, getattr(event, "summary_index" if channel == "s" else "content_index", -1))
        if key not in expected:
            return False
        if event.type in _DELTAS:
            delta = getattr(event, "delta", None)
            if not isinstance(delta, str):
                return False
            pieces[key] = pieces.get(key, "") + delta
            continue
        whole = (
            getattr(event, "text", None)
            or getattr(event, "refusal", None)
            or _text(getattr(event, "part", None))
        )
        if whole != expected[key] and not (whole == "" and event.type.endswith(".added")):
            return False
    return all(pieces.get(key, text) == text for key, text in expected.items())


def _text(part: Any) -> str:
    """The text of a content or summary part (a refusal's, for a refusal part)."""
    return getattr(part, "text", None) or getattr(part, "refusal", None) or ""


def _without_output(event: TResponseStreamEvent) -> TResponseStreamEvent:
    """A failed response's terminal event without the partial output it carries."""
    response = getattr(event, "response", None)
    if isinstance(response, Response):
        return event.model_copy(update={"response": response.model_copy(update={"output": []})})
    return event


def _with_replaced(
    held: list[TResponseStreamEvent],
    replaced: dict[int, tuple[Shown, Shown]],
    output: list[TResponseOutputItem],
) -> list[TResponseStreamEvent]:
    """A response's events with guardian replacements of messages, by output index, renumbered.

    A replaced item's own events (text, refusal and reasoning deltas, content and summary parts, annotations: all
    carry its original text) are dropped; its ``output_item`` events carry the replacement, a message's text also
    arriving as the events of one content part just before its ``output_item.done`` (a reasoning item's only in
    that event); every response an event carries holds the replacement.
    An event is the message's by its output index, or by its item id where no other item has that id.
    """
    counts: dict[str, int] = {}
    for item in output:
        item_id = getattr(item, "id", None)
        if isinstance(item_id, str):
            counts[item_id] = counts.get(item_id, 0) + 1
    by_id = {old.id: index for index, (old, _) in replaced.items() if old.id and counts.get(old.id) == 1}
    events: list[TResponseStreamEvent] = []
    for event in held:
        index = getattr(event, "output_index", None)
        if index not in replaced:
            carried = getattr(event, "item", None)
            index = by_id.get(getattr(event, "item_id", None) or getattr(carried, "id", None) or "")
        if index is not None:
            new = replaced[index][1]
            if isinstance(event, ResponseOutputItemAddedEvent):
                events.append(event.model_copy(update={"item": _started(new)}))
            elif isinstance(event, ResponseOutputItemDoneEvent):
                if isinstance(new, ResponseOutputMessage):
                    events.extend(_part_events(new, event.output_index))
                events.append(event.model_copy(update={"item": new}))
            continue  # one of the original text's events
        response = getattr(event, "response", None)
        if isinstance(response, Response) and any(i in replaced for i in range(len(response.output))):
            items = [replaced[i][1] if i in replaced else item for i, item in enumerate(response.output)]
            event = event.model_copy(update={"response": response.model_copy(update={"output": items})})
        events.append(event)
    first = getattr(held[0], "sequence_number", 0) if held else 0
    return [
        e.model_copy(update={"sequence_number": first + n}) if hasattr(e, "sequence_number") else e
        for n, e in enumerate(events)
    ]


def _started(item: Shown) -> Shown:
    """``item`` as its ``output_item.added`` event carries it: in progress, no text yet."""
    empty: dict[str, Any] = (
        {"content": []} if isinstance(item, ResponseOutputMessage) else {"summary": [], "content": None}
    )
    return item.model_copy(update={**empty, "status": "in_progress"})


def _part_events(message: ResponseOutputMessage, output_index: int) -> list[TResponseStreamEvent]:
    """The stream events of a message's content parts, as a provider sends them (numbered later)."""
    events: list[TResponseStreamEvent] = []
    for content_index, part in enumerate(message.content):
        where: dict[str, Any] = {
            "item_id": message.id,
            "output_index": output_index,
            "content_index": content_index,
            "sequence_number": 0,
        }
        if isinstance(part, ResponseOutputRefusal):
            empty: Any = part.model_copy(update={"refusal": ""})
            delta: TResponseStreamEvent = ResponseRefusalDeltaEvent(
                type="response.refusal.delta", delta=part.refusal, **where
            )
            done: TResponseStreamEvent = ResponseRefusalDoneEvent(
                type="response.refusal.done", refusal=part.refusal, **where
            )
        else:
            empty = part.model_copy(update={"text": ""})
            delta = ResponseTextDeltaEvent(
                type="response.output_text.delta", delta=part.text, logprobs=[], **where
            )
            done = ResponseTextDoneEvent(
                type="response.output_text.done", text=part.text, logprobs=[], **where
            )
        events.append(ResponseContentPartAddedEvent(type="response.content_part.added", part=empty, **where))
        events.extend((delta, done))
        events.append(ResponseContentPartDoneEvent(type="response.content_part.done", part=part, **where))
    return events
