"""Start-up cost: what a newcomer waits for before the first line of their own code runs.

    .venv/bin/python benchmarks/startup.py [--runs 15]

Prints a table and writes ``benchmarks/results/startup.json``. Each command runs as a fresh process, the
commands interleaved round by round (like ``hyperfine``'s repeated runs, but mixed, so a busy neighbour on a
shared machine slows all of them alike rather than one):

1. ``python -c pass``: the interpreter alone, the floor every other line stands on;
2. ``import agentguard``: the package (its names are loaded on first use);
3. ``from agentguard import Guard``: the facade with the pipeline, spec loader and telemetry it needs;
4. ``agentguard --help``: the console script listing its subcommands;
5. ``agentguard validate``: checking the example spec (loader, CEL compile);
6. ``scripts/setup``: on an installed tree (checks a stamp; reinstalls only when a pyproject.toml changed).

Reported per command: median, fastest and slowest wall time in ms, and the median less the bare interpreter's.
Where the time goes inside one import: ``.venv/bin/python -X importtime -c "import agentguard"``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import print_table, write_results

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import agentguard": [sys.executable, "-c", "import agentguard"],
    "from agentguard import Guard": [sys.executable, "-c", "from agentguard import Guard"],
    "agentguard --help": [str(BIN / "agentguard"), "--help"],
    "agentguard validate": [str(BIN / "agentguard"), "validate", "examples/support-agent/agent.yaml"],
    "scripts/setup (installed)": [str(ROOT / "scripts" / "setup")],
}


def _run_ms(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15, help="runs of each command (default: 15)")
    args = parser.parse_args()

    for command in COMMANDS.values():  # warm the file cache and byte-code; not measured
        _run_ms(command)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            times[name].append(_run_ms(command))

    floor = statistics.median(times["python -c pass"])
    results = {
        name: {
            "median_ms": round(statistics.median(runs), 1),
            "min_ms": round(min(runs), 1),
            "max_ms": round(max(runs), 1),
            "over_bare_python_ms": round(statistics.median(runs) - floor, 1),
        }
        for name, runs in times.items()
    }
    columns = [("command", "<30"), ("median ms", ">10"), ("min", ">8"), ("max", ">8"), ("- python", ">10")]
    print_table(
        columns,
        [
            (
                name,
                f"{r['median_ms']:.1f}",
                f"{r['min_ms']:.1f}",
                f"{r['max_ms']:.1f}",
                f"{r['over_bare_python_ms']:.1f}",
            )
            for name, r in results.items()
        ],
    )
    write_results("startup", {"runs": args.runs, "commands": results})


if __name__ == "__main__":
    main()
