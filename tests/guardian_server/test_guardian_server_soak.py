"""Soak (issue 13, item 7): the reference guardian serves good clients while hostile ones hammer it.

One guardian process on loopback (the real command line) with the documented example rules and a costly
rule. Good clients ask for decisions whose answers are known; at the same time hostile clients send request
heads and bodies a byte at a time, bodies over the limit (declared and streamed), malformed JSON, and
requests that make the costly rule work. Checked: no 5xx to anyone, every good decision answered and right,
the good clients' p99 within a generous multiple of the unloaded p99 measured first in the same test, and
the server's memory flat. Bounded: about half a minute, marked ``soak`` (``scripts/test`` runs it;
``-m "not soak"`` skips it).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.guardian_server.hostile import address, closed_within, connect, guardian_process, head, rss_bytes
from tests.guardian_server.support import request_for

pytestmark = pytest.mark.soak

ROOT = Path(__file__).resolve().parents[2]
COSTLY_RULE = """
  - name: costly
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "costly" &&
      params.toolCallRequest.inputs.exists(i, i.value.matches("^(x+x+)+y$"))
    decision: deny
    message: costly
"""
LOADED_SECONDS = 12.0
GOOD_CLIENTS = 3


def _rules(tmp_path: Path) -> Path:
    example = re.search(
        r"## Writing rules\n\n```yaml\n(.*?)```", (ROOT / "docs" / "guardian.md").read_text(), re.DOTALL
    )
    assert example is not None
    rules = tmp_path / "rules.yaml"
    rules.write_text(example.group(1) + COSTLY_RULE)
    return rules


def _email(index: int) -> tuple[bytes, str]:
    """A good client's request and the decision it must get (every third one goes outside and is denied)."""
    request = request_for("steps/toolCallRequest", index)
    outside = index % 3 == 0
    request["params"]["toolCallRequest"]["inputs"] = [
        {"name": "to", "value": "eve@evil.example" if outside else "bob@corp.example"},
        {"name": "body", "value": "Your order shipped."},
    ]
    return json.dumps(request).encode(), "deny" if outside else "modify"


class Tally:
    """What every client saw, shared by the threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: dict[str, list[int]] = {}
        self.wrong: list[str] = []

    def status(self, who: str, status: int) -> None:
        with self.lock:
            self.statuses.setdefault(who, []).append(status)

    def server_errors(self) -> dict[str, list[int]]:
        return {
            who: [s for s in seen if s >= 500]
            for who, seen in self.statuses.items()
            if any(s >= 500 for s in seen)
        }


def _good_client(
    url: str, tally: Tally, until: Callable[[int], bool], latencies: list[float], first: int
) -> None:
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as client:
        index = first
        while not until(index - first):
            body, expected = _email(index)
            started = time.perf_counter()
            answer = client.post(url, content=body)
            latencies.append(time.perf_counter() - started)
            tally.status("good", answer.status_code)
            decision = answer.json().get("result", {}).get("decision") if answer.status_code == 200 else None
            if decision != expected or answer.json().get("id") != index:
                tally.wrong.append(f"{index}: {answer.status_code} {answer.text[:200]}")
            index += 1


def _good_clients(url: str, tally: Tally, until: Callable[[int], bool]) -> list[float]:
    latencies: list[float] = []
    threads = [
        threading.Thread(target=_good_client, args=(url, tally, until, latencies, 1_000_000 * (n + 1)))
        for n in range(GOOD_CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(len(ordered) * 0.99)]


def _slow_heads(url: str, stop: threading.Event, tally: Tally) -> None:
    """40 connections that send their request head a byte at a time, replaced as the server closes them."""
    sockets: list[socket.socket] = []
    try:
        while not stop.is_set():
            while len(sockets) < 40:
                sockets.append(connect(url))
                sockets[-1].sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for sock in list(sockets):
                try:
                    sock.sendall(b"a")
                except OSError:
                    tally.status("slow-head-closed", 0)
                    sockets.remove(sock)
                    sock.close()
            time.sleep(0.2)
    finally:
        for sock in sockets:
            sock.close()


def _slow_bodies(url: str, stop: threading.Event, tally: Tally) -> None:
    """20 connections at a time trickling a body: each must be answered 408 and closed."""
    while not stop.is_set():
        threads = [threading.Thread(target=_one_slow_body, args=(url, tally)) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _one_slow_body(url: str, tally: Tally) -> None:
    with connect(url) as sock:
        sock.sendall(head("/", 10_000))
        closed, received = closed_within(sock, 8.0, trickle=b"[" + b" " * 200)
    status = int(received[9:12]) if received.startswith(b"HTTP/1.1 ") else 0
    tally.status("slow-body", status if closed else -1)


def _huge(url: str, stop: threading.Event, tally: Tally) -> None:
    """Bodies over the 1 MiB limit: declared (answered before the body is read), and streamed undeclared."""
    chunk = b" " * 65_536
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as client:
        while not stop.is_set():
            with connect(url) as sock:
                sock.sendall(head("/", 50_000_000))
                tally.status("huge-declared", int(sock.recv(64)[9:12]))
            answer = client.post(url, content=iter([chunk] * 40))  # 2.5 MiB, chunked
            tally.status("huge-streamed", answer.status_code)


def _malformed(url: str, stop: threading.Event, tally: Tally) -> None:
    bodies = [b"{", b"[1,", b'{"jsonrpc": "2.0", "id": 1, "method": 7}', b"\xff\xfe", b'{"a": NaN}', b"[]"]
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as client:
        while not stop.is_set():
            for body in bodies:
                answer = client.post(url, content=body)
                tally.status("malformed", answer.status_code)
                if answer.status_code == 200 and "error" not in answer.json():
                    tally.wrong.append(f"malformed {body!r} answered {answer.text[:100]}")
            time.sleep(0.01)


def _costly(url: str, stop: threading.Event, tally: Tally) -> None:
    request = request_for("steps/toolCallRequest", "costly")
    request["params"]["toolCallRequest"]["toolId"] = "costly"
    request["params"]["toolCallRequest"]["inputs"] = [
        {"name": f"n{i}", "value": "x" * 60} for i in range(3000)
    ]
    body = json.dumps(request).encode()
    with httpx.Client(timeout=60, headers={"content-type": "application/json"}) as client:
        while not stop.is_set():
            tally.status("costly", client.post(url, content=body).status_code)


def test_good_clients_are_served_while_hostile_ones_attack(tmp_path: Path) -> None:
    options = ("--header-timeout", "2", "--body-timeout", "2")
    with guardian_process(_rules(tmp_path), *options) as (url, pid):
        assert address(url)[0] == "127.0.0.1"
        tally = Tally()
        _good_clients(url, tally, lambda done: done >= 100)  # warm up
        baseline = _good_clients(url, tally, lambda done: done >= 200)
        rss_before = rss_bytes(pid)
        stop = threading.Event()
        attackers = [
            threading.Thread(target=attack, args=(url, stop, tally), daemon=True)
            for attack in (_slow_heads, _slow_bodies, _huge, _malformed, _costly)
        ]
        for thread in attackers:
            thread.start()
        time.sleep(1.0)  # let the attack build up
        deadline = time.monotonic() + LOADED_SECONDS
        loaded = _good_clients(url, tally, lambda _: time.monotonic() > deadline)
        rss_loaded = rss_bytes(pid)
        stop.set()
        for thread in attackers:
            thread.join(30)
        rss_after = rss_bytes(pid)
    summary: dict[str, Any] = {
        "baseline_p99_ms": round(_p99(baseline) * 1000, 1),
        "loaded_p99_ms": round(_p99(loaded) * 1000, 1),
        "good_decisions": len(loaded),
        "rss_mb": [round(value / 1_048_576, 1) for value in (rss_before, rss_loaded, rss_after)],
        "hostile": {who: len(seen) for who, seen in tally.statuses.items() if who != "good"},
    }
    print(summary)
    assert not tally.server_errors(), summary
    assert not tally.wrong, tally.wrong[:5]
    assert len(loaded) >= 100, summary
    # Each hostile client was actually served its refusal.
    assert set(tally.statuses["slow-body"]) == {408}, tally.statuses["slow-body"]
    assert set(tally.statuses["huge-declared"]) == {413}
    assert set(tally.statuses["huge-streamed"]) == {413}
    assert tally.statuses.get("slow-head-closed"), "no slow head was ever closed"
    assert set(tally.statuses["costly"]) == {200}
    # Generous bounds, relative to what this machine did unloaded a moment ago.
    assert _p99(loaded) < max(100 * _p99(baseline), 1.0), summary
    assert max(rss_loaded, rss_after) < rss_before + 150 * 1_048_576, summary
