"""``GuardTelemetry``: the observer that turns a Guard's turns, steps and decisions into OpenTelemetry.

It is installed in every Guard (``Guard(telemetry=True)``, the default) and uses ``opentelemetry-api`` only,
through its public names: without an SDK configured, each step costs one attribute read, and no span is made.
Whether an SDK is behind the global providers is asked once per turn, in :meth:`~GuardTelemetry.refresh` (the
public ``get_tracer_provider()`` / ``get_meter_provider()`` read ``os.environ`` while no provider is set, too
slow to ask at every step): a global provider set later is picked up at the next turn.
A step's span is the current span while the step runs (it is attached in :meth:`~GuardTelemetry.step_started`
and detached in :meth:`~GuardTelemetry.step_ended`, which the pipeline calls in the same thread or task), so
the tool's own spans, and the guardian request's, nest inside it.

Telemetry never breaks the agent: the Guard calls observers through a shield that logs and swallows their
errors (:mod:`agentguard.observers`), and this observer detaches and ends what it started even when recording
fails half-way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import traceback
from collections.abc import Iterator
from contextvars import Token
from dataclasses import dataclass
from typing import Any

from opentelemetry import context, metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.trace import (
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from agentguard.errors import ConfigurationError, PolicyViolation
from agentguard.guardian import GuardianClient
from agentguard.observers import Observer
from agentguard.record import CallRecord, Decision, EngagementState, EngagementStatus, Outcome, StepRecord
from agentguard.telemetry._metrics import Instruments, split_step_time
from agentguard.telemetry._spans import (
    DECISION_EVENT,
    TOOL_STEP,
    clean,
    decision_attributes,
    guardrail_decision,
    hide,
    names_tool,
    step_content,
    step_span,
    tool_content,
    tool_span_name,
    turn_span,
    unnamed_tool,
    utf8,
)

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "GuardTelemetry",
    "capture_content_from_env",
    "global_metrics",
    "global_tracing",
    "guard_observers",
]

logger = logging.getLogger("agentguard.telemetry")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# The values of the environment variable that put content on spans: "true" (the GenAI instrumentations' long
# standing value) and the newer "span_only" / "span_and_event" of opentelemetry-util-genai.
_CAPTURE_VALUES = frozenset({"true", "span_only", "span_and_event"})

# A call in one of these states ran (its tool was invoked), so its step's time includes the tool's.
_RAN = frozenset({"completed", "withheld", "failed"})


def capture_content_from_env() -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says content may be recorded (off if unset)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_VALUES


def global_tracing() -> bool:
    """Is a real tracer provider set globally? (The API's public ``get_tracer_provider()``.)

    While none is set, the call reads ``os.environ`` (about 0.8 µs): :class:`GuardTelemetry` asks once per
    turn, never per step.
    """
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


def global_metrics() -> bool:
    """Is a real meter provider set globally? (As :func:`global_tracing`, for metrics.)

    Neither the API's proxy (its class is not public: told apart by its name) nor its no-op.
    """
    provider = metrics.get_meter_provider()
    return type(provider).__name__ != "_ProxyMeterProvider" and not isinstance(provider, NoOpMeterProvider)


@dataclass(slots=True)
class _Turn:
    span: Span
    context: Context
    trace_id: int
    token: Token[Context] | None = None


@dataclass(slots=True)
class _Step:
    started: float  # time.time(), the clock of Decision.at
    first: int  # this segment's first decision in step.decisions (a step resumed after review has two)
    measured: bool
    span: Span | None = None
    context: Context | None = None
    token: Token[Context] | None = None
    hidden: str | None = None  # a tool name the span does not record, until its capability is allowed


def _trace(error: BaseException) -> str:
    """The ``exception.stacktrace`` the SDK would record, which quotes the message (made valid UTF-8 here)."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def _detach(ctx: Context | None, token: Token[Context] | None) -> None:
    """Detach ``token`` if its context is still the current one here; else leave the other context alone.

    A turn may end in another thread or task than it started in (a host that keeps an engagement across
    requests); detaching there would fail, and the attaching context is gone with its thread or task.
    """
    if token is not None and context.get_current() is ctx:
        context.detach(token)


class GuardTelemetry(Observer):
    """OpenTelemetry spans, decision events and metrics of one Guard's engagements.

    ``capture_content``: record tool arguments and results and the content of other steps (opt-in);
    ``None`` reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` once, now. A withheld output is
    never recorded. ``tracer_provider`` / ``meter_provider``: where spans and metrics go (default: the
    global providers, which do nothing until an SDK is configured). ``agent_name`` / ``agent_id`` name the
    agent on spans and metrics; a Guard fills them in from its spec when they are not given.

    The global providers are read when it is made and again at the start of each turn (:meth:`refresh`): a
    global provider set later is picked up at the next turn. Each step only reads what the last look found.

    Pass one to a Guard as ``Guard(..., telemetry=GuardTelemetry(...))``; the Guard installs one by default.
    """

    def __init__(
        self,
        *,
        agent_name: str | None = None,
        agent_id: str | None = None,
        capture_content: bool | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.agent_name = agent_name
        self.agent_id = agent_id
        self.capture_content = capture_content_from_env() if capture_content is None else capture_content
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._turns: dict[str, _Turn] = {}  # engagement id -> its open turn
        self._steps: dict[int, _Step] = {}  # id(step) -> the step's open segment
        # Is there an SDK behind the tracer / the instruments? True or False for an injected provider; None
        # for the global one: asked again at each turn (refresh) until the answer is yes (a global provider is
        # set only once). What a step reads: _live (active()), _live_tracer (_traced()), _measuring is True.
        self._tracer: Tracer | None = None
        self._tracing: bool | None = False
        self._instruments: Instruments | None = None
        self._measuring: bool | None = False
        self._live_tracer: Tracer | None = None
        self._live = False
        try:
            if tracer_provider is None or isinstance(tracer_provider, ProxyTracerProvider):
                trace.get_tracer_provider()  # loads a provider named by OTEL_PYTHON_TRACER_PROVIDER, if any
                self._tracer = trace.get_tracer("agentguard")  # a proxy until a global provider is set
                self._tracing = None
            elif not isinstance(tracer_provider, NoOpTracerProvider):
                self._tracer = tracer_provider.get_tracer("agentguard")
                self._tracing = True
        except Exception:
            logger.exception("agentguard telemetry: no tracer (spans are off for this guard)")
        try:
            global_meter = meter_provider is None or type(meter_provider).__name__ == "_ProxyMeterProvider"
            self._instruments = Instruments.for_provider(None if global_meter else meter_provider)
            self._measuring = None if global_meter else not isinstance(meter_provider, NoOpMeterProvider)
        except Exception:
            logger.exception("agentguard telemetry: no meter (metrics are off for this guard)")
        try:
            self.refresh()
        except Exception:
            logger.exception("agentguard telemetry: the global providers could not be read (asked again)")

    def for_agent(self, agent_name: str, agent_id: str) -> GuardTelemetry:
        """This telemetry for one agent: a copy naming it, unless this one already names an agent."""
        if self.agent_name is not None:
            return self
        return GuardTelemetry(
            agent_name=agent_name,
            agent_id=self.agent_id or agent_id,
            capture_content=self.capture_content,
            tracer_provider=self._tracer_provider,
            meter_provider=self._meter_provider,
        )

    def listen_to(self, guardian: GuardianClient) -> None:
        """Count ``guardian``'s observe-mode drops and failures, and time its observe-mode deliveries."""
        if self._instruments is not None:
            guardian.add_listener(self._instruments.guardian_event)

    # -- turns --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def chat_span(
        self, state: EngagementState, model: str | None, *, provider: str | None = None
    ) -> Iterator[None]:
        """A ``chat {model}`` CLIENT span around one model call a host adapter makes in ``state``'s turn.

        Nothing when no SDK is configured. The span is current inside, so that the host's own instrumentation
        of the call nests below; an exception sets its status and ``error.type`` and is re-raised.
        """
        tracer = self._traced()
        if tracer is None:
            yield
            return
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": state.id,
        }
        if self.agent_name:
            attributes["gen_ai.agent.name"] = self.agent_name
        if model:
            attributes["gen_ai.request.model"] = model
        if provider:
            attributes["gen_ai.provider.name"] = provider
        span = tracer.start_span(
            utf8(f"chat {model}") if model else "chat",
            context=self._parent(state),
            kind=SpanKind.CLIENT,
            attributes=clean(attributes),
        )
        try:
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                yield
        except BaseException as exc:
            if span.is_recording():
                span.set_attribute("error.type", utf8(type(exc).__name__))
                span.set_status(Status(StatusCode.ERROR, utf8(type(exc).__name__)))
            raise
        finally:
            span.end()

    def refresh(self) -> None:
        """Look again whether an SDK is behind the global providers (at each turn's start, and when made).

        Only while the answer is no: a global provider is set once, and an injected one is known from the
        start. Costs about 2 µs while no SDK is set; per step, :meth:`active` only reads what this found.
        """
        if self._tracing is None and global_tracing():
            self._tracing = True
        if self._measuring is None and global_metrics():
            self._measuring = True
        self._live_tracer = self._tracer if self._tracing else None
        self._live = self._live_tracer is not None or self._measuring is True

    steady = True  # active() reads what refresh() found

    def active(self) -> bool:
        """Only while an SDK is behind the tracer or the meter (as of the last :meth:`refresh`)."""
        return self._live

    @property
    def tracing(self) -> bool:
        """Is an SDK behind the tracer? Adapters ask before gathering a span's attributes: without one,
        :meth:`chat_span` records nothing and reading a model's name can cost more than the model call."""
        return self._live_tracer is not None

    def _traced(self) -> Tracer | None:
        """The tracer, if an SDK is behind it (as of the last :meth:`refresh`: this runs at every step)."""
        return self._live_tracer

    def _measured(self) -> bool:
        return self._measuring is True

    def turn_started(self, state: EngagementState) -> _Turn | None:
        tracer = self._traced()
        if tracer is None:
            return None
        name, attributes = turn_span(self.agent_name, self.agent_id, state)
        span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        turn = _Turn(span, trace.set_span_in_context(span), span.get_span_context().trace_id)
        self._turns[state.id] = turn
        # Current for the turn, so that what the host does in it (model calls, its own spans) nests below.
        turn.token = context.attach(turn.context)
        return turn

    def turn_ended(self, state: EngagementState, token: Any) -> None:
        if not isinstance(token, _Turn):
            return
        if self._turns.get(state.id) is token:
            del self._turns[state.id]
        span = token.span
        try:
            if span.is_recording():
                span.set_attribute("agentguard.engagement.status", state.status.value)
                if state.status is EngagementStatus.STOPPED or state.status is EngagementStatus.FAILED:
                    stopped = state.status is EngagementStatus.STOPPED
                    span.set_attribute(
                        "error.type", "ShortCircuitViolation" if stopped else "GuardrailViolation"
                    )
                    reason = state.status_reason
                    span.set_status(Status(StatusCode.ERROR, None if reason is None else utf8(reason)))
        finally:
            try:
                _detach(token.context, token.token)
            finally:
                span.end()

    # -- steps --------------------------------------------------------------------------------------------

    def step_started(self, state: EngagementState, step: StepRecord) -> _Step | None:
        tracer = self._traced()
        measured = self._measured()
        if tracer is None and not measured:
            return None  # no SDK: nothing to record
        entry = _Step(time.time(), len(step.decisions), measured)
        if tracer is not None:
            entry.hidden = hidden = unnamed_tool(step)
            name, attributes = step_span(self.agent_name, self.agent_id, state, step, hidden)
            entry.span = span = tracer.start_span(
                name, context=self._parent(state), kind=SpanKind.INTERNAL, attributes=attributes
            )
            entry.context = trace.set_span_in_context(span)
        self._steps[id(step)] = entry
        if entry.context is not None:
            entry.token = context.attach(entry.context)
        return entry

    def _parent(self, state: EngagementState) -> Context | None:
        """The turn's span, unless the current span is already inside the turn (``None``: the current one).

        A step run where the turn is not current (a worker thread, a host's node in its own context) still
        belongs to the turn; a step inside another step (a sub-agent's tool) or inside a host's span within
        the turn nests where it is.
        """
        turn = self._turns.get(state.id)
        if turn is None:
            return None
        current = trace.get_current_span().get_span_context()
        if current.is_valid and current.trace_id == turn.trace_id:
            return None
        return turn.context

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        if not self._steps:
            return  # no SDK: the common case, first
        entry = self._steps.get(id(step))
        span = entry.span if entry is not None else None
        if entry is None or span is None or not span.is_recording():
            return
        if entry.hidden is not None and names_tool(decision) and step.name:
            entry.hidden = None  # the spec knows the tool now: the span may say which it is
            span.update_name(tool_span_name(step.name))
            span.set_attribute("gen_ai.tool.name", step.name)
        span.add_event(DECISION_EVENT, decision_attributes(decision, entry.hidden))

    def step_ended(
        self, state: EngagementState, step: StepRecord, token: Any, error: BaseException | None
    ) -> None:
        if not isinstance(token, _Step):
            return
        ended = time.time()
        if self._steps.get(id(step)) is token:
            del self._steps[id(step)]
        call = step.call if step.kind == TOOL_STEP else None
        span = token.span
        try:
            if span is not None:
                try:
                    if span.is_recording():
                        self._finish(span, step, call, error, token.hidden)
                finally:
                    try:
                        _detach(token.context, token.token)
                    finally:
                        span.end()
        finally:
            if token.measured:
                self._measure(step, token, ended, call)

    def _finish(
        self,
        span: Span,
        step: StepRecord,
        call: CallRecord | None,
        error: BaseException | None,
        hidden: str | None,
    ) -> None:
        decisions = step.decisions
        blocked = next((d for d in decisions if d.blocked), None)
        outcome = step.outcome
        # A host that pauses the run for a review (a LangGraph interrupt) raises through the step: not an error.
        paused = outcome is Outcome.REVIEW_PENDING
        attributes: dict[str, AttributeValue] = {"agentguard.outcome": str(outcome)}  # a StrEnum's value
        if blocked is not None:
            attributes["agentguard.denied"] = True
            attributes["agentguard.denied.rule"] = str(blocked.rule)
        if any(d.outcome is Outcome.WARN for d in decisions):
            attributes["agentguard.warned"] = True
        if step.kind == TOOL_STEP:
            if step.call_id:
                attributes["gen_ai.tool.call.id"] = step.call_id
            if call is not None:
                attributes["gen_ai.tool.type"] = "agent" if call.kind == "agent" else "function"
        else:
            decision_type, reason = guardrail_decision(step, blocked)
            attributes["gen_ai.security.decision.type"] = decision_type
            if reason:
                attributes["gen_ai.security.decision.reason"] = reason
        if error is not None and not paused:
            attributes["error.type"] = type(error).__qualname__
        span.set_attributes(clean(attributes))
        if self.capture_content:
            self._record_content(span, step, call, error)
        if error is None or paused:
            return
        if isinstance(error, PolicyViolation):
            # The recorded decision's words: the error told to the caller may add the input values it compared.
            reason = blocked.reason if blocked is not None else error.reason
            span.set_status(Status(StatusCode.ERROR, hide(reason, hidden)))
        elif self.capture_content:  # a tool's error message may quote its inputs: it is content
            message = utf8(str(error))
            span.record_exception(
                error, {"exception.message": message, "exception.stacktrace": utf8(_trace(error))}
            )
            span.set_status(Status(StatusCode.ERROR, utf8(f"{type(error).__qualname__}: {message}")))
        else:
            span.set_status(Status(StatusCode.ERROR))

    def _record_content(
        self, span: Span, step: StepRecord, call: CallRecord | None, error: BaseException | None
    ) -> None:
        """CONTENT: tool arguments and result, or what another step judged. Only with capture on."""
        if not self.capture_content:
            return
        if step.kind != TOOL_STEP:
            # Only content that went on as it came: a denied step's was withheld (knowledge, an answer the
            # guardian refused), and a modified one's is the original the guardian replaced -- redacted
            # because it must not go on (the step keeps only the request as first built, not the replacement).
            if not any(d.blocked or d.outcome is Outcome.MODIFY for d in step.decisions):
                span.set_attributes(step_content(step))
        elif call is not None:
            # Only an output that left the pipeline: never a withheld one (failed output restriction,
            # rejected output review, guardian deny on the result), a failed call's, or one awaiting review.
            released = error is None and call.status == "completed"
            span.set_attributes(tool_content(call, with_result=released))

    def _measure(self, step: StepRecord, token: _Step, ended: float, call: CallRecord | None) -> None:
        instruments = self._instruments
        if instruments is None:
            return
        returned_at = None
        if (
            call is not None
            and call.status in _RAN
            and call.ended_at is not None
            and call.ended_at >= token.started
        ):
            returned_at = call.ended_at
        decisions = step.decisions[token.first :]
        instruments.record_step(
            self.agent_name, step, decisions, split_step_time(token.started, ended, decisions, returned_at)
        )


def guard_observers(
    telemetry: bool | GuardTelemetry,
    *,
    agent_name: str,
    agent_id: str,
    guardian: GuardianClient | None,
    capture_content: bool | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> tuple[Observer, ...]:
    """The telemetry observer a Guard installs, from its ``telemetry=`` and related options.

    ``capture_content``, ``tracer_provider`` and ``meter_provider`` configure the default telemetry
    (``telemetry=True``); with ``telemetry=False`` or a :class:`GuardTelemetry` of one's own they would be
    ignored, so giving them then is an error rather than a surprise.
    """
    given = [
        name
        for name, value in (
            ("capture_content", capture_content),
            ("tracer_provider", tracer_provider),
            ("meter_provider", meter_provider),
        )
        if value is not None
    ]
    if telemetry is True:
        bound = GuardTelemetry(
            agent_name=agent_name,
            agent_id=agent_id,
            capture_content=capture_content,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
    elif isinstance(telemetry, GuardTelemetry) or telemetry is False:
        if given:
            what = "telemetry=False" if telemetry is False else "a GuardTelemetry (set them on it)"
            raise ConfigurationError(f"{', '.join(given)} cannot be combined with {what}")
        if telemetry is False:
            return ()
        bound = telemetry.for_agent(agent_name, agent_id)
    else:
        raise ConfigurationError(f"telemetry must be True, False or a GuardTelemetry, not {telemetry!r}")
    if guardian is not None:
        bound.listen_to(guardian)
    return (bound,)
