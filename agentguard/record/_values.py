"""JSON-like values: what the record keeps of a tool's inputs and outputs, and process-unique ids.

Nothing here knows about engagements: these are the value rules every layer above shares (what CEL and AOS
can be given, what is delivered as it is, what can be consumed only once, how large a value may be).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "NOT_PLAIN",
    "SCALARS",
    "ValueLimits",
    "ValueTooComplex",
    "is_plain",
    "new_id",
    "one_shot",
    "plain_copies",
    "plain_copy",
    "to_plain",
    "unfaithful",
]

_PLAIN = (str, int, float, bool, type(None))
_PRIMITIVE = frozenset(_PLAIN)
SCALARS = _PRIMITIVE
"""The exact types of a JSON-like scalar: what :func:`plain_copy` keeps as it is (its fast path, which the
per-call path writes out, reads them)."""
_KEPT = (*_PLAIN, datetime, bytes)
"""What :func:`to_plain` keeps, a subclass as its base type's value (:func:`_exact`)."""
_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)

_DEEPEST = 200
"""The deepest :attr:`ValueLimits.max_depth` allowed: the JSON encoders a recorded value meets (telemetry, the
guardian client, audit reports) take a Python frame per level, and a host's own call stack (LangGraph's, some
150 frames) must still fit under Python's recursion limit (1000)."""


@dataclass(frozen=True, slots=True)
class ValueLimits:
    """How large a tool's inputs and outputs may be for the checks to see them whole.

    - ``max_depth``: containers nested in one another (``{"a": [1]}`` is 2 deep); at most 200;
    - ``max_values``: the values of all the containers, counted each time a container is reached (a value
      that holds itself is never done: it meets this bound), as they are iterated: what a container that is
      not a builtin says of its own size (``__len__``) is not taken on trust.

    A call whose inputs are larger is denied, an output that is larger withheld, both recorded. Without the
    bounds, a model's tool arguments nested 500 deep (JSON any parser reads) failed the call with a
    ``RecursionError`` before anything was recorded, and an output that holds itself looped for good.
    """

    max_depth: int = 100
    max_values: int = 1_000_000

    def __post_init__(self) -> None:
        for name, value in (("max_depth", self.max_depth), ("max_values", self.max_values)):
            if type(value) is not int or value < 1:
                raise ValueError(f"ValueLimits.{name} must be a positive int, not {value!r}")
        if self.max_depth > _DEEPEST:
            raise ValueError(f"ValueLimits.max_depth is at most {_DEEPEST} (Python's recursion limit)")


DEFAULT_LIMITS = ValueLimits()

_ANY_DEPTH = 100_000
_ANY_SIZE = 10_000_000
"""What :func:`to_plain` converts without ``limits``: more than any :class:`ValueLimits` lets through (the
pipeline checks a call's values against its Guard's limits first), and still an end for a value shared
endlessly (its size; one that holds itself meets Python's recursion limit first)."""


class ValueTooComplex(ValueError):
    """A value beyond its :class:`ValueLimits`: the message says which bound (``is nested deeper than ...``)."""


def new_id() -> str:
    """A process-unique id (random per-process prefix + counter): cheap enough for every step."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


def to_plain(value: Any, *, owned: bool = False, limits: ValueLimits | None = None) -> Any:
    """Convert a tool input or output into the JSON-like value CEL and AOS understand.

    Primitives pass through untouched (the common case costs one ``isinstance``); mappings, sequences,
    pydantic models, dataclasses and datetimes are converted, and so is a subclass of ``str``, ``int`` or
    ``float`` (a ``StrEnum``, an ``IntEnum``): to its base type's value (:func:`_exact`); anything else
    becomes its ``str``. A flat dict of primitives is copied, so that the record does not change when its
    owner does, unless the caller ``owned`` it (a dict built for this call that nobody else holds).
    :class:`ValueTooComplex` for a value beyond ``limits`` (none: 10,000,000 values, and as deep as Python's
    recursion limit allows).
    """
    max_depth, max_values = (
        (_ANY_DEPTH, _ANY_SIZE) if limits is None else (limits.max_depth, limits.max_values)
    )
    cls = type(value)
    if cls in _PRIMITIVE:
        return value
    if cls is dict and len(value) <= max_values:  # a flat dict of primitives: one pass
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return value if owned else dict(value)
    return _Converter(max_depth, max_values).convert(value, max_depth)


def _exact(value: Any) -> Any:
    """``value`` (one of :data:`_KEPT`) as its base type's own value: a subclass's ``str()`` or ``repr()``,
    which a host shows, is its own code's and need not be the value the checks compared (an ``int`` whose
    ``str()`` says ``5000`` while CEL compared 50). The base types' own conversions copy the value."""
    cls = type(value)
    if cls in _PRIMITIVE or cls is datetime or cls is bytes:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, bytes):
        return bytes.__bytes__(value)
    return datetime(  # a datetime subclass (value is one of _KEPT)
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
        value.tzinfo,
        fold=value.fold,
    )


class _Converter:
    """:func:`to_plain` of a nested value: one conversion, its values counted against ``max_values``.

    Recursive (the common nested outputs convert fastest so): two Python frames per level, which the
    :class:`ValueLimits` of a guarded call keep well under Python's recursion limit; without limits, a value
    deeper than that limit allows raises ``RecursionError``, as it always did.
    """

    __slots__ = ("left", "max_depth", "max_values")

    def __init__(self, max_depth: int, max_values: int) -> None:
        self.max_depth = max_depth
        self.max_values = self.left = max_values

    def convert(self, value: Any, depth: int) -> Any:
        """``value`` converted, with ``depth`` levels of containers still allowed at and below it."""
        cls = type(value)
        if cls in _PRIMITIVE:
            return value
        if (
            cls is not dict and cls is not list and isinstance(value, _KEPT)
        ):  # no ABC check for the common two
            return _exact(value)
        if depth == 0:
            raise ValueTooComplex(f"is nested deeper than {self.max_depth} levels (ValueLimits.max_depth)")
        if cls is list:  # the common containers first, a flat one copied at once
            self._count(len(value))
            for item in value:
                if type(item) not in _PRIMITIVE:
                    return [self.convert(v, depth - 1) for v in value]
            return list(value)
        if cls is dict:
            self._count(len(value))
            for key, item in value.items():
                if type(item) not in _PRIMITIVE or type(key) is not str:
                    return {str(k): self.convert(v, depth - 1) for k, v in value.items()}
            return dict(value)
        if cls is tuple or cls is set or cls is frozenset:  # builtins: their len() is their size
            self._count(len(value))
            return [self.convert(v, depth - 1) for v in value]
        if isinstance(value, Mapping):
            items = self._taken(value.items())
            return {str(k): self.convert(v, depth - 1) for k, v in items}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.convert(v, depth - 1) for v in self._taken(value)]
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return self.convert(dump(mode="json"), depth)
        fields = getattr(value, "__dataclass_fields__", None)
        if fields is not None:
            names = self._taken(fields)
            return {name: self.convert(getattr(value, name), depth - 1) for name in names}
        return str(value)

    def _count(self, values: int) -> None:
        self.left -= values
        if self.left < 0:
            raise ValueTooComplex(f"holds more than {self.max_values} values (ValueLimits.max_values)")

    def _taken(self, values: Iterable[Any]) -> list[Any]:
        """The values of a container whose ``len()`` is its own code's, counted as they are iterated."""
        taken = _counted(values, self.left)
        self._count(len(taken))
        return taken


def _counted(values: Iterable[Any], left: int) -> list[Any]:
    """``values`` iterated up to one past ``left``, which a caller with ``left`` values to spare refuses.

    A container's ``len()`` is not what iterating it yields when the container is not a builtin: a mapping or
    list subclass whose ``__len__`` said 1 had 10,000 values converted, judged and delivered under
    ``max_values=100``, and one whose ``__iter__`` never ends was converted for ever. Builtins keep their
    ``len()`` (it is their size, and the common values convert fastest so).
    """
    return list(itertools.islice(values, left + 1))


def is_plain(value: Any, limits: ValueLimits = DEFAULT_LIMITS) -> bool:
    """Whether ``value`` is already a JSON-like value (exact ``dict`` with ``str`` keys, ``list``, ``str``,
    ``int``, ``float``, ``bool``, ``None``, all the way down) within ``limits``: then it is delivered as it
    is."""
    if type(value) is dict and len(value) <= limits.max_values:  # fast path: a flat dict (most tool outputs)
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return True
    return _survey(value, limits, plain=True) is None


def _survey(value: Any, limits: ValueLimits, *, plain: bool) -> str | None:
    """Why ``value`` cannot be checked as it is, or ``None``. ``plain``: it must be JSON-like (then any other
    type is a reason); else only what cannot be converted faithfully is (:func:`unfaithful`).

    One pass, depth first, with a stack of its own (any depth, no recursion), each container's values
    counted as it is reached, so that a value holding itself ends at ``max_values`` (those of a container that
    is not a builtin as they are iterated: :func:`_counted`).
    """
    pending = [(value, 0)]
    left = limits.max_values
    max_depth = limits.max_depth
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind in _PRIMITIVE:
            continue
        children: Any
        if kind is dict:
            if plain:
                for key in item:
                    if type(key) is not str:
                        return "is not JSON-like"
            children = item.values()
        elif kind is list:
            children = item
        elif plain:
            return "is not JSON-like"
        elif kind is tuple or kind is set or kind is frozenset:
            children = item
        elif isinstance(item, Iterator | AsyncIterator | Awaitable):
            return f"is a {type(item).__name__} object, which can be consumed only once"
        elif isinstance(item, Mapping):
            children = _counted(item.values(), left)  # its own len() and iteration: counted as read
        elif isinstance(item, list | tuple | set | frozenset):
            children = _counted(item, left)
        else:
            continue  # converted by its own code (a model's dump, a dataclass's fields) or to its str
        if depth == max_depth:
            return f"is nested deeper than {max_depth} levels (ValueLimits.max_depth)"
        left -= len(children)
        if left < 0:
            return f"holds more than {limits.max_values} values (ValueLimits.max_values)"
        depth += 1
        for child in children:
            if type(child) not in _PRIMITIVE:
                pending.append((child, depth))
    return None


def unfaithful(value: Any, limits: ValueLimits = DEFAULT_LIMITS) -> str | None:
    """Why ``value`` has no faithful JSON-like form, or ``None``: it holds something that can be consumed only
    once (a generator, an iterator, a coroutine: :func:`to_plain` would give checks its ``str()``, while the
    consumer would get its items), or it is beyond ``limits``."""
    return _survey(value, limits, plain=False)


NOT_PLAIN: Any = object()
""":func:`plain_copy`'s answer for a value that is not JSON-like (``None`` is a JSON-like value)."""


def plain_copy(value: Any, owned: bool = False, limits: ValueLimits = DEFAULT_LIMITS) -> Any:
    """What the record keeps of ``value`` when it is JSON-like within ``limits`` (:func:`is_plain`): a copy, or
    ``value`` itself when it is a flat dict the caller ``owned`` (built for this call, held by nobody else);
    else :data:`NOT_PLAIN` (then :func:`unfaithful` says whether it can be converted, and :func:`to_plain`,
    which may call the value's own code, converts it).

    One pass over the common flat dict, where :func:`is_plain` then :func:`to_plain` take two.
    """
    cls = type(value)
    if cls is dict and len(value) <= limits.max_values:
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            return value if owned else dict(value)
    elif cls in _PRIMITIVE:
        return value
    # Not is_plain: its fast path is the one above, which this value has already failed.
    plain = _survey(value, limits, plain=True) is None
    return to_plain(value, owned=owned, limits=limits) if plain else NOT_PLAIN


def plain_copies(value: Any, limits: ValueLimits = DEFAULT_LIMITS) -> tuple[Any, Any]:
    """Two copies of ``value`` when it is JSON-like within ``limits`` (:func:`plain_copy`), that share no
    container: one for the caller, one for the record, so that neither's changes reach the other (nor the
    changes of whoever holds ``value``). ``(NOT_PLAIN, NOT_PLAIN)`` otherwise.

    One pass over the common flat dict, where :func:`plain_copy` then :func:`to_plain` take two.
    """
    cls = type(value)
    if cls is dict and len(value) <= limits.max_values:
        for key, item in value.items():
            if type(item) not in _PRIMITIVE or type(key) is not str:
                break
        else:
            first = dict(value)  # the second from the first: the tool's dict is read once
            return first, dict(first)
    elif cls in _PRIMITIVE:
        return value, value
    if _survey(value, limits, plain=True) is not None:
        return NOT_PLAIN, NOT_PLAIN
    first = to_plain(value, limits=limits)
    return first, to_plain(first)


one_shot = unfaithful
"""The old name of :func:`unfaithful`, from when a value consumed only once was its one reason (goes in 0.2)."""
