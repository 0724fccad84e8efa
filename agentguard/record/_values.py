"""JSON-like values: what the record keeps of a tool's inputs and outputs, and process-unique ids.

Nothing here knows about engagements: these are the value rules every layer above shares (what CEL and AOS
can be given, what is delivered as it is, what can be consumed only once).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from datetime import datetime
from typing import Any

__all__ = ["NOT_PLAIN", "is_plain", "new_id", "one_shot", "plain_copy", "to_plain"]

_PLAIN = (str, int, float, bool, type(None))
_PRIMITIVE = frozenset(_PLAIN)
_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def new_id() -> str:
    """A process-unique id (random per-process prefix + counter): cheap enough for every step."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


def to_plain(value: Any, *, owned: bool = False) -> Any:
    """Convert a tool input or output into the JSON-like value CEL and AOS understand.

    Primitives pass through untouched (the common case costs one ``isinstance``); mappings, sequences,
    pydantic models, dataclasses and datetimes are converted; anything else becomes its ``str``. A flat dict
    of primitives is copied, so that the record does not change when its owner does, unless the caller
    ``owned`` it (a dict built for this call that nobody else holds).
    """
    cls = type(value)
    if cls in _PRIMITIVE:
        return value
    if cls is dict:  # fast path: a flat dict of primitives with str keys (most tool inputs and outputs)
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return value if owned else dict(value)
    elif cls is list:
        for item in value:
            if type(item) not in _PRIMITIVE:
                break
        else:
            return list(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_plain(v) for v in value]
    if isinstance(value, datetime | bytes):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_plain(dump(mode="json"))
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: to_plain(getattr(value, name)) for name in fields}
    return str(value)


def is_plain(value: Any) -> bool:
    """Whether ``value`` is already a JSON-like value (exact ``dict`` with ``str`` keys, ``list``, ``str``,
    ``int``, ``float``, ``bool``, ``None``, all the way down): then it is delivered as it is."""
    if type(value) is dict:  # fast path: a flat dict of primitives with str keys (most tool outputs)
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return True
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _PRIMITIVE:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        else:
            return False
    return True


NOT_PLAIN: Any = object()
""":func:`plain_copy`'s answer for a value that is not JSON-like (``None`` is a JSON-like value)."""


def plain_copy(value: Any, *, owned: bool = False) -> Any:
    """What the record keeps of ``value`` when it is JSON-like (:func:`is_plain`): a copy, or ``value`` itself
    when it is a flat dict the caller ``owned`` (built for this call, held by nobody else); else
    :data:`NOT_PLAIN` (then :func:`to_plain`, which may call the value's own code, converts it).

    One pass over the common flat dict, where :func:`is_plain` then :func:`to_plain` take two.
    """
    cls = type(value)
    if cls is dict:
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return value if owned else dict(value)
    elif cls in _PRIMITIVE:
        return value
    return to_plain(value, owned=owned) if is_plain(value) else NOT_PLAIN


def one_shot(value: Any) -> str | None:
    """What in ``value`` can be consumed only once (a generator, an iterator, a coroutine), or ``None``.

    Such a value has no faithful JSON-like form: :func:`to_plain` would give checks its ``str()``, while the
    consumer would get its items.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _PRIMITIVE:
            continue
        if kind is dict:  # the common containers first: no ABC checks on the per-call path
            pending.extend(item.values())
            continue
        if kind is list or kind is tuple:
            pending.extend(item)
            continue
        if isinstance(item, Iterator | AsyncIterator | Awaitable):
            return f"is a {type(item).__name__} object, which can be consumed only once"
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            pending.extend(item)
    return None
