"""How the reference guardian's log shows text a client (or a rule's engine, quoting one) wrote.

A request's id, an unknown method's name, a CEL engine's error quoting the request's values: each is as long
as the body allows (a megabyte) and may hold a newline, a NUL or a lone surrogate. Logged as it came, one
request wrote a megabyte per line and could forge log lines (or fail a handler that writes UTF-8). Shown as
``repr`` shows it (every such character escaped), cut in the middle (:mod:`reprlib`), a line stays one
line of a bounded length and still says what arrived.
"""

from __future__ import annotations

import reprlib

__all__ = ["logged"]

_REPR = reprlib.Repr()
_REPR.maxstring = 160  # the characters of a string shown: its start and its end
_REPR.maxlong = 40  # the digits of an integer
_REPR.maxother = 160
_REPR.maxlevel = 4
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8


def logged(value: object) -> str:
    """``value`` as the guardian's log shows it: ``repr``, containers and long strings cut."""
    return _REPR.repr(value)
