"""The reference guardian stays up for good clients (issue 13, item 5), each limit against a real server.

Slow request heads and bodies are cut off at their deadlines, the connection cap holds, a request with a
costly rule condition does not stall a concurrent ping, and the token is checked before anything else
answers. Deadlines here are short (fractions of a second) so that the tests are quick.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from agentguard.aos import AOSRequest, AOSSuccessResult, JSONObject
from agentguard.guardian.server import GuardianRules, create_app, serve_in_thread
from agentguard.serving import ServerLimits
from tests.guardian_server.hostile import closed_within, connect, guardian_process, head, slow_body
from tests.guardian_server.support import answer_of, request_for

PING = {"jsonrpc": "2.0", "id": "ping", "method": "ping", "params": {"timestamp": "2025-07-01T12:00:00Z"}}

# A condition whose cost grows with the request: a backtracking-prone pattern over every input's value.
COSTLY_RULES = """
rules:
  - name: costly
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.inputs.exists(i, i.value.matches("^(x+x+)+y$"))
    decision: deny
    message: costly
"""


def _ping(url: str, timeout: float = 10.0) -> httpx.Response:
    return httpx.post(url, json=PING, timeout=timeout)


@pytest.fixture
def quick_limits() -> ServerLimits:
    return ServerLimits(header_timeout=0.5, keep_alive_timeout=0.5)


def test_a_slow_request_head_is_closed_at_the_header_deadline(quick_limits: ServerLimits) -> None:
    with serve_in_thread(create_app(GuardianRules()), limits=quick_limits) as server:
        started = time.monotonic()
        with connect(server.url) as slow, connect(server.url) as silent:
            # One byte every 0.1 s would keep uvicorn's own idle timer from ever firing.
            closed, _ = closed_within(
                slow, 5.0, trickle=b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 60
            )
            assert closed
            assert closed_within(silent, 5.0)[0]
        assert 0.4 < time.monotonic() - started < 4.0
        assert _ping(server.url).json()["result"]["status"] == "connected"


def test_a_deadline_counts_again_after_each_response(quick_limits: ServerLimits) -> None:
    with (
        serve_in_thread(create_app(GuardianRules()), limits=quick_limits) as server,
        connect(server.url) as sock,
    ):
        body = httpx.Request("POST", server.url, json=PING).read()
        sock.sendall(head("/", len(body)) + body)
        closed, received = closed_within(sock, 5.0, trickle=b"POST / HTTP/1.1\r\nX-Slow: " + b"a" * 60)
        assert received.startswith(b"HTTP/1.1 200")
        assert closed


def test_a_slow_body_is_answered_408_and_closed() -> None:
    with serve_in_thread(create_app(GuardianRules(), body_timeout=0.5)) as server:
        received, seconds = slow_body(server.url, "/", 1000)
    assert received.startswith(b"HTTP/1.1 408")
    assert b'"code":-32006' in received
    assert 0.4 < seconds < 4.0


def test_the_connection_cap_holds_and_frees_up() -> None:
    limits = ServerLimits(max_connections=4, header_timeout=30)
    with serve_in_thread(create_app(GuardianRules()), limits=limits) as server, ExitStack() as held:
        idle = [held.enter_context(connect(server.url)) for _ in range(4)]
        time.sleep(0.2)  # the server has accepted them
        with connect(server.url) as extra:
            closed, received = closed_within(extra, 5.0)
        assert closed
        assert received.startswith(b"HTTP/1.1 503")
        assert _ping(server.url).status_code == 503  # refused before its request is read
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        assert _ping(server.url).json()["result"]["status"] == "connected"


def test_a_costly_request_does_not_stall_a_concurrent_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the pure-Python engine, whose evaluation lets other threads run: the C++ engine holds the GIL for a
    # whole evaluation (its cost is bounded by the evaluation budget instead), so with it a ping can wait
    # for one evaluation whichever thread runs it, and the test would measure the engine, not the server.
    monkeypatch.setenv("AGENTGUARD_CEL_BACKEND", "cel-python")
    rules = tmp_path / "rules.yaml"
    rules.write_text(COSTLY_RULES)
    costly = request_for("steps/toolCallRequest")
    costly["params"]["toolCallRequest"]["inputs"] = [
        {"name": f"n{i}", "value": "x" * 80} for i in range(9000)
    ]
    body = json.dumps(costly).encode()
    with guardian_process(rules) as (url, _), httpx.Client(timeout=60) as client:
        _ping(url)  # warm
        took: list[float] = []

        def send_costly() -> None:
            started = time.monotonic()
            answer = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=60)
            assert answer.status_code == 200
            took.append(time.monotonic() - started)

        worker = threading.Thread(target=send_costly)
        worker.start()
        time.sleep(0.05)
        pings = []
        while worker.is_alive():
            started = time.monotonic()
            assert client.post(url, json=PING).status_code == 200
            pings.append(time.monotonic() - started)
        worker.join()
    # Pings answered while the rules run on a worker thread take a fraction of the costly request's time;
    # were the rules run on the event loop, a ping would wait for all of it.
    assert pings
    assert statistics.median(pings) < took[0] / 3, (pings, took)


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/nowhere", {}),
        ("POST", "/nowhere", {}),
        ("PUT", "/", {}),
        ("POST", "/", {"content-type": "text/plain"}),
        ("POST", "/", {"content-length": "999999999"}),
    ],
)
def test_the_token_is_checked_before_anything_else_answers(
    method: str, path: str, headers: dict[str, str]
) -> None:
    with serve_in_thread(create_app(GuardianRules(), token="s3cret", max_body_bytes=10)) as server:
        with connect(server.url) as sock:
            length = int(headers.pop("content-length", "2"))
            extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            sock.sendall(
                head(path, length, method=method, extra=extra).replace(
                    b"application/json",
                    b"application/json" if "content-type" not in headers else b"text/plain",
                )
            )
            _, received = closed_within(sock, 1.0)
        assert received.startswith(b"HTTP/1.1 401"), received[:80]
        assert b"www-authenticate: Bearer" in received


def test_unknown_paths_are_404_after_the_token() -> None:
    with serve_in_thread(create_app(GuardianRules(), token="s3cret")) as server:
        answer = httpx.post(server.url + "nowhere", json=PING, headers={"Authorization": "Bearer s3cret"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == -32005


def test_serving_beyond_loopback_needs_a_token_or_insecure_open() -> None:
    with pytest.raises(ValueError, match="without a token"):
        serve_in_thread(create_app(GuardianRules()), host="0.0.0.0")


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        ServerLimits(max_connections=0)
    with pytest.raises(ValueError, match="body_timeout"):
        create_app(GuardianRules(), body_timeout=0)
    with pytest.raises(ValueError, match="max_batch"):
        create_app(GuardianRules(), max_batch=0)


def test_workers_share_the_port(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(COSTLY_RULES)
    request = request_for("steps/toolCallRequest")
    request["params"]["toolCallRequest"]["inputs"] = [{"name": "to", "value": "xxxx"}]
    with guardian_process(rules, "--workers", "2") as (url, _), httpx.Client() as client:
        answers = [client.post(url, json=PING) for _ in range(20)]
        decided = client.post(url, json=request).json()
    assert {answer.json()["result"]["status"] for answer in answers} == {"connected"}
    assert decided["result"]["decision"] == "allow"


def test_a_batch_over_max_batch_is_one_invalid_request_deciding_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decided: list[object] = []

    class Counting(GuardianRules):
        def decide(self, request: AOSRequest, wire: JSONObject | None = None) -> AOSSuccessResult:
            decided.append(request.id)
            return super().decide(request, wire)

    batch = [request_for("steps/message", n) for n in range(3)]
    with serve_in_thread(create_app(Counting(), max_batch=3)) as server:
        at_the_limit = answer_of(httpx.post(server.url, json=batch))
        with caplog.at_level(logging.DEBUG, "agentguard.guardian.server"):
            # one more, a notification: not decided either
            over = httpx.post(server.url, json=[*batch, request_for("steps/message", None)])
    assert [answer["result"]["decision"] for answer in at_the_limit] == ["allow"] * 3
    assert decided == [0, 1, 2]
    assert answer_of(over) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Invalid Request: a batch of 4 requests, more than max_batch (3)",
        },
    }
    refusals = [
        record.getMessage() for record in caplog.records if record.name == "agentguard.guardian.server"
    ]
    assert refusals == [
        "refused request (-32600): 'Invalid Request: a batch of 4 requests, more than max_batch (3)'"
    ]


def test_a_huge_batch_is_refused_whole_by_default() -> None:
    """600 KB of ``[1,1,...]`` took 6 s of CPU and was answered with 34 MB, one error per entry."""
    body = b"[" + b",".join([b"1"] * 300_000) + b"]"
    with serve_in_thread(create_app(GuardianRules())) as server:
        response = httpx.post(
            server.url, content=body, headers={"Content-Type": "application/json"}, timeout=60
        )
    answer = answer_of(response)
    assert (answer["id"], answer["error"]["code"]) == (None, -32600)
    assert (
        answer["error"]["message"] == "Invalid Request: a batch of 300000 requests, more than max_batch (100)"
    )
    assert len(response.content) < 200
