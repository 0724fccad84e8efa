"""Cost of telemetry on a guarded tool call: off, on without an SDK (the API's no-op), and on with the SDK.

    .venv/bin/python benchmarks/telemetry.py [--calls 4000]

Prints a table and writes ``benchmarks/results/telemetry.json``. The same guarded call as in
``benchmarks/core.py`` (one input and one output CEL assertion, ``short_circuit: 3``) is timed, in one run,
under four Guards:

1. ``off``: ``Guard(telemetry=False)``, the pipeline alone;
2. ``empty observer``: ``telemetry=False`` and one observer whose hooks do nothing (:class:`Watching`): what
   the core's observer hooks cost by themselves, the part of what (4) costs that is not the SDK's;
3. ``no-op API``: the default, ``telemetry=True``, with no SDK configured (what a library user who has not set up
   OpenTelemetry pays);
4. ``SDK``: the OpenTelemetry SDK with an in-memory span exporter (``SimpleSpanProcessor``) and an in-memory
   metric reader, injected into the Guard: per call a step span with four decision events (and a twentieth
   of a turn span), a check-duration histogram update and four decisions tallied.

The providers are injected, never set globally, so that (3) really runs without an SDK in the same process.
Reported: the median µs per call of each, what (2) and (3) add to (1), and the ratio and difference of (4)
to (3).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import print_table, spec_text, tool_a, tool_b, write_results
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentguard import Guard, User
from agentguard.observers import Observer
from agentguard.record import Decision, EngagementState, StepRecord


class Watching(Observer):
    """Watches every step and decision, and does nothing with them.

    (The base :class:`Observer` would not do: an observer that overrides no hook watches no step, and the
    guard leaves it out of the call.)
    """

    def step_started(self, state: EngagementState, step: StepRecord) -> Any:
        return None

    def step_ended(
        self, state: EngagementState, step: StepRecord, token: Any, error: BaseException | None
    ) -> None:
        return None

    def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
        return None


def build(**options: Any) -> tuple[Guard, list[Callable[..., Any]]]:
    guard = Guard.from_yaml(spec_text(), **options)
    return guard, [guard.tool(tool_a), guard.tool(tool_b)]


def per_call_us(
    guard: Guard, tools: list[Callable[..., Any]], calls: int, rounds: int, reset: Callable[[], None]
) -> float:
    """Median µs of a guarded call; each round is one engagement of ``calls`` calls (alternating tools)."""
    samples: list[int] = []
    for _ in range(rounds):
        with guard.engagement(user=User(id="u1")):
            for i in range(calls):
                fn = tools[
                    bin(i).count("1") % 2
                ]  # Thue-Morse: never three repeats, short-circuit never fires
                start = time.perf_counter_ns()
                fn(x=1)
                samples.append(time.perf_counter_ns() - start)
        reset()
    return statistics.median(samples) / 1000


def measure(calls: int) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    def reset_sdk() -> None:
        exporter.clear()
        reader.get_metrics_data()

    configurations = {
        "off": (build(telemetry=False), lambda: None),
        "empty_observer": (build(telemetry=False, observers=[Watching()]), lambda: None),
        "noop_api": (build(), lambda: None),
        "sdk": (build(tracer_provider=tracer_provider, meter_provider=meter_provider), reset_sdk),
    }
    rounds = max(1, calls // 20)
    for (guard, tools), reset in configurations.values():  # warm up
        per_call_us(guard, tools, 20, 10, reset)
    # Interleave the configurations, so that a slow moment of the machine hits all three alike.
    samples: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(5):
        for name, ((guard, tools), reset) in configurations.items():
            samples[name].append(per_call_us(guard, tools, 20, max(1, rounds // 5), reset))
    off, observer, noop, sdk = (
        statistics.median(samples[name]) for name in ("off", "empty_observer", "noop_api", "sdk")
    )
    (guard, tools), _ = configurations["sdk"]
    exporter.clear()
    per_call_us(guard, tools, 10, 1, lambda: None)  # what was recorded: one turn and ten steps
    spans = len(exporter.get_finished_spans())
    tracer_provider.shutdown()
    meter_provider.shutdown()
    return {
        "off_us": round(off, 3),
        "empty_observer_us": round(observer, 3),
        "noop_api_us": round(noop, 3),
        "sdk_us": round(sdk, 3),
        "empty_observer_added_us": round(observer - off, 3),
        "noop_api_added_us": round(noop - off, 3),
        "sdk_added_us": round(sdk - noop, 3),
        "sdk_over_noop_ratio": round(sdk / noop, 3),
        "spans_per_10_calls": spans,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=4000, help="guarded calls measured per configuration")
    args = parser.parse_args(argv)
    result = measure(args.calls)
    print_table(
        [("configuration", "<34"), ("µs per call", ">12")],
        [
            ("telemetry off", f"{result['off_us']:.2f}"),
            ("telemetry off, an empty observer", f"{result['empty_observer_us']:.2f}"),
            ("telemetry on, no SDK (no-op API)", f"{result['noop_api_us']:.2f}"),
            ("telemetry on, SDK + in-memory", f"{result['sdk_us']:.2f}"),
        ],
    )
    print(
        f"no-op API adds {result['noop_api_added_us']:.2f} µs to a call (the core's observer hooks alone: "
        f"{result['empty_observer_added_us']:.2f} µs); the SDK adds {result['sdk_added_us']:.2f} µs more "
        f"({result['sdk_over_noop_ratio']:.2f}x the no-op API)"
    )
    write_results("telemetry", {"calls": args.calls, "results": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
