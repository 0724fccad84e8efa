"""Helpers shared by the guardian client tests (the repository root is on sys.path: see pyproject).

The fault guardian is a small Starlette app (served by uvicorn from the ``fault_server`` fixture in
conftest.py on 127.0.0.1, a free port bound before uvicorn starts). The path selects its behaviour, so one
server serves every test::

    /allow          answers allow (and answers ping)
    /slow           waits until the test ends (the client's timeout fires first)
    /garbage        200 with an HTML body
    /jsonrpc-error  a JSON-RPC -32603 error
    /unappliable    modify with a modifiedRequest for another method
    /503            HTTP 503, no body
    /record         records the request id in arrival order, answers allow (and answers ping)
    /gate           records, signals ``arrived``, then waits for ``gate`` before answering allow

Waiting handlers wait on events that the per-test ``fault`` fixture sets at teardown, so nothing hangs.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentguard.guardian import GuardianClient, GuardianVerdict


def decide(flavour: str, url: str, request: dict[str, object], **options: Any) -> GuardianVerdict:
    """One decision of a fresh client of the guardian at ``url``, through the ``sync`` or ``async`` driver."""
    if flavour == "sync":
        with GuardianClient(url, **options) as client:
            return client.decide(request)

    async def main() -> GuardianVerdict:
        async with GuardianClient(url, **options) as client:
            return await client.adecide(request)

    return asyncio.run(main())


def step(request_id: object = "step-1", method: str = "steps/toolCallRequest") -> dict[str, object]:
    """A small AOS request in wire JSON (the client does not validate params)."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {"toolCallRequest": {"executionId": "x-1", "toolId": "send-email", "inputs": []}},
    }


def answer(result: dict[str, object]) -> Callable[[httpx.Request], httpx.Response]:
    """A mock guardian that answers every request with ``result`` under the request's own id."""

    def handler(request: httpx.Request) -> httpx.Response:
        request_id = json.loads(request.content)["id"]
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": request_id, "result": result})

    return handler


class Recorder:
    """A mock transport handler that records every request and replies with a scripted sequence.

    Each item of ``script`` is either an ``httpx.Response`` factory taking the request, or an exception to
    raise; the last item repeats.
    """

    def __init__(self, *script: Callable[[httpx.Request], httpx.Response] | Exception) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.script[min(len(self.requests), len(self.script)) - 1]
        if isinstance(item, Exception):
            raise item
        return item(request)

    @property
    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(request.content) for request in self.requests]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


def status(code: int) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(code)


def raw(body: bytes, code: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(code, content=body)


def envelope(**fields: object) -> Callable[[httpx.Request], httpx.Response]:
    """A reply whose JSON body is exactly ``fields`` (use ``id=...`` etc.)."""
    return lambda request: httpx.Response(200, json=fields)


WAIT_LIMIT = 30.0  # seconds a waiting handler gives up after, should a test forget to release it


@dataclass
class FaultState:
    """What the fault guardian saw, and the events its waiting handlers wait on. Fresh for every test."""

    arrivals: list[object] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def release_all(self) -> None:
        self.gate.set()
        self.release.set()


def _allow(request_id: object) -> JSONResponse:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": request_id, "result": {"decision": "allow", "message": "ok"}}
    )


class FaultGuardian:
    """The app; ``state`` is swapped for a fresh one by each test."""

    def __init__(self) -> None:
        self.state = FaultState()

    async def endpoint(self, request: Request) -> Response:
        state = self.state  # the state of the test that sent this request, even if it ends meanwhile
        mode = request.path_params["mode"]
        payload = json.loads(await request.body())
        request_id = payload.get("id")
        if payload.get("method") == "ping" and mode in ("allow", "record"):
            pong = {"status": "connected", "version": "fault-1", "timestamp": "2025-07-01T12:00:00Z"}
            return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": pong})
        if mode == "allow":
            return _allow(request_id)
        if mode == "slow":
            await asyncio.to_thread(state.release.wait, WAIT_LIMIT)
            return _allow(request_id)
        if mode == "garbage":
            return Response(b"<html>502 Bad Gateway</html>", media_type="text/html")
        if mode == "jsonrpc-error":
            error = {"code": -32603, "message": "Internal error"}
            return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error})
        if mode == "unappliable":
            modified = {"jsonrpc": "2.0", "id": request_id, "method": "steps/memoryStore", "params": {}}
            result = {"decision": "modify", "message": "changed", "modifiedRequest": modified}
            return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})
        if mode == "503":
            return Response(status_code=503)
        if mode in ("record", "gate"):
            state.arrivals.append(request_id)
            state.methods.append(payload.get("method"))
            state.headers.append(dict(request.headers))
            if mode == "gate":
                state.arrived.set()
                await asyncio.to_thread(state.gate.wait, WAIT_LIMIT)
            return _allow(request_id)
        return Response(status_code=404)


@dataclass
class FaultServer:
    base: str
    app: FaultGuardian

    def url(self, mode: str) -> str:
        return f"{self.base}/{mode}"

    @property
    def state(self) -> FaultState:
        return self.app.state
