"""A fast path in front of the engine: common assertions compiled to Python closures.

Why: most spec assertions are a few field reads and one comparison
(``recent["send-email"].inputs.to.endsWith("@corp.com")``, ``history._total < 50``). The engine evaluates
one in about 2 µs when its code is hot. It costs 30-70 µs where agentguard usually runs, in a host's worker
thread between two steps of a framework that has evicted the engine's code and data from the CPU caches
(LangGraph runs each tool call in a fresh thread). A closure over the same reads runs in the interpreter
the host keeps hot, and it reads only the parts of a variable it uses: the engine converts each bound
variable whole.

How it stays exact: a closure only answers when the answer is beyond doubt. The expression must use only the
constructs below. Every operand must be a plain JSON value of the one type the operation is defined on:
``str`` (ASCII, where the engine's UTF-8 conversion cannot differ), ``int`` within int64, ``float``, ``bool``
or ``None``, and ``dict`` / ``list`` for selection and indexing. Anything else (a missing key, a type
mismatch, a mixed-type comparison, an overflow, an error) raises :class:`Unsure`, and the engine evaluates
the expression from scratch, producing the canonical value or error. The differential tests check the
closures against the engine on the CEL conformance cases and on generated expressions and data.

Supported: literals (null, bool, int, double, string), variables, ``a.f`` and ``has(a.f)`` on maps,
``a[k]`` (map with string key, list with int index), ``== != < <= > >=``, ``&& || !``, ``?:``,
``in`` (string key of a map, string in a list of strings), ``+`` and ``-`` on ints, ``+`` on strings,
unary ``-`` on ints, and ``size``, ``startsWith``, ``endsWith``, ``contains`` on strings (``size`` also on
lists and maps). Not supported, left to the engine: macros (comprehensions), list and map literals, uint,
bytes, timestamps and durations, regular expressions, conversions, other functions. An operand of ``&&`` or
``||`` built from those is left unsure: another operand with the deciding value still answers (CEL's ``&&``
is false when any operand is false, errors included), and otherwise the engine evaluates the whole.

One difference is deliberate: the engine converts each bound variable whole, and refuses one that holds a
value it cannot convert (an integer beyond 64 bits, a string that is not valid Unicode) even where the
expression does not read that value. A closure reads only what the expression reads, so it answers there, as
CEL's semantics say it should.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from agentguard.cel._checked import CheckedExpr, Message, message, text

__all__ = ["Closure", "Unsure", "compile_fast"]


class Unsure(Exception):
    """The closure cannot answer with certainty: the engine must evaluate the expression."""


Closure = Callable[[Mapping[str, Any]], Any]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _Unsupported(Exception):
    """The expression uses a construct the fast path does not compile."""


def _int(value: Any) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _str(value: Any) -> str:
    if type(value) is not str or not value.isascii():
        raise Unsure
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _scalar(value: Any) -> Any:
    """A value the engine would hand back unchanged (the result of a whole expression)."""
    kind = type(value)
    if kind not in _SCALARS or (kind is str and not value.isascii()):
        raise Unsure
    if kind is int and not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _same_scalars(a: Any, b: Any) -> None:
    """Both operands are one scalar type on which Python's operator is CEL's."""
    kind = type(a)
    if kind is not type(b) or kind not in _SCALARS:
        raise Unsure
    if kind is str:
        if not (a.isascii() and b.isascii()):
            raise Unsure
    elif kind is int and not (_INT64_MIN <= a <= _INT64_MAX and _INT64_MIN <= b <= _INT64_MAX):
        raise Unsure


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise Unsure
    return value


def compile_fast(tree: CheckedExpr) -> Closure | None:
    """A closure for a checked expression, or ``None`` if it uses anything the fast path does not compile."""
    if tree.expr is None:
        return None
    try:
        node = _compile(tree.expr, tree.references)
    except (_Unsupported, RecursionError):
        return None

    def run(variables: Mapping[str, Any]) -> Any:
        try:
            return _scalar(node(variables))
        except (KeyError, IndexError, TypeError, RecursionError):
            raise Unsure from None

    return run


def _compile(buf: bytes, references: Mapping[int, str]) -> Closure:
    expr = message(buf)
    node_id = expr.get(2, [0])[0]
    if 3 in expr:
        return _constant(message(expr[3][0]))
    if 4 in expr:
        name = text(message(expr[4][0]), 1)
        return _variable(references.get(node_id, name))
    if 5 in expr:
        if node_id in references:  # a.b.c resolved to a qualified variable name
            return _variable(references[node_id])
        select = message(expr[5][0])
        operand = _compile(select[1][0], references)
        field = text(select, 2)
        return _has(operand, field) if select.get(3, [0])[0] else _select(operand, field)
    if 6 in expr:
        call = message(expr[6][0])
        function = text(call, 2)
        if function in _LOGIC and 1 not in call:
            # An operand the fast path cannot compile (a comprehension, say) is unsure, not unsupported: another
            # operand with the deciding value still answers (``toolId == "refund" && inputs.exists(...)`` is
            # false whenever the tool is another one, as in CEL, whatever the comprehension would give).
            operands = [_compile_or_unsure(a, references) for a in call.get(3, [])]
            if all(operand is _unsure for operand in operands):
                raise _Unsupported
            return _call(function, operands, False)
        target = [_compile(t, references) for t in call.get(1, [])]
        args = [_compile(a, references) for a in call.get(3, [])]
        return _call(text(call, 2), target + args, bool(target))
    raise _Unsupported  # list and map literals, comprehensions


_LOGIC = frozenset({"_&&_", "_||_"})


def _unsure(variables: Mapping[str, Any]) -> Any:
    raise Unsure


def _compile_or_unsure(buf: bytes, references: Mapping[int, str]) -> Closure:
    try:
        return _compile(buf, references)
    except _Unsupported:
        return _unsure


def _constant(constant: Message) -> Closure:
    value: Any
    if 1 in constant:
        value = None
    elif 2 in constant:
        value = bool(constant[2][0])
    elif 3 in constant:
        value = constant[3][0]
        if value >= 2**63:
            value -= 2**64
    elif 5 in constant:
        value = struct.unpack("<d", constant[5][0])[0]
    elif 6 in constant:
        value = bytes(constant[6][0]).decode()
        if not value.isascii():
            raise _Unsupported
    else:  # uint, bytes, duration, timestamp
        raise _Unsupported
    return lambda variables: value


def _variable(name: str) -> Closure:
    return lambda variables: variables[name]


def _select(operand: Closure, field: str) -> Closure:
    def select(variables: Mapping[str, Any]) -> Any:
        value = operand(variables)
        if type(value) is not dict:
            raise Unsure
        return value[field]

    return select


def _has(operand: Closure, field: str) -> Closure:
    def has(variables: Mapping[str, Any]) -> bool:
        value = operand(variables)
        if type(value) is not dict:
            raise Unsure
        return field in value

    return has


def _index(container: Any, key: Any) -> Any:
    kind = type(container)
    if kind is dict and type(key) is str:
        return container[key]
    if kind is list and type(key) is int and 0 <= key < len(container):
        return container[key]
    raise Unsure


def _in(item: Any, container: Any) -> bool:
    kind = type(container)
    if kind is dict and type(item) is str:
        return item in container
    if kind is list and type(item) is str and item.isascii():
        for element in container:
            if type(element) is not str or not element.isascii():
                raise Unsure
        return item in container
    raise Unsure


def _equal(a: Any, b: Any) -> bool:
    _same_scalars(a, b)
    return bool(a == b)


def _ordered(a: Any, b: Any) -> None:
    """Both operands are one ordered scalar type, and not NaN (left to the engine)."""
    _same_scalars(a, b)
    if a is None or a != a or b != b:
        raise Unsure


def _less(a: Any, b: Any) -> bool:
    _ordered(a, b)
    return bool(a < b)


def _less_equal(a: Any, b: Any) -> bool:
    _ordered(a, b)
    return bool(a <= b)


def _add(a: Any, b: Any) -> Any:
    if type(a) is str:
        return _str(a) + _str(b)
    return _int(_int(a) + _int(b))


def _size(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return len(_str(value))
    if kind is list or kind is dict:
        return len(value)
    raise Unsure


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "_==_": _equal,
    "_!=_": lambda a, b: not _equal(a, b),
    "_<_": _less,
    "_<=_": _less_equal,
    "_>_": lambda a, b: _less(b, a),
    "_>=_": lambda a, b: _less_equal(b, a),
    "_[_]": _index,
    "@in": _in,
    "_+_": _add,
    "_-_": lambda a, b: _int(_int(a) - _int(b)),
}

_STRING_METHODS: dict[str, Callable[[str, str], bool]] = {
    "startsWith": str.startswith,
    "endsWith": str.endswith,
    "contains": str.__contains__,
}


def _call(function: str, operands: list[Closure], receiver: bool) -> Closure:
    count = len(operands)
    if function == "_&&_" and count >= 2:
        return _logic(operands, decisive=False)
    if function == "_||_" and count >= 2:
        return _logic(operands, decisive=True)
    if function == "!_" and count == 1:
        (operand,) = operands
        return lambda variables: not _bool(operand(variables))
    if function == "-_" and count == 1:
        (operand,) = operands
        return lambda variables: _int(-_int(operand(variables)))
    if function == "_?_:_" and count == 3:
        condition, then, otherwise = operands
        return lambda variables: (then if _bool(condition(variables)) else otherwise)(variables)
    if function == "size" and count == 1:
        (operand,) = operands
        return lambda variables: _size(operand(variables))
    if function in _STRING_METHODS and receiver and count == 2:
        method = _STRING_METHODS[function]
        text, part = operands
        return lambda variables: method(_str(text(variables)), _str(part(variables)))
    operation = _BINARY.get(function)
    if operation is not None and count == 2 and not receiver:
        left, right = operands
        return lambda variables: operation(left(variables), right(variables))
    raise _Unsupported


def _logic(operands: list[Closure], decisive: bool) -> Closure:
    """CEL's ``&&`` (``decisive`` false) and ``||`` (true): an operand with the decisive value decides,
    whatever the others are, errors included; otherwise every operand must be a known bool."""

    def logic(variables: Mapping[str, Any]) -> bool:
        unsure = False
        for operand in operands:
            try:
                if _bool(operand(variables)) is decisive:
                    return decisive
            except (Unsure, KeyError, IndexError, TypeError):
                unsure = True  # a later operand may still decide
        if unsure:
            raise Unsure
        return not decisive

    return logic
