"""What agentguard's LangChain middleware costs: one scripted ``create_agent`` run of 20 tool calls, with and
without ``AgentGuardMiddleware``, in the same process.

    python benchmarks/langchain_overhead.py [--latencies 0,20] [--runs 60] [--latency-runs 12] [--calls 20]

Three agents share the same scripted chat model and the same LangChain tools:

``bare``     no middleware;
``noop``     a middleware whose hooks only call the handler: what LangChain itself charges for *any*
             middleware with ``wrap_tool_call`` / ``wrap_model_call`` / ``before_agent`` / ``after_agent``
             (it wraps each hook call in a LangSmith ``traceable``, and each agent hook is a graph node).
             Its hooks are the guarded one's, handed to ``create_agent`` the same way (see
             ``NoopMiddleware``), so that guarded minus noop is what agentguard itself does;
``guarded``  ``AgentGuardMiddleware`` under the support agent's spec (``examples/support-agent/agent.yaml``):
             every call goes through the capability, short-circuit and CEL restriction checks, and the input
             and output guardrails run once per run.

Each agent runs at each model latency of ``--latencies`` (milliseconds per model reply):

``0``   the scripted model answers at once. This measures LangGraph's own loop, about 1 ms per model call and
        tool call, and is the worst case for any middleware: LangChain's no-op middleware alone costs more than
        5 % of it (about 1.1x), so the 1.05x target cannot be met here by anything that uses LangChain's
        hooks. What agentguard itself adds is reported as CPU microseconds per tool call (guarded minus noop,
        the run's own work such as opening the engagement and the guardrails included, spread over its calls).
``20``  each reply takes 20 ms, ten to fifty times faster than a hosted model's tool-calling turn: the
        fastest agent run the target is about. (A pause lets the CPU caches cool, so every step costs more
        after it than in the zero-latency loop; that is measured too.)

The tool sequence follows the Thue-Morse word over two tools, so it never repeats a block three times and the
spec's ``short_circuit: 3`` never stops it. Runs are interleaved to spread machine noise evenly; the table
gives medians and minimums, sync (``invoke``) and async (``ainvoke``), and the result goes to
``benchmarks/results/langchain.json``. Target: guarded <= 1.05x bare wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import print_table, write_results
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.demo import lookup_order, send_email  # the demo's support tools
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langsmith.utils import tracing_is_enabled as langsmith_tracing

from agentguard import Guard

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "support-agent" / "agent.yaml"
TARGET_RATIO = 1.05
Sample = tuple[float, float]
"""(wall seconds, process CPU seconds) of one run."""
PAYLOAD = {"messages": [{"role": "user", "content": "Check every open order and tell the team."}]}


class NoopMiddleware(AgentMiddleware):
    """The same hooks as AgentGuardMiddleware, doing nothing: LangChain's own cost of a middleware.

    The same hooks, handed to ``create_agent`` the same way: AgentGuardMiddleware gives it its async wrap
    hooks as plain functions that return their coroutine when LangSmith tracing is off (LangSmith's
    ``traceable`` runs a coroutine function's setup and teardown in worker threads, about 180 us a hook
    call), so this one does too. Otherwise the pair compares LangSmith's thread hops, not agentguard's work.
    """

    def __init__(self) -> None:
        super().__init__()
        if not langsmith_tracing():
            tool_hook, model_hook = self.awrap_tool_call, self.awrap_model_call
            self.awrap_tool_call = lambda request, handler: tool_hook(request, handler)
            self.awrap_model_call = lambda request, handler: model_hook(request, handler)

    def before_agent(self, state: Any, runtime: Any) -> None:
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> None:
        return None

    def after_agent(self, state: Any, runtime: Any) -> None:
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        return None

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def script(n: int) -> list[Any]:
    steps: list[Any] = []
    for i in range(n):
        if bin(i).count("1") % 2:  # Thue-Morse: cube-free, so no short-circuit
            steps.append(calls(("send_email", {"to": "team@corp.com", "body": f"update {i}"})))
        else:
            steps.append(calls(("lookup_order", {"order_id": f"A-{i}"})))
    steps.append(answer("All orders checked and the team informed."))
    return steps


def guard() -> Guard:
    g = Guard.from_file(SPEC)
    g.register("pii-check", lambda text: {"ok": True})
    g.register("toxicity-check", lambda text: {"ok": True, "score": 0.0})
    return g


class Subject:
    def __init__(self, n: int, middleware: Any, latency_ms: float = 0.0) -> None:
        self.n = n
        self.model = ScriptedChatModel(script=script(n), latency_ms=latency_ms)
        self.middleware = middleware
        self.agent: Any = create_agent(
            self.model, tools=[lookup_order, send_email], middleware=[middleware] if middleware else []
        )

    def check(self, result: dict[str, Any]) -> None:
        tool_messages = [m for m in result["messages"] if m.type == "tool"]
        if len(tool_messages) != self.n or any(m.status != "success" for m in tool_messages):
            raise RuntimeError("the benchmark run did not make every tool call successfully")

    def run(self) -> Sample:
        self.model.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        result = self.agent.invoke(PAYLOAD, context={"user_id": "bench"})
        sample = (time.perf_counter() - wall, time.process_time() - cpu)
        self.check(result)
        return sample

    async def arun(self) -> Sample:
        self.model.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        result = await self.agent.ainvoke(PAYLOAD, context={"user_id": "bench"})
        sample = (time.perf_counter() - wall, time.process_time() - cpu)
        self.check(result)
        return sample


def interleave(
    subjects: dict[str, Subject], runs: int, warmup: int, one: Callable[[Subject], Sample]
) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {name: [] for name in subjects}
    order = list(subjects.items())
    for _ in range(warmup):
        for _, subject in order:
            one(subject)
    gc.collect()
    for i in range(runs):
        for name, subject in order if i % 2 == 0 else reversed(order):
            samples[name].append(one(subject))
    return samples


async def ainterleave(subjects: dict[str, Subject], runs: int, warmup: int) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {name: [] for name in subjects}
    order = list(subjects.items())
    run: Callable[[Subject], Awaitable[Sample]] = Subject.arun
    for _ in range(warmup):
        for _, subject in order:
            await run(subject)
    gc.collect()
    for i in range(runs):
        for name, subject in order if i % 2 == 0 else reversed(order):
            samples[name].append(await run(subject))
    return samples


def summarise(samples: dict[str, list[Sample]], n: int) -> dict[str, float]:
    wall = {k: statistics.median(w for w, _ in v) * 1000 for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) * 1000 for k, v in samples.items()}
    low = {k: min(w for w, _ in v) * 1000 for k, v in samples.items()}
    out: dict[str, float] = {}
    for agent in ("bare", "noop", "guarded"):
        out[f"{agent}_median_ms"] = round(wall[agent], 3)
        out[f"{agent}_min_ms"] = round(low[agent], 3)
        out[f"{agent}_cpu_median_ms"] = round(cpu[agent], 3)
    out["ratio_guarded_vs_bare"] = round(wall["guarded"] / wall["bare"], 4)
    out["ratio_noop_vs_bare"] = round(wall["noop"] / wall["bare"], 4)
    out["ratio_guarded_vs_noop"] = round(wall["guarded"] / wall["noop"], 4)
    # The fastest run of each agent is the least disturbed by the machine: a steadier ratio than medians'.
    out["min_ratio_guarded_vs_bare"] = round(low["guarded"] / low["bare"], 4)
    out["min_ratio_noop_vs_bare"] = round(low["noop"] / low["bare"], 4)
    out["cpu_ratio_guarded_vs_bare"] = round(cpu["guarded"] / cpu["bare"], 4)
    out["cpu_ratio_guarded_vs_noop"] = round(cpu["guarded"] / cpu["noop"], 4)
    out["agentguard_cpu_us_per_tool_call"] = round((cpu["guarded"] - cpu["noop"]) * 1000 / n, 1)
    return out


def measure(n: int, latency: float, runs: int, warmup: int) -> dict[str, dict[str, float]]:
    guarded = AgentGuardMiddleware(guard())
    subjects = {
        "bare": Subject(n, None, latency),
        "noop": Subject(n, NoopMiddleware(), latency),
        "guarded": Subject(n, guarded, latency),
    }
    results = {
        "sync": summarise(interleave(subjects, runs, warmup, Subject.run), n),
        "async": summarise(asyncio.run(ainterleave(subjects, runs, warmup)), n),
    }
    last = guarded.last_engagement
    if last is None or last.view()["history"]["_total"] != n:
        raise RuntimeError("the guarded runs did not record every call")
    return results


def report(n: int, latency: float, runs: int, results: dict[str, dict[str, float]]) -> None:
    model = f"{latency:g} ms per model reply" if latency else "zero-latency"
    print(f"{runs} interleaved runs of {n} tool calls each, {model} scripted model\n")
    columns = [
        ("mode", "<6"),
        ("agent", "<8"),
        ("wall median", ">12"),
        ("wall min", ">9"),
        ("CPU median", ">11"),
        ("wall vs bare", ">13"),
    ]
    for index, (mode, r) in enumerate(results.items()):
        print_table(
            columns,
            (
                (
                    mode,
                    agent,
                    f"{r[f'{agent}_median_ms']:.2f} ms",
                    f"{r[f'{agent}_min_ms']:.2f} ms",
                    f"{r[f'{agent}_cpu_median_ms']:.2f} ms",
                    f"{r[f'{agent}_median_ms'] / r['bare_median_ms']:.3f}x",
                )
                for agent in ("bare", "noop", "guarded")
            ),
            sep=" ",
            header=index == 0,
        )
        verdict = "meets" if r["ratio_guarded_vs_bare"] <= TARGET_RATIO else "misses"
        print(
            f"{mode:<6} guarded/bare {r['ratio_guarded_vs_bare']:.3f}x wall, {r['cpu_ratio_guarded_vs_bare']:.3f}x CPU "
            f"({verdict} {TARGET_RATIO}x), fastest runs {r['min_ratio_guarded_vs_bare']:.3f}x; "
            f"LangChain's own middleware cost (noop/bare) {r['ratio_noop_vs_bare']:.3f}x; "
            f"guarded/noop {r['cpu_ratio_guarded_vs_noop']:.3f}x CPU = "
            f"{r['agentguard_cpu_us_per_tool_call']:.0f} us per tool call\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--latencies", default="0,20", help="model reply latencies in ms, comma-separated")
    parser.add_argument("--runs", type=int, default=60, help="runs per agent at zero latency")
    parser.add_argument("--latency-runs", type=int, default=12, help="runs per agent with a model latency")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    n = args.calls
    by_latency: dict[str, dict[str, dict[str, float]]] = {}
    for latency in (float(x) for x in args.latencies.split(",")):
        runs = args.latency_runs if latency else args.runs
        results = measure(n, latency, runs, args.warmup)
        report(n, latency, runs, results)
        by_latency[f"{latency:g}"] = results
    write_results(
        "langchain",
        {
            "tool_calls_per_run": n,
            "runs": {"zero_latency": args.runs, "with_latency": args.latency_runs},
            "targets": {"ratio_guarded_vs_bare": TARGET_RATIO},
            "results_by_model_latency_ms": by_latency,
        },
    )


if __name__ == "__main__":
    main()
