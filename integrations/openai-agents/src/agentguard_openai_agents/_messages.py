"""Which of a model response's messages the output guardrail sees, and which reach the caller without it.

The SDK makes the run's final output of one message only: the last message of a response that leaves nothing to
run (no function or handoff call, no computer, shell or patch action, no approval to ask), unless that message
refuses (the run then fails with ``ModelRefusalError``, carrying the refusal). Its output guardrail checks that
output. Every other message of a response still reaches the caller, as a ``MessageOutputItem`` in
``result.new_items`` and as stream events: the text a model writes beside its tool calls, a message before the
answer, a refusal. So does a reasoning item's text (its summary, and the reasoning text some providers send), as a
``ReasoningItem`` and as stream events that hosts show as the model's "thinking". The spec checks "any generative
model response" before the user sees it, so agentguard checks those too
(:class:`~agentguard_openai_agents._streaming.CheckedModel`, and the run hooks for a model the adapter does not
hold).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentguard_openai_agents._host import (
    ReasoningSummary,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
    TResponseOutputItem,
)

__all__ = [
    "Shown",
    "answer_message",
    "beside_answer",
    "item_field",
    "message_text",
    "provider_run",
    "with_text",
]

Shown = ResponseOutputMessage | ResponseReasoningItem
"""An output item whose text the SDK hands the caller: a message, or a reasoning item (its summary)."""
_PROVIDER_RUN = frozenset(
    {
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
    }
)
"""Output items of tools the model's provider ran itself (hosted tools): a call and its result the provider handed
to the model before anyone else saw them."""

_DONE = _PROVIDER_RUN | {"reasoning", "compaction"}
"""Output items the provider has dealt with itself: the run ends on a response that has only these besides its
messages (SDK 0.24). Any other item, a function call or one unknown here, is taken to keep the run going: its
messages are then checked as text beside it (at worst a final answer is checked twice), never left to an output
guardrail that might not run."""


def provider_run(output: Iterable[Any]) -> str | None:
    """The first item of ``output`` that a provider-run tool made (``"mcp_call 'search'"``), if any."""
    for item in output:
        kind = item_field(item, "type")
        if kind in _PROVIDER_RUN:
            name = item_field(item, "name")
            return f"{kind} {name!r}" if name else str(kind)
    return None


def item_field(item: Any, name: str) -> Any:
    """A field of an input or output item, which may be a model (the OpenAI client's types) or a plain mapping."""
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def answer_message(output: Sequence[TResponseOutputItem]) -> ResponseOutputMessage | None:
    """The message whose text the SDK makes the run's final output (and its output guardrail checks), or
    ``None`` when the response keeps the run going, says nothing, or ends in a refusal."""
    last: ResponseOutputMessage | None = None
    for item in output:
        if isinstance(item, ResponseOutputMessage):
            last = item
        elif item_field(item, "type") not in _DONE:
            return None
    if last is None or any(not isinstance(part, ResponseOutputText) for part in last.content):
        return None  # a refusal part (or a part of a kind the SDK does not read as text) is no answer
    return last


def beside_answer(output: Sequence[TResponseOutputItem]) -> list[tuple[int, Shown]]:
    """``(position, item)`` of each item of a response that shows the caller some text and that the output
    guardrail will not check: text beside tool calls, messages before the answer, a refusal, reasoning."""
    answer = answer_message(output)
    return [
        (index, item)
        for index, item in enumerate(output)
        if isinstance(item, Shown) and item is not answer and message_text(item)
    ]


def message_text(item: Shown) -> str:
    """All a message or a reasoning item shows the caller, as one text: a message's output text and refusal parts,
    a reasoning item's summary and reasoning text parts, in order, joined without a separator (as the SDK joins a
    message's parts), so that a word split across parts is still that word to the check."""
    parts: list[Any] = (
        [*item.summary, *(item.content or ())]
        if isinstance(item, ResponseReasoningItem)
        else list(item.content)
    )
    texts: list[str] = []
    for part in parts:
        text = getattr(part, "text", None)
        if not isinstance(text, str):
            text = getattr(part, "refusal", None)
        if isinstance(text, str):
            texts.append(text)
    return "".join(texts)


def with_text(message: Shown, text: str) -> Shown:
    """A copy of ``message`` saying ``text`` (a guardian's replacement) as its one part: a refusal if the message
    refused (so the SDK treats it as before), else output text; for a reasoning item, one summary part, its
    reasoning text gone. The original parts go, with their annotations and log probabilities, which carry the
    replaced text too. (A reasoning item's ``encrypted_content`` stays: the provider reads it back, nobody
    shows it.)"""
    if isinstance(message, ResponseReasoningItem):
        summary = [ReasoningSummary(type="summary_text", text=text)]
        return message.model_copy(update={"summary": summary, "content": None})
    refused = any(isinstance(part, ResponseOutputRefusal) for part in message.content)
    part: ResponseOutputText | ResponseOutputRefusal = (
        ResponseOutputRefusal(type="refusal", refusal=text)
        if refused
        else ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])
    )
    return message.model_copy(update={"content": [part]})
