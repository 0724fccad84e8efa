"""The fallback backend: the pure-Python ``cel-python`` engine (``import celpy``, ``agentguard[celpy]``).

It runs wherever Python runs, at the cost of speed (several times slower than ``cel-expr-python``) and of
static checks: ``celpy`` has no type checker, so type errors surface at evaluation time. What this module adds
on top of ``celpy.CompiledRunner``, and why:

* **Undeclared names fail at compile time.** The parse tree is scanned for the top-level variables the
  expression reads (ignoring string literals, field and method names after ``.``, and macro-bound
  variables such as ``x`` in ``list.exists(x, ...)``). A variable that is neither declared nor a CEL type
  name, a function celpy does not know, or a macro it cannot evaluate is a
  :class:`~agentguard.cel.CelCompileError`, as on the default backend, instead of an evaluation error on
  every call.
* **Thread safety.** ``CompiledRunner.evaluate`` stores the activation in a module global before running
  the transpiled code, so two threads evaluating at once can read each other's variables. Here the
  transpiled statements are executed once, in a namespace private to the program, and each evaluation calls
  the resulting function with its own activation.
* **Speed.** ``celpy``'s own activation clones a name tree per evaluation and resolves every identifier
  through it (~10 µs); here an activation is a dictionary of the bound variables in front of the shared
  one. Inputs are converted by exact type, bypassing the celpy constructors' own checks (~4x faster than
  ``json_to_cel``).
* **Numbers compare as JSON users expect.** ``celpy`` implements the old CEL rule that ``1.0 == 1`` is a
  type error, so a JSON ``1.0`` (or a ``float`` coming from a tool) could never equal ``1``. This backend
  registers its own comparison and arithmetic operators (``celpy``'s supported way of overriding
  operators, scoped to programs compiled here; ``celpy`` itself is not patched) implementing the current
  CEL semantics, as ``cel-expr-python`` does: ``int``, ``uint`` and ``double`` compare by numeric value,
  and ``==`` between values of different kinds is ``false`` rather than an error, also inside lists and
  maps. Arithmetic between different number types is refused, as in CEL and on the default backend
  (celpy would compute ``100 / 3.0`` as ``33``). Trade-off: numbers keep their type rather than integral
  doubles being turned into ints, so ``type(x) == double`` stays true and ``x * 2`` is an error for a
  JSON ``1.0`` on both backends (write ``x * 2.0``). A map lookup finds a key of another number type
  (``{1: "a"}[1.0]``), as on the default backend.
* **Never true where CEL is not.** The default backend hands an expression to this one whenever a bound
  value holds a NUL (:mod:`agentguard.cel._expr`), so a model picks this engine by adding ``"\\x00"`` to
  any argument: a lenient answer here is a denial turned into a run. celpy's indexing (``list[-1]`` is the
  last element, ``"abc"[0]`` is ``"a"``, ``{true: 1}[1]`` is found), conversions
  (:mod:`agentguard.cel._celpy_convert`), map literals (double and null keys), macros (an error inside
  ``exists`` made it true), ``in`` on strings, the string functions on bytes and lists, ordering of a bool
  against an int, and arithmetic on bools, ``%`` on doubles, ``-2**63 / -1`` and durations past int64
  nanoseconds are replaced by CEL's; so are ``||``, ``&&``, ``!`` and ``?:`` (celpy's ``false || "yes"`` was
  ``"yes"``), ``has()`` (any error in its operand was false), ``type()`` of computed values, the duration and
  timestamp accessors (:mod:`agentguard.cel._celpy_time`), ``matches()`` (strings only) and bound map keys
  (bool, int and string only; a double key finds only the int key of exactly its value). Where celpy cannot
  hold the value CEL means (a duration or timestamp below the microsecond), the evaluation fails.
  ``tests/cel/test_celpy_exact.py`` checks it differentially.
"""

from __future__ import annotations

import ast
import datetime
import math
import operator
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any, cast

import celpy
import celpy.celtypes as ct
import celpy.evaluation as ev
import lark
import re2
from celpy.celparser import CELParseError

from agentguard.cel._base import CelCompileError, CelEvaluationError, Reads, VarType, redacted
from agentguard.cel._budget import metered, spent, tick
from agentguard.cel._celpy_convert import (
    cel_bool,
    cel_bytes,
    cel_double,
    cel_duration,
    cel_int,
    cel_kind,
    cel_string,
    cel_timestamp,
    cel_uint,
)
from agentguard.cel._celpy_time import ACCESSORS
from agentguard.cel._checked import add_read

__all__ = ["CelpyBackend"]

_UTC = datetime.UTC


# --- Values in ----------------------------------------------------------------------------------------------

_TRUE = ct.BoolType(True)
_FALSE = ct.BoolType(False)
_INT64_MIN, _INT64_MAX, _UINT64_LIMIT = -(2**63), 2**63 - 1, 2**64


def _int_to_cel(value: int) -> ct.IntType | ct.UintType:
    # Same range rule as cel-expr-python: int64, then uint64 for the values only it can hold.
    if _INT64_MIN <= value <= _INT64_MAX:
        return int.__new__(ct.IntType, value)
    if 0 <= value < _UINT64_LIMIT:
        return int.__new__(ct.UintType, value)
    raise TypeError(f"integer {value} is out of the 64-bit range")


def _to_cel(value: Any) -> Any:
    """Convert a plain Python value (JSON-like, plus ``datetime``/``timedelta``) into celpy values.

    This runs on every evaluation for every bound variable, so the JSON types are tested first with
    exact-type comparisons and converted without going through the celpy constructors' own type checks.
    """
    kind = type(value)
    if kind is str:
        return str.__new__(ct.StringType, value)
    if kind is dict:
        result = dict.__new__(ct.MapType)  # MapType.__init__ would only copy the items one by one
        dict.update(
            result,
            {
                (str.__new__(ct.StringType, key) if type(key) is str else _key_to_cel(key)): _to_cel(item)
                for key, item in value.items()
            },
        )
        return result
    if kind is list:
        return ct.ListType([_to_cel(item) for item in value])
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int:
        return _int_to_cel(value)
    if kind is float:
        return float.__new__(ct.DoubleType, value)
    if value is None or kind in _CEL_TYPES:
        return value  # already converted: never wrap twice
    for base, convert in _BY_BASE:
        if isinstance(value, base):
            return convert(value)
    raise TypeError(f"a {kind.__name__} is not a CEL value")


def _key_to_cel(key: Any) -> Any:
    """A bound map's key other than a plain ``str``: a bool, an int (in the 64-bit range) or a string, as in CEL.
    A double, null, bytes or any other key is refused, as the default engine refuses it: celpy would keep it,
    and a double key would then answer a lookup CEL cannot make (``{1.0: "a"}[1]``)."""
    converted = _to_cel(key)
    if not isinstance(converted, bool | int | str):  # celpy's BoolType, IntType, UintType and StringType too
        raise TypeError(f"a {cel_kind(converted)} is not a valid map key")
    return converted


def _timestamp_to_cel(value: datetime.datetime) -> ct.TimestampType:
    return ct.TimestampType(value if value.tzinfo else value.replace(tzinfo=_UTC))


_CEL_TYPES = frozenset(
    {
        ct.BoolType,
        ct.IntType,
        ct.UintType,
        ct.DoubleType,
        ct.StringType,
        ct.BytesType,
        ct.ListType,
        ct.MapType,
        ct.TimestampType,
        ct.DurationType,
    }
)

# Everything but the exact JSON types (bytes, tuples, datetimes, subclasses such as str enums or
# OrderedDict); first match wins, so bool precedes int.
_BY_BASE: tuple[tuple[type | tuple[type, ...], Callable[[Any], Any]], ...] = (
    (bool, lambda value: _TRUE if value else _FALSE),
    (int, lambda value: _int_to_cel(int(value))),
    (float, lambda value: float.__new__(ct.DoubleType, value)),
    (str, lambda value: str.__new__(ct.StringType, value)),
    (bytes, lambda value: bytes.__new__(ct.BytesType, value)),
    ((list, tuple), lambda value: ct.ListType([_to_cel(item) for item in value])),
    (Mapping, lambda value: _to_cel(dict(value))),
    (datetime.datetime, _timestamp_to_cel),
    (datetime.timedelta, ct.DurationType),
)


def _strict(expected: type, cel_name: str, convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A binder for a variable declared with a scalar type: reject other Python types, as the default
    backend does, instead of letting the value fail somewhere inside the expression."""

    def bind(value: Any) -> Any:
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise TypeError(f"expected a {cel_name}, got a {type(value).__name__}")
        return convert(value)

    return bind


_BINDERS: dict[VarType, Callable[[Any], Any]] = {
    VarType.DYN: _to_cel,
    VarType.TIMESTAMP: _strict(datetime.datetime, "timestamp", _timestamp_to_cel),
    VarType.STRING: _strict(str, "string", _to_cel),
    VarType.INT: _strict(int, "int", _to_cel),
    VarType.BOOL: _strict(bool, "bool", _to_cel),
}


# --- Values out ---------------------------------------------------------------------------------------------

_TYPE_NAMES: dict[Any, str] = {
    ct.BoolType: "bool",
    ct.IntType: "int",
    ct.UintType: "uint",
    ct.DoubleType: "double",
    ct.StringType: "string",
    ct.BytesType: "bytes",
    ct.ListType: "list",
    ct.MapType: "map",
    type(None): "null_type",
    ct.TypeType: "type",
    ct.TimestampType: "google.protobuf.Timestamp",
    ct.DurationType: "google.protobuf.Duration",
}


def _to_python(value: Any) -> Any:
    """Unwrap a celpy result into plain Python values (type values become their CEL name)."""
    if isinstance(value, bool | ct.BoolType):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list):
        return [_to_python(item) for item in value]
    if isinstance(value, dict):
        return {_to_python(key): _to_python(item) for key, item in value.items()}
    if isinstance(value, datetime.datetime):
        plain = datetime.datetime.combine(value.date(), value.timetz())  # drop celpy's subclass
        return plain.astimezone(_UTC) if plain.tzinfo else plain.replace(tzinfo=_UTC)
    if isinstance(value, datetime.timedelta):
        return datetime.timedelta(days=value.days, seconds=value.seconds, microseconds=value.microseconds)
    if isinstance(value, type):
        return _TYPE_NAMES.get(value, value.__name__)
    return value


# --- CEL comparison semantics -------------------------------------------------------------------------------
#
# These are registered as the implementations of the operators (see the module docstring), so the
# transpiled code calls them by their qualified name; they must stay module-level functions.

_NUMBER, _LIST, _MAP = "number", "list", "map"

# What CEL equality considers one type, by Python base class; first match wins (bool before int, since
# celpy's BoolType is an int). Values of different kinds are never equal.
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    ((bool, ct.BoolType), "bool"),
    ((int, float), _NUMBER),
    (str, "string"),
    (bytes, "bytes"),
    (list, _LIST),
    (dict, _MAP),
    (datetime.datetime, "timestamp"),
    (datetime.timedelta, "duration"),
)


def _kind(value: Any) -> Any:
    for base, kind in _KINDS:
        if isinstance(value, base):
            return kind
    return type(value)  # null, type values


def _equal(left: Any, right: Any) -> bool:
    kind = _kind(left)
    if kind is not _kind(right):
        return False
    if kind is _NUMBER:
        first, second = _numbers(left, right)
        return first == second
    if kind is _LIST:
        return len(left) == len(right) and all(map(_equal, left, right))
    if kind is _MAP:
        return len(left) == len(right) and all(
            (found := _entry(right, key)) is not _MISSING and _equal(item, found)
            for key, item in left.items()
        )
    return bool(left == right)


_MISSING = object()


def _entry(mapping: dict[Any, Any], key: Any) -> Any:
    """The value under ``key`` by CEL equality (``1``, ``1u`` and ``1.0`` are one key; ``true`` is not ``1``,
    although Python hashes and compares them as equal), or ``_MISSING``. Numbers match exactly: ``2.0**53``
    does not find the key ``2**53 + 1``, which it only equals once both are doubles."""
    if isinstance(key, str):
        try:
            return dict.get(mapping, key, _MISSING)
        except TypeError:  # a hash collision made celpy compare the key with one of another type
            pass
    number = _kind(key) is _NUMBER
    for other, value in dict.items(mapping):
        if number and _kind(other) is _NUMBER:
            if _exact(key) == _exact(other):  # Python compares an int with a float exactly
                return value
        elif _equal(key, other):
            return value
    return _MISSING


def _exact(number: Any) -> int | float:
    """A celpy number as the plain Python number of its exact value."""
    return float(number) if isinstance(number, float) else int(number)


def _numbers(left: Any, right: Any) -> tuple[int, int] | tuple[float, float]:
    """Two numbers as CEL compares them: exactly between integers, as doubles when either is a double
    (so ``9223372036854775807 == 9223372036854775808.0``, as in cel-go and cel-cpp)."""
    if isinstance(left, float) or isinstance(right, float):
        return float(left), float(right)
    return int(left), int(right)


def cel_eq(left: Any, right: Any) -> Any:
    """CEL ``==``: never a type error; numbers of any type compare by value."""
    if isinstance(left, ev.CELEvalError):
        return left
    if isinstance(right, ev.CELEvalError):
        return right
    return _TRUE if _equal(left, right) else _FALSE


def cel_ne(left: Any, right: Any) -> Any:
    """CEL ``!=``: the negation of :func:`cel_eq`."""
    result = cel_eq(left, right)
    return result if isinstance(result, ev.CELEvalError) else (_FALSE if result else _TRUE)


def _order(
    compare: Callable[[Any, Any], bool], fallback: Callable[[Any, Any], Any], left: Any, right: Any
) -> Any:
    kind = _kind(left)
    if kind is _NUMBER and _kind(right) is _NUMBER:
        return _TRUE if compare(*_numbers(left, right)) else _FALSE
    if isinstance(left, ev.CELEvalError) or isinstance(right, ev.CELEvalError):
        return fallback(left, right)  # celpy's own passes the error on
    if kind != _kind(right) or kind not in _ORDERED:  # celpy would order a bool against an int
        raise TypeError(f"no matching overload for ordering {_kind_name(left)} and {_kind_name(right)}")
    return fallback(left, right)  # celpy's own: same-type ordering


_ORDERED = frozenset({"bool", "string", "bytes", "timestamp", "duration"})


def cel_lt(left: Any, right: Any) -> Any:
    """CEL ``<``; numbers of any type compare by value."""
    return _order(operator.lt, ev.bool_lt, left, right)


def cel_le(left: Any, right: Any) -> Any:
    """CEL ``<=``; numbers of any type compare by value."""
    return _order(operator.le, ev.bool_le, left, right)


def cel_gt(left: Any, right: Any) -> Any:
    """CEL ``>``; numbers of any type compare by value."""
    return _order(operator.gt, ev.bool_gt, left, right)


def cel_ge(left: Any, right: Any) -> Any:
    """CEL ``>=``; numbers of any type compare by value."""
    return _order(operator.ge, ev.bool_ge, left, right)


def cel_in(item: Any, container: Any) -> Any:
    """CEL ``in``: list membership by CEL equality; map membership by key, numbers by value. Nothing else is
    a container (celpy would answer ``"a" in "abc"`` with Python's substring test)."""
    if isinstance(item, ev.CELEvalError):
        return item
    if isinstance(container, ev.CELEvalError):
        return container
    if isinstance(container, list):
        return _TRUE if any(_equal(item, element) for element in container) else _FALSE
    if isinstance(container, dict):
        if not isinstance(item, float):  # a double finds an int or uint key of its value
            _map_key(item)
        return _FALSE if _entry(container, item) is _MISSING else _TRUE
    raise TypeError(f"no matching overload for _in_({_kind_name(item)}, {_kind_name(container)})")


def _kind_name(value: Any) -> str:
    kind = _kind(value)
    return kind if isinstance(kind, str) else "null_type" if value is None else kind.__name__


def _map_key(key: Any) -> None:
    """Refuse a value CEL does not allow as a map key (a double, null, a list...): cel-cpp fails there."""
    if not isinstance(key, bool | int | str):  # celpy's BoolType, IntType, UintType and StringType too
        raise TypeError(f"invalid map key type {_kind_name(key)}")


def cel_index(container: Any, key: Any) -> Any:
    """CEL ``container[key]``: a list index is an int, uint or integral double within ``0 .. size - 1`` (a
    negative one is an error, not Python's count from the end); a map key is found by CEL equality (``1``,
    ``1u`` and ``1.0`` are one key, ``true`` is not ``1``). Strings, bytes and other values have no index."""
    if isinstance(container, ev.CELEvalError):
        return container
    if isinstance(key, ev.CELEvalError):
        return key
    if isinstance(container, list):
        if isinstance(key, bool | ct.BoolType) or not isinstance(key, int | float):
            raise TypeError(f"no matching overload for _[_](list, {_kind_name(key)})")
        if isinstance(key, float) and not float(key).is_integer():
            raise IndexError("list index is not an integer")
        index = int(key)
        if not 0 <= index < len(container):
            raise IndexError("list index out of range")
        return list.__getitem__(container, index)
    if isinstance(container, dict):
        if isinstance(key, float) and not float(key).is_integer():
            raise IndexError("no such key in map")
        if not isinstance(key, float):
            _map_key(key)
        found = _entry(container, key)
        if found is _MISSING:  # the key is quoted, for redacted() to keep where the expression writes it
            raise IndexError(
                f"no such key in map: {str(key)!r}" if isinstance(key, str) else "no such key in map"
            )
        return found
    raise TypeError(f"no matching overload for _[_]({_kind_name(container)}, {_kind_name(key)})")


def cel_map_literal(entries: list[tuple[Any, Any]]) -> Any:
    """A CEL map literal ``{k: v, ...}``: keys are bool, int, uint or string, each once by CEL equality
    (``{1: 'a', 1u: 'b'}`` is an error); celpy's own accepts double and null keys."""
    result = dict.__new__(ct.MapType)
    for key, value in entries:
        if isinstance(key, ev.CELEvalError):
            return key
        if isinstance(value, ev.CELEvalError):
            return value
        _map_key(key)
        if _entry(result, key) is not _MISSING:
            raise ValueError("duplicate key in map literal")
        dict.__setitem__(result, key, value)
    return result


# Arithmetic: celpy accepts mixed number types and gets some wrong (``100 / 3.0`` is ``33``), takes a bool
# for a number (its BoolType is an int) and has a ``%`` on doubles; CEL has none of these, and the default
# backend refuses them, so both refuse them. The overloads of CEL's standard definitions, by operand kinds:
_NUMBERS = {("int", "int"), ("uint", "uint"), ("double", "double")}
_OVERLOADS: dict[str, frozenset[tuple[str, str]]] = {
    "+": frozenset(
        _NUMBERS
        | {("string", "string"), ("bytes", "bytes"), ("list", "list")}
        | {("timestamp", "duration"), ("duration", "timestamp"), ("duration", "duration")}
    ),
    "-": frozenset(
        _NUMBERS | {("timestamp", "timestamp"), ("timestamp", "duration"), ("duration", "duration")}
    ),
    "*": frozenset(_NUMBERS),
    "/": frozenset(_NUMBERS),
    "%": frozenset({("int", "int"), ("uint", "uint")}),
}


def _overload(symbol: str, left: Any, right: Any) -> ev.CELEvalError | None:
    """An operand that is already an error (passed on), or ``None``; raises when CEL has no such overload."""
    if isinstance(left, ev.CELEvalError):
        return left
    if isinstance(right, ev.CELEvalError):
        return right
    kinds = (cel_kind(left), cel_kind(right))
    if kinds not in _OVERLOADS[symbol]:
        raise TypeError(f"no matching overload for _{symbol}_{kinds}".replace("'", ""))
    return None


def _duration_in_range(value: Any) -> Any:
    """A duration computed by ``+`` or ``-`` must fit int64 nanoseconds (about 292 years), as in cel-cpp and
    cel-go; celpy lets ``timestamp - timestamp`` and duration sums go past it."""
    if isinstance(value, datetime.timedelta) and not (
        _INT64_MIN <= value // datetime.timedelta(microseconds=1) * 1000 <= _INT64_MAX
    ):
        raise OverflowError("duration out of range")
    return value


def cel_add(left: Any, right: Any) -> Any:
    """CEL ``+``: celpy's, on the operand types CEL defines it for, within the duration range."""
    if (error := _overload("+", left, right)) is not None:
        return error
    return _duration_in_range(spent(operator.add(left, right)))


def cel_sub(left: Any, right: Any) -> Any:
    """CEL ``-``: celpy's, on the operand types CEL defines it for, within the duration range."""
    if (error := _overload("-", left, right)) is not None:
        return error
    return _duration_in_range(operator.sub(left, right))


def cel_mul(left: Any, right: Any) -> Any:
    """CEL ``*``: celpy's, on the operand types CEL defines it for."""
    if (error := _overload("*", left, right)) is not None:
        return error
    return operator.mul(left, right)


def _int64_quotient(left: Any, right: Any) -> None:
    """``-2**63 / -1`` and ``-2**63 % -1`` overflow int64 in CEL; celpy answers them."""
    if (
        type(left) is ct.IntType
        and type(right) is ct.IntType
        and int(left) == _INT64_MIN
        and int(right) == -1
    ):
        raise OverflowError("int64 overflow")


def cel_div(left: Any, right: Any) -> Any:
    """CEL ``/``: celpy's, on the operand types CEL defines it for, with int64 overflow, and IEEE 754 for doubles
    (``1.0 / -0.0`` is ``-inf``; celpy makes it ``inf``)."""
    if (error := _overload("/", left, right)) is not None:
        return error
    _int64_quotient(left, right)
    if isinstance(left, ct.DoubleType) and isinstance(right, ct.DoubleType) and float(right) == 0.0:
        dividend = float(left)
        if math.isnan(dividend) or dividend == 0.0:
            return ct.DoubleType(math.nan)
        return ct.DoubleType(math.copysign(math.inf, dividend) * math.copysign(1.0, float(right)))
    return operator.truediv(left, right)


def cel_mod(left: Any, right: Any) -> Any:
    """CEL ``%``: celpy's, on the operand types CEL defines it for, with int64 overflow."""
    if (error := _overload("%", left, right)) is not None:
        return error
    _int64_quotient(left, right)
    return operator.mod(left, right)


def _strings(function: str, receiver: Any, argument: Any) -> tuple[str, str]:
    """Both operands of a string function, which celpy would also apply to bytes and lists."""
    if not (isinstance(receiver, str) and isinstance(argument, str)):
        raise TypeError(
            f"no matching overload for {function}({_kind_name(receiver)}, {_kind_name(argument)})"
        )
    return str(receiver), str(argument)


def cel_size(value: Any) -> Any:
    """CEL ``size()``: of a string (code points), bytes, a list or a map; celpy's is 0 for null."""
    if isinstance(value, ev.CELEvalError):
        return value
    if not isinstance(value, str | bytes | list | dict):
        raise TypeError(f"no matching overload for size({_kind_name(value)})")
    return ct.IntType(len(value))


def cel_contains(receiver: Any, argument: Any) -> Any:
    """CEL ``string.contains(string)``; celpy also answers it for lists and maps, which CEL does not."""
    if isinstance(receiver, ev.CELEvalError):
        return receiver
    text, part = _strings("contains", receiver, argument)
    return _TRUE if part in text else _FALSE


def cel_starts_with(receiver: Any, argument: Any) -> Any:
    """CEL ``string.startsWith(string)``; celpy also answers it for bytes."""
    if isinstance(receiver, ev.CELEvalError):
        return receiver
    text, part = _strings("startsWith", receiver, argument)
    return _TRUE if text.startswith(part) else _FALSE


def cel_ends_with(receiver: Any, argument: Any) -> Any:
    """CEL ``string.endsWith(string)``; celpy also answers it for bytes."""
    if isinstance(receiver, ev.CELEvalError):
        return receiver
    text, part = _strings("endsWith", receiver, argument)
    return _TRUE if text.endswith(part) else _FALSE


# --- Logic, has() and type() -------------------------------------------------------------------------------
#
# celpy's ``||`` and ``&&`` hand a non-bool operand through as their value (``false || "yes"`` is ``"yes"``, so
# ``(a || b) != true`` was true), its ``!`` and ``?:`` refuse a Python bool, its has() is "the selection gave
# no error" (any error in the operand made it false) and its type() is the Python type of values computed
# here. These follow the CEL specification; the transpiled code calls them instead of celpy's (see
# :class:`_Exact`).


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | ct.BoolType)


def _no_logic_overload(operator_name: str, *operands: Any) -> ev.CELEvalError:
    kinds = ", ".join(_kind_name(operand) for operand in operands)
    message = f"no matching overload for {operator_name}({kinds})"
    return ev.CELEvalError(message, TypeError, (message,))


def _logic(absorbing: bool, operator_name: str, left: Any, right: Any) -> Any:
    """CEL ``||`` (``absorbing`` true) or ``&&`` (false): the absorbing value on either side is the answer,
    whatever the other side is (an error too, in either order); else two bools give the other value, and an
    error or a non-bool operand is an error, never the operand itself."""
    if (_is_bool(left) and bool(left) is absorbing) or (_is_bool(right) and bool(right) is absorbing):
        return _TRUE if absorbing else _FALSE
    if _is_bool(left) and _is_bool(right):
        return _FALSE if absorbing else _TRUE
    for operand in (left, right):
        if isinstance(operand, ev.CELEvalError):
            return operand
    return _no_logic_overload(operator_name, left, right)


def cel_or(left: Any, right: Any) -> Any:
    """CEL ``a || b``: true if either side is true, whatever the other is; false if both are false."""
    return _logic(True, "_||_", left, right)


def cel_and(left: Any, right: Any) -> Any:
    """CEL ``a && b``: false if either side is false, whatever the other is; true if both are true."""
    return _logic(False, "_&&_", left, right)


def cel_not(operand: Any) -> Any:
    """CEL ``!a``: of a bool only."""
    if isinstance(operand, ev.CELEvalError):
        return operand
    if not _is_bool(operand):
        return _no_logic_overload("!_", operand)
    return _FALSE if operand else _TRUE


def cel_condition(condition: Any, if_true: Any, if_false: Any) -> Any:
    """CEL ``c ? a : b``: the condition is a bool; the branch not taken is ignored, its error too."""
    if isinstance(condition, ev.CELEvalError):
        return condition
    if not _is_bool(condition):
        return _no_logic_overload("_?_:_", condition)
    return if_true if condition else if_false


def cel_has(parent: Any, field: str) -> Any:
    """CEL ``has(e.f)``: whether the map (or message) ``e`` has the field ``f``. Evaluating ``e`` is not part of
    the test: its error is the answer (``has(v.a.b)`` with ``v == {}`` is an error, not false), and ``e`` of
    another type is an error too."""
    if isinstance(parent, ev.CELEvalError):
        return parent
    if not isinstance(parent, dict):
        raise TypeError(
            f"no matching overload: has() selects a field of a map, not of a {_kind_name(parent)}"
        )
    return _TRUE if dict.__contains__(parent, field) else _FALSE


# The CEL type value of each kind of value: what celpy's type names (``int``, ``string``...) resolve to.
_CEL_TYPE_OF = {
    "bool": ct.BoolType,
    "int": ct.IntType,
    "uint": ct.UintType,
    "double": ct.DoubleType,
    "string": ct.StringType,
    "bytes": ct.BytesType,
    "list": ct.ListType,
    "map": ct.MapType,
    "timestamp": ct.TimestampType,
    "duration": ct.DurationType,
    "null_type": type(None),
}


def cel_type(value: Any) -> Any:
    """CEL ``type(x)``: by the CEL kind of ``x``, not its Python class (celpy's ``+`` of two strings is a
    ``str``, so ``type(a + b) == string`` was false)."""
    if isinstance(value, ev.CELEvalError):
        return value
    if isinstance(value, type):
        return ct.TypeType
    found = _CEL_TYPE_OF.get(cel_kind(value))
    if found is None:
        raise TypeError(f"no CEL type for a {type(value).__name__}")
    return found


# --- Macros -------------------------------------------------------------------------------------------------
#
# celpy's macros wrap their answer in ``BoolType(...)``, which makes an error (an exception object, truthy)
# true: ``[0].exists(x, 1 / x > 0)`` and ``!["a"].exists(x, x)`` were true. These follow the CEL
# specification: the range is a list or a map (its keys); ``true`` absorbs errors in ``exists``, ``false``
# in ``all``; any other error, or a predicate that is not a bool, is an error. The transpiled code calls
# these instead of celpy's (see :class:`_Exact`).

_Predicate = Callable[[Any], Any]


def _range(items: Any) -> list[Any]:
    if isinstance(items, ev.CELEvalError):
        raise _raised(items)
    if isinstance(items, list | dict):
        return list(items)
    raise TypeError(f"no matching overload: a {_kind_name(items)} is not a comprehension range")


def _raised(error: ev.CELEvalError) -> TypeError:
    """A CEL error value as an exception celpy turns back into one at the nearest absorbing point."""
    return TypeError(_error_message(error))


def _verdicts(activation: Any, variable: str, predicate: _Predicate, items: Any) -> Iterator[Any]:
    """Each element's answer: a bool, or the error it gave (a non-bool answer is an error)."""
    for item in _range(items(activation)):
        answer = ev.result(activation.nested_activation(vars={variable: item}), predicate)
        if isinstance(answer, ev.CELEvalError | bool | ct.BoolType):
            yield answer
        else:
            yield ev.CELEvalError("no matching overload: the predicate is not a bool", TypeError, ())


def cel_macro_exists(activation: Any, variable: str, predicate: _Predicate, items: Any) -> Any:
    """``range.exists(x, p)``: true if ``p`` is true for one element, whatever errors others give."""
    error = None
    for answer in _verdicts(activation, variable, predicate, items):
        if isinstance(answer, ev.CELEvalError):
            error = error or answer
        elif answer:
            return _TRUE
    if error is not None:
        raise _raised(error)
    return _FALSE


def cel_macro_all(activation: Any, variable: str, predicate: _Predicate, items: Any) -> Any:
    """``range.all(x, p)``: false if ``p`` is false for one element, whatever errors others give."""
    error = None
    for answer in _verdicts(activation, variable, predicate, items):
        if isinstance(answer, ev.CELEvalError):
            error = error or answer
        elif not answer:
            return _FALSE
    if error is not None:
        raise _raised(error)
    return _TRUE


def cel_macro_exists_one(activation: Any, variable: str, predicate: _Predicate, items: Any) -> Any:
    """``range.exists_one(x, p)``: ``p`` true for exactly one element; any error is the answer."""
    count = 0
    for answer in _verdicts(activation, variable, predicate, items):
        if isinstance(answer, ev.CELEvalError):
            raise _raised(answer)
        count += 1 if answer else 0
    return _TRUE if count == 1 else _FALSE


def cel_macro_filter(activation: Any, variable: str, predicate: _Predicate, items: Any) -> Any:
    """``range.filter(x, p)``: the elements for which ``p`` is true; any error is the answer."""
    kept = []
    elements = _range(items(activation))
    for item in elements:
        answer = ev.result(activation.nested_activation(vars={variable: item}), predicate)
        if isinstance(answer, ev.CELEvalError):
            raise _raised(answer)
        if not isinstance(answer, bool | ct.BoolType):
            raise TypeError("no matching overload: the predicate is not a bool")
        if answer:
            kept.append(item)
    return ct.ListType(kept)


def cel_macro_map(activation: Any, variable: str, transform: _Predicate, items: Any) -> Any:
    """``range.map(x, e)``: ``e`` of each element; any error is the answer."""
    mapped: list[Any] = []
    for item in _range(items(activation)):
        value = ev.result(activation.nested_activation(vars={variable: item}), transform)
        if isinstance(value, ev.CELEvalError):
            raise _raised(value)
        mapped.append(value)
    return ct.ListType(mapped)


_QUIET = re2.Options()
_QUIET.log_errors = False


def cel_matches(text: Any, pattern: Any) -> Any:
    """CEL ``string.matches(string)``: RE2's search, on strings only (celpy's also matched bytes). An invalid
    pattern is an error that RE2 does not write to stderr (a pattern taken from the data would put the data in
    the process's log); so is a text or pattern with a lone surrogate, which RE2 cannot encode."""
    for operand in (text, pattern):
        if isinstance(operand, ev.CELEvalError):
            return operand
    if not (isinstance(text, str) and isinstance(pattern, str)):
        raise TypeError(f"no matching overload for matches({_kind_name(text)}, {_kind_name(pattern)})")
    try:
        return _TRUE if re2.search(str(pattern), str(text), options=_QUIET) is not None else _FALSE
    except re2.error as exc:
        return ev.CELEvalError("match error", exc.__class__, exc.args)
    except UnicodeEncodeError:  # celpy's error capture has no entry for it: an error value here
        message = "a string that is not valid Unicode cannot be matched"
        return ev.CELEvalError(message, ValueError, (message,))


_OPERATORS: dict[str, Callable[..., Any]] = {
    **ACCESSORS,
    "matches": cel_matches,
    "size": cel_size,
    "contains": cel_contains,
    "startsWith": cel_starts_with,
    "endsWith": cel_ends_with,
    "_[_]": cel_index,
    "int": cel_int,
    "uint": cel_uint,
    "double": cel_double,
    "string": cel_string,
    "bytes": cel_bytes,
    "bool": cel_bool,
    "duration": cel_duration,
    "timestamp": cel_timestamp,
    "_+_": cel_add,
    "_-_": cel_sub,
    "_*_": cel_mul,
    "_/_": cel_div,
    "_%_": cel_mod,
    "_==_": cel_eq,
    "_!=_": cel_ne,
    "_<_": cel_lt,
    "_<=_": cel_le,
    "_>_": cel_gt,
    "_>=_": cel_ge,
    "_in_": cel_in,
}


# --- Activation ---------------------------------------------------------------------------------------------


class _Activation(ev.Activation):
    """The variables of one evaluation, in front of the program's shared base activation.

    The transpiled code reads a variable as ``activation.name``; a plain dictionary lookup answers that.
    Everything else (function and type names, qualified names declared with dots) falls through to the
    base activation, which is never modified. Macros nest by copying the dictionary.
    """

    def __init__(self, base: ev.Activation, values: dict[str, Any]) -> None:
        # Deliberately not calling super().__init__: it would build and load a new name tree.
        self.identifiers = base.identifiers
        self.functions = base.functions
        self.package = base.package
        self.agentguard_values = values

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = self.__dict__["agentguard_values"]
        if name in values:
            return values[name]
        return _TYPE_VALUES[name] if name in _TYPE_VALUES else super().__getattr__(name)

    def resolve_variable(self, name: str) -> Any:
        values = self.agentguard_values
        if name in values:
            return values[name]
        return _TYPE_VALUES[name] if name in _TYPE_VALUES else super().resolve_variable(name)

    def nested_activation(
        self, annotations: Mapping[str, Any] | None = None, vars: Mapping[str, Any] | None = None
    ) -> _Activation:
        tick()  # a comprehension's next iteration: counted against the evaluation budget
        return _Activation(self, {**self.agentguard_values, **(vars or {})})


# --- Backend ------------------------------------------------------------------------------------------------

# Names a CEL expression may use without declaring them: the type denotations.
_TYPE_IDENTIFIERS = frozenset(
    {"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"}
)
_KNOWN_QUALIFIED = frozenset(celpy.googleapis)
# celpy resolves a type name (``type(x) == int``) to the function of that name, its conversion: the types
# whose conversion is replaced here keep celpy's type value.
_TYPE_VALUES = {name: ev.base_functions[name] for name in _OPERATORS if name in _TYPE_IDENTIFIERS}

# Functions and methods celpy knows; calling another one would be an evaluation error on every call.
_FUNCTIONS = frozenset(ev.base_functions) | {"dyn", "has"}
# The macros celpy implements, all of the form ``receiver.macro(variable, expression)``.
_MACROS = frozenset({"all", "exists", "exists_one", "filter", "map"})
# CEL macros it does not: celpy would treat them as calls to unknown functions, or (for the
# three-argument ``map(x, filter, transform)``) silently ignore an argument.
_UNSUPPORTED_MACROS = frozenset({"existsOne", "transformList", "transformMap", "transformMapEntry"})


class CelpyBackend:
    """:class:`~agentguard.cel.CelBackend` on ``cel-python``."""

    name = "cel-python"

    def __init__(self) -> None:
        # celpy's parser is a shared singleton that keeps the text being parsed on itself: compile under a
        # lock (compiling happens at load time; evaluation takes no lock).
        self._lock = threading.Lock()
        limit = sys.getrecursionlimit()
        self._environment = celpy.Environment(runner_class=celpy.CompiledRunner)
        # celpy sets the limit to 2500 unconditionally; never lower what the application chose.
        sys.setrecursionlimit(max(limit, sys.getrecursionlimit()))

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> CelpyProgram:
        with self._lock:
            try:
                tree = self._environment.compile(expression)
            except CELParseError as exc:
                raise _parse_error(expression, exc) from None
            referenced = _Scanner(expression, declarations).scan(tree)
            reads = _reads(tree, frozenset(referenced))
            try:
                runner = celpy.CompiledRunner(self._environment, cast(ev.TranspilerTree, tree), _OPERATORS)
                run = _function(runner.tp.source_text)
            except Exception as exc:  # the transpiler rejects a few constructs the grammar accepts
                raise CelCompileError(expression, f"{type(exc).__name__}: {exc}") from exc
        binders = {name: _BINDERS[declarations[name]] for name in referenced}
        return CelpyProgram(expression, runner.tp.base_activation, run, binders, reads)


class CelpyProgram:
    """A transpiled ``cel-python`` expression. Thread-safe: evaluation state lives in its activation."""

    __slots__ = ("_base", "_binders", "_dotted", "_names", "_reads", "_run", "_source")

    def __init__(
        self,
        source: str,
        base: ev.Activation,
        run: Callable[[_Activation], Any],
        binders: dict[str, Callable[[Any], Any]],
        reads: Mapping[str, Reads] | None = None,
    ) -> None:
        self._source = source
        self._reads: Mapping[str, Reads] = reads if reads is not None else dict.fromkeys(binders)
        self._base = base
        self._run = run
        self._binders = binders
        self._names = frozenset(binders)
        self._dotted = any("." in name for name in binders)

    @property
    def source(self) -> str:
        return self._source

    @property
    def variables(self) -> frozenset[str]:
        return self._names

    @property
    def reads(self) -> Mapping[str, Reads]:
        return self._reads

    def explain(self, variables: Mapping[str, Any], *, values: bool) -> str | None:
        """Not offered by this backend (it keeps no source positions)."""
        return None

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        values: dict[str, Any] = {}
        for name, bind in self._binders.items():
            if name in variables:
                try:
                    values[name] = bind(variables[name])
                except (TypeError, ValueError) as exc:
                    raise CelEvaluationError(
                        self._source, f"variable {name!r} cannot be bound: {redacted(str(exc), self._source)}"
                    ) from exc
        activation = self._qualified(values) if self._dotted else _Activation(self._base, values)
        try:
            with metered(self._source):
                result = self._run(activation)
        except CelEvaluationError:
            raise
        except Exception as exc:  # what escapes celpy's own error capture; celpy's runner does the same
            raise CelEvaluationError(
                self._source, f"{type(exc).__name__}: {redacted(str(exc), self._source)}"
            ) from exc
        if isinstance(result, ev.CELEvalError):
            raise CelEvaluationError(self._source, redacted(_error_message(result), self._source))
        return _to_python(result)

    def _qualified(self, values: dict[str, Any]) -> _Activation:
        """Variables declared as ``a.b.c`` are resolved through celpy's name tree (longest prefix wins)."""
        dotted = {name: value for name, value in values.items() if "." in name}
        plain = {name: value for name, value in values.items() if "." not in name}
        return _Activation(self._base.nested_activation(vars=dotted), plain)

    def __repr__(self) -> str:
        return f"CelpyProgram({self._source!r})"


def _path_to_modules(*names: str) -> dict[str, Any]:
    """The transpiled code calls the operators registered here by their qualified name
    (``agentguard.cel._celpy.cel_eq``, ``agentguard.cel._celpy_convert.cel_int``): its namespace binds the
    name's first part to a tree of namespaces ending at these modules, rather than to the package itself (the
    CEL layer imports nothing of agentguard outside ``agentguard.cel``)."""
    root = SimpleNamespace()
    for name in names:
        *parents, leaf = name.split(".")
        node = root
        for part in parents:
            if not hasattr(node, part):
                setattr(node, part, SimpleNamespace())
            node = getattr(node, part)
        setattr(node, leaf, sys.modules[name])
    return vars(root)


_OPERATOR_PATH = _path_to_modules(__name__, cel_int.__module__, ACCESSORS["getHours"].__module__)


# What the transpiled code calls directly rather than through a function that can be registered.
_REPLACED: dict[str, Callable[..., Any]] = {
    "celpy.celtypes.MapType": cel_map_literal,
    "celpy.celtypes.logical_or": cel_or,
    "celpy.celtypes.logical_and": cel_and,
    "celpy.celtypes.logical_not": cel_not,
    "celpy.celtypes.logical_condition": cel_condition,
    "celpy.celtypes.TypeType": cel_type,
    "celpy.evaluation.macro_exists": cel_macro_exists,
    "celpy.evaluation.macro_all": cel_macro_all,
    "celpy.evaluation.macro_exists_one": cel_macro_exists_one,
    "celpy.evaluation.macro_filter": cel_macro_filter,
    "celpy.evaluation.macro_map": cel_macro_map,
}


def _call_to(function: Callable[..., Any]) -> ast.expr:
    """The transpiled code's name for one of this module's functions."""
    return ast.parse(f"{__name__}.{function.__name__}", mode="eval").body


class _Exact(ast.NodeTransformer):
    """Calls to celpy's map literal, logical operators, type() and macros in the transpiled code become calls
    to this module's."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        replacement = _REPLACED.get(ast.unparse(node.func))
        if replacement is not None:
            node.func = _call_to(replacement)
        return node


# celpy transpiles ``has(e.f)`` as two helpers: ``ex_N_h = lambda activation: <e>.get('f')`` and this test.
_HAS_TEST = "not isinstance(celpy.evaluation.result(activation, {}), CELEvalError)"


def _exact_has(helpers: list[ast.stmt]) -> None:
    """Make each ``has(e.f)`` CEL's :func:`cel_has` of ``e`` and ``'f'``, in place of celpy's "selecting
    ``e.f`` gives no error" (which made any error in ``e`` false). The test becomes the helper's value, with
    the errors ``e`` gives."""
    lambdas = {
        statement.targets[0].id: statement.value
        for statement in helpers
        if isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(statement.value, ast.Lambda)
    }
    for name, test in lambdas.items():
        if not ast.unparse(test.body).startswith(_HAS_TEST.partition("{")[0]):
            continue
        selection = lambdas.get(f"{name}_h")
        if selection is None or ast.unparse(test.body) != _HAS_TEST.format(f"{name}_h"):
            raise RuntimeError("unexpected celpy transpiler output for has() (unsupported celpy version?)")
        body = selection.body
        if not (
            isinstance(body, ast.Call)
            and isinstance(body.func, ast.Attribute)
            and body.func.attr == "get"
            and len(body.args) == 1
            and isinstance(body.args[0], ast.Constant)
            and isinstance(body.args[0].value, str)
        ):
            raise ValueError("has() takes a field selection, such as has(x.f)")
        selection.body = ast.Call(func=_call_to(cel_has), args=[body.func.value, body.args[0]], keywords=[])
        test.body = ast.parse(f"celpy.evaluation.result(activation, {name}_h)", mode="eval").body


def _function(source_text: str) -> Callable[[_Activation], Any]:
    """Turn the transpiler's statements into a function of the activation.

    The statements define helper lambdas (``ex_1 = lambda activation: ...``) and end with
    ``CEL = celpy.evaluation.result(base_activation, ex_N)``. The lambdas are defined once, in a namespace
    private to this program; the last statement's value becomes the body of the returned function, with
    ``base_activation`` as its parameter instead of a module global.
    """
    module = _Exact().visit(ast.parse(source_text))
    *helpers, last = module.body
    _exact_has(helpers)
    if not (isinstance(last, ast.Assign) and [ast.unparse(target) for target in last.targets] == ["CEL"]):
        raise RuntimeError(f"unexpected celpy transpiler output (unsupported celpy version?):\n{source_text}")
    parameters = ast.arguments(
        posonlyargs=[], args=[ast.arg(arg="base_activation")], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    function = ast.Expression(body=ast.Lambda(args=parameters, body=last.value))
    namespace: dict[str, Any] = {**vars(ev), **_OPERATOR_PATH}
    helpers_module = ast.fix_missing_locations(ast.Module(body=helpers, type_ignores=[]))
    exec(compile(helpers_module, "<cel>", "exec"), namespace)
    run: Callable[[_Activation], Any] = eval(
        compile(ast.fix_missing_locations(function), "<cel>", "eval"), namespace
    )
    return run


# celpy names a ValueError "return error for overflow" whatever it says; its own text is the reason.
_BY_TEXT = frozenset({ValueError, OverflowError, TypeError, IndexError})


def _error_message(error: ev.CELEvalError) -> str:
    message = str(error.args[0]) if error.args else "evaluation error"
    details = error.args[2] if len(error.args) > 2 and isinstance(error.args[2], tuple) else ()
    if (
        len(error.args) > 1
        and error.args[1] in _BY_TEXT
        and len(details) == 1
        and isinstance(details[0], str)
    ):
        return details[0]  # the reason raised by this backend's operators (or by celpy's own)
    detail = "; ".join(str(part) for part in details)
    return f"{message} ({detail})" if detail and detail not in message else message


def _parse_error(expression: str, exc: CELParseError) -> CelCompileError:
    """celpy's message is only the caret snippet; the reason is on the lark exception it replaced.

    Lark places "unexpected end of input" at the last token; it is reported at the end of the text
    instead, where the default backend reports it too.
    """
    cause = exc.__context__
    line, column = exc.line, exc.column
    if isinstance(cause, lark.exceptions.UnexpectedToken) and cause.token.type == "$END":
        reason = "Syntax error: unexpected end of input"
        line = expression.count("\n") + 1
        column = len(expression.rpartition("\n")[2]) + 1
    elif isinstance(cause, lark.exceptions.UnexpectedToken):
        reason = f"Syntax error: unexpected {str(cause.token)!r}"
    elif isinstance(cause, lark.exceptions.UnexpectedCharacters):
        reason = f"Syntax error: unexpected character {cause.char!r}"
    else:
        reason = "Syntax error"
    return CelCompileError(expression, reason, line, column)


class _Scanner:
    """Find the declared variables an expression reads, and reject undeclared ones, on celpy's parse tree.

    Works on the tree rather than the text, so string literals, field and method names after ``.`` and
    field names in message literals are never mistaken for variables. A qualified name ``a.b.c`` counts
    as every declared prefix (``a``, ``a.b``, ``a.b.c``), because celpy resolves the longest one at run
    time. Variables bound by macros are in scope only in the macro's body, never in its receiver. Macros
    celpy cannot evaluate are compile errors here, rather than evaluation errors on every call.
    """

    def __init__(self, expression: str, declarations: Mapping[str, VarType]) -> None:
        self._expression = expression
        self._declared = declarations
        self._found: set[str] = set()

    def scan(self, tree: lark.Tree[Any]) -> set[str]:
        self._visit(tree, frozenset())
        return self._found

    def _visit(self, node: Any, scope: frozenset[str]) -> None:
        if not isinstance(node, lark.Tree):
            return  # a token: literal, operator, or a name handled by the rule that holds it
        children: list[Any] = node.children
        rule = node.data
        if rule in ("member_dot", "ident", "dot_ident"):
            name = _qualified_name(node)
            if name is not None:
                self._reference(*name, scope)
                return
        elif rule == "member_dot_arg":
            self._method(children, scope)
            return
        elif rule in ("ident_arg", "dot_ident_arg"):
            self._function(children[0])
            children = children[1:]  # the arguments
        elif rule == "member_object":
            children = children[1:]  # the field values, not the message type name
        for child in children:
            self._visit(child, scope)

    def _method(self, children: list[Any], scope: frozenset[str]) -> None:
        receiver, method, *rest = children
        self._visit(receiver, scope)
        args = rest[0].children if rest else []
        if method not in _MACROS and method not in _UNSUPPORTED_MACROS:
            self._function(method)
            for arg in args:
                self._visit(arg, scope)
            return
        if method not in _MACROS or len(args) != 2:
            raise CelCompileError(
                self._expression,
                f"{method}() with {len(args)} arguments is not supported by the cel-python backend",
                method.line,
                method.column,
            )
        name = _qualified_name(args[0])
        if name is None or len(name[0]) != 1 or name[1]:
            raise CelCompileError(
                self._expression,
                f"{method}() needs a variable name as first argument",
                method.line,
                method.column,
            )
        self._visit(args[1], scope | {str(name[0][0])})

    def _function(self, name: lark.Token) -> None:
        if name not in _FUNCTIONS:
            raise CelCompileError(
                self._expression, f"undeclared reference to function {str(name)!r}", name.line, name.column
            )

    def _reference(self, chain: list[lark.Token], rooted: bool, scope: frozenset[str]) -> None:
        head = str(chain[0])
        if head in scope and not rooted:
            return
        prefixes = [".".join(chain[: length + 1]) for length in range(len(chain))]
        declared = [name for name in prefixes if name in self._declared]
        if declared:
            self._found.update(declared)
        elif head not in _TYPE_IDENTIFIERS and prefixes[-1] not in _KNOWN_QUALIFIED:
            raise CelCompileError(
                self._expression, f"undeclared reference to {head!r}", chain[0].line, chain[0].column
            )


# Rules that, with a single child, only wrap it (precedence levels of the grammar).
_WRAPPERS = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
    }
)
_LITERAL_WRAPPERS = _WRAPPERS | {"literal"}


def _reads(tree: lark.Tree[Any], declared: frozenset[str]) -> dict[str, Reads]:
    """What the expression reads of each declared variable, from celpy's parse tree (as
    :func:`agentguard.cel._checked.reads_of` does from the C++ engine's): the members selected by a constant
    name, nested; ``None`` wherever a value is used in any other way. Dotted variable names are read whole."""
    if any("." in name for name in declared):
        return dict.fromkeys(declared)
    found: dict[str, Reads] = {}

    def visit(node: Any, scope: frozenset[str]) -> None:
        if not isinstance(node, lark.Tree):
            return
        path = _member_path(node)
        if path is not None:
            head, members = path
            if head in declared and head not in scope:
                add_read(found, head, members)
            return
        children: list[Any] = node.children
        if node.data == "member_dot_arg" and str(children[1]) in _MACROS:
            receiver, _, *rest = children
            visit(receiver, scope)
            args = rest[0].children if rest else []
            bound = _qualified_name(args[0]) if args else None
            inner = scope | {str(bound[0][0])} if bound is not None else scope
            for arg in args[1:]:
                visit(arg, inner)
            return
        for child in children:
            visit(child, scope)

    visit(tree, frozenset())
    return found


def _unwrapped(node: Any, wrappers: frozenset[str] = _WRAPPERS) -> Any:
    """``node`` without the single-child rules that only wrap it (precedence levels of the grammar)."""
    while isinstance(node, lark.Tree) and node.data in wrappers and len(node.children) == 1:
        node = node.children[0]
    return node


def _member_path(node: Any) -> tuple[str, list[str]] | None:
    """``(variable, [member, ...])`` when ``node`` is nothing but constant selections from a variable."""
    node = _unwrapped(node)
    if not isinstance(node, lark.Tree):
        return None
    children: list[Any] = node.children
    if node.data in ("ident", "dot_ident"):
        return str(children[0]), []
    if node.data == "member_dot":
        inner = _member_path(children[0])
        return None if inner is None else (inner[0], [*inner[1], str(children[1])])
    if node.data == "member_index":
        key = _string_literal(children[1])
        inner = _member_path(children[0]) if key is not None else None
        return None if inner is None or key is None else (inner[0], [*inner[1], key])
    return None


def _string_literal(node: Any) -> str | None:
    """The text of a plain quoted string literal (no escapes, no prefix); ``None`` for anything else."""
    node = _unwrapped(node, _LITERAL_WRAPPERS)
    token = str(node) if isinstance(node, lark.Token) else ""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'" and "\\" not in token:
        inner = token[1:-1]
        return None if token[0] in inner else inner
    return None


def _qualified_name(node: Any) -> tuple[list[lark.Token], bool] | None:
    """``(identifiers, rooted)`` if ``node`` is nothing but a name ``a.b.c`` (``rooted``: written ``.a.b.c``,
    which bypasses local variables), else ``None``."""
    node = _unwrapped(node)
    if not isinstance(node, lark.Tree):
        return None
    children: list[Any] = node.children
    if node.data in ("ident", "dot_ident"):
        return [children[0]], node.data == "dot_ident"
    if node.data == "member_dot":
        prefix = _qualified_name(children[0])
        return None if prefix is None else ([*prefix[0], children[1]], prefix[1])
    return None
