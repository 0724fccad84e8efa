"""Identity: which credentials a tool runs with (``user_identity`` / ``static_identity``, decision 10).

The spec says a capability uses the calling user's identity unless ``user_identity: false``, and that
``static_identity`` names a credential set used when ``user_identity`` is false or there is no user. A
:class:`CredentialResolver` turns that into concrete credentials (an OAuth token for this user and this tool,
a service account, ...). The tool reads them, while it runs, with :func:`current_credentials`::

    from agentguard import current_credentials

    @guard.tool(needs_credentials=True)
    def read_mailbox(folder: str) -> list[str]:
        token = current_credentials().secret
        ...

Without a resolver, agentguard passes the identity itself (``Credentials(kind="user", subject=user.id)`` or
``Credentials(kind="static", subject=<static_identity>)``), which is what most in-process tools need. A tool
declared ``needs_credentials=True`` that gets no credentials is not called (:class:`~agentguard.IdentityError`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentguard.record import User

__all__ = [
    "CredentialRequest",
    "CredentialResolver",
    "Credentials",
    "current_credentials",
    "identity_for",
]


@dataclass(frozen=True, slots=True)
class Credentials:
    """Credentials a tool runs with. ``secret`` is whatever the resolver supplies (token, key, client)."""

    kind: Literal["user", "static"]
    subject: str
    secret: Any = None
    user: User | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print secrets into logs or traces
        return f"Credentials(kind={self.kind!r}, subject={self.subject!r}, secret={'***' if self.secret else None})"


@dataclass(frozen=True, slots=True)
class CredentialRequest:
    """What a resolver is asked: credentials of ``kind`` for ``subject`` to call ``capability``."""

    capability: str
    kind: Literal["user", "static"]
    subject: str
    user: User | None
    engagement_id: str


CredentialResolver = Callable[[CredentialRequest], "Credentials | None"]

_current: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "agentguard_credentials", default=None
)


def current_credentials() -> Credentials | None:
    """The credentials of the guarded tool running now (``None`` outside one, or when none apply)."""
    return _current.get()


# The pipeline sets the credentials around every tool call: the context variable's own methods, no Python
# frame of ours around them.
set_credentials: Callable[[Credentials | None], contextvars.Token[Credentials | None]] = _current.set
reset_credentials: Callable[[contextvars.Token[Credentials | None]], None] = _current.reset


def identity_for(
    *, user_identity: bool, static_identity: str | None, user: User | None
) -> tuple[Literal["user", "static"], str] | None:
    """Decision 10: whose identity a call uses, or ``None`` when neither applies."""
    if user_identity and user is not None:
        return "user", user.id
    if static_identity:
        return "static", static_identity
    return None
