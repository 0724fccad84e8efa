"""``configure()``: set up the OpenTelemetry SDK for a process that is agentguard's own (the CLI, the demo).

A library must not configure the SDK of its host, so nothing in agentguard calls this on import or in a Guard;
an application that already set up OpenTelemetry simply does not call it. It needs the ``otel`` extra
(``pip install 'agentguard[otel]'``: the SDK and the OTLP/HTTP exporter), imported here, on call.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from opentelemetry import metrics, trace

from agentguard.errors import ConfigurationError
from agentguard.telemetry._observer import global_metrics, global_tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["Configured", "configure"]

_NEEDS_EXTRA = "pip install 'agentguard[otel]'"
_lock = threading.Lock()
_configured: Configured | None = None


@dataclass(frozen=True)
class Configured:
    """The SDK providers :func:`configure` set globally. ``shutdown()`` flushes and stops them."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def configure(
    *,
    console: bool | TextIO = False,
    otlp_endpoint: str | None = None,
    service_name: str = "agentguard",
) -> Configured:
    """Install global SDK tracer and meter providers that export to the console and/or an OTLP collector.

    ``otlp_endpoint`` is the collector's base URL (``http://localhost:4318``; ``/v1/traces`` and
    ``/v1/metrics`` are added); when it is not given, ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the other
    ``OTEL_EXPORTER_OTLP_*`` variables) are used if set. ``console=True`` prints spans as they end and
    metrics every minute and at exit; ``console=<open text file>`` writes them there instead of stdout
    (the demo keeps its timeline readable that way). Calling it again returns the providers of the first call.

    Raises :class:`~agentguard.ConfigurationError` when the SDK (or the OTLP exporter, if asked for) is not
    installed, when there is nowhere to export to, or when another SDK provider is already set globally.
    """
    global _configured
    with _lock:
        if _configured is not None:
            return _configured
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import (
                ConsoleMetricExporter,
                MetricExporter,
                MetricReader,
                PeriodicExportingMetricReader,
            )
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                ConsoleSpanExporter,
                SimpleSpanProcessor,
            )
        except ImportError as exc:
            raise ConfigurationError(
                f"agentguard.telemetry.configure() needs the OpenTelemetry SDK: {_NEEDS_EXTRA}"
            ) from exc
        use_otlp = otlp_endpoint is not None or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        if not console and not use_otlp:
            raise ConfigurationError(
                "configure() has nowhere to export to: pass console=True and/or otlp_endpoint=..., "
                "or set OTEL_EXPORTER_OTLP_ENDPOINT"
            )
        if global_tracing() or global_metrics():
            raise ConfigurationError(
                "OpenTelemetry is already set up in this process (a global tracer or meter provider); "
                "agentguard records to it as it is: do not call configure()"
            )
        resource = Resource.create({"service.name": service_name})
        tracer_provider = TracerProvider(resource=resource)
        readers: list[MetricReader] = []
        if console:
            out: TextIO = sys.stdout if console is True else console
            tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
            readers.append(
                PeriodicExportingMetricReader(ConsoleMetricExporter(out=out), export_interval_millis=60_000)
            )
        if use_otlp:
            try:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                raise ConfigurationError(
                    f"exporting to an OTLP collector needs opentelemetry-exporter-otlp-proto-http: {_NEEDS_EXTRA}"
                ) from exc
            base = otlp_endpoint.rstrip("/") if otlp_endpoint is not None else None
            tracer_provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=None if base is None else f"{base}/v1/traces"))
            )
            metric_exporter: MetricExporter = OTLPMetricExporter(
                endpoint=None if base is None else f"{base}/v1/metrics"
            )
            readers.append(PeriodicExportingMetricReader(metric_exporter))
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
        _configured = Configured(tracer_provider, meter_provider)
        return _configured
