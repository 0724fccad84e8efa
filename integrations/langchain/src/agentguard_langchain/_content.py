"""Translation between LangChain message content and the plain values agentguard checks.

A LangChain tool's result reaches the agent as a ``ToolMessage`` whose content is a string (a ``dict`` result
is JSON-encoded by langchain-core) or a list of content blocks. Output restrictions are CEL over the tool's
*output*, so a JSON object or array is decoded back into the value the tool returned; anything else is
checked as the text the model would see. A message that also carries an artifact is checked as both
(:func:`tool_output`).
"""

from __future__ import annotations

import base64
import binascii
import json
import json.encoder
import math
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import unquote

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
    "is_role",
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


class _Exact:
    """A number or a bool as :func:`snapshot` keeps it: equal to a value of its very type and value alone, as
    JSON tells them apart. Python's ``==`` takes ``1``, ``1.0`` and ``True`` for one value (a model reads
    ``1``, ``1.0`` and ``true``: an answer sent again with ``true`` for ``1`` would pass as the one produced),
    ``0.0`` for ``-0.0``, and NaN for no value, not even itself (a message that holds one would be input at
    every run, once the checkpoint gave a copy of it). Only numbers are wrapped: the strings and ``None`` that
    most fields hold still compare in C."""

    __slots__ = ("value",)

    def __init__(self, value: int | float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Exact):
            other = other.value
        value = self.value
        if type(other) is not type(value):
            return False
        if other == value:
            if type(value) is float:  # 0.0 is not -0.0
                return math.copysign(1.0, value) == math.copysign(1.0, cast("float", other))
            return True
        return other != other and value != value  # NaN: the same JSON value as any other NaN

    def __repr__(self) -> str:
        return f"_Exact({self.value!r})"


class _Leaf:
    """Any other value as :func:`snapshot` keeps it: its :func:`canonical_json` text when it was taken, equal to
    a value whose text is the same now. Kept by reference, an object (a pydantic model in
    ``additional_kwargs``, say) changed in place after its message was checked still compared equal to itself,
    and its new text reached the model unread. A value whose text cannot be taken again is not equal."""

    __slots__ = ("text",)

    def __init__(self, value: object) -> None:
        self.text = canonical_json(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Leaf):
            return self.text == other.text
        try:
            return canonical_json(other) == self.text
        except Exception:  # its own code raising: not known to be the value that was checked
            return False

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"_Leaf({self.text!r})"


def snapshot(value: Any) -> Any:
    """``value`` as it is now, to tell later whether a message still has it: its dicts, lists and tuples are
    copied all the way down (a block, a tool call's arguments or a nested block changed in place does not
    change the copy); a number or a bool is kept as :class:`_Exact` (``True`` is not ``1``, a NaN is itself);
    a string is itself; any other value (a ``str`` subclass too) as its JSON text (:class:`_Leaf`: an object
    changed in place is a change)."""
    kind = type(value)
    if kind is str or value is None:  # most fields of most messages: the cheap cases first
        return value
    if kind is dict or isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()} if value else {}
    if kind is list or isinstance(value, list):
        return [snapshot(item) for item in value] if value else []
    if isinstance(value, tuple):
        return tuple(snapshot(item) for item in value)
    if isinstance(value, int | float):  # bool is an int
        return _Exact(value)
    return _Leaf(value)


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


def _jsonable(value: object) -> Any:
    """What :func:`canonical_json` encodes in place of a value plain JSON cannot hold: a pydantic model's fields
    (as Python values: its dicts keep their keys, whatever their type), a mapping as a dict, anything else as
    pydantic makes it plain (a datetime, a UUID, bytes as text), or its ``repr``."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    if isinstance(value, Mapping):
        return dict(value)
    return to_jsonable_python(value, fallback=repr)


def canonical_json(value: object) -> str:
    """``value`` as one canonical JSON text: sorted keys, no spaces, non-ASCII as itself (a guardrail reads
    "Müller", not its escape).

    A value plain JSON cannot hold (an object, bytes, keys that are not strings) is encoded as ``json.dumps``
    encodes it, objects made plain by :func:`_jsonable`; keys that cannot be sorted together (``1`` and
    ``"1"``) are written in their order. Never merged: a provider sends both ``"1"`` keys of ``{1: a, "1": b}``
    (pydantic would keep one value, which the guardrail and the digest would then miss). A value that cannot be
    encoded at all (bytes that are not UTF-8, a key that is a tuple) is its ``repr``."""
    try:
        return _canonical(value)
    except (TypeError, ValueError):  # not plain JSON (or a nesting too deep: RecursionError is not caught)
        pass
    for sort_keys in (True, False):  # sorting keys of mixed types fails: then as they come
        try:
            return json.dumps(
                value, ensure_ascii=False, sort_keys=sort_keys, separators=(",", ":"), default=_jsonable
            )
        except (TypeError, ValueError):  # pydantic_core's serialization error (bytes not UTF-8) is one
            continue
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
    }
)
"""Keys (of a message's fields, of its content blocks and what they nest) whose values the input guardrail
does not read: what a provider interprets rather than shows the model as text -- a block's or a message's
kind, position and status, the ids that tie a tool call to its result, an image's MIME type or detail level,
caching. A payload (:data:`_PAYLOAD`) is read when it is text. Any other key's strings are read."""

_PAYLOAD = frozenset({"data", "base64", "file_data", "url", "uri", "image_url"})
"""Keys whose string is a block's payload or its address (:func:`_payload_text`): a payload is read when it is
text (Anthropic's ``{"type": "text", "media_type": "text/plain", "data": ...}`` document source, a ``text/*``
file, a ``data:text/...`` URL), base64 decoded; an image's, a recording's or a PDF's is not (a text guardrail
cannot read it), nor is an address a provider fetches (the model reads what is there, not the address)."""

_ADDRESSES = frozenset({"url", "uri", "image_url"})
_BINARY_KINDS = frozenset({"image", "image_url", "input_image", "audio", "input_audio", "video"})
"""Block types whose payload is binary even where no media type says so (OpenAI's ``input_audio`` gives a
format instead)."""
_TEXT_MEDIA = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/x-yaml", "application/x-ndjson"}
)
"""Media types outside ``text/*`` that are text a model reads as such (besides ``+json`` and ``+xml``)."""

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


def is_role(role: str) -> bool:
    """Whether a provider takes ``role`` (a ``ChatMessage``'s) as a role (:data:`_ROLES`), not as text."""
    return role.strip().casefold() in _ROLES


def _textual(media: str) -> bool:
    """Whether a media type (``text/plain; charset=utf-8``) is text a model reads as text."""
    kind = media.split(";", 1)[0].strip().casefold()
    return kind.startswith("text/") or kind in _TEXT_MEDIA or kind.endswith(("+json", "+xml"))


def _decoded(payload: str, declared_text: bool) -> str:
    """A base64 payload's text: its bytes as UTF-8 (a payload declared text, with a replacement character for
    what is not UTF-8: the digits and words around it are still read). ``payload`` itself when it is not
    base64, or is bytes not declared text that are not UTF-8: deny by default, the guardrail reads what is
    there. No bound of its own: the text is shorter than the payload, which the message holds."""
    try:
        raw = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        return payload
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace") if declared_text else payload


def _payload_text(block: Mapping[Any, Any], key: str, payload: str, kind: object) -> str | None:
    """The text a model reads of a block's payload ``block[key]`` (see :data:`_PAYLOAD`), ``None`` when it reads
    none there: binary data, or an address. ``kind``: the type of the block that holds ``block`` under that
    type's name (OpenAI's ``{"type": "input_audio", "input_audio": {"data": ...}}``).

    A ``data:`` URL says its own media type (none: text, as RFC 2397 has it). Otherwise the block's
    ``media_type`` / ``mime_type`` does; a block without one is read unless its type is an image, audio or
    video kind (deny by default). Base64 (the key ``base64``, a ``base64`` source, a data URL's ``;base64``,
    ``file_data``) is decoded (:func:`_decoded`); any other payload is read as it is, and also decoded when it
    is base64 of UTF-8 text."""
    if payload[:5].casefold() == "data:":
        head, comma, body = payload.partition(",")
        if not comma:
            return payload
        media = head[5:].split(";", 1)[0]
        if media.strip() and not _textual(media):
            return None
        if head.casefold().endswith(";base64"):
            return _decoded(body, True)
        return unquote(body)
    if key in _ADDRESSES:
        return None
    encoded = key in ("base64", "file_data") or "base64" in (block.get("type"), block.get("source_type"))
    declared = block.get("media_type") or block.get("mime_type")
    if isinstance(declared, str) and declared.strip():
        if not _textual(declared):
            return None
    elif kind in _BINARY_KINDS or block.get("type") in _BINARY_KINDS:
        return None
    if encoded:
        return _decoded(payload, bool(declared))
    # Not said to be base64, yet it may be (Gemini's ``inline_data`` is, with no word of it): read as it is,
    # and as the UTF-8 text it decodes to when it does.
    decoded = _decoded(payload, False)
    return payload if decoded is payload else f"{payload}\n{decoded}"


def _strings(value: object, out: list[str], kind: object = None) -> None:
    """Append to ``out`` every string in ``value`` a model may read (see :data:`_NOT_TEXT`, :data:`_DATA`,
    :data:`_PAYLOAD`); ``kind``: see :func:`_payload_text`."""
    if isinstance(value, str):
        if value:
            out.append(value)
    elif isinstance(value, dict):
        block_type = value.get("type")
        for key, item in value.items():
            if key in _PAYLOAD:
                if isinstance(item, str):
                    text = _payload_text(value, key, item, kind)
                    if text:
                        out.append(text)
                else:  # an ``image_url`` object: its ``url``
                    _strings(item, out, key)
            elif key in _NOT_TEXT:
                continue
            elif key in _DATA:
                if item is not None and item != "" and item != {}:
                    out.append(item if isinstance(item, str) else canonical_json(item))
            elif key in _ROLE_KEYS and isinstance(item, str):
                if not is_role(item):
                    out.append(item)
            else:
                _strings(item, out, block_type if key == block_type else None)
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


_CALL_BLOCKS = frozenset({"tool_use", "function_call", "tool_call"})
"""Content blocks that call a tool (Anthropic's ``tool_use``, OpenAI Responses' ``function_call``, LangChain's
v1 ``tool_call``): a ``ToolMessage`` answers them by their id (a ``function_call`` by its ``call_id``)."""


def reply_ids(message: BaseMessage) -> set[str]:
    """The ids under which ``message`` calls tools: its tool calls' and invalid tool calls', the OpenAI calls
    of its ``additional_kwargs`` (``tool_calls``, ``function_call``), its tool-calling blocks'
    (:data:`_CALL_BLOCKS`). A ``ToolMessage`` whose ``tool_call_id`` is one of them, before the next assistant
    message, answers this message. No other id counts (a text block's, a message's): a result a later call
    made under the same id answers that call."""
    ids: set[str] = set()

    def add(call: object, *keys: str) -> None:
        if isinstance(call, Mapping):
            for key in keys:
                value = call.get(key)
                if isinstance(value, str) and value:
                    ids.add(value)

    for name in ("tool_calls", "invalid_tool_calls"):
        calls = getattr(message, name, None)
        for call in calls if isinstance(calls, list | tuple) else ():
            add(call, "id")
    kwargs = message.additional_kwargs
    calls = kwargs.get("tool_calls")
    for call in calls if isinstance(calls, list | tuple) else ():
        add(call, "id")
    add(kwargs.get("function_call"), "id", "call_id")
    content = message.content
    if not isinstance(content, str):
        for block in content:
            if isinstance(block, dict) and block.get("type") in _CALL_BLOCKS:
                add(block, "id", "call_id")
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
