"""What agentguard's LangChain middleware costs per tool call, and in a whole ``create_agent`` run of 20 tool
calls, against a do-nothing middleware, in the same process.

    python benchmarks/langchain_overhead.py [--hook-rounds 300] [--latencies 0,20] [--runs 60]
        [--latency-runs 12] [--calls 20] [--hooks-only]

**The tool hook** (the reported figure, target: at most 40 µs of CPU per tool call). Three rows, each a
``wrap_tool_call`` / ``awrap_tool_call`` called as LangGraph's ToolNode calls it: a real ``ToolCallRequest``
(the call, the real tool, the graph state, a ``ToolRuntime``) and ToolNode's own handler, which runs the tool
(see ``HookBench``). Each round is one run's calls, in an engagement the middleware's ``before_agent`` opened,
the rows taking turns call by call:

``noop``     ``NoopMiddleware``'s hook: the handler alone (the tool's run through LangChain);
``core``     ``Guard.call`` / ``acall`` alone on the same inputs around the same handler: the core pipeline;
``guarded``  ``AgentGuardMiddleware``'s hook.

agentguard's CPU per tool call is ``guarded - noop`` (medians of the rounds' CPU per call); of it,
``core - noop`` is the core's guarded call and ``guarded - core`` the adapter's own work. ``of noop`` is
``guarded - noop`` as a share of ``noop``: on a machine whose speed moves from day to day, the figure that
stays comparable (40 µs was 17.9 % of the sync do-nothing hook when it took 224 µs).

**Whole runs.** Three agents share the same scripted chat model and the same LangChain tools:

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

``0``   the scripted model answers at once. This measures LangGraph's own loop, about 1.6 ms per tool call,
        and is the worst case for any middleware: LangChain's no-op middleware alone costs more than
        5 % of it (about 1.1x), so the 1.05x target cannot be met here by anything that uses LangChain's
        hooks. The runs' CPU difference per tool call (guarded minus noop, the run's own work such as opening
        the engagement and the guardrails included) is printed too, but LangGraph's loop makes it noisier
        than what it measures: the tool hook's rows above are the measure of agentguard's own work.
``20``  each reply takes 20 ms, ten to fifty times faster than a hosted model's tool-calling turn: the
        fastest agent run the target is about. (A pause lets the CPU caches cool, so every step costs more
        after it than in the zero-latency loop; that is measured too.)

The tool sequence follows the Thue-Morse word over two tools, so it never repeats a block three times and the
spec's ``short_circuit: 3`` never stops it. Runs are interleaved to spread machine noise evenly; the table
gives medians and minimums, sync (``invoke``) and async (``ainvoke``), and the result goes to
``benchmarks/results/langchain.json``. Targets: at most 40 µs of agentguard CPU per tool call (the tool hook),
guarded <= 1.05x bare wall time (whole runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from _common import print_table, write_results
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.demo import lookup_order, send_email  # the demo's support tools
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolNode, ToolRuntime
from langgraph.runtime import Runtime
from langsmith.utils import tracing_is_enabled as langsmith_tracing

from agentguard import Guard

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "support-agent" / "agent.yaml"
TARGET_RATIO = 1.05
TARGET_US = 40.0
"""agentguard's CPU per tool call over a do-nothing middleware, measured on the tool hook itself."""
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
    # The whole runs' CPU difference per tool call: LangGraph's loop (about 1.6 ms a tool call) dominates it,
    # so its noise is larger than what it measures; the tool hook's own measure is the steady one.
    out["run_cpu_us_per_tool_call_guarded_vs_noop"] = round((cpu["guarded"] - cpu["noop"]) * 1000 / n, 1)
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


# -- the tool hook alone ---------------------------------------------------------------------------------------

HOOK_ROWS = ("noop", "core", "guarded")
"""``NoopMiddleware``'s tool hook, ``Guard.call`` alone around the same handler, ``AgentGuardMiddleware``'s."""

SPEC_NAMES = {"lookup_order": "lookup-order", "send_email": "send-email"}
"""LangChain tool name -> the spec's capability (what the middleware's default mapping gives)."""

Hook = Callable[[ToolCallRequest, Callable[[ToolCallRequest], Any]], Any]


class HookBench:
    """Each row's ``wrap_tool_call`` / ``awrap_tool_call`` called as LangGraph's ToolNode calls it.

    ToolNode builds a ``ToolCallRequest`` (the call, the real tool, the state, a ``ToolRuntime``) and hands
    the hook ``execute``: a function that runs the tool through ``ToolNode._execute_tool_sync`` / ``_async``
    (argument injection, ``tool.invoke``, the ``ToolMessage``). The benchmark does the same, for the agent's
    sequence of calls, so that the rows differ only in their hook. A round is one run's calls for each row,
    the guarded and core rows each in an engagement of their own, opened by the middleware's ``before_agent``
    and closed by its ``after_agent`` outside the timed calls (those are graph nodes of their own, once per
    run). The rows take turns call by call, in every order in turn, so that a millisecond's disturbance of the
    machine, and the CPU caches one row leaves to the next, fall on all of them alike.

    ``core`` is ``Guard.call`` / ``acall`` alone, in the same kind of engagement, on the same inputs and call
    id, around a function that runs the same handler and returns the tool's decoded output: the part of the
    guarded hook that is the core's pipeline. ``guarded - core`` is the adapter's own share.
    """

    def __init__(self, calls: int) -> None:
        self.middleware = AgentGuardMiddleware(guard())
        self.guard = self.middleware.guard
        self.noop = NoopMiddleware()
        self.node = ToolNode([lookup_order, send_email])
        self.steps: list[AIMessage] = [step for step in script(calls) if step.tool_calls]
        self.context = {"user_id": "bench"}
        self.runtime: Runtime[Any] = Runtime(context=self.context)
        self.human = HumanMessage(content=PAYLOAD["messages"][0]["content"], id="bench-input")
        self.config: Any = {}
        self.turns = 0
        """Calls made so far: which order of the rows the next one takes (see ``ORDERS``)."""
        self.outputs: dict[str, Any] = {}
        """Tool name -> the decoded output of its ``ToolMessage``: what the core row's function returns."""
        for request in self.requests({}):
            self.outputs.setdefault(request.tool_call["name"], json.loads(self.execute(request).content))

    def execute(self, request: ToolCallRequest) -> Any:
        """ToolNode's ``execute`` in a ``create_agent`` graph (whose state is a dict)."""
        return self.node._execute_tool_sync(request, "dict", self.config)

    async def aexecute(self, request: ToolCallRequest) -> Any:
        return await self.node._execute_tool_async(request, "dict", self.config)

    def requests(self, private: dict[str, Any]) -> list[ToolCallRequest]:
        """One ``ToolCallRequest`` per call, with the state a ToolNode hands it: the conversation up to the AI
        message that asked for the call, and the run's private keys (the engagement's id)."""
        out: list[ToolCallRequest] = []
        messages: list[Any] = [self.human]
        tools = list(self.node.tools_by_name.values())
        for step in self.steps:
            messages = [*messages, step]
            state = {"messages": messages, **private}
            call = step.tool_calls[0]
            runtime = ToolRuntime(
                state=state,
                context=self.context,
                config=self.config,
                stream_writer=lambda _: None,
                tool_call_id=call["id"],
                store=None,
                tools=tools,
            )
            out.append(ToolCallRequest(call, self.node.tools_by_name[call["name"]], state, runtime))
            messages = [*messages, ToolMessage(content="{}", tool_call_id=call["id"], name=call["name"])]
        return out

    # -- the core row: Guard.call alone ---------------------------------------------------------------------

    def core_hook(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = request.tool_call
        output = self.outputs[call["name"]]

        def run(**inputs: Any) -> Any:
            handler(request)
            return output

        return self.guard.call(SPEC_NAMES[call["name"]], call["args"], run, call_id=call["id"])

    async def acore_hook(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = request.tool_call
        output = self.outputs[call["name"]]

        async def run(**inputs: Any) -> Any:
            await handler(request)
            return output

        return await self.guard.acall(SPEC_NAMES[call["name"]], call["args"], run, call_id=call["id"])

    # -- one round ------------------------------------------------------------------------------------------

    def check(self, row: str, results: list[Any], engagement: Any) -> None:
        if row == "core":
            ok = all(isinstance(r, dict) for r in results)
        else:
            ok = all(isinstance(r, ToolMessage) and r.status == "success" for r in results)
        if not ok:
            raise RuntimeError(f"the {row} hook did not make every tool call successfully")
        if engagement is not None and engagement.view()["history"]["_total"] != len(results):
            raise RuntimeError(f"the {row} engagement did not record every call")

    def _hooks(self, asynchronous: bool) -> dict[str, Hook]:
        if asynchronous:
            return {
                "noop": self.noop.awrap_tool_call,
                "core": self.acore_hook,
                "guarded": self.middleware.awrap_tool_call,
            }
        return {
            "noop": self.noop.wrap_tool_call,
            "core": self.core_hook,
            "guarded": self.middleware.wrap_tool_call,
        }

    def _requests(self, row: str, update: dict[str, Any] | None) -> tuple[list[ToolCallRequest], Any]:
        """The row's requests in the run's state, and its engagement (``None`` for the noop row)."""
        if row == "noop":
            return self.requests({}), None
        return self.requests(dict(update or {})), self.middleware.last_engagement

    def round(self, rows: tuple[str, ...] = HOOK_ROWS, calls: int | None = None) -> dict[str, float]:
        """One run's calls through each row's sync hook, the rows taking turns call by call (so that what
        disturbs the machine for a millisecond disturbs them alike): row -> CPU µs per tool call.

        ``rows`` and ``calls`` (the run's first calls only; all of them by default) let
        ``langchain_instructions.py`` run a row alone, and a run's opening and closing without its calls."""
        hooks = self._hooks(asynchronous=False)
        states: dict[str, Any] = {row: {"messages": [self.human]} for row in rows}
        runs: dict[str, tuple[list[ToolCallRequest], Any]] = {}
        for row in rows:
            update = self.middleware.before_agent(states[row], self.runtime) if row != "noop" else None
            runs[row] = self._requests(row, update)
        elapsed = dict.fromkeys(rows, 0)
        results: dict[str, list[Any]] = {row: [] for row in rows}
        made = len(self.steps) if calls is None else calls
        for i in range(made):
            for row in _turn(self.turns + i, rows):
                request, engagement = runs[row][0][i], runs[row][1]
                hook, handler = hooks[row], self.execute
                with engagement.activate() if row == "core" else _NOT_ACTIVE:
                    start = time.process_time_ns()
                    result = hook(request, handler)
                    elapsed[row] += time.process_time_ns() - start
                results[row].append(result)
        for row in rows:
            self.check(row, results[row], runs[row][1])
            if row != "noop":
                states[row].update(_private(runs[row][0]))
                self.middleware.after_agent(states[row], self.runtime)
        self.turns += made
        return {row: elapsed[row] / 1000 / max(made, 1) for row in rows}

    async def around(self, rows: tuple[str, ...] = HOOK_ROWS, calls: int | None = None) -> dict[str, float]:
        hooks = self._hooks(asynchronous=True)
        states: dict[str, Any] = {row: {"messages": [self.human]} for row in rows}
        runs: dict[str, tuple[list[ToolCallRequest], Any]] = {}
        for row in rows:
            update = await self.middleware.abefore_agent(states[row], self.runtime) if row != "noop" else None
            runs[row] = self._requests(row, update)
        elapsed = dict.fromkeys(rows, 0)
        results: dict[str, list[Any]] = {row: [] for row in rows}
        made = len(self.steps) if calls is None else calls
        for i in range(made):
            for row in _turn(self.turns + i, rows):
                request, engagement = runs[row][0][i], runs[row][1]
                hook, handler = hooks[row], self.aexecute
                with engagement.activate() if row == "core" else _NOT_ACTIVE:
                    start = time.process_time_ns()
                    result = await hook(request, handler)
                    elapsed[row] += time.process_time_ns() - start
                results[row].append(result)
        for row in rows:
            self.check(row, results[row], runs[row][1])
            if row != "noop":
                states[row].update(_private(runs[row][0]))
                await self.middleware.aafter_agent(states[row], self.runtime)
        self.turns += made
        return {row: elapsed[row] / 1000 / max(made, 1) for row in rows}


_NOT_ACTIVE: AbstractContextManager[None] = nullcontext()


ORDERS = tuple(itertools.permutations(HOOK_ROWS))
"""The orders the rows take turns in, one call after another: every row follows every other equally often
(it may find some of the pipeline's code still in the CPU caches after the core row, or after the guarded)."""


def _turn(i: int, rows: tuple[str, ...] = HOOK_ROWS) -> tuple[str, ...]:
    order = ORDERS[i % len(ORDERS)]
    return order if rows == HOOK_ROWS else tuple(row for row in order if row in rows)


def _private(requests: list[ToolCallRequest]) -> dict[str, Any]:
    state = requests[0].state if requests else {}
    return {k: v for k, v in state.items() if k != "messages"}


def hook_rounds(bench: HookBench, rounds: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    """Rounds of every row, sync then async: mode -> row -> CPU µs per tool call, one value per round."""

    def collect(one: Callable[[], dict[str, float]]) -> dict[str, list[float]]:
        samples: dict[str, list[float]] = {row: [] for row in HOOK_ROWS}
        for _ in range(warmup):
            one()
        for _ in range(rounds):
            gc.collect()
            for row, value in one().items():
                samples[row].append(value)
        return samples

    loop = asyncio.new_event_loop()
    try:
        return {
            "sync": collect(bench.round),
            "async": collect(lambda: loop.run_until_complete(bench.around())),
        }
    finally:
        loop.close()


def hook_summary(samples: dict[str, list[float]]) -> dict[str, Any]:
    """Each row's median CPU µs per tool call, and the differences of those medians: what agentguard adds
    (guarded - noop), of it the core's ``Guard.call`` (core - noop) and the adapter's own work (guarded -
    core)."""
    median = {row: statistics.median(samples[row]) for row in HOOK_ROWS}
    added = median["guarded"] - median["noop"]
    out: dict[str, Any] = {f"{row}_cpu_us": round(median[row], 2) for row in HOOK_ROWS}
    out["agentguard_cpu_us_per_tool_call"] = round(added, 2)
    out["core_call_cpu_us"] = round(median["core"] - median["noop"], 2)
    out["adapter_cpu_us"] = round(median["guarded"] - median["core"], 2)
    out["meets_target"] = added <= TARGET_US
    # The share of the do-nothing hook agentguard adds, in the same run: what a machine whose speed moves
    # between runs (this one's do-nothing hook took 224 µs at one stop and 420-650 µs at another) leaves
    # comparable from one day to the next, where the µs are not.
    out["agentguard_share_of_noop"] = round(added / median["noop"], 4)
    return out


def report_hooks(calls: int, rounds: int, results: dict[str, dict[str, float]]) -> None:
    print(
        f"The tool hook alone: {rounds} interleaved rounds of {calls} tool calls per row, as ToolNode calls "
        "it (median CPU us per tool call; the tool's own run included in every row)\n"
    )
    columns = [
        ("mode", "<6"),
        ("noop", ">8"),
        ("core", ">8"),
        ("guarded", ">8"),
        ("guarded-noop", ">13"),
        ("core-noop", ">10"),
        ("guarded-core", ">13"),
        ("of noop", ">8"),
        ("target", ">8"),
    ]
    print_table(
        columns,
        (
            (
                mode,
                f"{r['noop_cpu_us']:.1f}",
                f"{r['core_cpu_us']:.1f}",
                f"{r['guarded_cpu_us']:.1f}",
                f"{r['agentguard_cpu_us_per_tool_call']:.1f}",
                f"{r['core_call_cpu_us']:.1f}",
                f"{r['adapter_cpu_us']:.1f}",
                f"{r['agentguard_share_of_noop']:.1%}",
                f"{'meets' if r['meets_target'] else 'misses'} {TARGET_US:g}",
            )
            for mode, r in results.items()
        ),
        sep=" ",
    )
    print(
        "\nagentguard CPU us per tool call = guarded - noop; of it, core-noop is the core's Guard.call and "
        "guarded-core the adapter's own work; 'of noop' is guarded - noop as a share of noop (comparable "
        "across days on a machine whose speed moves)\n"
    )


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
            f"guarded/noop {r['cpu_ratio_guarded_vs_noop']:.3f}x CPU "
            f"({r['run_cpu_us_per_tool_call_guarded_vs_noop']:.0f} us per tool call, within the runs' noise)\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--latencies", default="0,20", help="model reply latencies in ms, comma-separated")
    parser.add_argument("--runs", type=int, default=60, help="runs per agent at zero latency")
    parser.add_argument("--latency-runs", type=int, default=12, help="runs per agent with a model latency")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--hook-rounds", type=int, default=300, help="interleaved rounds of the tool hooks")
    parser.add_argument(
        "--hooks-only", action="store_true", help="only the tool hooks (prints; writes no results)"
    )
    args = parser.parse_args()
    n = args.calls
    hooks = {
        mode: hook_summary(samples)
        for mode, samples in hook_rounds(HookBench(n), args.hook_rounds, args.warmup).items()
    }
    report_hooks(n, args.hook_rounds, hooks)
    if args.hooks_only:
        return
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
            "runs": {
                "zero_latency": args.runs,
                "with_latency": args.latency_runs,
                "hook_rounds": args.hook_rounds,
            },
            "targets": {"agentguard_cpu_us_per_tool_call": TARGET_US, "ratio_guarded_vs_bare": TARGET_RATIO},
            "agentguard_cpu_us_per_tool_call": {
                mode: r["agentguard_cpu_us_per_tool_call"] for mode, r in hooks.items()
            },
            "tool_hook_cpu_us_per_tool_call": hooks,
            "results_by_model_latency_ms": by_latency,
        },
    )


if __name__ == "__main__":
    main()
