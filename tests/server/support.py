"""Agents, runners and servers shared by the OpenAgentSpec server's tests.

``shop-agent`` is the agent most tests serve: a tool with a restriction and a review, an input guardrail
and ``exposes``. Its runner does what the input's ``action`` says, so one server answers every scenario;
``gate`` names a :class:`threading.Event` the runner waits on, so a test decides when a run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from agentguard import Approval, Engagement, Guard, GuardrailViolation, ReviewRequest
from agentguard.remote import RemoteLimits, attach_remote_agents
from agentguard.server import ServedAgent, load_agents
from agentguard.server._store import EngagementRecord, MemoryEngagementStore
from tests.conftest import spec_text
from tests.guardian_client.hostile_http import Script, http_response

SHOP_SPEC = spec_text(
    """
    capabilities:
      lookup-order:
      refund:
        input_restriction:
          require_review: supervisor
          assertion: recent["refund"].inputs.amount <= 100
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok == true
    exposes:
      lookups: history._total
      last: recent._name
    """,
    name="shop-agent",
)

ORDER_SCHEMA = """{
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"},
    "amount": {"type": "integer", "minimum": 0}
  }
}
"""

GATES: dict[str, threading.Event] = {}
"""Events runners wait on, by the name an input gives as ``gate``."""

CALLED: list[str] = []
"""Tools actually invoked, in order (a refused call never gets here)."""


def gate(name: str) -> threading.Event:
    return GATES.setdefault(name, threading.Event())


def lookup_order(order_id: str) -> dict[str, Any]:
    CALLED.append("lookup-order")
    return {"order_id": order_id, "status": "shipped"}


def refund(amount: int) -> dict[str, Any]:
    CALLED.append("refund")
    return {"refunded": amount}


def pii_check(text: str) -> dict[str, Any]:
    return {"ok": "ssn" not in text}


def shop_runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
    """A sync runner doing what ``input["action"]`` says."""
    action = input.get("action", "lookup")
    if input.get("gate"):
        gate(input["gate"]).wait(10)
    if action == "lookup":
        return guard.call("lookup-order", {"order_id": input.get("order_id", "A-1")}, lookup_order)
    if action == "refund":
        return guard.call("refund", {"amount": input["amount"]}, refund)
    if action == "guardrail":
        engagement.check_input(input["text"])
        return "passed"
    if action == "guardrail-swallowed":
        try:
            engagement.check_input(input["text"])
        except GuardrailViolation:
            return "the model answer the guardrail should have stopped"
    if action == "crash":
        raise RuntimeError("database password is hunter2")
    return None


async def async_shop_runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
    """An async runner: waits ``seconds`` (cancellable), then looks an order up."""
    import asyncio

    try:
        await asyncio.sleep(input.get("seconds", 0))
    except asyncio.CancelledError:
        CALLED.append("async-runner-cancelled")
        raise
    return await guard.acall("lookup-order", {"order_id": "A-1"}, lookup_order)


def approve_when_gate_opens(request: ReviewRequest) -> Approval:
    gate("review").wait(10)
    return Approval(True, "looks fine", "supervisor")


def write_shop_dir(directory: Path, *, schema: bool = False) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "shop.yaml").write_text(SHOP_SPEC)
    if schema:
        (directory / "shop.input_schema.json").write_text(ORDER_SCHEMA)
    return directory


def shop_setup(guard: Guard) -> None:
    """What ``agentguard serve --setup`` calls for each agent: the shop's guardrail tool and reviewer."""
    guard.register("pii-check", pii_check)
    # create_app(reviewers=...) replaces this refusing supervisor when a test gives one
    guard.add_reviewer("supervisor", lambda request: False)


def shop_agents(directory: Path, *, schema: bool = False) -> list[ServedAgent]:
    agents = load_agents(write_shop_dir(directory, schema=schema))
    shop_setup(agents[0].guard)
    return agents


def wait_for(client: httpx.Client, location: str, *, until: str | None = None, seconds: float = 10) -> Any:
    """The engagement state once it finished (long polling), or once its status is ``until``."""
    deadline = time.monotonic() + seconds
    while True:
        state = client.get(location, params={"wait": 0 if until else 5}).json()
        if (state["status"] == until) if until else state["status"] not in ("running", "awaiting-review"):
            return state
        assert time.monotonic() < deadline, f"engagement still {state['status']}"
        time.sleep(0.02)


def start(client: httpx.Client, agent: str, body: Any) -> str:
    """POST ``body`` to the agent; the Location of the engagement (asserting the 303)."""
    response = client.post(f"/agents/{agent}", json=body)
    assert response.status_code == 303, response.text
    location: str = response.headers["location"]
    return location


class RecordingStore(MemoryEngagementStore):
    """The in-memory store, keeping every record saved, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[EngagementRecord] = []

    async def save(self, record: EngagementRecord) -> None:
        self.saved.append(record)
        await super().save(record)


class Recorder:
    """ASGI middleware noting every request: (method, path with query, status, request headers).

    A request is noted when it arrives and its status when the answer starts, so by the time a client
    has an answer, the request is in :meth:`seen` with its status.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[list[Any]] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"] + (("?" + scope["query_string"].decode()) if scope["query_string"] else "")
        headers = httpx.Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]])
        entry = [scope["method"], path, 0, headers]
        with self._lock:
            self.requests.append(entry)

        async def note(message: Any) -> None:
            if message["type"] == "http.response.start":
                entry[2] = message["status"]
            await send(message)

        await self.app(scope, receive, note)

    def seen(self, method: str | None = None) -> list[tuple[str, str, int, httpx.Headers]]:
        with self._lock:
            return [(m, p, s, h) for m, p, s, h in self.requests if method is None or m == method]

    def wait_seen(self, method: str, count: int = 1) -> list[tuple[str, str, int, httpx.Headers]]:
        """Like :meth:`seen`, once ``count`` such requests were noted (a client may see the answer first)."""
        deadline = time.monotonic() + 5
        while len(found := self.seen(method)) < count:
            assert time.monotonic() < deadline, f"{count} {method} request(s) expected, saw {len(found)}"
            time.sleep(0.01)
        return found

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()


@contextlib.contextmanager
def serve_tls(app: Any, certfile: Path, keyfile: Path) -> Iterator[str]:
    """``app`` over HTTPS on a free 127.0.0.1 port (uvicorn's own TLS); yields the base URL."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        ssl_certfile=str(certfile),
        ssl_keyfile=str(keyfile),
        log_config=None,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn (TLS) stopped"
        assert time.monotonic() < deadline, "uvicorn (TLS) did not start"
        time.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


# -- a hostile remote agent's server (raw sockets: tests/guardian_client/hostile_http.py) -----------------

REMOTE_DEFINITION = spec_text("capabilities:\n  lookup:\n", name="billing-agent").encode()
"""The definition a hostile ``billing-agent`` server answers with: a valid one."""


def remote_script(state: Iterable[bytes] | None = None, definition: bytes = REMOTE_DEFINITION) -> Script:
    """A script for :class:`HostileServer`: ``definition`` at once; a start answered 303; each state request
    answered with what ``state`` yields (a list: the same bytes every time; an iterator: once)."""

    def script(method: str, path: str) -> Iterator[bytes]:
        if method == "GET" and path.endswith("/billing-agent"):
            yield http_response(definition, content_type="application/yaml")
        elif method == "POST":
            yield http_response(b"", status="303 See Other").replace(
                b"\r\n\r\n", b"\r\nLocation: /agents/billing-agent/engagements/e1\r\n\r\n", 1
            )
        elif method == "DELETE":
            yield http_response(b"", status="204 No Content")
        elif state is not None:
            yield from state

    return script


def remote_front_desk(url: str, limits: RemoteLimits) -> Guard:
    """``front-desk``, whose capability ``billing-agent`` is the remote agent served at ``url`` (plain HTTP)."""
    host = httpx.URL(url).netloc.decode()
    guard = Guard.from_yaml(
        spec_text(f"capabilities:\n  oagent://{host}/agents/billing-agent:\n", name="front-desk")
    )
    attach_remote_agents(guard, allow_hosts=[host], allow_insecure_loopback=True, limits=limits)
    return guard


def call_remote(guard: Guard, flavour: str) -> Any:
    """Call ``billing-agent`` through ``guard`` in an engagement: ``"sync"`` (guard.call) or ``"async"``."""
    if flavour == "sync":
        with guard.engagement():
            return guard.call("billing-agent", {"input": {"q": 1}}, kind="agent")

    async def main() -> Any:
        async with guard.engagement():
            return await guard.acall("billing-agent", {"input": {"q": 1}}, kind="agent")

    return asyncio.run(main())
