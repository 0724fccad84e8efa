"""Request checks shared by agentguard's HTTP servers (the reference guardian, the OpenAgentSpec server).

Plain functions over header strings and body chunks -- no web framework is imported here -- so that each
server makes the same decisions about bearer tokens, JSON content types and body sizes, and answers them
in its own wire format (JSON-RPC errors for the guardian, plain JSON for the agent server)::

    >>> is_json_media_type("application/json; charset=utf-8")
    True
    >>> bearer_challenge("Bearer wrong", b"s3cret", realm="demo")
    'Bearer realm="demo", error="invalid_token"'
    >>> bearer_challenge("Bearer s3cret", b"s3cret", realm="demo") is None
    True
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import AsyncIterable, Iterable

__all__ = [
    "bearer_challenge",
    "content_codings",
    "declared_too_large",
    "excerpt",
    "is_json_media_type",
    "is_loopback",
    "read_limited",
]


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a Content-Type header says JSON in UTF-8 (no charset, or a UTF-8 one)."""
    if content_type is None:
        return False
    media_type, *parameters = (part.strip().lower() for part in content_type.split(";"))
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return media_type == "application/json"


def content_codings(headers: Iterable[str]) -> list[str]:
    """The content codings the ``Content-Encoding`` header lines ``headers`` name, ``identity`` aside: what a
    body would have to be inflated from. agentguard inflates none (a small body can inflate far past any size
    cap), on either side of the wire.

        >>> content_codings(["gzip, identity", " BR"])
        ['gzip', 'br']
    """
    codings = (coding.strip().lower() for header in headers for coding in header.split(","))
    return [coding for coding in codings if coding not in ("", "identity")]


MAX_QUOTED = 160
"""The most characters of one text a client wrote that an answer quotes."""


def excerpt(text: str) -> str:
    """``text`` (a client's) as an answer quotes it: whole up to :data:`MAX_QUOTED` characters, else its start
    and its end joined by ``...`` (both say what arrived). A header or a body is as long as the server lets it
    be; quoted whole, one request of a megabyte was answered with a megabyte, shown in full by every log and
    client that shows the answer.

    The characters are kept as they came (a newline, a NUL, a lone surrogate): a JSON answer escapes each, and
    a client shows them escaped as it must any peer's text. Changed, they would make a method name or a path
    its client could no longer recognise as its own.

        >>> excerpt("tasks/send")
        'tasks/send'
        >>> len(excerpt("x" * 1_000_000)) == MAX_QUOTED
        True
    """
    if len(text) <= MAX_QUOTED:
        return text
    head = MAX_QUOTED * 2 // 3
    return f"{text[:head]}...{text[len(text) - (MAX_QUOTED - head - 3) :]}"


def bearer_challenge(authorization: str, token: bytes, *, realm: str) -> str | None:
    """``None`` when the Authorization header carries ``token``; else the ``WWW-Authenticate`` to answer.

    The comparison takes constant time. Headers arrive latin-1 decoded, so encoding back gives the bytes
    the client sent (a non-ASCII token works).
    """
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return f'Bearer realm="{realm}"'
    if not hmac.compare_digest(credentials.strip().encode("latin-1"), token):
        return f'Bearer realm="{realm}", error="invalid_token"'
    return None


def declared_too_large(content_length: str | None, limit: int) -> bool:
    """Whether a Content-Length header announces more than ``limit`` bytes (checked before reading)."""
    return content_length is not None and content_length.isdigit() and int(content_length) > limit


async def read_limited(chunks: AsyncIterable[bytes], limit: int) -> bytes | None:
    """The whole body, or ``None`` as soon as it grows past ``limit`` (a missing or false Content-Length)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``, without port) names this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"
