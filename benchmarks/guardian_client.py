"""What the AOS guardian client costs: an enforce-mode round trip on loopback, and observe mode's ``submit``.

    .venv/bin/python benchmarks/guardian_client.py [--calls 2000] [--submits 20000]

A minimal allow-everything ASGI app (no framework: it reads the request id and answers ``allow``) runs under
uvicorn in a separate process on 127.0.0.1, so the client's process holds only the client. Measured, after
a warm-up, one call at a time:

1. ``httpx baseline``: a bare ``httpx.Client.post`` of the same body — the floor the client stands on.
2. ``decide``: ``GuardianClient.decide`` (enforce, sync): serialise, send, validate the JSON-RPC reply.
3. ``adecide``: the same through the asyncio driver.
4. ``submit``: observe mode, the caller's critical path only (queue append); the background thread
   delivers meanwhile. Target: median <= 10 µs. The delivery throughput of that run is reported too.

Prints a table and writes ``benchmarks/results/guardian_client.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from _common import aos_request, print_table, write_results

from agentguard.guardian import GuardianClient, GuardianOutcome

SUBMIT_TARGET_US = 10.0

# The guardian process. The socket is created with IPPROTO_TCP so that asyncio sets TCP_NODELAY on accepted
# connections (with proto 0 it does not, and every response waits ~40 ms for a delayed ACK).
SERVER = r"""
import json, socket, sys, uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request_id = json.loads(body)["id"]
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"decision": "allow", "message": "ok"}}
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
uvicorn.Server(config).run(sockets=[sock])
"""


@contextmanager
def guardian_process() -> Iterator[str]:
    """Start the allow-everything guardian in its own process; yield its URL once it answers."""
    process = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = f"http://127.0.0.1:{int(process.stdout.readline())}/aos"
        with httpx.Client() as probe:
            for _ in range(1000):  # bounded wait for uvicorn to accept connections
                try:
                    probe.post(url, json=aos_request(0))
                    break
                except httpx.TransportError:
                    time.sleep(0.01)
            else:
                raise RuntimeError("the benchmark guardian did not start")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def summary(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "median_us": round(statistics.median(ordered) / 1000, 2),
        "p99_us": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000, 2),
        "mean_us": round(statistics.fmean(ordered) / 1000, 2),
    }


def timed_calls(call: Callable[[int], object], calls: int, warmup: int) -> list[int]:
    for n in range(warmup):
        call(n)
    samples: list[int] = []
    for n in range(calls):
        start = time.perf_counter_ns()
        call(n)
        samples.append(time.perf_counter_ns() - start)
    return samples


def bench_baseline(url: str, calls: int, warmup: int) -> list[int]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    with httpx.Client() as client:
        return timed_calls(
            lambda n: client.post(url, content=json.dumps(aos_request(n)).encode(), headers=headers),
            calls,
            warmup,
        )


def bench_decide(url: str, calls: int, warmup: int) -> list[int]:
    with GuardianClient(url) as client:

        def call(n: int) -> None:
            if client.decide(aos_request(n)).outcome is not GuardianOutcome.ALLOW:
                raise RuntimeError("the benchmark guardian did not allow")

        return timed_calls(call, calls, warmup)


def bench_adecide(url: str, calls: int, warmup: int) -> list[int]:
    async def run() -> list[int]:
        async with GuardianClient(url) as client:
            for n in range(warmup):
                await client.adecide(aos_request(n))
            samples: list[int] = []
            for n in range(calls):
                start = time.perf_counter_ns()
                verdict = await client.adecide(aos_request(n))
                samples.append(time.perf_counter_ns() - start)
                if verdict.outcome is not GuardianOutcome.ALLOW:
                    raise RuntimeError("the benchmark guardian did not allow")
            return samples

    return asyncio.run(run())


def bench_submit(url: str, submits: int, warmup: int) -> tuple[list[int], dict[str, Any]]:
    requests = [aos_request(n) for n in range(warmup + submits)]  # built beforehand: only submit is timed
    with GuardianClient(url, mode="observe", queue_size=warmup + submits) as client:
        for request in requests[:warmup]:
            client.submit(request)
        if not client.flush(120):
            raise RuntimeError("warm-up steps were not delivered")
        samples: list[int] = []
        began = time.perf_counter()
        for request in requests[warmup:]:
            start = time.perf_counter_ns()
            client.submit(request)
            samples.append(time.perf_counter_ns() - start)
        drained = client.flush(300)
        elapsed = time.perf_counter() - began
        stats = client.stats
    delivery = {
        "drained": drained,
        "delivered": stats.delivered - warmup,
        "dropped": stats.dropped,
        "failed": stats.failed,
        "steps_per_s": round((stats.delivered - warmup) / elapsed),
    }
    return samples, delivery


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="enforce-mode calls measured")
    parser.add_argument("--submits", type=int, default=20000, help="observe-mode submits measured")
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args(argv)
    with guardian_process() as url:
        rows = {
            "httpx baseline": summary(bench_baseline(url, args.calls, args.warmup)),
            "decide": summary(bench_decide(url, args.calls, args.warmup)),
            "adecide": summary(bench_adecide(url, args.calls, args.warmup)),
        }
        submit_samples, delivery = bench_submit(url, args.submits, args.warmup)
        rows["submit"] = summary(submit_samples)
    print_table(
        [("", "<16"), ("median µs", ">11"), ("p99 µs", ">10"), ("mean µs", ">10")],
        (
            (name, f"{row['median_us']:.2f}", f"{row['p99_us']:.2f}", f"{row['mean_us']:.2f}")
            for name, row in rows.items()
        ),
    )
    print(
        f"observe delivery: {delivery['delivered']} of {args.submits} delivered "
        f"({delivery['steps_per_s']} steps/s), {delivery['dropped']} dropped, {delivery['failed']} failed"
    )
    print(f"target: submit median <= {SUBMIT_TARGET_US} µs -> {rows['submit']['median_us']} µs")
    write_results(
        "guardian_client",
        {
            "httpx": httpx.__version__,
            "calls": args.calls,
            "submits": args.submits,
            "warmup": args.warmup,
            "targets": {"submit_median_us": SUBMIT_TARGET_US},
            "results": rows,
            "observe_delivery": delivery,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
