"""Instructions per tool call through the LangChain tool hook, counted by valgrind (callgrind): a measure the
machine's noise cannot move.

    .venv/bin/python benchmarks/langchain_instructions.py [--calls 400] [--jobs 2]

``langchain_overhead.py`` times the tool hook in CPU µs, the target's own unit, but on a shared 2-core VM
those figures move by up to 3x between days. Instruction counts repeat, so this script settles what a change
does to the hook: the same workload (``HookBench``: the hooks called as LangGraph's ToolNode calls them, runs
of 20 calls, each run in an engagement the middleware's ``before_agent`` opens and its ``after_agent`` closes),
one row per process under ``valgrind --tool=callgrind``, sync and async:

``noop``     ``NoopMiddleware``'s hook: the handler alone (the tool's run through LangChain);
``core``     ``Guard.call`` / ``acall`` around the same handler: the core pipeline;
``guarded``  ``AgentGuardMiddleware``'s hook.

Each row runs twice, after the same set-up and warm-up (garbage collection then disabled, so that the counts
repeat): once with ``--calls`` calls (``--calls`` / 20 runs) and once with the same runs opened and closed but
none of their calls made; the difference divided by ``--calls`` is the cost of one call (with the share of a
run's closing that grows with its calls, which the CPU timing leaves out). Only that part is counted: the
process starts with callgrind's instrumentation off (importing LangChain under it takes two minutes), the
parent turns it on (``callgrind_control -i on``) once the warm-up is done, and the child leaves with
``os._exit`` (no interpreter teardown). agentguard's cost per tool call is ``guarded - noop``; of it,
``core - noop`` is the core's guarded call and ``guarded - core`` the adapter's own work. Processes run
``--jobs`` at a time (instruction counts do not depend on it), with ``PYTHONHASHSEED=0``. Each child prints
where it imported ``agentguard`` and ``agentguard_langchain`` from (the table names them), so that another
checkout can be measured with ``PYTHONPATH``. Needs ``valgrind`` (Debian package); skips with a message
without it. Writes ``benchmarks/results/langchain_instructions.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import print_table, write_results

ROWS = ("noop", "core", "guarded")
"""``langchain_overhead.HOOK_ROWS`` (not imported here: that module imports LangChain)."""
MODES = ("sync", "async")
RUN = 20
"""Tool calls per run: ``langchain_overhead``'s default ``--calls``."""
WARMUP = 10
"""Runs before the count starts."""


def workload(mode: str, row: str, runs: int, calls: int) -> None:
    """What runs under valgrind: set up, warm up, wait for the parent to turn instrumentation on, then make
    ``runs`` runs of ``calls`` calls each (``RUN`` or none) through ``row``'s hook."""
    import agentguard_langchain
    from langchain_overhead import HookBench

    import agentguard

    bench = HookBench(RUN)
    loop = asyncio.new_event_loop()

    def run(made: int | None) -> None:
        if mode == "sync":
            bench.round((row,), made)
        else:
            loop.run_until_complete(bench.around((row,), made))

    for _ in range(WARMUP):
        run(None)
    gc.collect()
    gc.disable()
    print(agentguard.__file__, agentguard_langchain.__file__, flush=True)
    sys.stdin.readline()  # the parent answers once callgrind counts
    for _ in range(runs):
        run(calls)
    os._exit(0)


def instructions(mode: str, row: str, runs: int, calls: int) -> tuple[int, str]:
    """The instructions the child's counted part ran, and where it imported the code under test from."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={Path(tmp) / 'callgrind.out'}",
            sys.executable,
            __file__,
            "--workload",
            mode,
            row,
            str(runs),
            str(calls),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        with subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        ) as child:
            assert child.stdout is not None
            code = child.stdout.readline().strip()
            if code:
                subprocess.run(
                    ["callgrind_control", "-i", "on", str(child.pid)], capture_output=True, check=True
                )
            _, log = child.communicate("go\n")
    match = re.search(r"Collected : (\d+)", log)
    if not code or child.returncode != 0 or match is None:
        raise RuntimeError(f"{mode} {row}: no instruction count in valgrind's output:\n{log[-2000:]}")
    return int(match.group(1)), code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=400, help=f"counted calls per row, a multiple of {RUN}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind processes at a time")
    parser.add_argument(
        "--workload", nargs=4, metavar=("MODE", "ROW", "RUNS", "CALLS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.workload:
        mode, row, runs, calls = args.workload
        workload(mode, row, int(runs), int(calls))
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 0
    if args.calls <= 0 or args.calls % RUN:
        parser.error(f"--calls must be a positive multiple of {RUN}")
    n, runs = args.calls, args.calls // RUN
    started = time.perf_counter()
    configurations = [(mode, row, calls) for calls in (RUN, 0) for mode in reversed(MODES) for row in ROWS]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {c: pool.submit(instructions, c[0], c[1], runs, c[2]) for c in configurations}
        counted = {c: future.result() for c, future in futures.items()}
    code = {where for _, where in counted.values()}
    if len(code) != 1:
        raise RuntimeError(f"the processes imported different code: {code}")
    results: dict[str, dict[str, int]] = {}
    for mode in MODES:
        per_call = {row: (counted[mode, row, RUN][0] - counted[mode, row, 0][0]) / n for row in ROWS}
        results[mode] = {f"{row}_instructions": round(per_call[row]) for row in ROWS} | {
            "agentguard_instructions_per_tool_call": round(per_call["guarded"] - per_call["noop"]),
            "core_call_instructions": round(per_call["core"] - per_call["noop"]),
            "adapter_instructions": round(per_call["guarded"] - per_call["core"]),
        }
    agentguard_file, langchain_file = code.pop().split()
    print(f"code measured: {agentguard_file}, {langchain_file}")
    print(
        f"{n} tool calls per row in runs of {RUN}, after {WARMUP} runs of warm-up (instructions per tool call)\n"
    )
    columns = [
        ("mode", "<6"),
        ("noop", ">10"),
        ("core", ">10"),
        ("guarded", ">10"),
        ("guarded-noop", ">13"),
        ("core-noop", ">10"),
        ("guarded-core", ">13"),
    ]
    print_table(
        columns,
        (
            (
                mode,
                *(
                    f"{r[key]:,}"
                    for key in (
                        "noop_instructions",
                        "core_instructions",
                        "guarded_instructions",
                        "agentguard_instructions_per_tool_call",
                        "core_call_instructions",
                        "adapter_instructions",
                    )
                ),
            )
            for mode, r in results.items()
        ),
        sep=" ",
    )
    print(
        "\nagentguard's instructions per tool call = guarded - noop; of them, core-noop is the core's "
        f"Guard.call and guarded-core the adapter's own work ({time.perf_counter() - started:.0f} s)"
    )
    write_results(
        "langchain_instructions",
        {
            "calls": n,
            "calls_per_run": RUN,
            "warmup_runs": WARMUP,
            "agentguard_instructions_per_tool_call": {
                mode: r["agentguard_instructions_per_tool_call"] for mode, r in results.items()
            },
            "tool_hook_instructions_per_tool_call": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
