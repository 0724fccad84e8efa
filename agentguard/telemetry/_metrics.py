"""Metrics of a guarded agent, and how one step's wall time splits into checking, tool and guardian time.

=================================  =========  ==========  =====================================================
instrument                         kind       unit        attributes
=================================  =========  ==========  =====================================================
``agentguard.decisions``           counter    {decision}  ``agentguard.decision.outcome``,
                                                          ``agentguard.decision.rule``, ``gen_ai.agent.name``
``agentguard.check.duration``      histogram  s           ``agentguard.step.kind``, ``agentguard.outcome``,
                                                          ``gen_ai.agent.name``
``agentguard.guardian.duration``   histogram  s           ``rpc.method``, ``agentguard.guardian.outcome``,
                                                          ``agentguard.guardian.mode``
``agentguard.guardian.undecided``  counter    {step}      ``agentguard.guardian.cause``,
                                                          ``agentguard.guardian.proceeded``,
                                                          ``agentguard.guardian.mode``, ``rpc.method``
=================================  =========  ==========  =====================================================

Durations are in seconds, as the OpenTelemetry semantic conventions record every duration, with bucket
boundaries suggested for what they measure (local checks take microseconds, a guardian milliseconds).

The check duration is agentguard's own time on a step. It is read off the decisions, which are time-stamped
when taken (:attr:`Decision.at`): the time before each decision is the time its check took, except the tool's
run, a guardian's latency and a reviewer's answer, which are not agentguard's (:func:`split_step_time`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.util.types import AttributeValue

from agentguard.errors import Phase, Rule
from agentguard.guardian import GuardianOutcome, GuardianVerdict
from agentguard.record import Decision, Outcome, StepRecord
from agentguard.telemetry._spans import TOOL_STEP, step_kind, utf8

__all__ = ["Instruments", "StepTime", "cause_kind", "split_step_time"]

logger = logging.getLogger("agentguard.telemetry")

_CHECK_BUCKETS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip
_GUARDIAN_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# How the pipeline words a step that went on, or was refused, without a guardian decision (policy/_flow.py);
# the cause follows the prefix. tests/telemetry pins both against a dead guardian.
_PROCEEDED = "proceeded without guardian decision: "
_DENIED = "denied without guardian decision: "

# Low-cardinality kinds of the causes the guardian client and the pipeline give (guardian/_flow.py).
_CAUSES = (
    ("timeout", "timeout"),
    ("transport", "transport"),
    ("http ", "http"),
    ("jsonrpc ", "jsonrpc"),
    ("malformed", "malformed"),
    ("id mismatch", "malformed"),
    ("unappliable", "unappliable"),
    ("modifiedRequest", "unappliable"),
    ("guardian answered modify", "unappliable"),
    ("ping:", "ping"),
    ("client closed", "closed"),
    ("queue full", "queue_full"),
    ("unsendable", "unsendable"),
    ("internal error", "internal"),
)


def cause_kind(cause: str) -> str:
    """The kind of a guardian failure cause (``"timeout"``, ``"http"``, ``"queue_full"``, ...; else ``"other"``)."""
    for prefix, kind in _CAUSES:
        if cause.startswith(prefix):
            return kind
    return "other"


def _latency_seconds(decision: Decision) -> float | None:
    latency = decision.data.get("latency_ms") if decision.data is not None else None
    return latency / 1000 if isinstance(latency, int | float) and not isinstance(latency, bool) else None


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step segment's time: agentguard's own checking, and each guardian exchange's wait."""

    check: float
    guardian: tuple[tuple[Decision, float], ...]


def split_step_time(
    started: float, ended: float, decisions: Sequence[Decision], returned_at: float | None
) -> StepTime:
    """Split the wall time of one step segment (``time.time()`` seconds) into checking and guardian waits.

    ``decisions`` are the segment's decisions in order; ``returned_at`` is when the tool returned, if it ran in
    this segment. The time before a decision counts as checking, except:

    - the tool's run, between the last input-phase decision and the first output-phase one: only the time
      after ``returned_at`` is checking (if the tool's return is not inside that interval, none of it is);
    - a guardian exchange: its latency is waiting (the verdict's, or the whole interval when the decision
      does not carry it); what is left is building the request, which is checking;
    - a review: waiting for a person, or for a host that paused the run.
    """
    check = 0.0
    waits: list[tuple[Decision, float]] = []
    previous = started
    previous_rule: Rule | None = None
    tool_running = returned_at is not None
    for decision in decisions:
        at = decision.at
        begin = previous
        if tool_running and returned_at is not None and decision.phase is Phase.OUTPUT:
            tool_running = False
            begin = returned_at if previous <= returned_at <= at else at
        spent = max(0.0, at - begin)
        if decision.rule is Rule.GUARDIAN:
            latency = _latency_seconds(decision)
            if latency is not None:
                waits.append((decision, latency))
                spent = max(0.0, spent - latency)
            elif previous_rule is not Rule.GUARDIAN:  # not a second decision about the same exchange
                waits.append((decision, spent))
                spent = 0.0
        elif decision.rule is Rule.REVIEW:
            spent = 0.0
        check += spent
        previous, previous_rule = at, decision.rule
    begin = previous
    if tool_running and returned_at is not None:
        begin = returned_at if previous <= returned_at <= ended else ended
    check += max(0.0, ended - begin)
    return StepTime(check, tuple(waits))


def _guardian_method(step: StepRecord, decision: Decision) -> str:
    if step.kind == TOOL_STEP:
        return "steps/toolCallResult" if decision.phase is Phase.OUTPUT else TOOL_STEP
    return step_kind(step.kind)


class Instruments:
    """The instruments on one meter provider, shared by every Guard that records to it.

    One object per provider (:meth:`for_provider`): the SDK keeps the first instrument of a name, so a second
    set would never be reported; and its :meth:`guardian_event` listener is then one and the same callable
    for every Guard of a shared guardian client, which adds it once, so an observe-mode drop is counted once.

    ``agentguard.decisions`` is an asynchronous counter over a tally kept here: a step takes four decisions
    or so, and one SDK counter update costs about 6 µs, while a tally update under a lock costs 0.1 µs and
    the SDK reads the tally only when it collects.
    """

    _by_provider: weakref.WeakKeyDictionary[MeterProvider, Instruments] = weakref.WeakKeyDictionary()
    _unreferenceable: dict[int, tuple[MeterProvider, Instruments]] = {}
    _global: Instruments | None = None
    _lock = threading.Lock()

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter("agentguard")
        self._tally: dict[tuple[str, str, str | None], int] = {}  # (outcome, rule, agent) -> decisions
        self._tally_lock = threading.Lock()
        self.decisions = meter.create_observable_counter(
            "agentguard.decisions",
            callbacks=[self._observe_decisions],
            unit="{decision}",
            description="Decisions taken about agent steps.",
        )
        self.check_duration = meter.create_histogram(
            "agentguard.check.duration",
            unit="s",
            description="agentguard's own time on a step: local checks, without the tool, guardian or reviewers.",
            explicit_bucket_boundaries_advisory=_CHECK_BUCKETS,
        )
        self.guardian_duration = meter.create_histogram(
            "agentguard.guardian.duration",
            unit="s",
            description="Time a guardian exchange took, retries and back-off included.",
            explicit_bucket_boundaries_advisory=_GUARDIAN_BUCKETS,
        )
        self.undecided = meter.create_counter(
            "agentguard.guardian.undecided",
            unit="{step}",
            description="Steps that went on, or were refused, without a guardian decision, and observed steps dropped.",
        )

    @classmethod
    def for_provider(cls, provider: MeterProvider | None) -> Instruments:
        """The instruments of ``provider``; ``None``: of the global provider, whenever it is set.

        (Instruments made before an SDK is set globally are the API's proxies, which follow it once set.)
        """
        with cls._lock:
            if provider is None:
                if cls._global is None:
                    cls._global = cls(metrics.get_meter_provider())
                return cls._global
            try:
                found = cls._by_provider.get(provider)
            except TypeError:  # a provider that cannot be weakly referenced: kept for good
                kept = cls._unreferenceable.get(id(provider))
                if kept is None:
                    kept = cls._unreferenceable[id(provider)] = (provider, cls(provider))
                return kept[1]
            if found is None:
                found = cls._by_provider[provider] = cls(provider)
            return found

    def _observe_decisions(self, options: CallbackOptions) -> Iterator[Observation]:
        with self._tally_lock:
            tally = list(self._tally.items())
        for (outcome, rule, agent), count in tally:
            attributes: dict[str, AttributeValue] = {
                "agentguard.decision.outcome": outcome,
                "agentguard.decision.rule": rule,
            }
            if agent is not None:
                attributes["gen_ai.agent.name"] = agent
            yield Observation(count, attributes)

    def record_step(
        self, agent_name: str | None, step: StepRecord, decisions: Sequence[Decision], time: StepTime
    ) -> None:
        """Count one step segment's decisions and record its check time and guardian exchanges."""
        if agent_name is not None:  # the host's to write: a lone surrogate would drop it from every export
            agent_name = utf8(agent_name)
        tally = self._tally
        with self._tally_lock:
            for decision in decisions:
                key = (str(decision.outcome), str(decision.rule), agent_name)  # StrEnum values
                tally[key] = tally.get(key, 0) + 1
        agent: dict[str, AttributeValue] = {} if agent_name is None else {"gen_ai.agent.name": agent_name}
        self.check_duration.record(
            time.check,
            {"agentguard.step.kind": step_kind(step.kind), "agentguard.outcome": str(step.outcome), **agent},
        )
        for decision, seconds in time.guardian:
            method = _guardian_method(step, decision)
            self.guardian_duration.record(
                seconds,
                {
                    "rpc.method": method,
                    "agentguard.guardian.outcome": decision.outcome.value,
                    "agentguard.guardian.mode": "enforce",
                },
            )
        for decision in decisions:
            if decision.rule is not Rule.GUARDIAN:
                continue
            method = _guardian_method(step, decision)
            if decision.outcome is Outcome.NO_DECISION and decision.reason.startswith(_PROCEEDED):
                self._undecided(decision.reason[len(_PROCEEDED) :], True, "enforce", method)
            elif decision.outcome is Outcome.DENY and decision.reason.startswith(_DENIED):
                self._undecided(decision.reason[len(_DENIED) :], False, "enforce", method)

    def _undecided(self, cause: str, proceeded: bool, mode: str, method: str) -> None:
        attributes: Mapping[str, AttributeValue] = {
            "agentguard.guardian.cause": cause_kind(cause),
            "agentguard.guardian.proceeded": proceeded,
            "agentguard.guardian.mode": mode,
            "rpc.method": method,
        }
        self.undecided.add(1, attributes)

    def guardian_event(self, event: str, data: dict[str, object]) -> None:
        """A guardian client's observe-mode event (see :data:`agentguard.guardian.EventCallback`).

        Observed steps never wait for the guardian, so they have no decision in the step records: their
        latency, their failures and the steps dropped before sending are known only from these events.
        """
        method = data.get("method")
        method = step_kind(method) if isinstance(method, str) else "unknown"
        if event == "dropped":
            self._undecided(str(data.get("reason", "")), True, "observe", method)
            return
        verdict = data.get("verdict")
        if not isinstance(verdict, GuardianVerdict):
            return
        self.guardian_duration.record(
            verdict.latency_ms / 1000,
            {
                "rpc.method": method,
                "agentguard.guardian.outcome": verdict.outcome.value,
                "agentguard.guardian.mode": "observe",
            },
        )
        if verdict.outcome is GuardianOutcome.NO_DECISION:
            self._undecided(verdict.failure or "", True, "observe", method)
