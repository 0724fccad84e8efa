"""CEL's duration and timestamp accessors (``getHours()``, ``getMilliseconds()``, ``getDayOfYear(tz)``, ...) for
the ``cel-python`` backend, as the CEL specification and the default engine define them.

Why they are not ``celpy``'s: an expression is evaluated on ``cel-python`` whenever a bound value holds a NUL,
so a model picks these answers by adding a NUL to any argument, and celpy's differ from CEL's where an
assertion would notice: ``duration("1.5s").getMilliseconds()`` is the total (``1500``) on celpy and the
millisecond part (``500``) in CEL; a time zone name is looked up without regard to case (``"utc"``, which the
engine refuses); a duration accessor given a time zone fails on an ``assert``. Here:

* a duration has ``getHours()``, ``getMinutes()``, ``getSeconds()`` (each the total, truncated toward zero)
  and ``getMilliseconds()`` (the millisecond part, of the duration's sign); nothing else, and no time zone;
* a timestamp has all ten accessors, in UTC or in the time zone given: an IANA name spelled exactly as in the
  system's time zone database (the one the engine reads), or an offset ``[+-]h:m`` of one or two ASCII digits
  each, as the engine parses it (``"+02:00"``, ``"-2:0"``). Anything else is an error, where the engine may be
  more lenient (``"+1:2:3"``): an error is never true.

A local time past the year 9999 fails (the engine would answer ``10000``): failing is the safe side.

    >>> from agentguard.cel import VarType, get_backend
    >>> program = get_backend("cel-python").compile("duration(v).getMilliseconds()", {"v": VarType.DYN})
    >>> program.evaluate({"v": "-1.5s"})
    -500
"""

from __future__ import annotations

import datetime
import functools
import re
import zoneinfo
from collections.abc import Callable
from typing import Any

import celpy.celtypes as ct
import celpy.evaluation as ev

from agentguard.cel._celpy_convert import cel_kind

__all__ = ["ACCESSORS"]

_UTC = datetime.UTC
_OFFSET = re.compile(r"\A([+-]?)([0-9]{1,2}):([0-9]{1,2})\Z")


@functools.cache
def _zone_names() -> frozenset[str]:
    """The time zone names the engine accepts: the database's, exactly spelled; not the ``right/`` zones
    (with leap seconds), which it refuses."""
    return frozenset(name for name in zoneinfo.available_timezones() if not name.startswith("right/"))


def _local(timestamp: datetime.datetime, zone: Any) -> datetime.datetime:
    """``timestamp``'s wall-clock time in ``zone`` (``None``: UTC), as a naive datetime."""
    utc = timestamp.astimezone(_UTC).replace(tzinfo=None)
    if zone is None:
        return utc
    if not isinstance(zone, str):
        raise TypeError(f"no matching overload: a time zone is a string, not a {cel_kind(zone)}")
    name = str(zone)
    if name == "":
        return utc
    offset = _OFFSET.match(name)
    if offset is not None:  # any number of hours: the engine takes "+25:00" as a day and an hour
        sign, hours, minutes = offset.groups()
        shift = datetime.timedelta(hours=int(hours), minutes=int(minutes))
        return utc - shift if sign == "-" else utc + shift
    if name not in _zone_names():
        raise ValueError("invalid timezone")
    return timestamp.astimezone(zoneinfo.ZoneInfo(name)).replace(tzinfo=None)


def _day_of_year(local: datetime.datetime) -> int:
    return local.timetuple().tm_yday - 1


# What each accessor answers of a local time (CEL counts months, days of the month and of the year from 0,
# the day of the week from Sunday = 0, and getDate() from 1).
_OF_TIMESTAMP: dict[str, Callable[[datetime.datetime], int]] = {
    "getFullYear": lambda local: local.year,
    "getMonth": lambda local: local.month - 1,
    "getDate": lambda local: local.day,
    "getDayOfMonth": lambda local: local.day - 1,
    "getDayOfWeek": lambda local: local.isoweekday() % 7,
    "getDayOfYear": _day_of_year,
    "getHours": lambda local: local.hour,
    "getMinutes": lambda local: local.minute,
    "getSeconds": lambda local: local.second,
    "getMilliseconds": lambda local: local.microsecond // 1000,
}


def _truncated(micros: int, unit: int) -> int:
    """``micros // unit`` rounded toward zero, as the engine divides (``-119s`` is ``-1`` minute)."""
    quotient = abs(micros) // unit
    return -quotient if micros < 0 else quotient


# What each accessor answers of a duration, from its microseconds.
_OF_DURATION: dict[str, Callable[[int], int]] = {
    "getHours": lambda micros: _truncated(micros, 3_600_000_000),
    "getMinutes": lambda micros: _truncated(micros, 60_000_000),
    "getSeconds": lambda micros: _truncated(micros, 1_000_000),
    "getMilliseconds": lambda micros: _truncated(micros, 1_000) - 1_000 * _truncated(micros, 1_000_000),
}


def _part(name: str, value: Any, zone: tuple[Any, ...]) -> Any:
    """Accessor ``name`` of ``value``: a timestamp's in UTC or in ``zone``, a duration's (no zone)."""
    for operand in (value, *zone):
        if isinstance(operand, ev.CELEvalError):
            return operand
    if isinstance(value, datetime.datetime) and len(zone) <= 1:
        return ct.IntType(_OF_TIMESTAMP[name](_local(value, zone[0] if zone else None)))
    of_duration = _OF_DURATION.get(name)
    if isinstance(value, datetime.timedelta) and of_duration is not None and not zone:
        return ct.IntType(of_duration(value // datetime.timedelta(microseconds=1)))
    kinds = ", ".join(cel_kind(operand) for operand in (value, *zone))
    raise TypeError(f"no matching overload for {name}({kinds})")


def _accessor(name: str, doc: str) -> Callable[..., Any]:
    """The function registered for CEL's ``name`` accessor, made a module-level function of its own
    (``cel_get_hours`` for ``getHours``): the transpiled code calls a registered function by its qualified
    name."""

    def accessor(value: Any, *zone: Any) -> Any:
        return _part(name, value, zone)

    accessor.__name__ = accessor.__qualname__ = "cel_get" + re.sub(
        "[A-Z]", lambda m: "_" + m[0].lower(), name[3:]
    )
    accessor.__doc__ = doc
    globals()[accessor.__name__] = accessor
    return accessor


# The functions registered in place of celpy's, by CEL name, and what each answers.
ACCESSORS: dict[str, Callable[..., Any]] = {
    name: _accessor(name, doc)
    for name, doc in {
        "getFullYear": "CEL ``timestamp.getFullYear([zone])``.",
        "getMonth": "CEL ``timestamp.getMonth([zone])``: January is 0.",
        "getDate": "CEL ``timestamp.getDate([zone])``: the day of the month from 1.",
        "getDayOfMonth": "CEL ``timestamp.getDayOfMonth([zone])``: the day of the month from 0.",
        "getDayOfWeek": "CEL ``timestamp.getDayOfWeek([zone])``: Sunday is 0.",
        "getDayOfYear": "CEL ``timestamp.getDayOfYear([zone])``: January 1st is 0.",
        "getHours": "CEL ``timestamp.getHours([zone])``, ``duration.getHours()`` (the total).",
        "getMinutes": "CEL ``timestamp.getMinutes([zone])``, ``duration.getMinutes()`` (the total).",
        "getSeconds": "CEL ``timestamp.getSeconds([zone])``, ``duration.getSeconds()`` (the total).",
        "getMilliseconds": (
            "CEL ``timestamp.getMilliseconds([zone])``, ``duration.getMilliseconds()`` (the part below the "
            "second, of the duration's sign: ``-500`` for ``-1.5s``; celpy answers the total)."
        ),
    }.items()
}
