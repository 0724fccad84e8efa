"""What the middleware is guarding in this thread or asyncio task right now.

One context variable, set around each model call and each tool call the middleware runs. The callback handler
reads it to record nothing twice; the interrupt reviewer reads the tool call's name and counts the interrupts
it raises (see :mod:`agentguard_langchain._review`).
"""

from __future__ import annotations

import contextvars
from contextvars import Token

__all__ = ["CURRENT", "Scope", "current_scope", "is_guarded"]


class Scope:
    """A model call (``name`` is ``None``) or a tool call the middleware is guarding. Use with ``with``."""

    __slots__ = ("_token", "call_id", "interrupts", "name")

    def __init__(self, name: str | None = None, call_id: str | None = None) -> None:
        self.name = name
        self.call_id = call_id
        self.interrupts = 0
        self._token: Token[Scope | None] | None = None

    def __enter__(self) -> Scope:
        self._token = CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            CURRENT.reset(self._token)
            self._token = None


CURRENT: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("agentguard_lc_scope", default=None)
"""The scope entered in this context. The tool hook sets and resets it itself rather than entering its
scope with ``with``: two frames less per tool call."""


def current_scope() -> Scope | None:
    return CURRENT.get()


def is_guarded() -> bool:
    """Is the middleware guarding the model or tool call running in this context?"""
    return CURRENT.get() is not None
