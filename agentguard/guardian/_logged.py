"""How the guardian client and the reference guardian show text the other side wrote: bounded, escaped.

What a peer writes is as long as its body allows and may hold a newline, a NUL or a lone surrogate: a
client's request id or unknown method in the reference guardian's log, a guardian's JSON-RPC error message
(``Method not found: <whatever the step's method was>``), its ``decision`` or ``id`` of the wrong kind in the
cause of a client's missing decision -- which becomes the step's recorded reason, a log line, a span status
and an audit report. Shown as it came, one answer wrote megabytes into each of them, could forge log lines
or report lines, and failed a handler or exporter that writes UTF-8. Shown as ``repr`` shows it (every such
character escaped), cut in the middle (:mod:`reprlib`) and never longer than :data:`MAX_LOGGED` characters
in all, it stays one line of a bounded length and still says what arrived::

    >>> logged("Method not found: tasks/send")
    "'Method not found: tasks/send'"
    >>> logged("line\\nNUL\\x00 half \\ud800")
    "'line\\\\nNUL\\\\x00 half \\\\ud800'"
    >>> len(logged("x" * 1_000_000)) <= MAX_LOGGED
    True

It lives here rather than in the server so that the client can use it without importing the server (and
its rule engine): the server's package imports this one anyway.
"""

from __future__ import annotations

import reprlib

__all__ = ["MAX_LOGGED", "logged"]

_REPR = reprlib.Repr()
_REPR.maxstring = 160  # the characters of a string shown: its start and its end
_REPR.maxlong = 40  # the digits of an integer
_REPR.maxother = 160
_REPR.maxlevel = 4
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8

MAX_LOGGED = 400
"""The most characters :func:`logged` returns. reprlib cuts each string and each container, but a value of
containers within containers holds up to 8**4 strings of 160 characters: past this, the middle is cut too."""


def logged(value: object) -> str:
    """``value`` as a log line or a failure cause shows it: ``repr``, containers and long strings cut, at most
    :data:`MAX_LOGGED` characters."""
    text = _REPR.repr(value)
    if len(text) <= MAX_LOGGED:
        return text
    half = (MAX_LOGGED - 3) // 2
    return f"{text[:half]}...{text[len(text) - half :]}"
