"""Instructions per guarded call, counted by valgrind (callgrind): a measure the machine's noise cannot move.

    .venv/bin/python benchmarks/core_instructions.py [--calls 2000]

The wall-clock benchmark (``core.py``) is the target's own unit, but on a shared 2-core VM its medians move by
+-30 % between runs. Instruction counts repeat (with ``PYTHONHASHSEED=0``, so that dict layouts do, and garbage
collection off in the measured process), so this
script settles the *ratios*: each configuration runs in its own process under ``valgrind --tool=callgrind``,
once with ``--calls`` guarded calls and once with none (same set-up, same history), and the difference divided
by ``--calls`` is the cost of one call. Configurations: the bare functions; ``core.HandWritten``, the same
checks written by hand (the denominator of ``core.py``'s ratio, here counted exactly: instructions leave out
the cache and branch misses a larger body of code adds to wall-clock time), and the same with the guard's own
incremental loop detector in place of its regex (the guard dropped the regex for that detector, and the regex
was most of the hand-written cost: this row shows what the ratio is against a baseline that shares the
speed-up); guarded with the ``recent``/``user`` assertions at 10 and 10,000 earlier calls; guarded with
``history._total`` at 10 and 10,000. Needs ``valgrind`` (Debian package); skips with a message without it.
Writes ``benchmarks/results/core_instructions.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import RECENT, print_table, thue_morse, tool_a, tool_b, write_results

HISTORY = "history._total < 1000000"
WARMUP = 200


def workload(earlier: int, calls: int, mode: str) -> None:
    """What runs under valgrind: set up, fill ``earlier`` calls, warm up, then make ``calls`` calls.

    Garbage collection is off: a collection falls into one of the two runs a count is the difference of, or
    not, as the allocations before it happen to add up (it moved a count by a third between runs)."""
    from core import HandWritten, build

    from agentguard import User

    gc.disable()

    guard, tools = build("cel-expr-python", HISTORY if mode == "history" else RECENT)
    table = {"tool-a": tool_a, "tool-b": tool_b} if mode == "bare" else tools
    sequence = thue_morse(earlier + WARMUP + calls)
    if mode in ("hand", "hand-incremental"):
        tables = {"tool-a": tool_a, "tool-b": tool_b}
        hand = HandWritten(guard, tables, User(id="u1"), incremental=mode == "hand-incremental")
        for name in sequence:
            hand.call(name, 1)
        return
    with guard.engagement(user=User(id="u1")) as eng:
        state = eng.state
        for name in sequence[:earlier]:
            state.complete_call(state.begin_call(name, {"x": 1}), {"ok": True})
        for name in sequence[earlier:]:
            table[name](x=1)


def instructions(earlier: int, calls: int, mode: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--workload",
            str(earlier),
            str(calls),
            mode,
        ]
        # A fixed hash seed: string hashes decide dict and set layouts, and so move the counts between runs.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        log = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stderr
    match = re.search(r"Collected : (\d+)", log)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{log[-2000:]}")
    return int(match.group(1))


def per_call(earlier: int, calls: int, mode: str) -> float:
    return (instructions(earlier, calls, mode) - instructions(earlier, 0, mode)) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--workload", nargs=3, metavar=("EARLIER", "CALLS", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        earlier, calls, mode = args.workload
        workload(int(earlier), int(calls), mode)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 0
    n = args.calls
    bare = per_call(10, n, "bare")
    hand = per_call(10, n, "hand")
    incremental = per_call(10, n, "hand-incremental")
    recent = {k: per_call(k, n, "recent") for k in (10, 10_000)}
    history = {k: per_call(k, n, "history") for k in (10, 10_000)}
    rows = [
        ("bare functions", f"{bare:,.0f}", ""),
        ("hand-written, 10 earlier", f"{hand:,.0f}", ""),
        ("hand-written, incremental loops", f"{incremental:,.0f}", ""),
        ("recent/user, 10 earlier", f"{recent[10]:,.0f}", f"{recent[10] / hand:.3f}x hand"),
        ("  the same, against", "incremental loops", f"{recent[10] / incremental:.3f}x hand"),
        ("recent/user, 10,000 earlier", f"{recent[10_000]:,.0f}", f"{recent[10_000] / recent[10]:.3f}x"),
        ("history._total, 10 earlier", f"{history[10]:,.0f}", ""),
        (
            "history._total, 10,000 earlier",
            f"{history[10_000]:,.0f}",
            f"{history[10_000] / history[10]:.3f}x",
        ),
    ]
    print_table([("configuration", "<32"), ("instructions/call", ">18"), ("ratio", ">12")], rows)
    print("targets: <= 1.5x hand-written, recent/user 10k/10 <= 1.5x, history._total 10k/10 <= 3x")
    write_results(
        "core_instructions",
        {
            "calls": n,
            "bare_instructions_per_call": round(bare),
            "hand_written_instructions_per_call": round(hand),
            "ratio_vs_hand_written": round(recent[10] / hand, 4),
            "hand_written_incremental_instructions_per_call": round(incremental),
            "ratio_vs_hand_written_incremental": round(recent[10] / incremental, 4),
            "recent_user_10": round(recent[10]),
            "recent_user_10k": round(recent[10_000]),
            "recent_user_ratio": round(recent[10_000] / recent[10], 4),
            "history_total_10": round(history[10]),
            "history_total_10k": round(history[10_000]),
            "history_total_ratio": round(history[10_000] / history[10], 4),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
