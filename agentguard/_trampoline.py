"""The one trampoline: drive a sans-I/O generator by performing each effect it yields.

Every flow in agentguard -- the policy pipeline (:mod:`agentguard.pipeline`), the guardian client's exchange
(:mod:`agentguard.guardian`) and a remote agent's engagement (:mod:`agentguard.remote`) -- is a generator that
decides, yields an effect whenever something outside has to happen, and is sent back the result (or thrown
back the exception). Each of them brings its own ``perform`` (what its effects mean); this module is the
loop they share, once for blocking code and once for asyncio, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["adrive", "drive"]

E = TypeVar("E")
T = TypeVar("T")

Catch = type[BaseException] | tuple[type[BaseException], ...]


def drive(flow: Generator[E, Any, T], perform: Callable[[E], Any], catch: Catch = BaseException) -> T:
    """Run ``flow`` to completion in this thread and return its result (or raise its error).

    What ``perform`` raises is thrown into the flow when it is a ``catch``; anything else propagates (and
    the flow is closed). It is thrown from outside the ``except`` block that caught it: an exception the flow
    raises in its place would otherwise take it along as its ``__context__`` (a tool's error, with what it
    quotes, behind the denial that withheld it).
    """
    try:
        effect = next(flow)
        while True:
            try:
                value = perform(effect)
            except catch as exc:
                failure: BaseException | None = exc
            else:
                failure = None
            effect = flow.send(value) if failure is None else flow.throw(failure)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        flow.close()


async def adrive(
    flow: Generator[E, Any, T], perform: Callable[[E], Awaitable[Any]], catch: Catch = BaseException
) -> T:
    """:func:`drive` under asyncio: ``perform`` is awaited."""
    try:
        effect = next(flow)
        while True:
            try:
                value = await perform(effect)
            except catch as exc:
                failure: BaseException | None = exc
            else:
                failure = None
            effect = flow.send(value) if failure is None else flow.throw(failure)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        flow.close()
