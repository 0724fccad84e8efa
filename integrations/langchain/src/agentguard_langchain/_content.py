"""Translation between LangChain message content and the plain values agentguard checks.

A LangChain tool's result reaches the agent as a ``ToolMessage`` whose content is a string (a ``dict`` result
is JSON-encoded by langchain-core) or a list of content blocks. Output restrictions are CEL over the tool's
*output*, so a JSON object or array is decoded back into the value the tool returned; anything else is
checked as the text the model would see. A message that also carries an artifact is checked as both
(:func:`tool_output`).
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias, TypeVar

from pydantic_core import to_jsonable_python

from agentguard.aos import unique_keys
from agentguard_langchain._host import BaseMessage, ChatMessage, HumanMessage, ToolMessage

__all__ = [
    "Content",
    "content_copy",
    "decode_output",
    "encode_output",
    "is_user_message",
    "message_text",
    "structured_text",
    "tool_output",
    "with_output",
    "with_text",
]

M = TypeVar("M", bound=BaseMessage)

Content: TypeAlias = str | list[str | dict[Any, Any]]
"""A message's content: its text, or its content blocks."""


def _block_text(block: object) -> str | None:
    """The text a content block carries, ``None`` for a block that carries none (an image, a file).

    Not only ``type: "text"`` blocks (all ``BaseMessage.text`` reads): a model is also sent the text of
    LangChain's ``text-plain`` blocks, provider blocks such as OpenAI's ``input_text``, and a block's string
    ``content`` (which ``create_agent`` itself reads as an answer's text for a structured response). A check
    that read ``type: "text"`` alone would pass a message whose whole text is in one of those.
    """
    if isinstance(block, str):
        return block
    if isinstance(block, dict):
        for key in ("text", "content"):
            value = block.get(key)
            if isinstance(value, str):
                return value
    return None


def is_user_message(message: object) -> bool:
    """A message a model reads as the user's: a ``HumanMessage``, or a ``ChatMessage`` whose role is the user's
    (chat models send ``ChatMessage(role="user")`` as a user turn, so the input guardrail must read it)."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role.strip().casefold() in ("user", "human")
    )


def message_text(message: BaseMessage) -> str:
    """The text of a message (the text of its blocks joined), as guardrails and step records see it."""
    content = message.content
    if type(content) is str:
        return content
    return "".join(text for text in map(_block_text, content) if text is not None)


def content_copy(content: Content) -> Content:
    """``content`` as it is now, to tell later whether a message still has it: a string is itself; a list is
    copied, and so is each of its dict blocks, whose own values are the text the checks read (a block changed
    in place does not change the copy)."""
    if type(content) is str:
        return content
    return [dict(block) if isinstance(block, dict) else block for block in content]


def with_text(message: M, text: str) -> M:
    """A copy of ``message`` whose text is ``text``: every block :func:`message_text` read is replaced, the
    blocks that carry no text (images, files, tool use) are kept after it."""
    content = message.content
    if isinstance(content, str) or not content:
        return message.model_copy(update={"content": text})
    others = [b for b in content if _block_text(b) is None]
    blocks: list[str | dict[Any, Any]] = [{"type": "text", "text": text}, *others]
    return message.model_copy(update={"content": blocks})


def structured_text(value: object) -> str:
    """A structured response (``response_format``: a pydantic model, a dataclass, a dict) as the JSON text the
    output guardrail checks."""
    return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)


_JSON_SPACE = " \t\n\r"
"""What JSON counts as whitespace (``str.strip()`` would strip more)."""


_decode_json = json.JSONDecoder(object_pairs_hook=unique_keys).raw_decode
"""``json.loads`` without its Python wrapper and its two whitespace regexes: run once per tool result, right
after the tool (when the JSON module's code is out of the CPU caches), ``json.loads`` costs about 8 µs of it
and this about a third."""


def decode_output(content: object) -> Any:
    """The tool output an output restriction should see, from a ``ToolMessage``'s content: the JSON object or
    array the text is, when it is exactly one, else the text. With a key twice in an object a parser keeps one
    of its values while the model reads both, and an array nested too deep for the parser is still text to
    the model: the checks of such a text see the text itself."""
    if not isinstance(content, str):
        return content
    text = content.lstrip(_JSON_SPACE)
    if text[:1] not in ("{", "["):
        return content
    try:
        value, end = _decode_json(text)
    except (ValueError, RecursionError):  # AmbiguousJSON (a key twice) is a ValueError
        return content
    # A JSON object or array (its first character says which) followed by nothing but whitespace.
    return value if end == len(text) or not text[end:].strip(_JSON_SPACE) else content


def encode_output(value: Any, original: object = "") -> str | list[str | dict[Any, Any]]:
    """``ToolMessage`` content for an output the pipeline replaced (a guardian ``modify``).

    Content blocks stay content blocks when the tool produced blocks; everything else becomes text, JSON for
    anything that is not already a string (the same encoding langchain-core gives a ``dict`` result).
    """
    if isinstance(value, str):
        return value
    if (
        not isinstance(original, str)
        and isinstance(value, list)
        and all(isinstance(b, str | dict) for b in value)
    ):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


def tool_output(message: ToolMessage) -> Any:
    """The output the checks see for a tool's message: its content (:func:`decode_output`), and when it carries
    an artifact, ``{"content": <the content>, "artifact": <the artifact>}``.

    LangChain's chat models do not send an artifact to the model, but it stays in the message: in the graph
    state, in what the caller gets back, for any prompt or middleware that reads it. So the checks see it, and
    an output they withhold takes its artifact along.
    """
    content = decode_output(message.content)
    if message.artifact is None:
        return content
    return {"content": content, "artifact": message.artifact}


def with_output(message: ToolMessage, output: Any) -> ToolMessage:
    """``message`` carrying an output the pipeline replaced: a guardian's ``modify``, or the JSON-like value it
    made of an artifact that was not one (what is delivered is what was checked). The artifact is the replaced
    output's; none when that output no longer has the shape :func:`tool_output` gave it.
    """
    content, artifact = output, None
    if message.artifact is not None and isinstance(output, dict) and "content" in output:
        content, artifact = output["content"], output.get("artifact")
    return message.model_copy(
        update={"content": encode_output(content, message.content), "artifact": artifact}
    )
