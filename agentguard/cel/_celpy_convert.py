"""CEL's type conversions (``int()``, ``uint()``, ``double()``, ``string()``, ``bytes()``, ``bool()``,
``duration()``, ``timestamp()``) for the ``cel-python`` backend, as the CEL specification and the default
engine define them.

Why they are not ``celpy``'s: ``celpy`` converts with Python's own constructors, which accept more than CEL
does (``int("0x10")``, ``int("1_0")``, ``int("٣")``, ``duration("1d")``, ``timestamp("2024-01-01")``,
``uint(-0.5)``, ``duration(1)``, ``bool(1)``) and format differently (``string(1.0)`` is ``"1.0"``,
``string(true)`` ``"True"``). An expression is evaluated on ``cel-python`` whenever a bound value holds a
NUL, so a lenient conversion there would let the model pick the answer by adding a NUL to any argument.
Every function here either gives the default engine's answer or fails, never a different value:

* where the engine is more lenient than the specification (``double("0x10")``, a timestamp with a leap
  second or without the ``:`` in its offset), these fail, which an assertion counts as not true;
* a duration or timestamp text with a non-zero digit below the microsecond fails: ``celpy`` keeps
  microseconds, and rounding would answer some comparison differently from the engine's nanoseconds.

Failures are raised as ``ValueError``, ``OverflowError`` or ``TypeError``, which ``celpy`` turns into CEL
error values at the nearest point where CEL may absorb an error (``||``, ``&&``, ``?:``, macros), so an
error here behaves as a CEL error does. Messages never quote the value converted.

    >>> from agentguard.cel import VarType, get_backend
    >>> program = get_backend("cel-python").compile("int(v) <= 100", {"v": VarType.DYN})
    >>> program.evaluate({"v": " 42"})
    True
    >>> program.evaluate({"v": "0x10"})
    Traceback (most recent call last):
    ...
    agentguard.cel._base.CelEvaluationError: CEL evaluation error: cannot convert string to int
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import celpy.celtypes as ct
import celpy.evaluation as ev

__all__ = [
    "cel_bool",
    "cel_bytes",
    "cel_double",
    "cel_duration",
    "cel_int",
    "cel_kind",
    "cel_string",
    "cel_timestamp",
    "cel_uint",
]

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
# The timestamp range of CEL: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_TIMESTAMP_SECONDS = (-62135596800, 253402300799)
# The duration range of CEL: +-10,000 years, in nanoseconds.
_DURATION_NANOS = 315576000000 * 10**9

# The engine parses numbers with absl's SimpleAtoi/SimpleAtod: ASCII digits, surrounding ASCII whitespace.
_WS = "[ \t\n\v\f\r]*"
_INT_TEXT = re.compile(rf"\A{_WS}[+-]?[0-9]+{_WS}\Z")
_UINT_TEXT = re.compile(rf"\A{_WS}\+?[0-9]+{_WS}\Z")
_DOUBLE_TEXT = re.compile(
    rf"\A{_WS}[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan){_WS}\Z",
    re.IGNORECASE,
)
# Go's ParseDuration, as the CEL specification uses it, without the non-ASCII "µs" the engine refuses.
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h)")
_DURATION_TEXT = re.compile(r"\A([+-]?)(0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|ms|s|m|h))+)\Z")
_DURATION_UNITS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
# RFC 3339, as the CEL specification requires it.
_TIMESTAMP_TEXT = re.compile(
    r"\A([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))\Z"
)
# The texts the engine's bool() accepts (Go's strconv.ParseBool less "T" and "F", which it refuses).
_BOOL_TEXT = {
    **dict.fromkeys(("1", "t", "true", "TRUE", "True"), True),
    **dict.fromkeys(("0", "f", "false", "FALSE", "False"), False),
}


def cel_kind(value: Any) -> str:
    """The CEL type name of a celpy value, for overload resolution and messages."""
    if isinstance(value, bool | ct.BoolType):
        return "bool"
    if isinstance(value, ct.UintType):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, datetime.timedelta):
        return "duration"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return "null_type" if value is None else type(value).__name__


def _no_overload(function: str, value: Any) -> TypeError:
    return TypeError(f"no matching overload for {function}({cel_kind(value)})")


def _int64(value: int) -> ct.IntType:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise OverflowError("int64 overflow")
    return ct.IntType(value)


def _uint64(value: int) -> ct.UintType:
    if not 0 <= value <= _UINT64_MAX:
        raise OverflowError("uint64 overflow")
    return ct.UintType(value)


def cel_int(value: Any) -> Any:
    """``int()``: truncates a double toward zero within the int64 range; a string is decimal digits only."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind in ("bool", "int", "uint"):  # the engine converts a bool to 0 or 1
        return _int64(int(value))
    if kind == "double":
        number = float(value)
        if math.isnan(number) or not -(2.0**63) < number < 2.0**63:
            raise OverflowError("double out of int64 range")
        return ct.IntType(math.trunc(number))
    if kind == "string":
        if not _INT_TEXT.match(value):
            raise ValueError("cannot convert string to int")
        return _int64(int(str(value)))
    if kind == "timestamp":  # seconds since the epoch, rounded down
        return _int64((value - _EPOCH) // datetime.timedelta(seconds=1))
    raise _no_overload("int", value)


def cel_uint(value: Any) -> Any:
    """``uint()``: a negative value, even ``-0.5``, is out of range; a string is decimal digits only."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind in ("int", "uint"):
        return _uint64(int(value))
    if kind == "double":
        number = float(value)
        if math.isnan(number) or not 0.0 <= number < 2.0**64:
            raise OverflowError("double out of uint64 range")
        return ct.UintType(math.trunc(number))
    if kind == "string":
        if not _UINT_TEXT.match(value):
            raise ValueError("cannot convert string to uint")
        return _uint64(int(str(value)))
    raise _no_overload("uint", value)


def cel_double(value: Any) -> Any:
    """``double()``: from numbers and from decimal text (``inf`` and ``nan`` too), never from a bool."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind in ("int", "uint", "double"):
        return ct.DoubleType(float(value))
    if kind == "string":
        if not _DOUBLE_TEXT.match(value):
            raise ValueError("cannot convert string to double")
        return ct.DoubleType(float(value.strip(" \t\n\v\f\r")))
    raise _no_overload("double", value)


def cel_string(value: Any) -> Any:
    """``string()``: formatted as the engine formats (``1.0`` is ``"1"``, ``true`` is ``"true"``)."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind == "string":
        return ct.StringType(value)
    if kind == "bool":
        return ct.StringType("true" if value else "false")
    if kind in ("int", "uint"):
        return ct.StringType(str(int(value)))
    if kind == "double":
        return ct.StringType(format_double(float(value)))
    if kind == "bytes":
        try:
            return ct.StringType(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("invalid UTF-8 in bytes converted to string") from None
    if kind == "timestamp":
        utc = value.astimezone(_UTC)  # formatted by hand: strftime's %Y does not write year 50 as 0050
        return ct.StringType(
            f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
            + _fraction(utc.microsecond)
            + "Z"
        )
    if kind == "duration":
        micros = value // datetime.timedelta(microseconds=1)
        seconds, rest = divmod(abs(micros), 10**6)
        return ct.StringType(f"{'-' if micros < 0 else ''}{seconds}{_fraction(rest)}s")
    raise _no_overload("string", value)


def _fraction(micros: int) -> str:
    """The fractional seconds as protobuf's JSON form writes them: none, or 3, 6 (or 9) digits."""
    if micros == 0:
        return ""
    return f".{micros // 1000:03d}" if micros % 1000 == 0 else f".{micros:06d}"


def format_double(value: float) -> str:
    """A double as the engine's ``string()`` writes it: the shortest digits that read back as the same
    double, in ``%g`` style (an exponent when it is below -4 or at least 6): ``1``, ``1e+06``, ``-0``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    shortest = Decimal(repr(abs(value))).normalize()
    digits = "".join(map(str, shortest.as_tuple().digits))
    exponent = shortest.adjusted()
    if -4 <= exponent < 6:
        return sign + format(shortest, "f")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def cel_bytes(value: Any) -> Any:
    """``bytes()``: a string's UTF-8 encoding (text that is not valid Unicode fails)."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind == "bytes":
        return ct.BytesType(value)
    if kind == "string":
        try:
            return ct.BytesType(str(value).encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("a string that is not valid Unicode has no UTF-8 encoding") from None
    raise _no_overload("bytes", value)


def cel_bool(value: Any) -> Any:
    """``bool()``: from a bool, or the texts ``true``/``false`` (and ``1``/``0``, ``t``/``f``, ``TRUE``, ...; not
    ``T``/``F``, which the engine refuses)."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind == "bool":
        return ct.BoolType(bool(value))
    if kind == "string":
        found = _BOOL_TEXT.get(str(value))
        if found is None:
            raise ValueError("cannot convert string to bool")
        return ct.BoolType(found)
    raise _no_overload("bool", value)


def cel_duration(value: Any) -> Any:
    """``duration()``: Go duration text (``"1h30m"``, ``"1.5s"``, ``"-90m"``; units ns, us, ms, s, m, h)."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind == "duration":
        return value
    if kind != "string":
        raise _no_overload("duration", value)
    whole = _DURATION_TEXT.match(value)
    if whole is None:
        raise ValueError("cannot convert string to duration")
    nanos = sum(
        (Fraction(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(whole[2])),
        Fraction(0),
    )
    if nanos > _DURATION_NANOS:
        raise OverflowError("duration out of range")
    if nanos % 1000:
        raise ValueError(
            "cel-python keeps durations to the microsecond: a finer one cannot be compared exactly"
        )
    micros = int(nanos) // 1000
    return ct.DurationType(datetime.timedelta(microseconds=-micros if whole[1] == "-" else micros))


def cel_timestamp(value: Any) -> Any:
    """``timestamp()``: RFC 3339 text (``"2024-01-01T00:00:00Z"``, an offset ``+01:00``) or epoch seconds,
    between the years 1 and 9999 in UTC."""
    if isinstance(value, ev.CELEvalError):
        return value
    kind = cel_kind(value)
    if kind == "timestamp":
        return value
    if kind == "int":
        seconds = int(value)
        if not _TIMESTAMP_SECONDS[0] <= seconds <= _TIMESTAMP_SECONDS[1]:
            raise OverflowError("timestamp out of range")
        return ct.TimestampType(_EPOCH + datetime.timedelta(seconds=seconds))
    if kind != "string":
        raise _no_overload("timestamp", value)
    parts = _TIMESTAMP_TEXT.match(value)
    if parts is None:
        raise ValueError("cannot convert string to timestamp")
    year, month, day, hour, minute, second, fraction, sign, off_hours, off_minutes = parts.groups()
    fraction = (fraction or "").ljust(9, "0")
    if fraction[6:] != "000":
        raise ValueError(
            "cel-python keeps timestamps to the microsecond: a finer one cannot be compared exactly"
        )
    offset = datetime.timedelta()
    if sign is not None:
        if int(off_hours) > 23 or int(off_minutes) > 59:
            raise ValueError("cannot convert string to timestamp")
        offset = datetime.timedelta(hours=int(off_hours), minutes=int(off_minutes))
        offset = -offset if sign == "-" else offset
    try:
        local = datetime.datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int(fraction[:6]),
            tzinfo=datetime.timezone(offset),
        )
    except ValueError:  # no such date or time of day (a leap second too, which the engine accepts)
        raise ValueError("cannot convert string to timestamp") from None
    try:
        return ct.TimestampType(local.astimezone(_UTC))
    except OverflowError:
        raise OverflowError("timestamp out of range") from None
