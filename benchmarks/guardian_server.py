"""Throughput of the reference guardian: ``agentguard guardian`` with one worker, loaded from another process.

    .venv/bin/python benchmarks/guardian_server.py [--requests 20000] [--connections 32]

The guardian runs as its own process (the real command line, one uvicorn worker) with a small rules file:
three CEL rules that every request is matched against, the last one denying. This process is the load: a
plain asyncio HTTP/1.1 client on keep-alive connections (no client library, so that the client is not what
is measured), each connection sending its next ``steps/toolCallRequest`` as soon as the previous decision
arrives. Target on this 2-core machine: >= 3,000 decisions/s.

Prints a table and writes ``benchmarks/results/guardian_server.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import aos_request, print_table, write_results

TARGET_PER_SECOND = 3_000

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


def start_guardian(rules: Path, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentguard", "guardian", "--rules", str(rules), "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the guardian did not start within 30 s")


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
            if answer["result"]["decision"] == "deny":
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(RULES)
        port = free_port()
        guardian = start_guardian(rules, port)
        try:
            asyncio.run(load(port, 500, args.connections))  # warm up
            elapsed, latencies, denied = asyncio.run(load(port, args.requests, args.connections))
        finally:
            guardian.terminate()
            guardian.wait(10)
    per_second = args.requests / elapsed
    latencies.sort()
    median_ms = statistics.median(latencies) * 1000
    p99_ms = latencies[int(len(latencies) * 0.99)] * 1000
    print_table(
        [
            ("decisions", ">10"),
            ("connections", ">12"),
            ("decisions/s", ">12"),
            ("median ms", ">10"),
            ("p99 ms", ">8"),
        ],
        [
            (
                str(args.requests),
                str(args.connections),
                f"{per_second:,.0f}",
                f"{median_ms:.2f}",
                f"{p99_ms:.2f}",
            )
        ],
    )
    print(f"target: >= {TARGET_PER_SECOND:,} decisions/s with one worker; {denied} of them were denials")
    write_results(
        "guardian_server",
        {
            "requests": args.requests,
            "connections": args.connections,
            "workers": 1,
            "decisions_per_second": round(per_second, 1),
            "median_ms": round(median_ms, 3),
            "p99_ms": round(p99_ms, 3),
            "denied": denied,
            "target_decisions_per_second": TARGET_PER_SECOND,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
