"""What agentguard's OpenAI Agents SDK adapter costs: one scripted ``Runner.run`` of 20 tool calls, with and
without ``AgentGuard.wrap``, in the same process.

    python benchmarks/openai_agents_overhead.py [--runs 40] [--calls 20] [--latency 0]

Three agents share the same scripted model and the same function tools:

``bare``     the agent as written;
``noop``     every tool's ``on_invoke_tool`` wrapped by a function that only awaits the original, plus an input
             and an output guardrail that allow everything: what the SDK charges for the same interception
             points whatever they do;
``guarded``  ``AgentGuard(guard).wrap(agent)`` under the support agent's spec
             (``examples/support-agent/agent.yaml``), run inside an engagement with its run hooks: capability,
             short-circuit and CEL restriction checks on every call, guardrails once per run.

The tool sequence follows the Thue-Morse word over two tools, so ``short_circuit: 3`` never stops it. Runs
are interleaved (order reversed every other round), each ``Runner.run`` in its own ``asyncio.run`` (what
``Runner.run_sync`` does); the table gives medians and minimums; the result goes to
``benchmarks/results/openai_agents.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import print_table, thue_morse, write_results
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from agentguard import Guard

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "support-agent" / "agent.yaml"
AGENTS = ("bare", "noop", "guarded")
Sample = tuple[float, float]
"""(wall seconds, process CPU seconds) of one run."""


@function_tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "shipped"}


@function_tool
def send_email(to: str, body: str) -> str:
    """Email someone."""
    return f"sent to {to}"


def script(n: int) -> list[Any]:
    steps: list[Any] = [
        calls(("send_email", {"to": "team@corp.com", "body": f"update {i}"}))
        if name == "tool-b"
        else calls(("lookup_order", {"order_id": f"A-{i}"}))
        for i, name in enumerate(thue_morse(n))
    ]
    return [*steps, answer("All orders checked and the team informed.")]


def guard() -> Guard:
    g = Guard.from_file(SPEC)
    g.register("pii-check", lambda text: {"ok": True})
    g.register("toxicity-check", lambda text: {"ok": True, "score": 0.0})
    return g


async def _allow(*_: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


def _noop_tool(tool: FunctionTool) -> FunctionTool:
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        return await invoke(ctx, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class Subject:
    """One agent, run again and again on a fresh copy of the script."""

    def __init__(self, kind: str, n: int, latency_ms: float) -> None:
        self.kind, self.n, self.latency_ms = kind, n, latency_ms
        tools = [lookup_order, send_email]
        self.guarded = AgentGuard(guard()) if kind == "guarded" else None
        if kind == "noop":
            self.extra: dict[str, Any] = {
                "tools": [_noop_tool(t) for t in tools],
                "input_guardrails": [InputGuardrail(guardrail_function=_allow, run_in_parallel=False)],
                "output_guardrails": [OutputGuardrail(guardrail_function=_allow)],
            }
        else:
            self.extra = {"tools": tools}

    def _agent(self) -> Agent[Any]:
        agent = Agent(
            name="support", model=ScriptedModel(script(self.n), latency_ms=self.latency_ms), **self.extra
        )
        return self.guarded.wrap(agent) if self.guarded is not None else agent

    def _check(self, result: Any) -> None:
        outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        if len(outputs) != self.n or any("denied" in str(o) for o in outputs):
            raise RuntimeError(f"{self.kind}: the benchmark run did not make every tool call successfully")

    async def arun(self) -> Sample:
        agent = self._agent()
        hooks = self.guarded.hooks if self.guarded is not None else None
        wall, cpu = time.perf_counter(), time.process_time()
        if self.guarded is not None:
            with self.guarded.guard.engagement():
                result = await Runner.run(agent, "Check every open order.", hooks=hooks, max_turns=self.n + 2)
        else:
            result = await Runner.run(agent, "Check every open order.", max_turns=self.n + 2)
        sample = (time.perf_counter() - wall, time.process_time() - cpu)
        self._check(result)
        return sample

    def run(self) -> Sample:
        return asyncio.run(self.arun())


def interleave(subjects: dict[str, Subject], runs: int, warmup: int, one: Callable[[Subject], Sample]) -> Any:
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


def summarise(samples: dict[str, list[Sample]], n: int) -> dict[str, float]:
    wall = {k: statistics.median(w for w, _ in v) * 1000 for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) * 1000 for k, v in samples.items()}
    low = {k: min(w for w, _ in v) * 1000 for k, v in samples.items()}
    out: dict[str, float] = {}
    for agent in AGENTS:
        out[f"{agent}_median_ms"] = round(wall[agent], 3)
        out[f"{agent}_min_ms"] = round(low[agent], 3)
        out[f"{agent}_cpu_median_ms"] = round(cpu[agent], 3)
    out["ratio_guarded_vs_bare"] = round(wall["guarded"] / wall["bare"], 4)
    out["ratio_noop_vs_bare"] = round(wall["noop"] / wall["bare"], 4)
    out["min_ratio_guarded_vs_bare"] = round(low["guarded"] / low["bare"], 4)
    out["agentguard_cpu_us_per_tool_call"] = round((cpu["guarded"] - cpu["noop"]) * 1000 / n, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.0, help="ms per model reply")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    set_tracing_disabled(True)
    subjects = {kind: Subject(kind, args.calls, args.latency) for kind in AGENTS}
    results = {"async": summarise(interleave(subjects, args.runs, args.warmup, Subject.run), args.calls)}
    print(f"{args.runs} interleaved runs of {args.calls} tool calls, {args.latency:g} ms per model reply\n")
    columns = [
        ("agent", "<8"),
        ("wall median", ">12"),
        ("wall min", ">10"),
        ("CPU median", ">11"),
        ("vs bare", ">8"),
    ]
    r = results["async"]
    print_table(
        columns,
        (
            (
                agent,
                f"{r[f'{agent}_median_ms']:.2f} ms",
                f"{r[f'{agent}_min_ms']:.2f} ms",
                f"{r[f'{agent}_cpu_median_ms']:.2f} ms",
                f"{r[f'{agent}_median_ms'] / r['bare_median_ms']:.3f}x",
            )
            for agent in AGENTS
        ),
        sep=" ",
    )
    print(
        f"\nagentguard's own CPU per tool call (guarded - noop): {r['agentguard_cpu_us_per_tool_call']:.0f} us"
    )
    write_results(
        "openai_agents",
        {"calls": args.calls, "runs": args.runs, "latency_ms": args.latency, "results": results},
    )


if __name__ == "__main__":
    main()
