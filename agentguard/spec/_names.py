"""Tool and agent names, and the three forms of reference to them (OpenAgentSpec, "Names & References").

A name is a DNS subdomain in the sense the spec spells out: at most 253 characters, only lowercase
alphanumerics, ``-`` and ``.``, and an alphanumeric character at both ends. A reference is one of:

* ``agent_name`` -- a *bare* name. Where the server has a tool of that name it means the tool, otherwise the
  agent (the tool-before-agent rule);
* ``oagent://agent_name`` -- exclusively the local agent of that name;
* ``oagent://hostname[/path]/agent_name`` -- a remote agent, fetched from
  ``https://hostname[/path]/agent_name``.

Example::

    >>> ref = parse_reference("oagent://agents.example.com/team/support-agent")
    >>> (ref.kind, ref.host, ref.path, ref.name)
    ('remote', 'agents.example.com', 'team', 'support-agent')
    >>> ref.url
    'https://agents.example.com/team/support-agent'
    >>> resolve(parse_reference("search"), tools={"search"}, agents={"search"})
    'tool'
    >>> resolve(parse_reference("oagent://search"), tools={"search"}, agents={"search"})
    'agent'
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AGENT_SCHEME",
    "MAX_NAME_LENGTH",
    "Reference",
    "ReferenceKind",
    "is_valid_name",
    "parse_reference",
    "resolve",
    "validate_name",
]

MAX_NAME_LENGTH = 253
AGENT_SCHEME = "oagent://"

ReferenceKind = Literal["bare", "agent", "remote"]

_NAME_CHARS = re.compile(r"[a-z0-9.-]*")
# A hostname, optionally with a port: dot-separated labels of letters, digits and inner hyphens.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*(?::\d{{1,5}})?")
# Path segments of a remote reference end up in an https URL: keep to characters that need no escaping.
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%-]+")


def validate_name(name: str) -> str | None:
    """Return why ``name`` is not a valid tool or agent name, or ``None`` when it is.

    The reason is a sentence fragment meant for a human ("must not be empty", ...), so that callers can put
    it after a field name in an error message.
    """
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters (has {len(name)})"
    if not _NAME_CHARS.fullmatch(name):
        bad = next(ch for ch in name if not _NAME_CHARS.fullmatch(ch))
        hint = " (names are lowercase)" if bad.isupper() else ""
        return f"may contain only lowercase letters, digits, '-' and '.', not {bad!r}{hint}"
    if not name[0].isalnum():
        return f"must start with a lowercase letter or digit, not {name[0]!r}"
    if not name[-1].isalnum():
        return f"must end with a lowercase letter or digit, not {name[-1]!r}"
    return None


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid tool or agent name (a DNS subdomain as the spec defines it)."""
    return validate_name(name) is None


@dataclass(frozen=True)
class Reference:
    """A parsed reference to a tool or agent.

    ``kind`` is ``"bare"`` for ``name`` (tool or agent, tool first), ``"agent"`` for ``oagent://name`` and
    ``"remote"`` for ``oagent://host[/path]/name``. ``host`` and ``path`` are set only for remote references;
    ``path`` is the part between host and name without surrounding slashes (``""`` when there is none).
    ``raw`` is the text as written, which is also how a capability is keyed in the spec.
    """

    kind: ReferenceKind
    name: str
    raw: str
    host: str | None = None
    path: str | None = None

    @property
    def url(self) -> str | None:
        """The ``https://`` URL the spec says a remote reference stands for; ``None`` for local references."""
        if self.kind != "remote":
            return None
        middle = f"/{self.path}" if self.path else ""
        return f"https://{self.host}{middle}/{self.name}"

    def __str__(self) -> str:
        return self.raw


def parse_reference(text: str) -> Reference:
    """Parse a reference in one of the three forms the spec allows; raise ``ValueError`` otherwise.

    The agent or tool name inside the reference must itself be a valid name, so a successfully parsed
    reference can be used as a lookup key without further checks.
    """
    if not text.startswith(AGENT_SCHEME):
        if "://" in text:
            scheme = text.split("://", 1)[0]
            raise ValueError(f"unsupported reference scheme {scheme!r}: use a bare name or {AGENT_SCHEME}...")
        _require_name(text, text)
        return Reference(kind="bare", name=text, raw=text)

    rest = text[len(AGENT_SCHEME) :]
    if "/" not in rest:
        _require_name(rest, text)
        return Reference(kind="agent", name=rest, raw=text)

    host, _, remainder = rest.partition("/")
    if not _HOST.fullmatch(host):
        raise ValueError(f"invalid host {host!r} in remote reference {text!r}")
    *segments, name = remainder.split("/")
    for segment in segments:
        if not _PATH_SEGMENT.fullmatch(segment):
            what = "empty path segment" if not segment else f"invalid path segment {segment!r}"
            raise ValueError(f"{what} in remote reference {text!r}")
    _require_name(name, text)
    return Reference(kind="remote", name=name, raw=text, host=host, path="/".join(segments))


def _require_name(name: str, text: str) -> None:
    reason = validate_name(name)
    if reason is not None:
        where = "" if name == text else f" in reference {text!r}"
        raise ValueError(f"name {name!r}{where} {reason}")


def resolve(
    ref: Reference, tools: Container[str], agents: Container[str]
) -> Literal["tool", "agent", "remote"] | None:
    """Say what ``ref`` refers to on a server holding ``tools`` and ``agents``; ``None`` if nothing.

    A bare name means the tool when a tool of that name exists, and the agent only otherwise: the spec
    makes the tool win so that adding an agent can never silently redirect an existing tool capability.
    ``oagent://name`` only ever means the local agent. Remote references are not looked up here.
    """
    if ref.kind == "remote":
        return "remote"
    if ref.kind == "bare" and ref.name in tools:
        return "tool"
    if ref.name in agents:
        return "agent"
    return None
