"""Telemetry test fixtures: SDK providers with in-memory exporters, injected into each Guard (never global).

Tests that need the *global* providers (the no-SDK fast path, ``configure()``) run in a subprocess, so that
no test here changes what another test's process sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentguard import Guard

WAIT = 10.0


@dataclass
class Otel:
    """One test's tracer and meter providers, and what they recorded."""

    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)
    tracer_provider: TracerProvider = field(default_factory=TracerProvider)
    meter_provider: MeterProvider = field(init=False)

    def __post_init__(self) -> None:
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def guard(self, spec: str, **options: Any) -> Guard:
        """A guard recording into this provider pair; reviewers the test does not give refuse every request."""
        guard = Guard.from_yaml(
            spec, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )
        for reviewer_id in guard.required_reviewers() - guard.reviewer_ids:
            guard.add_reviewer(reviewer_id, lambda request: False)
        return guard

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def span(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.spans()]}"
        return found[0]

    def wait_for(self, name: str, count: int = 1) -> list[ReadableSpan]:
        """Spans ended on another thread (the guardian's server, the observe worker) arrive a little later."""
        deadline = time.monotonic() + WAIT
        while len(self.named(name)) < count:
            assert time.monotonic() < deadline, (
                f"no {count} spans named {name!r}: {[s.name for s in self.spans()]}"
            )
            time.sleep(0.005)
        return self.named(name)

    def text(self) -> str:
        """Every span, attribute and event as JSON: to look for content anywhere it could have leaked."""
        return "\n".join(s.to_json() for s in self.spans())

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """The data points of one metric: (attributes, point)."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend((dict(p.attributes or {}), p) for p in m.data.data_points)
        return found

    def counts(self, metric: str, *keys: str) -> dict[tuple[Any, ...], int]:
        """A counter's values by the given attributes."""
        out: dict[tuple[Any, ...], int] = {}
        for attributes, point in self.points(metric):
            key = tuple(attributes.get(k) for k in keys)
            out[key] = out.get(key, 0) + point.value
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    recorded = Otel()
    yield recorded
    recorded.tracer_provider.shutdown()
    recorded.meter_provider.shutdown()


def decision_events(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "agentguard.decision"]


def is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None, f"{child.name} has no parent"
    assert parent.context is not None
    assert child.context is not None
    same_trace: bool = child.context.trace_id == parent.context.trace_id
    return same_trace and child.parent.span_id == parent.context.span_id


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)
