"""What the reference guardian's answers quote of text a client wrote: a bounded excerpt of it.

An answer may quote the client: the method it asked for (``Method not found: <method>``), the path of each
member that failed validation (which can hold the client's own member names, when a rule copied one in), a
content coding it declared. Each is as long as the body or the head allows, and quoted whole, one request
of a megabyte was answered with a megabyte -- shown in full by every log and client that shows the answer --
and one ``params`` with a hundred thousand failing fields with forty times its size::

    >>> excerpt("tasks/send")
    'tasks/send'
    >>> len(excerpt("x" * 1_000_000)) == MAX_QUOTED
    True

The request's ``id`` is the one thing an answer still echoes whole: JSON-RPC requires it (the client matches
answers to requests by it), and it is no longer than the request made it. The log shows the same texts with
:func:`agentguard.guardian._logged.logged`, which also escapes them.
"""

from __future__ import annotations

from agentguard.aos import AOSRequestError, FieldError, InvalidParamsError, MethodNotFoundError

__all__ = ["MAX_FIELD_ERRORS", "MAX_QUOTED", "bounded", "excerpt"]

MAX_QUOTED = 160
"""The most characters of one text a client wrote that an answer quotes."""

MAX_FIELD_ERRORS = 10
"""The most failing fields a -32602 answer lists; ``data.omitted`` counts the others."""


def excerpt(text: str) -> str:
    """``text`` as an answer quotes it: whole up to :data:`MAX_QUOTED` characters, else its start and its end
    joined by ``...`` (both say what arrived).

    The characters are kept as they came (a newline, a NUL, a lone surrogate): the guardian's JSON text
    escapes each, and a client shows them escaped as it must any peer's text (agentguard's does). Changed,
    they would make a method name or a path its client could no longer recognise as its own.
    """
    if len(text) <= MAX_QUOTED:
        return text
    head = MAX_QUOTED * 2 // 3
    return f"{text[:head]}...{text[len(text) - (MAX_QUOTED - head - 3) :]}"


def bounded(error: AOSRequestError) -> AOSRequestError:
    """``error`` as the guardian answers it: each text of the client's it quotes an :func:`excerpt`, and at
    most :data:`MAX_FIELD_ERRORS` failing fields (``data.omitted``: how many more there were).

    The messages keep :mod:`agentguard.aos`'s wording: the error is made again from the excerpts. A -32600
    quotes nothing of the client's and is returned as it is.
    """
    if isinstance(error, MethodNotFoundError):
        return MethodNotFoundError(excerpt(error.method), request_id=error.request_id)
    if isinstance(error, InvalidParamsError):
        fields = [
            FieldError(excerpt(field.path), excerpt(field.message))
            for field in error.errors[:MAX_FIELD_ERRORS]
        ]
        listed = InvalidParamsError(fields, request_id=error.request_id)
        omitted = len(error.errors) - len(fields)
        if omitted and isinstance(listed.data, dict):
            listed.data["omitted"] = omitted
        return listed
    return error
