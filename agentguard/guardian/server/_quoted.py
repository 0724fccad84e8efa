"""What the reference guardian's answers quote of text a client wrote: a bounded excerpt of it.

An answer may quote the client: the method it asked for (``Method not found: <method>``), the path of each
member that failed validation (which can hold the client's own member names, when a rule copied one in), a
content coding it declared. Each is as long as the body or the head allows, and quoted whole, one request
of a megabyte was answered with a megabyte -- shown in full by every log and client that shows the answer --
and one ``params`` with a hundred thousand failing fields with forty times its size. Each is quoted as an
:func:`agentguard._httputil.excerpt` (which the agent server's answers use too).

The request's ``id`` is the one thing an answer still echoes whole: JSON-RPC requires it (the client matches
answers to requests by it), and it is no longer than the request made it. The log shows the same texts with
:func:`agentguard.guardian._logged.logged`, which also escapes them.
"""

from __future__ import annotations

from agentguard._httputil import excerpt
from agentguard.aos import AOSRequestError, FieldError, InvalidParamsError, MethodNotFoundError

__all__ = ["MAX_FIELD_ERRORS", "bounded"]

MAX_FIELD_ERRORS = 10
"""The most failing fields a -32602 answer lists; ``data.omitted`` counts the others."""


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
        omitted = error.omitted + len(error.errors) - len(fields)
        return InvalidParamsError(fields, request_id=error.request_id, omitted=omitted)
    return error
