"""One engagement per SDK ``Session``: the block that makes it current, and the session the run is given.

:class:`GuardedSession` is a ``with`` / ``async with`` block (the engagement is current inside it, in this
thread or task and every task the SDK starts from it) and an SDK ``Session`` to pass to ``Runner.run``. It
delegates to the wrapped session; with ``retain_memory: false`` it hides what the session held before the
block, so the model never sees an earlier engagement's messages.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from agentguard import Engagement
from agentguard_openai_agents._host import Session, SessionSettings, TResponseInputItem

__all__ = ["GuardedSession"]


class GuardedSession:
    """An engagement made current for a block, and the SDK session a run in that block should use."""

    def __init__(self, engagement: Engagement, session: Session | None, *, keep: bool) -> None:
        self.engagement = engagement
        self.session = session
        self._keep = keep
        self._added: list[TResponseInputItem] = []
        self._active: AbstractContextManager[Engagement] | None = None

    # -- the block -------------------------------------------------------------------------------------

    def __enter__(self) -> GuardedSession:
        self._active = self.engagement.activate()
        self._active.__enter__()
        self.engagement.start_turn()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._leave():
            self.engagement.close()

    async def __aenter__(self) -> GuardedSession:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        if self._leave():
            await self.engagement.aclose()

    def _leave(self) -> bool:
        """End the block's turn and the engagement's currency; ``True`` when the engagement ends with it."""
        self.engagement.end_turn()
        if self._active is not None:
            self._active.__exit__(None, None, None)
            self._active = None
        return not self._keep

    # -- the SDK Session protocol ------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.session.session_id if self.session is not None else self.engagement.id

    @property
    def session_settings(self) -> SessionSettings | None:
        return self.session.session_settings if self.session is not None else None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        if self.session is not None and self._keep:
            return await self.session.get_items(limit)
        items = list(self._added)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self._added.extend(items)
        if self.session is not None:
            await self.session.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        mine = self._added.pop() if self._added else None
        if self.session is None:
            return mine
        if self._keep:
            return await self.session.pop_item()
        # Without memory the block removes only its own items: earlier runs' are hidden from it, and another
        # block of the same session may have added one since.
        if mine is not None:
            await _pop_own(self.session, [mine])
        return mine

    async def clear_session(self) -> None:
        added, self._added = self._added, []
        if self.session is None:
            return
        if self._keep:
            await self.session.clear_session()
        else:
            await _pop_own(self.session, added)

    def __getattr__(self, name: str) -> Any:  # compaction and other session extras reach the real session
        if self.session is None:
            raise AttributeError(name)
        return getattr(self.session, name)


async def _pop_own(session: Session, items: list[TResponseInputItem]) -> None:
    """Pop ``items`` (a block's own, oldest first) from the end of ``session``, newest first, for as long as its
    last item is the block's next one: an item another writer added since stays, and so do the block's items
    before it."""
    for item in reversed(items):
        if await session.get_items(1) != [item]:
            return
        await session.pop_item()
