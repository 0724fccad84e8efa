"""Throughput of the reference guardian against a bare uvicorn + Starlette JSON echo app, in one run.

    .venv/bin/python benchmarks/guardian_server.py [--requests 20000] [--connections 32] [--rounds 3]
    .venv/bin/python benchmarks/guardian_server.py --workers 2       # the guardian with two processes

The guardian runs as its own process (the real command line, ``--workers`` uvicorn workers, one by default)
with a small rules file: three CEL rules that every request is matched against, the last one denying. The
echo app is the floor any Python JSON-over-HTTP server pays: uvicorn with the same HTTP implementation and
settings, a Starlette route that parses the body and answers it back. Both are loaded the same way, in
alternating rounds so that the machine's other load touches both alike: a plain asyncio HTTP/1.1 client
on keep-alive connections (no client library, so that the client is not what is measured), each connection
sending its next ``steps/toolCallRequest`` as soon as the previous answer arrives. Each server's figure is
its best round (the least disturbed one).

Targets on this 2-core machine, one worker: >= 3,000 decisions/s, and >= 0.8x the echo app's requests/s.
Each row also gives the CPU the server used per request, steadier than requests/s under the machine's other
load, and the client's (the two share the cores). Prints a table and writes
``benchmarks/results/guardian_server.json`` (``guardian_server_workers<N>.json`` with ``--workers``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import aos_request, print_table, write_results

TARGET_PER_SECOND = 3_000
TARGET_RATIO = 0.8

RULES = """
default_decision: allow
rules:
  - name: no-shell
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "shell"
    decision: deny
    message: No shell access
  - name: external-email
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "send-email" &&
      params.toolCallRequest.inputs.exists(i, i.name == "to" && !i.value.endsWith("@corp.example"))
    decision: deny
    message: External recipient
  - name: big-refunds
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "refund" &&
      params.toolCallRequest.inputs.exists(i, i.name == "amount" && i.value > 100)
    decision: deny
    message: Refund over 100
"""


def request_body(index: int) -> bytes:
    """A realistic ``steps/toolCallRequest``; every fourth one goes to an external address and is denied."""
    return json.dumps(
        aos_request(index, to="eve@evil.test" if index % 4 == 0 else "bob@corp.example")
    ).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_echo(port: int) -> None:
    """The comparison app: uvicorn + Starlette, one route that parses the JSON body and sends it back."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    app = Starlette(routes=[Route("/", echo, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(command: list[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{command} did not start within 30 s")


async def connection(port: int, indices: list[int], latencies: list[float], denied: list[int]) -> None:
    """One keep-alive connection sending its requests one after the other."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for index in indices:
            body = request_body(index)
            head = (
                f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            started = time.perf_counter()
            writer.write(head + body)
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answer = json.loads(await reader.readexactly(length))
            latencies.append(time.perf_counter() - started)
            if not status.startswith(b"HTTP/1.1 200") or answer.get("id") != index:
                raise RuntimeError(f"unexpected answer {status!r} {answer!r}")
            if answer.get("result", {}).get("decision") == "deny":
                denied.append(index)
    finally:
        writer.close()
        await writer.wait_closed()


async def load(port: int, requests: int, connections: int) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    denied: list[int] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(
            connection(port, list(range(c, requests, connections)), latencies, denied)
            for c in range(connections)
        )
    )
    return time.perf_counter() - started, latencies, len(denied)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process ``pid`` and its finished children used so far (Linux ``/proc``;
    0 elsewhere). The server's CPU per request is steadier than requests/s on a machine with other load."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def measure(port: int, requests: int, connections: int, pid: int) -> dict[str, float]:
    """One round against the server on ``port`` (process ``pid``): requests/s, its CPU µs per request and
    the client's (this process: the two share the machine's cores), median and p99 latency (ms), denials."""
    cpu, client = cpu_seconds(pid), cpu_seconds(os.getpid())
    elapsed, latencies, denied = asyncio.run(load(port, requests, connections))
    cpu, client = cpu_seconds(pid) - cpu, cpu_seconds(os.getpid()) - client
    latencies.sort()
    return {
        "per_second": requests / elapsed,
        "cpu_us": cpu / requests * 1e6,
        "client_cpu_us": client / requests * 1e6,
        "median_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "denied": denied,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000, help="requests per round and server")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server")
    parser.add_argument("--workers", type=int, default=1, help="guardian worker processes")
    parser.add_argument("--rule-threads", type=int, default=2, help="guardian threads deciding, per worker")
    parser.add_argument("--serve-echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo is not None:
        serve_echo(args.serve_echo)
        return 0
    best: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(RULES)
        guardian_port, echo_port = free_port(), free_port()
        guardian = [sys.executable, "-m", "agentguard", "guardian", "--rules", str(rules)]
        servers = {
            "guardian": (
                start_server(
                    [
                        *guardian,
                        "--port",
                        str(guardian_port),
                        "--log-level",
                        "warning",
                        "--workers",
                        str(args.workers),
                        "--rule-threads",
                        str(args.rule_threads),
                    ],
                    guardian_port,
                ),
                guardian_port,
            ),
            "echo": (
                start_server([sys.executable, __file__, "--serve-echo", str(echo_port)], echo_port),
                echo_port,
            ),
        }
        try:
            for process, port in servers.values():
                measure(port, 500, args.connections, process.pid)  # warm up
            for _ in range(args.rounds):
                for name, (process, port) in servers.items():
                    result = measure(port, args.requests, args.connections, process.pid)
                    if name not in best or result["per_second"] > best[name]["per_second"]:
                        best[name] = result
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(10)
    ratio = best["guardian"]["per_second"] / best["echo"]["per_second"]
    print_table(
        [
            ("server", "<10"),
            ("requests/s", ">12"),
            ("CPU µs/req", ">11"),
            ("client µs/req", ">14"),
            ("median ms", ">10"),
            ("p99 ms", ">8"),
        ],
        [
            (
                name,
                f"{row['per_second']:,.0f}",
                f"{row['cpu_us']:.0f}",
                f"{row['client_cpu_us']:.0f}",
                f"{row['median_ms']:.2f}",
                f"{row['p99_ms']:.2f}",
            )
            for name, row in best.items()
        ],
    )
    print(
        f"guardian / echo = {ratio:.2f} (target >= {TARGET_RATIO}); guardian target >= {TARGET_PER_SECOND:,}"
        f" decisions/s with one worker ({args.workers} used); {best['guardian']['denied']:.0f} denials a round"
    )
    write_results(
        "guardian_server" if args.workers == 1 else f"guardian_server_workers{args.workers}",
        {
            "requests": args.requests,
            "connections": args.connections,
            "rounds": args.rounds,
            "workers": args.workers,
            "rule_threads": args.rule_threads,
            "decisions_per_second": round(best["guardian"]["per_second"], 1),
            "median_ms": round(best["guardian"]["median_ms"], 3),
            "p99_ms": round(best["guardian"]["p99_ms"], 3),
            # With --workers the process measured is the supervisor: its CPU says nothing of the workers.
            "cpu_us_per_decision": round(best["guardian"]["cpu_us"], 1) if args.workers == 1 else None,
            "client_cpu_us_per_decision": round(best["guardian"]["client_cpu_us"], 1),
            "echo_cpu_us_per_request": round(best["echo"]["cpu_us"], 1),
            "echo_client_cpu_us_per_request": round(best["echo"]["client_cpu_us"], 1),
            "echo_requests_per_second": round(best["echo"]["per_second"], 1),
            "echo_median_ms": round(best["echo"]["median_ms"], 3),
            "ratio_to_echo": round(ratio, 3),
            "denied_per_round": best["guardian"]["denied"],
            "target_decisions_per_second": TARGET_PER_SECOND,
            "target_ratio_to_echo": TARGET_RATIO,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
