"""Telemetry never breaks the agent, costs nothing without an SDK, and is the host's to configure."""

from __future__ import annotations

import ast
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.metrics import (
    Counter,
    Histogram,
    Meter,
    MeterProvider,
    NoOpCounter,
    NoOpHistogram,
    NoOpMeter,
)
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from agentguard import ConfigurationError, Guard
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import create_app, parse_rules, serve_in_thread
from agentguard.observers import Observer
from agentguard.telemetry import GuardTelemetry, _observer, configure
from tests.conftest import ROOT, spec_text
from tests.telemetry.conftest import Otel, wait_until

SPEC = spec_text(
    """
    capabilities:
      lookup: {}
    """
)


class BrokenProcessor(SpanProcessor):
    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        raise RuntimeError("span processor is down")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("span processor is down")


class BrokenExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise RuntimeError("collector is down")


class BrokenCounter(NoOpCounter):
    def add(self, amount: int | float, attributes: Any = None, context: Context | None = None) -> None:
        raise RuntimeError("meter is down")


class BrokenHistogram(NoOpHistogram):
    def record(self, amount: int | float, attributes: Any = None, context: Context | None = None) -> None:
        raise RuntimeError("meter is down")


class BrokenMeter(NoOpMeter):
    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        return BrokenCounter(name)

    def create_histogram(self, name: str, *args: Any, **kwargs: Any) -> Histogram:
        return BrokenHistogram(name)


class BrokenMeterProvider(MeterProvider):
    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> Meter:
        return BrokenMeter(name)


class BrokenPropagator(TextMapPropagator):
    def extract(
        self, carrier: CarrierT, context: Context | None = None, getter: Getter[CarrierT] = default_getter
    ) -> Context:
        raise RuntimeError("propagator is down")

    def inject(
        self, carrier: CarrierT, context: Context | None = None, setter: Setter[CarrierT] = default_setter
    ) -> None:
        raise RuntimeError("propagator is down")

    @property
    def fields(self) -> set[str]:
        return {"traceparent"}


class BrokenObserver(Observer):
    def step_started(self, state: Any, step: Any) -> None:
        raise RuntimeError("observer bug")


def _run_lookup(guard: Guard) -> Any:
    lookup = guard.tool(name="lookup")(lambda: "found")
    with guard.engagement():
        return lookup()


def test_a_broken_span_processor_never_breaks_a_call(otel: Otel, caplog: pytest.LogCaptureFixture) -> None:
    otel.tracer_provider.add_span_processor(BrokenProcessor())
    with caplog.at_level(logging.ERROR):
        assert _run_lookup(otel.guard(SPEC)) == "found"
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert any("observer" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_broken_exporter_never_breaks_a_call(otel: Otel) -> None:
    otel.tracer_provider.add_span_processor(SimpleSpanProcessor(BrokenExporter()))
    assert _run_lookup(otel.guard(SPEC)) == "found"
    assert [s.name for s in otel.spans()] == ["execute_tool lookup", "invoke_agent test-agent"]


def test_a_broken_meter_never_breaks_a_call_nor_the_spans(otel: Otel) -> None:
    guard = Guard.from_yaml(SPEC, tracer_provider=otel.tracer_provider, meter_provider=BrokenMeterProvider())
    assert _run_lookup(guard) == "found"
    assert [s.name for s in otel.spans()] == ["execute_tool lookup", "invoke_agent test-agent"]


def test_a_broken_observer_beside_telemetry_never_breaks_a_call(otel: Otel) -> None:
    assert _run_lookup(otel.guard(SPEC, observers=[BrokenObserver()])) == "found"
    assert len(otel.named("execute_tool lookup")) == 1


@pytest.fixture
def broken_propagator() -> Iterator[None]:
    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(BrokenPropagator())
    yield
    propagate.set_global_textmap(previous)


@pytest.mark.usefixtures("broken_propagator")
def test_a_broken_propagator_never_fails_a_guardian_request(otel: Otel) -> None:
    rules = parse_rules("rules: []")
    with serve_in_thread(create_app(rules, tracer_provider=otel.tracer_provider)) as server:
        client = GuardianClient(server.url, tracer_provider=otel.tracer_provider)
        guard = otel.guard(SPEC, guardian=client)
        with client:
            assert _run_lookup(guard) == "found"
        assert client.stats.delivered == 2
    assert len(otel.named("steps/toolCallRequest")) == 1


def test_a_raising_listener_never_stops_the_others(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[tuple[str, object]] = []

    def broken(event: str, data: dict[str, object]) -> None:
        raise RuntimeError("listener bug")

    def listener(event: str, data: dict[str, object]) -> None:
        heard.append((event, data["reason"]))

    client = GuardianClient("http://guardian.test/aos", mode="observe", on_event=broken)
    client.add_listener(listener)
    client.add_listener(listener)  # the same callable twice: heard once
    client.close()
    with caplog.at_level(logging.WARNING):
        client.submit({"jsonrpc": "2.0", "id": "s-1", "method": "steps/message", "params": {}})
    assert heard == [("dropped", "client closed")]
    assert any("callback raised" in r.getMessage() for r in caplog.records)


def test_listeners_hear_delivered_and_failed_steps() -> None:
    heard: list[str] = []
    answers = iter(
        [httpx.Response(200, json={"jsonrpc": "2.0", "id": "s-1", "result": {"decision": "allow"}})]
    )

    def guardian(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(503))

    client = GuardianClient(
        "http://guardian.test/aos", mode="observe", transport=httpx.MockTransport(guardian)
    )
    client.add_listener(lambda event, data: heard.append(f"{event} {data['id']}"))
    client.submit({"jsonrpc": "2.0", "id": "s-1", "method": "steps/message", "params": {}})
    client.submit({"jsonrpc": "2.0", "id": "s-2", "method": "steps/message", "params": {}})
    client.close()
    wait_until(lambda: len(heard) == 2)
    assert heard == ["delivered s-1", "failed s-2"]


@pytest.mark.parametrize(
    "options",
    [
        {"telemetry": False, "capture_content": True},
        {"telemetry": GuardTelemetry(), "tracer_provider": trace.NoOpTracerProvider()},
        {"telemetry": "yes"},
    ],
)
def test_contradictory_telemetry_options_are_refused(options: Mapping[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Guard.from_yaml(SPEC, **options)


def test_telemetry_can_be_left_out() -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)
    assert guard.observers == ()
    assert guard.telemetry is None


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_agentguard_does_not_import_the_sdk() -> None:
    out = _python(
        """
        import sys
        import agentguard, agentguard.telemetry, agentguard.guardian
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")))
        """
    )
    assert out.strip() == "[]"


def test_without_an_sdk_no_span_is_made_until_one_is_set() -> None:
    out = _python(
        f"""
        import sys
        from opentelemetry import trace
        from agentguard import Guard

        guard = Guard.from_yaml({SPEC!r})

        @guard.tool
        def lookup():
            return trace.get_current_span().get_span_context().is_valid

        with guard.engagement():
            assert lookup() is False, "no SDK: no span"
        assert "opentelemetry.sdk" not in sys.modules

        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)   # after the Guard was made: picked up from now on
        with guard.engagement():
            assert lookup() is True
        print(sorted(s.name for s in exporter.get_finished_spans()))
        """
    )
    assert out.strip() == "['execute_tool lookup', 'invoke_agent test-agent']"


def test_a_global_provider_set_later_is_picked_up_at_the_next_turn() -> None:
    out = _python(
        f"""
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from agentguard import Guard

        def traced():
            return trace.get_current_span().get_span_context().is_valid

        guard = Guard.from_yaml({SPEC!r})
        lookup = guard.tool(name="lookup")(traced)
        auto = Guard.from_yaml({SPEC!r}, auto_engagement=True)
        auto_lookup = auto.tool(name="lookup")(traced)
        assert auto_lookup() is False

        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        with guard.engagement() as eng:
            assert lookup() is False
            trace.set_tracer_provider(tracer_provider)
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            assert lookup() is False, "the turn began without an SDK"
            eng.new_turn()
            assert lookup() is True, "the next turn sees it"
        # one-call engagements have no turn: each one's end looks again, for the next
        assert [auto_lookup(), auto_lookup()] == [False, True]

        durations = [
            point.count
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "agentguard.check.duration"
            for point in metric.data.data_points
        ]
        print(sum(durations), sorted(s.name for s in exporter.get_finished_spans()))
        """
    )
    assert out.strip() == "2 ['execute_tool lookup', 'execute_tool lookup', 'invoke_agent test-agent']"


def test_the_global_providers_are_read_once_per_turn_not_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(_observer, "global_tracing", lambda: asked.append("tracing") is not None)
    monkeypatch.setattr(_observer, "global_metrics", lambda: asked.append("metrics") is not None)
    guard = Guard.from_yaml(SPEC)
    lookup = guard.tool(name="lookup")(lambda: "found")
    assert asked == ["tracing", "metrics"]  # when the telemetry was made
    with guard.engagement() as eng:
        for _ in range(3):
            lookup()
        eng.new_turn()
        lookup()
    assert asked == ["tracing", "metrics"] * 3


def test_a_raising_provider_lookup_is_logged_and_the_call_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> bool:
        raise RuntimeError("provider lookup bug")

    monkeypatch.setattr(_observer, "global_tracing", broken)
    with caplog.at_level(logging.ERROR):
        guard = Guard.from_yaml(SPEC)
        assert _run_lookup(guard) == "found"
    logged = [r for r in caplog.records if "provider lookup bug" in str(r.exc_info)]
    assert [r.name for r in logged] == ["agentguard.telemetry", "agentguard.observers"]


# An attribute or module of the API's behind an underscore, or its globals by name (as getattr would ask).
_OTEL_PRIVATE = re.compile(
    r"\b(?:opentelemetry(?:\.\w+)*|trace|metrics|context|propagate|baggage)\._\w|(?<!\w)_(?:TRACER|METER)_PROVIDER\b"
)


def _otel_modules(tree: ast.Module) -> set[str]:
    """The local names bound to OpenTelemetry modules or names by the imports of one module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("opentelemetry")
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            names.update(a.asname or a.name for a in node.names)
    return names


def _otel_privates(source: str) -> list[str]:
    """Where one module's source imports, reads or asks ``getattr`` for an OpenTelemetry private name."""
    tree = ast.parse(source)
    otel = _otel_modules(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            dotted = [f"{module}.{a.name}" if module else a.name for a in node.names]
            found.extend(
                f"{node.lineno}: imports {name}"
                for name in dotted
                if name.startswith("opentelemetry") and any(p.startswith("_") for p in name.split("."))
            )
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr.startswith("_") and node.value.id in otel:
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            target, name = [*node.args, None, None][:2]
            if (
                isinstance(target, ast.Name)
                and target.id in otel
                and isinstance(name, ast.Constant)
                and str(name.value).startswith("_")
            ):
                found.append(f"{node.lineno}: getattr({target.id}, {name.value!r})")
    found.extend(
        f"{n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if _OTEL_PRIVATE.search(line)
    )
    return found


def test_the_private_name_check_finds_what_it_is_for() -> None:
    source = textwrap.dedent(
        """
        import opentelemetry.metrics._internal as api
        from opentelemetry import trace
        from opentelemetry.trace import _PROXY_TRACER_PROVIDER
        a = trace._TRACER_PROVIDER
        b = getattr(api, "_METER_PROVIDER", None)
        c = trace.get_tracer_provider()
        """
    )
    assert sorted({line.split(":")[0] for line in _otel_privates(source)}) == ["2", "4", "5", "6"]


def test_agentguard_uses_only_public_opentelemetry_names() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted((ROOT / "agentguard").rglob("*.py"))
        if "opentelemetry" in (source := path.read_text(encoding="utf-8"))
        for where in _otel_privates(source)
    ]
    assert found == []


def test_configure_sets_up_the_sdk_once() -> None:
    out = _python(
        f"""
        from agentguard import ConfigurationError, Guard
        from agentguard.telemetry import configure

        configured = configure(console=True, service_name="agentguard-test")
        assert configure(console=False, otlp_endpoint="http://127.0.0.1:9") is configured
        guard = Guard.from_yaml({SPEC!r})
        with guard.engagement():
            guard.call("lookup", {{}}, lambda: "found")
        configured.shutdown()
        """
    )
    assert '"name": "execute_tool lookup"' in out
    assert '"service.name": "agentguard-test"' in out


def test_configure_refuses_a_process_that_has_its_own_sdk() -> None:
    _python(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from agentguard import ConfigurationError
        from agentguard.telemetry import configure

        trace.set_tracer_provider(TracerProvider())
        try:
            configure(console=True)
        except ConfigurationError as exc:
            assert "already set up" in str(exc)
        else:
            raise AssertionError("configure() replaced the host's SDK")
        """
    )


def test_configure_needs_somewhere_to_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with pytest.raises(ConfigurationError, match="nowhere to export"):
        configure()


def test_configure_names_the_extra_when_the_sdk_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.metrics", None)
    with pytest.raises(ConfigurationError, match=r"agentguard\[otel\]"):
        configure(console=True)
