"""Translation between LangChain message content and the plain values agentguard checks.

A LangChain tool's result reaches the agent as a ``ToolMessage`` whose content is a string (a ``dict`` result
is JSON-encoded by langchain-core) or a list of content blocks. Output restrictions are CEL over the tool's
*output*, so a JSON object or array is decoded back into the value the tool returned; anything else is
checked as the text the model would see. A message that also carries an artifact is checked as both
(:func:`tool_output`).
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeAlias, TypeVar, cast

from pydantic_core import to_jsonable_python

from agentguard.aos import unique_keys
from agentguard_langchain._host import BaseMessage, ChatMessage, HumanMessage, ToolMessage

__all__ = [
    "Content",
    "canonical_json",
    "decode_output",
    "encode_output",
    "field_values",
    "input_text",
    "is_user_message",
    "message_text",
    "model_fields",
    "reply_ids",
    "snapshot",
    "structured_text",
    "tool_output",
    "with_output",
    "with_text",
]

M = TypeVar("M", bound=BaseMessage)

Content: TypeAlias = str | list[str | dict[Any, Any]]
"""A message's content: its text, or its content blocks."""


def _text_key(block: dict[Any, Any]) -> str | None:
    """The key of a content block that holds its text: ``text``, else ``content`` when it is a string."""
    for key in ("text", "content"):
        if isinstance(block.get(key), str):
            return key
    return None


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
        key = _text_key(block)
        if key is not None:
            text: str = block[key]
            return text
    return None


def is_user_message(message: object) -> bool:
    """A message a model reads as the user's: a ``HumanMessage``, or a ``ChatMessage`` whose role is the user's
    (chat models send ``ChatMessage(role="user")`` as a user turn, so the input guardrail must read it)."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role.strip().casefold() in ("user", "human")
    )


def message_text(message: BaseMessage) -> str:
    """The text of a message (the text of its blocks joined), as the output guardrail and step records see it.
    The input guardrail reads more: :func:`input_text`."""
    content = message.content
    if type(content) is str:
        return content
    return "".join(text for text in map(_block_text, content) if text is not None)


_MODEL_BLIND = frozenset({"content", "id", "type", "response_metadata", "usage_metadata", "artifact"})
"""The fields of a message that no chat model is sent (langchain-core's ``convert_to_openai_messages`` reads
none of them), besides ``content``, which is read on its own: the message's id (a message is known by it), its
class tag, what the provider said about an answer, and a tool's artifact."""

_fields_of: dict[type[BaseMessage], tuple[str, ...]] = {}
_values_of: dict[type[BaseMessage], Callable[[BaseMessage], tuple[Any, ...]]] = {}


def model_fields(kind: type[BaseMessage]) -> tuple[str, ...]:
    """The fields of a message class other than ``content`` that may reach a model: every pydantic field but
    those :data:`_MODEL_BLIND` names. Deny by default: a field a subclass or a later langchain-core adds counts
    until it is known not to reach a model. Looked up once per class."""
    names = _fields_of.get(kind)
    if names is None:
        names = tuple(name for name in kind.model_fields if name not in _MODEL_BLIND)
        _fields_of[kind] = names
    return names


def field_values(kind: type[BaseMessage]) -> Callable[[BaseMessage], tuple[Any, ...]]:
    """A function of a ``kind`` message that gives its ``content`` and the values of its :func:`model_fields`,
    as one tuple, in one C call (``operator.attrgetter``): a model call compares them for every message of the
    thread, and a tuple compares with another in C too."""
    values = _values_of.get(kind)
    if values is None:
        values = cast("Callable[[BaseMessage], tuple[Any, ...]]", attrgetter("content", *model_fields(kind)))
        _values_of[kind] = values
    return values


def snapshot(value: Any) -> Any:
    """``value`` as it is now, to tell later whether a message still has it: its dicts, lists and tuples are
    copied all the way down (a block, a tool call's arguments or a nested block changed in place does not
    change the copy); a string or another leaf is itself."""
    kind = type(value)
    if kind is str or value is None:  # most fields of most messages: the cheap cases first
        return value
    if kind is dict or isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()} if value else {}
    if kind is list or isinstance(value, list):
        return [snapshot(item) for item in value] if value else []
    if isinstance(value, tuple):
        return tuple(snapshot(item) for item in value)
    return value


def _not_plain(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain JSON")


_canonical: Callable[[object], str] = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":")
).encode
"""The encoder of :func:`canonical_json`. ``JSONEncoder.encode`` makes a C encoder at every call, which costs
more than encoding a message's few fields: the C encoder is made once when there is one (a digest is taken of
every message a run produces). Without a circular-reference check: a value that holds itself ends in a
``RecursionError``, not a text."""
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _make_encoder is not None:
    _encode = _make_encoder(
        None, _not_plain, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )

    def _canonical(value: object) -> str:
        return "".join(_encode(value, 0))


def canonical_json(value: object) -> str:
    """``value`` as one canonical JSON text: sorted keys, no spaces, non-ASCII as itself (a guardrail reads
    "Müller", not its escape). A value plain JSON cannot hold (an object, bytes, keys of mixed types) is made
    plain first by pydantic, and one that cannot be (bytes that are not UTF-8) is its ``repr``."""
    try:
        return _canonical(value)
    except (TypeError, ValueError):  # not plain JSON (or a nesting too deep: RecursionError is not caught)
        pass
    try:
        return _canonical(to_jsonable_python(value, fallback=repr))
    except (TypeError, ValueError):  # pydantic_core's serialization error: bytes that are not UTF-8
        return repr(value)


_NOT_TEXT = frozenset(
    {
        "type",
        "index",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "file_id",
        "status",
        "is_error",
        "mime_type",
        "source_type",
        "detail",
        "cache_control",
        "chunk_position",
        "data",
        "base64",
        "url",
        "image_url",
        "file_data",
        "uri",
    }
)
"""Keys (of a message's fields, of its content blocks and what they nest) whose values the input guardrail
does not read: what a provider interprets rather than shows the model as text -- a block's or a message's
kind, position and status, the ids that tie a tool call to its result, an image's MIME type or detail level,
caching -- binary payloads (images, audio, files), which a text guardrail cannot read, and the URLs a
provider fetches them from (the model reads what is there, not the address). Any other key's strings are
read."""

_DATA = frozenset({"args", "arguments", "input", "json", "extras", "output"})
"""Keys whose value is data as a whole (a tool call's arguments, a ``tool_use`` block's input, a ``json``
block): read as its canonical JSON, its keys and numbers too, as providers send it (langchain-core sends
``args`` and ``input`` as JSON ``arguments``, a ``json`` block as its JSON text)."""

_ROLE_KEYS = frozenset({"role", "__openai_role__"})
_ROLES = frozenset(
    {"user", "human", "assistant", "ai", "system", "developer", "tool", "function", "model", "chatbot"}
)
"""A role a provider takes as a role (``ChatMessage.role``; ``__openai_role__``, which langchain-core sets on a
``developer`` message); any other is text a chat template writes out, and read."""


def _strings(value: object, out: list[str]) -> None:
    """Append to ``out`` every string in ``value`` a model may read (see :data:`_NOT_TEXT`, :data:`_DATA`)."""
    if isinstance(value, str):
        if value:
            out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in _NOT_TEXT:
                continue
            if key in _DATA:
                if item is not None and item != "" and item != {}:
                    out.append(item if isinstance(item, str) else canonical_json(item))
            elif key in _ROLE_KEYS and isinstance(item, str):
                if item.strip().casefold() not in _ROLES:
                    out.append(item)
            else:
                _strings(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, out)
    elif value is not None and not isinstance(value, bytes | bool | int | float):
        out.append(canonical_json(value))  # an object (a pydantic model): its data, as it would be sent


def input_text(message: BaseMessage) -> str:
    """Every text of ``message`` a chat model may be sent, as the input guardrail reads it: its text
    (:func:`message_text`), then, each on a line of its own, every other string its content blocks hold (a
    ``tool_result`` block's nested blocks, a ``tool_use`` block's input, a ``reasoning`` or ``thinking``
    block, a ``function_call`` block's arguments, ...), its ``name``, its tool calls (name, and arguments as
    canonical JSON) and invalid tool calls, the strings of its ``additional_kwargs`` (an OpenAI
    ``function_call``'s or ``tool_calls``' arguments, a refusal), and a ``ChatMessage`` role that is not one.

    Deny by default: a string is read wherever it is, unless its key is one a provider does not show the
    model as text (:data:`_NOT_TEXT`). A message that holds nothing but text is read as exactly that text.
    """
    parts = [message_text(message)]
    content = message.content
    if type(content) is not str:
        for block in content:
            if isinstance(block, dict):
                read = _text_key(block)
                _strings(block if read is None else {k: v for k, v in block.items() if k != read}, parts)
    _strings({name: getattr(message, name) for name in model_fields(type(message))}, parts)
    if len(parts) == 1:
        return parts[0]
    return "\n".join(part for part in parts if part)


def reply_ids(message: BaseMessage) -> set[str]:
    """The ids under which ``message`` may call tools: its tool calls' (invalid ones too), the calls' in its
    ``additional_kwargs``, its ``tool_use`` / ``function_call`` blocks'. A ``ToolMessage`` whose
    ``tool_call_id`` is one of them answers this message."""
    ids: set[str] = set()

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("id", "call_id") and isinstance(item, str):
                    ids.add(item)
                else:
                    collect(item)
        elif isinstance(value, list | tuple):
            for item in value:
                collect(item)

    collect(message.content)
    collect([getattr(message, name) for name in model_fields(type(message))])
    return ids


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
