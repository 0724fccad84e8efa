"""The OpenAgentSpec server over a real socket, driven with a plain httpx client (no redirects followed).

One server (``shop-agent`` from a spec directory, with an input schema and a tracked reviewer) answers most
tests; the limits that need their own settings -- token, concurrency, timeout, store -- get their own app.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from agentguard.server import RunningServer, create_app, serve_in_thread
from agentguard.server._store import EngagementRecord, RunStatus
from agentguard.spec import load_spec_text
from tests.server.support import (
    CALLED,
    SHOP_SPEC,
    RecordingStore,
    approve_when_gate_opens,
    async_shop_runner,
    gate,
    shop_agents,
    shop_runner,
    start,
    wait_for,
)

FINISHED = {"completed", "failed", "denied", "cancelled"}


@pytest.fixture(scope="module")
def store() -> RecordingStore:
    return RecordingStore()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, store: RecordingStore) -> Iterator[RunningServer]:
    agents = shop_agents(tmp_path_factory.mktemp("specs"), schema=True)
    app = create_app(
        agents,
        shop_runner,
        store=store,
        max_body_bytes=4096,
        reviewers={"supervisor": approve_when_gate_opens},
    )
    with serve_in_thread(app) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=15) as http:
        yield http


# -- surfacing the definitions ---------------------------------------------------------------------------


def test_index_lists_every_agent_with_its_definition_url(client: httpx.Client, server: RunningServer) -> None:
    response = client.get("/agents")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    [entry] = response.json()
    assert entry["name"] == "shop-agent"
    assert entry["description"] == "The agent is used in tests."
    # No public_url: relative to the server, and no oagent:// reference (tests/server/test_server_attacker.py)
    assert (entry["url"], entry["reference"]) == ("/agents/shop-agent", None)
    assert client.get(entry["url"]).status_code == 200


def test_definition_is_the_file_as_written_in_yaml(client: httpx.Client) -> None:
    response = client.get("/agents/shop-agent")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/yaml"
    assert response.content == SHOP_SPEC.encode()
    assert load_spec_text(response.text).spec.name == "shop-agent"
    etag = response.headers["etag"]
    revalidated = client.get("/agents/shop-agent", headers={"If-None-Match": etag})
    assert revalidated.status_code == 304
    assert revalidated.content == b""
    assert revalidated.headers["etag"] == etag
    assert client.get("/agents/shop-agent", headers={"If-None-Match": '"other"'}).status_code == 200


def test_post_answers_303_to_the_engagement_state_in_json(client: httpx.Client) -> None:
    before = time.time()
    response = client.post("/agents/shop-agent", json={"order_id": "A-7"})
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("/engagements/")
    assert response.headers["content-type"] == "application/json"
    state = wait_for(client, location)
    reply = client.get(location)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert state == reply.json()
    assert state["id"] == location.rsplit("/", 1)[1]
    assert state["agent"] == "shop-agent"
    assert state["status"] == "completed"
    assert state["output"] == {"order_id": "A-7", "status": "shipped"}
    assert state["exposes"] == {"lookups": 1, "last": "lookup-order"}
    assert state["error"] is None
    for stamp in ("created_at", "updated_at", "finished_at"):
        assert from_iso(state[stamp]) >= before - 1


def from_iso(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def test_engagement_ids_are_unguessable(client: httpx.Client) -> None:
    ids = {start(client, "shop-agent", {}).rsplit("/", 1)[1] for _ in range(3)}
    assert len(ids) == 3
    assert all(len(engagement_id) >= 20 for engagement_id in ids)


def test_long_poll_waits_for_the_end(client: httpx.Client) -> None:
    location = start(client, "shop-agent", {"gate": "long-poll"})
    assert client.get(location).json()["status"] == "running"
    began = time.monotonic()
    assert client.get(location, params={"wait": 0.3}).json()["status"] == "running"
    assert time.monotonic() - began >= 0.25
    gate("long-poll").set()
    began = time.monotonic()
    assert client.get(location, params={"wait": 10}).json()["status"] == "completed"
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("wait", ["soon", "-1", "nan", "inf"])
def test_a_bad_wait_is_refused(client: httpx.Client, wait: str) -> None:
    location = start(client, "shop-agent", {})
    response = client.get(location, params={"wait": wait})
    assert response.status_code == 400
    assert "wait" in response.json()["error"]


def test_store_sees_every_state(client: httpx.Client, store: RecordingStore) -> None:
    location = start(client, "shop-agent", {"order_id": "B-2"})
    wait_for(client, location)
    engagement_id = location.rsplit("/", 1)[1]
    statuses = [r.status for r in store.saved if r.id == engagement_id]
    assert statuses == [RunStatus.RUNNING, RunStatus.COMPLETED]


# -- how engagements end ---------------------------------------------------------------------------------


def test_a_policy_denial_reports_its_rule(client: httpx.Client) -> None:
    state = wait_for(client, start(client, "shop-agent", {"action": "refund", "amount": 500}))
    assert state["status"] == "denied"
    assert state["output"] is None
    error = state["error"]
    assert error["type"] == "RestrictionViolation"
    assert (error["rule"], error["capability"], error["phase"]) == ("restriction", "refund", "input")
    assert error["reason"] == "assertion is false: 500 <= 100"  # the clause compared the caller's own input
    assert state["exposes"] == {  # nothing was called: `last` cannot be evaluated, and says so
        "lookups": 0,
        "last": {"error": 'Key not found in map: "_name"', "expression": "recent._name"},
    }


def test_a_failed_guardrail_denies_even_when_the_runner_carries_on(client: httpx.Client) -> None:
    stopped = wait_for(client, start(client, "shop-agent", {"action": "guardrail", "text": "my ssn"}))
    assert stopped["status"] == "denied"
    assert stopped["error"]["type"] == "GuardrailViolation"
    # The runner swallowed the violation and returned an answer: the spec says the execution fails.
    swallowed = wait_for(
        client, start(client, "shop-agent", {"action": "guardrail-swallowed", "text": "ssn"})
    )
    assert swallowed["status"] == "denied"
    assert swallowed["output"] is None
    assert swallowed["error"]["rule"] == "guardrail"
    assert swallowed["error"]["phase"] == "input"
    passed = wait_for(client, start(client, "shop-agent", {"action": "guardrail", "text": "hello"}))
    assert (passed["status"], passed["output"]) == ("completed", "passed")


def test_a_runner_error_fails_without_leaking_its_message(client: httpx.Client) -> None:
    location = start(client, "shop-agent", {"action": "crash"})
    state = wait_for(client, location)
    assert state["status"] == "failed"
    assert state["error"]["type"] == "RuntimeError"
    assert "hunter2" not in client.get(location).text


def test_a_review_shows_as_awaiting_review(client: httpx.Client) -> None:
    location = start(client, "shop-agent", {"action": "refund", "amount": 5})
    waiting = wait_for(client, location, until="awaiting-review")
    assert waiting["review"] == {
        "reviewer": "supervisor",
        "capability": "refund",
        "phase": "input",
        "message": "May agent 'shop-agent' call 'refund'?",
    }
    gate("review").set()
    state = wait_for(client, location)
    assert (state["status"], state["output"], state["review"]) == ("completed", {"refunded": 5}, None)


# -- cancelling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["DELETE", "POST /cancel"])
def test_cancel_a_running_engagement(client: httpx.Client, how: str) -> None:
    name = f"cancel-{how}"
    location = start(client, "shop-agent", {"gate": name})
    response = client.delete(location) if how == "DELETE" else client.post(location + "/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["error"] == {"type": "Cancelled", "message": "cancelled by the client"}
    calls = len(CALLED)
    gate(name).set()  # the sync runner wakes up in a cancelled engagement: its tool call is refused
    time.sleep(0.2)
    assert len(CALLED) == calls
    assert client.get(location).json()["status"] == "cancelled"
    again = client.delete(location)
    assert again.status_code == 409
    assert again.json()["engagement"]["status"] == "cancelled"


def test_cancel_a_finished_or_unknown_engagement(client: httpx.Client) -> None:
    location = start(client, "shop-agent", {})
    wait_for(client, location)
    finished = client.post(location + "/cancel")
    assert finished.status_code == 409
    assert "already completed" in finished.json()["error"]
    assert client.delete("/engagements/no-such-id").status_code == 404
    assert client.get("/engagements/no-such-id").status_code == 404


# -- refusals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"order_id": "A-1"}', "text/plain", 415),
        (b'{"order_id": "A-1"}', "application/json; charset=latin-1", 415),
        (b"", "application/json", 400),
        (b"{not json", "application/json", 400),
        (b'["a", "list"]', "application/json", 400),
        (b'"text"', "application/json", 400),
        (b'{"amount": NaN}', "application/json", 400),
        (b"\xff\xfe{}", "application/json", 400),
        (b'{"order_id": "lowercase-1"}', "application/json", 422),
        (b'{"amount": -3}', "application/json", 422),
    ],
)
def test_input_is_validated(client: httpx.Client, content: bytes, content_type: str, status: int) -> None:
    response = client.post("/agents/shop-agent", content=content, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]
    if status == 422:
        assert response.json()["problems"]


def test_body_size_limit_declared_and_streamed(client: httpx.Client) -> None:
    big = b'{"pad": "' + b"x" * 5000 + b'"}'
    declared = client.post("/agents/shop-agent", content=big, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies as the body streams in
        yield big[:3000]
        yield big[3000:]

    streamed = client.post(
        "/agents/shop-agent", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert "4096 bytes" in streamed.json()["error"]


def test_unknown_agents_routes_and_methods(client: httpx.Client) -> None:
    assert client.get("/agents/nobody").status_code == 404
    assert client.post("/agents/nobody", json={}).status_code == 404
    missing = client.get("/nowhere")
    assert (missing.status_code, missing.headers["content-type"]) == (404, "application/json")
    wrong = client.put("/agents/shop-agent", json={})
    assert wrong.status_code == 405
    assert set(wrong.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD", "POST"}
    assert wrong.json()["error"]


# -- apps with their own limits --------------------------------------------------------------------------


def test_bearer_token_guards_every_route(tmp_path: Path) -> None:
    app = create_app(shop_agents(tmp_path), shop_runner, token="s3cret-\u00e9")
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        for method, path in [("GET", "/agents"), ("GET", "/agents/shop-agent"), ("POST", "/agents/shop-agent"),
                             ("GET", "/engagements/x"), ("DELETE", "/engagements/x")]:  # fmt: skip
            missing = http.request(method, path, json={})
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == 'Bearer realm="agentguard-server"'
            wrong = http.request(method, path, json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        authorized = {b"Authorization": "Bearer s3cret-\u00e9".encode()}
        assert http.get("/agents", headers=authorized).status_code == 200
        response = http.post("/agents/shop-agent", json={}, headers=authorized)
        assert response.status_code == 303
        state = http.get(response.headers["location"], params={"wait": 5}, headers=authorized).json()
        assert state["status"] == "completed"


def test_concurrency_limit_answers_429_and_frees_the_slot(tmp_path: Path) -> None:
    app = create_app(shop_agents(tmp_path), shop_runner, max_concurrency=1)
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        first = start(http, "shop-agent", {"gate": "busy"})
        busy = http.post("/agents/shop-agent", json={})
        assert busy.status_code == 429
        assert busy.headers["retry-after"] == "1"
        gate("busy").set()
        assert wait_for(http, first)["status"] == "completed"
        assert wait_for(http, start(http, "shop-agent", {}))["status"] == "completed"


def test_run_timeout_fails_the_engagement_and_refuses_later_steps(tmp_path: Path) -> None:
    app = create_app(shop_agents(tmp_path), shop_runner, run_timeout=0.3, max_concurrency=1)
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        location = start(http, "shop-agent", {"gate": "timeout"})
        state = wait_for(http, location)
        assert state["status"] == "failed"
        assert state["error"] == {"type": "Timeout", "message": "the run did not finish within 0.3 s"}
        # The sync runner is still blocked: it keeps its slot until it returns ...
        assert http.post("/agents/shop-agent", json={}).status_code == 429
        calls = len(CALLED)
        gate("timeout").set()
        # ... and then finds its engagement cancelled: the tool it calls never runs.
        deadline = time.monotonic() + 5
        while (again := http.post("/agents/shop-agent", json={})).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert again.status_code == 303
        assert wait_for(http, again.headers["location"])["status"] == "completed"
        assert CALLED[calls:] == ["lookup-order"]  # only the second engagement's


def test_cancel_interrupts_an_async_runner(tmp_path: Path) -> None:
    app = create_app(shop_agents(tmp_path), async_shop_runner)
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        location = start(http, "shop-agent", {"seconds": 30})
        time.sleep(0.1)
        began = time.monotonic()
        assert http.delete(location).json()["status"] == "cancelled"
        assert time.monotonic() - began < 2
        assert "async-runner-cancelled" in CALLED
        assert wait_for(http, start(http, "shop-agent", {}))["output"]["status"] == "shipped"


@pytest.mark.parametrize("runner", [shop_runner, async_shop_runner])
def test_cancelling_at_once_frees_the_slot(tmp_path: Path, runner: Any) -> None:
    body = {"seconds": 30} if runner is async_shop_runner else {}
    app = create_app(shop_agents(tmp_path), runner, max_concurrency=1)
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        for _ in range(20):  # cancelled before, while or after the runner runs; a leaked slot would stay 429
            deadline = time.monotonic() + 5
            while (response := http.post("/agents/shop-agent", json=body)).status_code == 429:
                assert time.monotonic() < deadline, "the slot of a cancelled engagement was not freed"
                time.sleep(0.01)
            assert response.status_code == 303
            assert http.delete(response.headers["location"]).status_code in (200, 409)


class BrokenStore:
    async def save(self, record: EngagementRecord) -> None:
        raise ConnectionError("the store is down")

    async def load(self, engagement_id: str) -> EngagementRecord | None:
        raise ConnectionError("the store is down")


def test_a_failing_store_answers_503_and_holds_no_slot(tmp_path: Path) -> None:
    app = create_app(shop_agents(tmp_path), shop_runner, store=BrokenStore(), max_concurrency=1)
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url) as http:
        for _ in range(3):
            assert http.post("/agents/shop-agent", json={}).status_code == 503
        assert http.get("/engagements/x").status_code == 503
        assert http.delete("/engagements/x").status_code == 503


def test_shutdown_cancels_running_engagements(tmp_path: Path) -> None:
    store = RecordingStore()
    app = create_app(shop_agents(tmp_path), async_shop_runner, store=store)
    with TestClient(app, follow_redirects=False) as http:  # runs the app's lifespan
        response = http.post("/agents/shop-agent", json={"seconds": 30})
        assert response.status_code == 303
    final: dict[str, Any] = store.saved[-1].to_json()
    assert final["status"] == "cancelled"
    assert final["error"]["message"] == "the server is shutting down"
