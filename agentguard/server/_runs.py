"""Running served engagements: one task per engagement, bounded in number and time, cancellable.

The server hands each accepted input to :class:`Runs`, which opens an engagement with the agent's guard,
calls the runner inside it and turns how the runner ended into an :class:`EngagementRecord`:

============================  ==============================================================
the runner ...                the engagement is ...
============================  ==============================================================
returned                      ``completed`` (``output`` is what it returned)
returned what JSON cannot     ``failed`` (``error.type``: ``OutputNotJSON``): ``NaN``, an
hold                          infinity, a value that contains itself
returned, but a guardrail     ``denied``: the spec says the execution fails with an error, so
failed or a loop was stopped  the output is not returned
raised a ``PolicyViolation``  ``denied`` (``error`` carries the rule, reason, capability, phase)
raised anything else          ``failed``
ran past ``run_timeout``      ``failed`` (the engagement is cancelled: later steps are refused)
was cancelled                 ``cancelled``
waits for a reviewer          ``awaiting-review`` meanwhile (reviewers installed by the server)
============================  ==============================================================

Async runners run on the server's event loop and are cancelled with ``asyncio``. Sync runners run in a
daemon thread each (copying the context, so the engagement is current there); Python cannot stop a thread,
so a sync runner that is timed out or cancelled runs on with its engagement cancelled -- every guarded step
it still tries is refused -- and keeps its concurrency slot until it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import json
import logging
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeAlias

from agentguard.errors import AgentGuardError, PolicyViolation
from agentguard.guard import Engagement, Guard
from agentguard.pipeline import run_in_daemon_thread
from agentguard.policy import Approval, Reviewer, ReviewRequest
from agentguard.record import EngagementStatus, to_plain
from agentguard.remote import RemoteAgentError
from agentguard.runs import Cancel

from ._agents import ServedAgent
from ._store import EngagementRecord, EngagementStore, RunStatus

__all__ = ["Runner", "Runs"]

logger = logging.getLogger("agentguard.server")

Runner: TypeAlias = Callable[[Guard, Engagement, dict[str, Any]], Any]
"""``runner(guard, engagement, input)``: run the agent on ``input`` and return its output (sync or async)."""

_CANCEL_WAIT = 5.0  # seconds a cancel request waits for the run to wind down before answering


def _now() -> datetime:
    return datetime.now(UTC)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


def _json_data(value: Any) -> Any:
    """``value`` as JSON data (what JSON has no type for becomes its ``str``).

    Raises ``ValueError`` for ``NaN`` and the infinities -- ``json.dumps`` would write them as ``NaN``, which
    is not JSON and which strict clients (agentguard's own) refuse -- and for a value that contains itself;
    ``RecursionError`` for one nested too deeply.
    """
    return json.loads(json.dumps(to_plain(value), default=str, allow_nan=False))


def _json_ready(value: Any) -> Any:
    """``value`` as JSON data, or a placeholder string saying it is not representable (a read never breaks)."""
    try:
        return _json_data(value)
    except (ValueError, RecursionError) as exc:
        return f"<not representable as JSON: {type(exc).__name__}>"


def _describe_error(exc: BaseException) -> dict[str, Any]:
    """The ``error`` member for an exception that ended a run.

    Policy decisions and agentguard's own errors are described in full; any other exception only by its
    type -- its message may carry internals -- and logged with its traceback.
    """
    error: dict[str, Any] = {"type": type(exc).__name__}
    if isinstance(exc, PolicyViolation):
        error.update(
            message=str(exc),
            rule=exc.rule.value,
            reason=exc.reason,
            capability=exc.capability,
            phase=exc.phase.value if exc.phase else None,
        )
    elif isinstance(exc, AgentGuardError):
        error["message"] = str(exc)
        if isinstance(exc, RemoteAgentError):
            error["remote"] = {"status": exc.remote_status, "error": _json_ready(exc.remote_error)}
    else:
        logger.error("the runner raised %s", type(exc).__name__, exc_info=exc)
        error["message"] = f"the agent failed with {type(exc).__name__} (the server log has the details)"
    return error


def _stopped_error(engagement: Engagement) -> dict[str, Any]:
    """The ``error`` member of an engagement a rule stopped while the runner carried on."""
    error: dict[str, Any] = {"type": "PolicyViolation", "message": engagement.state.status_reason}
    blocked = [decision for decision in engagement.decisions if decision.blocked]
    if blocked:
        last = blocked[-1]
        error.update(
            rule=last.rule.value,
            reason=last.reason,
            capability=last.capability,
            phase=last.phase.value if last.phase else None,
        )
    return error


@dataclass(eq=False)
class _Run:
    """A run in this process: the latest record, and what is needed to wait for or cancel it."""

    record: EngagementRecord
    engagement: Engagement
    done: asyncio.Event = field(default_factory=asyncio.Event)
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None  # held here: the event loop keeps only weak references to tasks
    work: asyncio.Future[Any] | None = None
    thread: concurrent.futures.Future[Any] | None = None  # a sync runner's
    cancel_reason: str | None = None
    slot: threading.BoundedSemaphore | None = None

    def release_slot(self) -> None:
        """Give the concurrency slot back: when the runner is seen to stop (one place per run, see below)."""
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()

    def work_done(self, work: asyncio.Future[Any]) -> None:
        """The work ended -- and with it the runner, unless a sync runner runs on in its thread."""
        if self.thread is None:
            self.release_slot()


class Runs:
    """The engagements of one server: starts them, reports them, cancels them."""

    def __init__(
        self, runner: Runner, store: EngagementStore, *, max_concurrency: int, run_timeout: float
    ) -> None:
        self._runner = runner
        self._async_runner = _is_async(runner)
        self._store = store
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._run_timeout = run_timeout
        self._live: dict[str, _Run] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- starting ----------------------------------------------------------------------------------------

    async def start(self, agent: ServedAgent, input: dict[str, Any]) -> EngagementRecord | None:
        """Start an engagement with ``agent``; ``None`` when ``max_concurrency`` runs are under way."""
        if not self._slots.acquire(blocking=False):
            return None
        self._loop = asyncio.get_running_loop()
        now = _now()
        # An unguessable id: the engagement's URL is the only handle on its output.
        record = EngagementRecord(secrets.token_urlsafe(16), agent.name, RunStatus.RUNNING, now, now)
        run = _Run(record, agent.guard.engagement(engagement_id=record.id), slot=self._slots)
        try:
            await self._store.save(record)
        except BaseException:
            run.release_slot()
            raise
        self._live[record.id] = run
        run.task = asyncio.create_task(self._run(run, agent.guard, input), name=f"agentguard-{record.id}")
        return record

    async def _run(self, run: _Run, guard: Guard, input: dict[str, Any]) -> None:
        engagement = run.engagement
        try:
            async with engagement:
                changes = await self._engage(run, guard, input)
                changes["exposes"] = self._exposed(engagement)
        except asyncio.CancelledError:  # the loop is going away (no lifespan shutdown ran)
            changes = {
                "status": RunStatus.CANCELLED,
                "error": {"type": "Cancelled", "message": "interrupted"},
            }
        except Exception as exc:  # closing the engagement failed (an observe-mode guardian flush, say)
            changes = {"status": RunStatus.FAILED, "error": _describe_error(exc)}
        finally:
            if run.work is None:  # the runner never started: its slot is still held here
                run.release_slot()
        now = _now()
        run.record = replace(run.record, updated_at=now, finished_at=now, review=None, **changes)
        try:
            await self._save(run)
        finally:
            del self._live[run.record.id]
            run.done.set()

    async def _engage(self, run: _Run, guard: Guard, input: dict[str, Any]) -> dict[str, Any]:
        """Run the runner inside the open engagement; the record changes its ending calls for."""
        engagement = run.engagement
        if run.cancel_reason is not None:  # cancelled before it began
            return {
                "status": RunStatus.CANCELLED,
                "error": {"type": "Cancelled", "message": run.cancel_reason},
            }
        run.work = work = asyncio.ensure_future(self._invoke(run, guard, engagement, input))
        work.add_done_callback(run.work_done)
        try:
            finished, _ = await asyncio.wait({work}, timeout=self._run_timeout)
        except asyncio.CancelledError:
            work.cancel()
            raise
        if not finished:
            reason = f"the run did not finish within {self._run_timeout:g} s"
            work.cancel()
            work.add_done_callback(_forget)
            await engagement.acancel(Cancel(reason, graceful=False))
            return {"status": RunStatus.FAILED, "error": {"type": "Timeout", "message": reason}}
        if work.cancelled():
            message = run.cancel_reason or "cancelled"
            return {"status": RunStatus.CANCELLED, "error": {"type": "Cancelled", "message": message}}
        error = work.exception()
        if isinstance(error, PolicyViolation):
            return {"status": RunStatus.DENIED, "error": _describe_error(error)}
        if error is not None:
            return {"status": RunStatus.FAILED, "error": _describe_error(error)}
        status = engagement.status
        if status is EngagementStatus.CANCELLED:
            message = engagement.state.status_reason or "cancelled"
            return {"status": RunStatus.CANCELLED, "error": {"type": "Cancelled", "message": message}}
        if status is not EngagementStatus.ACTIVE:  # a guardrail failed or a loop was stopped
            return {"status": RunStatus.DENIED, "error": _stopped_error(engagement)}
        try:
            output = _json_data(work.result())
        except (ValueError, RecursionError) as exc:
            # Not completed with a stand-in: a client must not take a placeholder for what the runner returned.
            logger.warning("engagement %s: the runner's output is not representable as JSON", engagement.id)
            message = (
                f"the runner's output is not representable as JSON ({type(exc).__name__}): it holds NaN or "
                "an infinite number, contains itself, or is nested too deeply"
            )
            return {"status": RunStatus.FAILED, "error": {"type": "OutputNotJSON", "message": message}}
        return {"status": RunStatus.COMPLETED, "output": output}

    async def _invoke(self, run: _Run, guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
        if self._async_runner:
            result = self._runner(guard, engagement, input)
        else:
            run.thread = run_in_daemon_thread(functools.partial(self._runner, guard, engagement, input))
            run.thread.add_done_callback(lambda _: run.release_slot())
            result = await asyncio.wrap_future(run.thread)
        return await result if inspect.isawaitable(result) else result

    @staticmethod
    def _exposed(engagement: Engagement) -> dict[str, Any]:
        """``exposes`` over the final Engagement; a selection that cannot be evaluated is ``null``."""
        try:
            return {key: _json_ready(value) for key, value in engagement.exposed().items()}
        except Exception:  # a sync runner past its timeout may still be changing the record
            logger.exception("could not evaluate exposes of engagement %s", engagement.id)
            return dict.fromkeys(engagement.guard.policy.exposes)

    # -- reading -----------------------------------------------------------------------------------------

    async def get(self, engagement_id: str, wait: float = 0.0) -> EngagementRecord | None:
        """The engagement's record; with ``wait``, first wait up to that many seconds for it to finish."""
        run = self._live.get(engagement_id)
        if run is None:
            return await self._store.load(engagement_id)
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.done.wait(), wait)
        return run.record

    # -- cancelling --------------------------------------------------------------------------------------

    async def cancel(self, engagement_id: str, reason: str) -> tuple[str, EngagementRecord | None]:
        """Cancel a running engagement. Returns what happened and the record:

        ``cancelled``; ``finished`` (it had already ended); ``elsewhere`` (running in another process that
        shares the store); ``unknown``.
        """
        run = self._live.get(engagement_id)
        if run is None:
            record = await self._store.load(engagement_id)
            if record is None:
                return "unknown", None
            return ("finished" if record.status.finished else "elsewhere"), record
        if run.cancel_reason is None and not run.record.status.finished:
            run.cancel_reason = reason
            await run.engagement.acancel(Cancel(reason, graceful=False))
            if run.work is not None:
                run.work.cancel()
        try:
            await asyncio.wait_for(run.done.wait(), _CANCEL_WAIT)
        except TimeoutError:
            logger.warning(
                "engagement %s did not wind down within %s s of its cancel", run.record.id, _CANCEL_WAIT
            )
        return ("cancelled" if run.record.status is RunStatus.CANCELLED else "finished"), run.record

    async def shutdown(self) -> None:
        """Cancel every run of this process (the server is stopping) and wait for them to wind down."""
        await asyncio.gather(
            *(self.cancel(engagement_id, "the server is shutting down") for engagement_id in list(self._live))
        )

    # -- reviews -----------------------------------------------------------------------------------------

    def tracked(self, reviewer: Reviewer) -> Reviewer:
        """``reviewer``, reporting its engagement as ``awaiting-review`` while it is asked (sync or async)."""
        if _is_async(reviewer):

            async def ask_async(request: ReviewRequest) -> Approval | bool:
                self._reviewing(request.execution_id, _review_of(request))
                try:
                    answer = reviewer(request)
                    return await answer if inspect.isawaitable(answer) else answer
                finally:
                    self._reviewing(request.execution_id, None)

            return ask_async

        def ask(request: ReviewRequest) -> Approval | bool | Awaitable[Approval | bool]:
            self._reviewing(request.execution_id, _review_of(request))
            try:
                return reviewer(request)
            finally:
                self._reviewing(request.execution_id, None)

        return ask

    def _reviewing(self, engagement_id: str, review: Mapping[str, Any] | None) -> None:
        """Record that a review started (``review``) or ended (``None``); callable from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            in_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            in_loop = False
        if in_loop:
            self._set_review(engagement_id, review)
        else:
            loop.call_soon_threadsafe(self._set_review, engagement_id, review)

    def _set_review(self, engagement_id: str, review: Mapping[str, Any] | None) -> None:
        run = self._live.get(engagement_id)
        if run is None or run.record.status.finished:
            return
        status = RunStatus.AWAITING_REVIEW if review is not None else RunStatus.RUNNING
        run.record = replace(run.record, status=status, review=review, updated_at=_now())
        task = asyncio.ensure_future(self._save(run))
        self._background.add(task)
        task.add_done_callback(self._saved)

    async def _save(self, run: _Run) -> None:
        # Saves of one run are serialised and each writes the latest record, so the store ends up with
        # the latest state whatever order the saves were scheduled in.
        async with run.save_lock:
            await self._store.save(run.record)

    def _saved(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("could not save an engagement record", exc_info=task.exception())


def _review_of(request: ReviewRequest) -> dict[str, Any]:
    return {
        "reviewer": request.reviewer,
        "capability": request.capability,
        "phase": request.phase.value,
        "message": request.message,
    }


def _forget(future: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a run nobody waits for any more, so asyncio does not log it as lost."""
    if not future.cancelled():
        future.exception()
