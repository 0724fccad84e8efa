"""``Engagement``: one conversation with a guarded agent, as users and adapters hold it.

The record itself (what CEL sees, the step records) is :class:`agentguard.record.EngagementState`; this
facade binds it to its Guard's :class:`~agentguard.pipeline.Runtime` and offers what acts on it: guardrails,
reports of other steps, turns, cancellation, and the ``with`` / ``async with`` protocol that makes it
current.

Until 0.2 this module also re-exports the record's names (``EngagementState``, ``Decision``, ...), which
lived here before the record became :mod:`agentguard.record`; importing them from here warns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from agentguard import record
from agentguard.errors import ConfigurationError, Phase, PolicyViolation, Rule
from agentguard.pipeline import (
    Commit,
    Flow,
    flush_flow,
    guardrail_flow,
    message_text,
    new_step,
    record_flow,
    report_flow,
    run_async,
    run_sync,
)
from agentguard.runs import Cancel
from agentguard.steps import MCP, KnowledgeRetrieval, Message, Step
from agentguard.stores import MemoryStore

if TYPE_CHECKING:  # the record's names only annotate here, so that the deprecated re-exports below warn
    from agentguard.guard import Guard
    from agentguard.pipeline import Runtime
    from agentguard.record import Decision, EngagementState, EngagementStatus, StepRecord, Steps, User

__all__ = ["Engagement"]

log = logging.getLogger("agentguard")


class Engagement:
    """One conversation of one user with the guarded agent: the Engagement record plus what acts on it.

    Use it as a context manager (``with`` or ``async with``): inside, guarded tools called from this thread or
    asyncio task are recorded in it. Engagements are isolated per thread and per task (``contextvars``).
    """

    def __init__(self, runtime: Runtime, state: EngagementState, guard: Guard) -> None:
        self.runtime = runtime
        self.state = state
        self.guard = guard
        """The Guard that opened this engagement (for hosts and reports; the facade itself uses ``runtime``)."""
        self._lock = threading.Lock()
        self._depth = 0  # how many `with eng:` blocks are open, in any thread or task
        self._turn: list[Any] | None = None  # the observers' tokens of the current turn
        self._turned = False  # a turn was started (else the observers refresh at the close: Observer.refresh)
        self._closed = False

    # -- identity and record --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def user(self) -> User | None:
        return self.state.user

    @property
    def status(self) -> EngagementStatus:
        return self.state.status

    @property
    def steps(self) -> Steps:
        """Every step taken in this engagement, with its decisions and AOS records (guardian or not): a
        read-only sequence that sees later steps as they are taken."""
        return self.state.steps

    @property
    def decisions(self) -> list[Decision]:
        return [d for step in self.state.steps for d in step.decisions]

    def view(self) -> dict[str, Any]:
        """The Engagement exactly as CEL assertions see it: ``started_at``, ``user``, ``recent``, ``history``."""
        return self.state.view()

    def exposed(self) -> dict[str, Any]:
        """The ``exposes`` selections evaluated now.

        A selection that cannot be evaluated (e.g. ``recent["refund"].inputs`` before any refund) is
        ``{"error": "<why>", "expression": "<its CEL>"}``, never a silent ``None``.
        """
        return {
            key: assertion.select(self.state.bindings(assertion.plan))
            for key, assertion in self.runtime.policy.exposes.items()
        }

    # -- guardrails -----------------------------------------------------------------------------------

    def check_input(self, text: str) -> str:
        """Run the input guardrail on user input before any model sees it; return the text to pass on."""
        return run_sync(guardrail_flow(self.runtime, self.state, Phase.INPUT, text))

    async def acheck_input(self, text: str) -> str:
        return await run_async(guardrail_flow(self.runtime, self.state, Phase.INPUT, text))

    def check_output(self, text: str) -> str:
        """Run the output guardrail on a model answer before the user sees it; return the text to pass on."""
        return run_sync(guardrail_flow(self.runtime, self.state, Phase.OUTPUT, text))

    async def acheck_output(self, text: str) -> str:
        return await run_async(guardrail_flow(self.runtime, self.state, Phase.OUTPUT, text))

    # -- other steps ----------------------------------------------------------------------------------

    def _report_flow(self, step: Step) -> Flow[dict[str, Any] | None]:
        ctx, state = self.runtime, self.state
        builder = ctx.steps
        if isinstance(step, Message):
            message = step

            def build(record: StepRecord) -> dict[str, Any]:
                record.payload["role"] = message.role
                return builder.message(
                    state,
                    record,
                    message.role,
                    message.text,
                    citation=message.citation,
                    reasoning=message.reasoning,
                )

        elif isinstance(step, MCP):
            params = step.params()

            def build(record: StepRecord) -> dict[str, Any]:
                return builder.passthrough(step.method, params)

        else:
            params = step.params()

            def build(record: StepRecord) -> dict[str, Any]:
                return builder.generic(state, record, step.method, params)

        phase = Phase.INPUT if getattr(step, "role", "user") == "user" else Phase.OUTPUT
        return report_flow(ctx, state, step.method, build, name=getattr(step, "role", None), phase=phase)

    def record_call(
        self,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Any = None,
        *,
        error: BaseException | str | None = None,
        call_id: str | None = None,
        kind: Literal["tool", "agent"] = "tool",
    ) -> StepRecord:
        """Record a call that already happened, outside the pipeline (observe-only hosts, e.g. callbacks).

        Nothing is checked or reviewed (it is too late for that); the call enters ``recent``/``history`` and
        the step records (its output only if its capability collects results), and an observe-mode guardian
        is told. A call that raised is recorded with ``outputs: null``. Once recorded, a call that repeats a
        block of calls ``lifespan.short_circuit`` times stops the engagement and raises
        :class:`~agentguard.ShortCircuitViolation`, and one recorded in an engagement no longer active raises
        as a guarded call would. Use :meth:`Guard.call` to *guard* a call. Inputs or outputs beyond the Guard's
        ``value_limits`` raise :class:`~agentguard.record.ValueTooComplex` (a ``ValueError``), and nothing is
        recorded.
        """
        return run_sync(
            record_flow(self.runtime, self.state, name, dict(inputs), outputs, error, call_id, kind)
        )

    def report(self, step: Step) -> dict[str, Any] | None:
        """Record a step (see :mod:`agentguard.steps`) and put it to the guardian when one is configured.

        Returns the params of the guardian's replacement request on ``modify``, else ``None``; raises
        :class:`~agentguard.GuardianDenied` on ``deny`` -- then the step must not be carried out.
        """
        return run_sync(self._report_flow(step))

    async def areport(self, step: Step) -> dict[str, Any] | None:
        return await run_async(self._report_flow(step))

    def report_message(
        self,
        role: Literal["user", "agent", "system"],
        text: str,
        *,
        citation: Sequence[Mapping[str, Any]] = (),
        reasoning: str | None = None,
    ) -> str:
        """Record a ``steps/message`` without running a guardrail; returns the text to use (guardian-modified)."""
        params = self.report(Message(role, text, citation, reasoning))
        return (message_text(params) or text) if params is not None else text

    async def areport_message(
        self,
        role: Literal["user", "agent", "system"],
        text: str,
        *,
        citation: Sequence[Mapping[str, Any]] = (),
        reasoning: str | None = None,
    ) -> str:
        params = await self.areport(Message(role, text, citation, reasoning))
        return (message_text(params) or text) if params is not None else text

    def report_knowledge_retrieval(
        self, query: str | None, results: Sequence[Mapping[str, Any]], keywords: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        """Shorthand for ``report(KnowledgeRetrieval(...))``."""
        return self.report(KnowledgeRetrieval(results=results, query=query, keywords=keywords))

    async def areport_knowledge_retrieval(
        self, query: str | None, results: Sequence[Mapping[str, Any]], keywords: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        return await self.areport(KnowledgeRetrieval(results=results, query=query, keywords=keywords))

    # -- lifecycle ------------------------------------------------------------------------------------

    def new_turn(self) -> str:
        """Start a new turn (one user input and what the agent does about it); returns the AOS ``turnId``."""
        self._end_turn()
        turn_id = self.state.new_turn()
        self._start_turn()
        return turn_id

    def start_turn(self) -> str:
        """Start a turn unless one is open; returns the AOS ``turnId`` (for hosts that run turn by turn)."""
        if self._turn is None:
            return self.new_turn()
        return self.state.turn_id

    def end_turn(self) -> None:
        """End the open turn without starting another (a host's run is over until the next one)."""
        self._end_turn()

    def _start_turn(self) -> None:
        observers = self.runtime.observers
        self._turned = True
        self._turn = observers.turn_started(self.state) if observers else []

    def _end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn:
            self.runtime.observers.turn_ended(self.state, turn)

    def _finish(self) -> bool:
        """Mark the engagement closed; ``True`` if an observe-mode guardian must now be flushed."""
        self._end_turn()
        was_open = self._closed is False
        self._closed = True
        self.state.stop(record.EngagementStatus.CLOSED, "engagement closed")
        store = self.runtime.store
        if isinstance(store, MemoryStore):
            store.forget(self.state)
        observers = self.runtime.observers
        if was_open and observers:
            observers.engagement_ended(self.state)
            if not self._turned:  # a one-call engagement (auto_engagement): the next one sees what changed
                observers.refresh()
        guardian = self.runtime.guardian
        return guardian is not None and guardian.mode == "observe"

    def _store_step(self) -> StepRecord:
        """Where a shared store's failure outside any flow is recorded: the newest step, else a new one."""
        steps = self.state.steps
        return steps[-1] if steps else new_step(self.state, "agentguard/store", name="engagement")

    def _flush_quietly(self) -> Flow[None]:
        """What changed goes to a shared store; a failure is recorded (a close does not fail for it: the
        engagement is closed here whatever the store heard)."""
        try:
            yield from flush_flow(self.runtime, self.state, self._store_step())
        except PolicyViolation:
            log.warning("agentguard: engagement %s closed, but its store did not hear of it", self.id)

    def close(self) -> None:
        """End the engagement: later steps are refused; an observe-mode guardian is flushed.

        In a shared store the engagement is closed for every process (a store failure here is recorded on
        the last step and logged, and the close holds in this process only)."""
        observe = self._finish()
        if self.state.journal is not None:  # not a flow per close for a record of this process only
            run_sync(self._flush_quietly())
        if observe and self.runtime.guardian is not None:
            self.runtime.guardian.flush()

    async def aclose(self) -> None:
        observe = self._finish()
        if self.state.journal is not None:
            await run_async(self._flush_quietly())
        if observe and self.runtime.guardian is not None:
            await self.runtime.guardian.aflush()

    def refresh(self) -> None:
        """Apply what other processes changed in a shared store since this one last looked (one round trip;
        nothing to do for the default store). Guarded calls do it themselves when it matters."""
        if self.state.journal is not None:
            run_sync(self._refresh_flow())

    async def arefresh(self) -> None:
        if self.state.journal is not None:
            await run_async(self._refresh_flow())

    def _refresh_flow(self) -> Flow[None]:
        yield Commit(self.state, exclusive=False, fetch=True)

    def _begin_cancel(self, cancel: Cancel, before: object) -> StepRecord | None:
        """Apply a cancellation once ``before_cancel`` answered ``before``; its step, ``None`` when it refused."""
        step = new_step(self.state, "agentguard/cancel", name="engagement")
        flow = self.runtime
        if before is False:
            reason = f"cancellation refused by before_cancel: {cancel.reason}"
            flow.decide(
                self.state, step, record.Decision(Rule.ENGAGEMENT, record.Outcome.ALLOW, None, reason)
            )
            return None
        self.state.cancel_graceful = cancel.graceful
        self.state.stop(record.EngagementStatus.CANCELLED, cancel.reason)
        reason = f"cancelled ({'graceful' if cancel.graceful else 'immediate'}): {cancel.reason}"
        flow.decide(self.state, step, record.Decision(Rule.ENGAGEMENT, record.Outcome.DENY, None, reason))
        return step

    def _end_cancel(self, cancel: Cancel, drained: bool) -> None:
        if not drained:
            step = self.state.steps[-1]
            reason = f"{self.state.in_flight} call(s) still running after {cancel.graceful_timeout_ms} ms"
            self.runtime.decide(
                self.state, step, record.Decision(Rule.ENGAGEMENT, record.Outcome.WARN, None, reason)
            )
        if cancel.after_cancel is not None:
            cancel.after_cancel()

    def cancel(self, cancel: str | Cancel = "cancelled") -> bool:
        """Cancel the engagement (OS Protocol ``Cancel``): it refuses every later step.

        Returns ``False`` when ``before_cancel`` refused. ``graceful`` (default) waits up to
        ``graceful_timeout_ms`` for calls in flight, whose results are then delivered; otherwise their
        results are withheld when they finish.
        """
        cancel = Cancel(cancel) if isinstance(cancel, str) else cancel
        before = cancel.before_cancel() if cancel.before_cancel is not None else True
        if inspect.isawaitable(before):
            if inspect.iscoroutine(before):
                before.close()
            raise ConfigurationError("before_cancel is async: use `await eng.acancel(...)`")
        step = self._begin_cancel(cancel, before)
        if step is None:
            return False
        run_sync(flush_flow(self.runtime, self.state, step))
        drained = True
        if cancel.graceful:
            timeout = None if cancel.graceful_timeout_ms is None else cancel.graceful_timeout_ms / 1000
            drained = self.state.wait_idle(timeout)
        self._end_cancel(cancel, drained)
        return True

    async def acancel(self, cancel: str | Cancel = "cancelled") -> bool:
        """Async twin of :meth:`cancel` (``before_cancel`` may be async)."""
        cancel = Cancel(cancel) if isinstance(cancel, str) else cancel
        before = cancel.before_cancel() if cancel.before_cancel is not None else True
        if inspect.isawaitable(before):
            before = await before
        step = self._begin_cancel(cancel, before)
        if step is None:
            return False
        await run_async(flush_flow(self.runtime, self.state, step))
        drained = True
        if cancel.graceful:
            timeout = None if cancel.graceful_timeout_ms is None else cancel.graceful_timeout_ms / 1000
            drained = await asyncio.to_thread(self.state.wait_idle, timeout)
        self._end_cancel(cancel, drained)
        return True

    def activate(self) -> _Active:
        """Make this the current engagement for a block, without starting or ending it.

        For hosts that run one engagement's tool calls in worker threads or across several invocations:
        ``with eng.activate(): guard.call(...)``. (``with eng:`` is the engagement's whole life: it starts the
        first turn and closes the engagement when the outermost ``with`` ends.)
        """
        return _Active(self)

    def _enter(self) -> None:
        runtime = self.runtime
        runtime.tokens.set((*runtime.tokens.get(), runtime.current.set(self)))
        with self._lock:
            self._depth += 1
            outermost = self._depth == 1
        if outermost and self.state.active and self._turn is None:
            self._start_turn()

    def _leave(self) -> bool:
        """Undo one ``_enter`` in this context; ``True`` when the outermost ``with`` has ended."""
        runtime = self.runtime
        tokens = runtime.tokens.get()
        runtime.current.reset(tokens[-1])
        runtime.tokens.set(tokens[:-1])
        with self._lock:
            self._depth -= 1
            return self._depth == 0

    def __enter__(self) -> Engagement:
        self._enter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._leave():
            self.close()

    async def __aenter__(self) -> Engagement:
        self._enter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._leave():
            await self.aclose()

    def __repr__(self) -> str:
        return f"<Engagement {self.id} {self.status.value} calls={self.state.total}>"


class _Active:
    """The context manager of :meth:`Engagement.activate`: a class, not ``contextlib``'s generator, because
    adapters enter one around every tool call."""

    __slots__ = ("_engagement", "_token")

    def __init__(self, engagement: Engagement) -> None:
        self._engagement = engagement

    def __enter__(self) -> Engagement:
        self._token = self._engagement.runtime.current.set(self._engagement)
        return self._engagement

    def __exit__(self, *exc: object) -> None:
        self._engagement.runtime.current.reset(self._token)


# What this module exported when it held the record (the record has added the rest since).
_MOVED = frozenset(record.__all__) - {
    "Appended",
    "Journal",
    "LoopDetector",
    "Snapshot",
    "decode_event",
    "encode_event",
}


def __getattr__(name: str) -> Any:
    """The record's names, from where they used to live (deprecated: import them from agentguard.record)."""
    if name in _MOVED:
        warnings.warn(
            f"agentguard.engagement.{name} moved to agentguard.record.{name}; the old name goes in 0.2",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
