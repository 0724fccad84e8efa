"""The OpenAgentSpec server reads and writes only JSON that every standards parser reads alike (a real server).

An input that gives a key twice, or a number past a double, is refused (400) and nothing starts: the input
schema and the runner would see Python's reading (the last value, ``inf``), a proxy, a log or the client
that checked the input another. A body with a content coding is refused (415), never inflated. An engagement
state is always strict JSON: a runner's output that JSON cannot hold (``NaN``, ``Infinity``) fails the
engagement rather than be sent as ``NaN``, which strict clients -- agentguard's own -- refuse.
"""

from __future__ import annotations

import gzip
import math
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentguard import Engagement, Guard
from agentguard._httputil import MAX_QUOTED
from agentguard.aos import strict_json
from agentguard.server import RunningServer, create_app, serve_in_thread
from tests.conftest import spec_text
from tests.server.support import start

SPEC = spec_text(
    """
    capabilities:
      score:
    exposes:
      score: recent["score"].outputs
    """,
    name="echo",
)

STARTED: list[dict[str, Any]] = []
"""Every input a runner was started with."""

SCORES = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf}


def runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
    """Echoes the input; ``{"output": "nan"}`` returns NaN, ``{"exposes": "nan"}`` exposes it."""
    STARTED.append(input)
    if "exposes" in input:
        guard.call("score", {}, lambda: SCORES[input["exposes"]])
        return "scored"
    if "output" in input:
        return {"score": SCORES[input["output"]]}
    return input


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve_in_thread(create_app([Guard.from_yaml(SPEC)], runner)) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    STARTED.clear()
    with httpx.Client(base_url=server.url, timeout=15) as http:
        yield http


def strict_state(client: httpx.Client, location: str) -> Any:
    """The engagement's state once it finished, read as strictly as agentguard's remote client reads it."""
    answer = client.get(location, params={"wait": 5})
    assert answer.status_code == 200
    state = strict_json(answer.content.decode("utf-8"))
    assert isinstance(state, dict)
    assert state["status"] not in ("running", "awaiting-review")
    return state


AMBIGUOUS = {
    "a key twice": (b'{"amount": 5000, "amount": 5}', "key 'amount' given twice in an object"),
    "a key twice, deeper": (b'{"order": {"id": "A-1", "id": "B-2"}}', "key 'id' given twice in an object"),
    "1e400": (b'{"amount": 1e400}', "number 1e400 is out of range"),
    "-1e400": (b'{"amount": -1e400}', "number -1e400 is out of range"),
}


@pytest.mark.parametrize(("body", "why"), AMBIGUOUS.values(), ids=AMBIGUOUS.keys())
def test_an_input_parsers_read_differently_is_refused_and_nothing_starts(
    client: httpx.Client, body: bytes, why: str
) -> None:
    answer = client.post("/agents/echo", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == f"the body is JSON that parsers read differently: {why}"
    assert STARTED == []


def test_a_compressed_body_is_refused_without_being_inflated(client: httpx.Client) -> None:
    """A 256 KiB gzip body of 256 MiB: the server never inflates a request body (Starlette does not), and
    it says why it refuses one instead of reading the compressed bytes as the JSON they are not."""
    bomb = gzip.compress(b" " * (256 << 20), compresslevel=9)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    tracemalloc.start()
    try:
        answer = client.post("/agents/echo", content=bomb, headers=headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 415, answer.text
    assert answer.json()["error"] == "content-encoding gzip is not accepted: send the input uncompressed"
    assert answer.headers["accept-encoding"] == "identity"
    assert peak < 32 << 20, f"{peak / (1 << 20):.0f} MiB held for a 256 KiB body"
    # Plain JSON that says it is compressed: the client and the server would read it differently.
    plain = client.post("/agents/echo", content=b'{"amount": 5}', headers=headers)
    assert plain.status_code == 415
    assert STARTED == []
    identity = {"Content-Type": "application/json", "Content-Encoding": "identity"}
    assert client.post("/agents/echo", content=b'{"amount": 5}', headers=identity).status_code == 303


def test_a_content_coding_is_named_bounded(client: httpx.Client) -> None:
    """The 415 names the codings it refused: a 60 KB header was answered whole (and shown whole by every log
    and client that shows the answer)."""
    headers = {"Content-Type": "application/json", "Content-Encoding": "x" * 60_000}
    started = len(STARTED)
    answer = client.post("/agents/echo", content=b"{}", headers=headers)
    assert answer.status_code == 415
    message = answer.json()["error"]
    assert message.startswith("content-encoding xxx")
    assert message.endswith("xxx is not accepted: send the input uncompressed")
    assert len(message) <= MAX_QUOTED + len("content-encoding  is not accepted: send the input uncompressed")
    assert len(STARTED) == started  # nothing was started


@pytest.mark.parametrize("score", SCORES)
def test_an_output_json_cannot_hold_fails_the_engagement(client: httpx.Client, score: str) -> None:
    state = strict_state(client, start(client, "echo", {"output": score}))
    assert state["status"] == "failed"
    assert state["output"] is None
    assert state["error"]["type"] == "OutputNotJSON"
    assert "not representable as JSON" in state["error"]["message"]


@pytest.mark.parametrize("score", SCORES)
def test_an_exposed_value_json_cannot_hold_is_not_sent_as_nan(client: httpx.Client, score: str) -> None:
    state = strict_state(client, start(client, "echo", {"exposes": score}))
    assert state["status"] == "completed"
    assert state["output"] == "scored"
    assert state["exposes"] == {"score": "<not representable as JSON: ValueError>"}
