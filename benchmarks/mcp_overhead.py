"""What agentguard's MCP adapter adds per tool call: in process and through the proxy, against the same calls
unguarded, interleaved in one run.

    python benchmarks/mcp_overhead.py [--rounds 15] [--calls 40]

Six ways to make the same ``tools/call`` sequence (Thue-Morse over ``tool-a`` / ``tool-b`` under
:data:`_common.SPEC`, so ``short_circuit: 3`` is checked on every call and never fires):

``client bare`` / ``client guarded``  the SDK ``Client`` on an in-process ``MCPServer``, as is and wrapped in
                                      ``GuardedClient``;
``server bare`` / ``server guarded``  the same client on the server without / with ``GuardMiddleware``;
``stdio bare`` / ``stdio proxy``      the server in a subprocess over stdio, reached directly and through
                                      ``agentguard-mcp-proxy`` (one more process and stdio hop).

Rounds are interleaved (order reversed every other round); the table gives the median µs per call and what
the guarded variant adds over its bare twin; the result goes to ``benchmarks/results/mcp.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from _common import print_table, spec_text, thue_morse, tool_a, tool_b, write_results
from agentguard_mcp import GuardedClient, guard_server
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer

from agentguard import Guard, User

PAIRS = (("client bare", "client guarded"), ("server bare", "server guarded"), ("stdio bare", "stdio proxy"))
Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


def make_server() -> MCPServer:
    server = MCPServer("bench")
    server.tool(name="tool-a")(tool_a)
    server.tool(name="tool-b")(tool_b)
    return server


@asynccontextmanager
async def variants(spec: Path) -> AsyncIterator[dict[str, Call]]:
    """Every variant's ``call_tool``, connected; the guarded ones inside one long engagement each."""
    guard, server_guard = Guard.from_file(spec), Guard.from_file(spec)
    guarded_server = make_server()
    guard_server(guarded_server, server_guard)
    serve = [sys.executable, __file__, "--serve"]
    proxy = str(Path(sys.executable).parent / "agentguard-mcp-proxy")
    async with AsyncExitStack() as stack:
        enter = stack.enter_async_context
        plain = await enter(Client(make_server()))
        await enter(guard.engagement(user=User(id="u1")))
        calls: dict[str, Call] = {
            "client bare": plain.call_tool,
            "client guarded": GuardedClient(plain, guard).call_tool,
            "server bare": (await enter(Client(make_server()))).call_tool,
            "server guarded": (await enter(Client(guarded_server))).call_tool,
            "stdio bare": (
                await enter(Client(StdioServerParameters(command=serve[0], args=serve[1:])))
            ).call_tool,
            "stdio proxy": (
                await enter(
                    Client(StdioServerParameters(command=proxy, args=["--spec", str(spec), "--", *serve]))
                )
            ).call_tool,
        }
        yield calls


async def measure(rounds: int, n: int) -> dict[str, list[float]]:
    sequence = thue_morse(rounds * n)  # each variant continues the word: no round repeats the last
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "agent.yaml"
        spec.write_text(spec_text('recent["{name}"].inputs.x < 1000'))  # the proxy knows no user
        async with variants(spec) as calls:
            names = list(calls)
            for r in range(rounds):
                for name in names if r % 2 == 0 else reversed(names):
                    start = time.perf_counter()
                    for i, tool in enumerate(sequence[r * n : (r + 1) * n]):
                        result = await calls[name](tool, {"x": i})
                        assert not result.is_error, (name, result)
                    samples.setdefault(name, []).append((time.perf_counter() - start) / n * 1e6)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--serve", action="store_true", help="run the measured server over stdio (internal)")
    args = parser.parse_args()
    if args.serve:
        make_server().run("stdio")
        return
    samples = anyio.run(measure, args.rounds, args.calls)
    median = {name: statistics.median(values) for name, values in samples.items()}
    columns = [("variant", "<16"), ("µs/call", ">10"), ("added µs", ">10")]
    rows = []
    for bare, guarded in PAIRS:
        rows.append([bare, f"{median[bare]:.0f}", ""])
        rows.append([guarded, f"{median[guarded]:.0f}", f"{median[guarded] - median[bare]:+.0f}"])
    print_table(columns, rows, sep="  ")
    write_results(
        "mcp",
        {
            "rounds": args.rounds,
            "calls_per_round": args.calls,
            "median_us_per_call": {k: round(v, 1) for k, v in median.items()},
            "added_us_per_call": {g: round(median[g] - median[b], 1) for b, g in PAIRS},
        },
    )


if __name__ == "__main__":
    main()
