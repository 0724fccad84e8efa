"""Thin sync and async drivers for the sans-I/O policy flows of :mod:`agentguard.policy._flow`.

A flow decides; a driver performs the effects it yields (run the tool, ask a reviewer, ask the guardian) and
sends back the result or throws back the exception. The two drivers differ only in *how* they wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
from typing import Any

from agentguard.errors import ConfigurationError
from agentguard.policy._flow import AskGuardian, AskReviewer, Effect, Flow, Invoke, T
from agentguard.policy._identity import reset_credentials, set_credentials

__all__ = ["run_async", "run_sync"]

_review_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _review_pool
    if _review_pool is None:
        _review_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="agentguard-review"
        )
    return _review_pool


_NOT_AWAITABLE = frozenset({dict, list, tuple, str, int, float, bool, type(None), bytes})


def _resolve_sync(value: Any, what: str) -> Any:
    """A sync driver met an awaitable (an async tool or reviewer): run it if no loop runs in this thread."""
    if type(value) in _NOT_AWAITABLE or not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(value))
    if inspect.iscoroutine(value):
        value.close()
    raise ConfigurationError(f"{what} is async but was called from a running event loop: use the async API")


async def _await(value: Any) -> Any:
    return await value


def _perform_sync(effect: Effect) -> Any:
    if isinstance(effect, Invoke):
        token = set_credentials(effect.credentials)
        try:
            return _resolve_sync(effect.fn(*effect.args, **effect.kwargs), "the tool")
        finally:
            reset_credentials(token)
    if isinstance(effect, AskReviewer):
        if effect.timeout_ms is None:
            return _resolve_sync(effect.reviewer(effect.request), "the reviewer")
        # Copy contextvars so the reviewer sees the caller's context (e.g. a framework's run config). A
        # reviewer that overruns keeps its thread until it returns: Python cannot kill a thread; its late
        # answer is ignored and the timeout decision stands.
        ctx = contextvars.copy_context()
        future = _pool().submit(
            ctx.run, lambda: _resolve_sync(effect.reviewer(effect.request), "the reviewer")
        )
        try:
            return future.result(timeout=effect.timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"reviewer did not answer within {effect.timeout_ms} ms") from None
    if isinstance(effect, AskGuardian):
        return effect.client.decide(effect.request)
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover - exhaustive over Effect


async def _perform_async(effect: Effect) -> Any:
    if isinstance(effect, Invoke):
        token = set_credentials(effect.credentials)
        try:
            value = effect.fn(*effect.args, **effect.kwargs)
            if inspect.isawaitable(value):
                value = await value
            return value
        finally:
            reset_credentials(token)
    if isinstance(effect, AskReviewer):
        reviewer, request, timeout_ms = effect.reviewer, effect.request, effect.timeout_ms
        if timeout_ms is None:
            answer = reviewer(request)
            return await answer if inspect.isawaitable(answer) else answer
        try:
            if inspect.iscoroutinefunction(reviewer) or inspect.iscoroutinefunction(
                getattr(reviewer, "__call__", None)  # noqa: B004 - async callable objects
            ):
                return await asyncio.wait_for(reviewer(request), timeout_ms / 1000)  # type: ignore[arg-type]
            # A sync reviewer runs in a worker thread (contextvars copied) so the timeout can fire.
            answer = await asyncio.wait_for(asyncio.to_thread(reviewer, request), timeout_ms / 1000)
            return await answer if inspect.isawaitable(answer) else answer
        except TimeoutError:
            raise TimeoutError(f"reviewer did not answer within {timeout_ms} ms") from None
    if isinstance(effect, AskGuardian):
        return await effect.client.adecide(effect.request)
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover - exhaustive over Effect


def run_sync(flow: Flow[T]) -> T:
    """Drive ``flow`` to completion in this thread; return its result or raise its error."""
    try:
        effect = next(flow)
        while True:
            try:
                value = _perform_sync(effect)
            except BaseException as exc:
                effect = flow.throw(exc)
            else:
                effect = flow.send(value)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def run_async(flow: Flow[T]) -> T:
    """Drive ``flow`` to completion under asyncio; return its result or raise its error."""
    try:
        effect = next(flow)
        while True:
            try:
                value = await _perform_async(effect)
            except BaseException as exc:
                effect = flow.throw(exc)
            else:
                effect = flow.send(value)
    except StopIteration as stop:
        result: T = stop.value
        return result
