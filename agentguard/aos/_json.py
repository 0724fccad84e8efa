"""AOS JSON read the one way every standards parser reads it, on both ends of the wire.

RFC 8259 leaves the meaning of some documents to the parser: a name given twice in an object (Python keeps
the last, others the first, some refuse), and numbers beyond a double (``1e400``). ``NaN`` and ``Infinity``
are not JSON at all, though Python reads them. Where two parsers read one message differently, whoever
checked it and whoever acts on it may see two messages: a guardian that approved ``{"inputs": A, "inputs": B}``
as ``B`` while the agent ran ``A``, or a client that read ``"decision":"deny", ..., "decision":"allow"`` as
allow. So an AOS message is read strictly, and such a document is refused, not guessed.

Integers too: Python reads ``9007199254740993`` exactly, a JavaScript (or any double-based) peer as
``9007199254740992``. A guardian in one and a guard in the other would check two different numbers (a limit
``amount <= 9007199254740992`` passes for one and fails for the other), so an integer outside the range every
peer holds exactly, ``±(2**53 - 1)`` (I-JSON, RFC 7493 §2.2), is refused, as a number past a double is.
"""

from __future__ import annotations

import json
import math
from typing import NoReturn

__all__ = ["MAX_EXACT_INTEGER", "AmbiguousJSON", "strict_json", "unique_keys", "valid_utf8"]


class AmbiguousJSON(ValueError):
    """The text is JSON to Python, but not a document every standards parser reads alike."""


_SHOWN = 40
"""The characters of a key or a number that an :class:`AmbiguousJSON` message quotes. The text is a peer's,
as long as its body allows, and the message goes back to it (a guardian's -32700) or into a log or a
failure cause: past this, it ends ``...``."""


def _cut(text: str) -> str:
    return "..." if len(text) > _SHOWN else ""


def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object as a ``dict``, :class:`AmbiguousJSON` when a key is in it twice: the
    ``object_pairs_hook`` of :func:`strict_json`, for a reader that must refuse only that (a tool's output,
    whose text a model reads whole while a parser would keep one of the two values)::

        >>> import json
        >>> json.loads('{"a": 1, "a": 2}', object_pairs_hook=unique_keys)
        Traceback (most recent call last):
        ...
        agentguard.aos._json.AmbiguousJSON: key 'a' given twice in an object
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                # repr: the key may hold a newline, a NUL or a bidi override, escaped here.
                raise AmbiguousJSON(f"key {key[:_SHOWN]!r}{_cut(key)} given twice in an object")
            seen.add(key)
    return obj


def _no_constant(name: str) -> NoReturn:
    raise AmbiguousJSON(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise AmbiguousJSON(f"number {text[:_SHOWN]}{_cut(text)} is out of range")
    return value


MAX_EXACT_INTEGER = 2**53 - 1
"""The largest integer magnitude :func:`strict_json` accepts: every double-based JSON parser reads each
integer up to it exactly, and none past it (I-JSON, RFC 7493 §2.2)."""


def _exact_int(text: str) -> int:
    # 17 characters hold "-9007199254740991"; a longer text is out of range, and not converted: converting
    # thousands of digits costs time quadratic in their number (and Python refuses past 4300 of them).
    value = int(text) if len(text) <= 17 else MAX_EXACT_INTEGER + 1
    if abs(value) > MAX_EXACT_INTEGER:
        raise AmbiguousJSON(
            f"integer {text[:_SHOWN]}{_cut(text)} is beyond ±(2**53 - 1), where JSON parsers disagree"
        )
    return value


# Made once: ``json.loads`` with options builds a new decoder on every call.
_DECODER = json.JSONDecoder(
    object_pairs_hook=unique_keys, parse_constant=_no_constant, parse_float=_finite, parse_int=_exact_int
)


def strict_json(body: bytes | str) -> object:
    r"""``body`` as JSON, read strictly: bytes as UTF-8 (RFC 8259 §8.1), strictly too (``json.loads`` on bytes
    would guess UTF-16/32 and let encoded surrogates through).

    Raises ``UnicodeDecodeError`` for bytes that are not UTF-8; :class:`AmbiguousJSON` for a key given twice
    in any object, ``NaN``/``Infinity``, a number too large for a double, or an integer beyond
    :data:`MAX_EXACT_INTEGER`; ``json.JSONDecodeError`` or
    ``RecursionError`` for text that is not JSON. The first three are ``ValueError``\ s: catch
    ``UnicodeDecodeError`` and ``AmbiguousJSON`` before ``ValueError`` to tell them apart.
    """
    return _DECODER.decode(body.decode("utf-8") if isinstance(body, bytes) else body)


def valid_utf8(text: str) -> str:
    """``text`` with each lone surrogate (what JSON's ``"\\ud800"`` reads as) made U+FFFD.

    A string a model, a client or a peer wrote may hold one, and UTF-8 encoders refuse it: OpenTelemetry's
    OTLP exporter drops an attribute holding one and fails the whole batch for one in a span's name or
    status, so that one call id or message could keep every other span of the batch from the collector.
    """
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
