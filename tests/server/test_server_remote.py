"""Remote agent references between two real servers on 127.0.0.1.

Agent A (``front-desk``) has agent B (``billing-agent``) as a capability by ``oagent://127.0.0.1:PORT/...``.
B is a real agentguard server; the misbehaving servers (invalid YAML, a state that never completes, a
redirect elsewhere, ...) are a small Starlette app. A runs in process (``guard.call`` / ``guard.acall``) and,
for the end-to-end case, behind its own server.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentguard import ConfigurationError, Engagement, Guard, RestrictionViolation, SpecError, User
from agentguard.remote import RemoteAgentError, RemoteLimits, attach_remote_agents
from agentguard.server import RunningServer, ServedAgent, create_app, serve_in_thread
from tests.conftest import spec_text
from tests.server.support import Recorder, serve_tls, start, wait_for

B_TOKEN = "billing-token"

BILLING_SPEC = spec_text(
    """
    capabilities:
      lookup-invoice:
        input_restriction:
          assertion: recent["lookup-invoice"].inputs.amount <= 500
    exposes:
      invoices: history._total
      last: recent._name
    """,
    name="billing-agent",
)

FAST = RemoteLimits(request_timeout=5, call_timeout=10, poll_wait=5, poll_interval=0.01)


def lookup_invoice(invoice: str, amount: int) -> dict[str, Any]:
    return {"invoice": invoice, "amount": amount, "due": "2026-12-01"}


def billing_runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
    time.sleep(input.get("seconds", 0))
    inputs = {"invoice": input["invoice"], "amount": input["amount"]}
    return guard.call("lookup-invoice", inputs, lookup_invoice)


def host_of(url: str) -> str:
    return httpx.URL(url).netloc.decode()


def front_desk_spec(host: str, agent: str = "billing-agent") -> str:
    return spec_text(
        f"""
        capabilities:
          oagent://{host}/agents/{agent}:
            input_restriction:
              assertion: recent["{agent}"].inputs.input.amount <= 1000
        exposes:
          billed: recent["{agent}"].outputs.exposes
        """,
        name="front-desk",
    )


def front_desk(host: str, agent: str = "billing-agent", **options: Any) -> Guard:
    """Agent A, with its remote capability attached (plain HTTP on loopback unless told otherwise)."""
    guard = Guard.from_yaml(front_desk_spec(host, agent))
    options.setdefault("allow_hosts", [host])
    options.setdefault("allow_insecure_loopback", True)
    options.setdefault("limits", FAST)
    attach_remote_agents(guard, **options)
    return guard


def ask(guard: Guard, agent: str = "billing-agent", **input: Any) -> Any:
    with guard.engagement():
        return guard.call(agent, {"input": input}, kind="agent")


@pytest.fixture(scope="module")
def billing() -> Iterator[tuple[RunningServer, Recorder]]:
    agent = ServedAgent.from_guard(Guard.from_yaml(BILLING_SPEC))
    recorder = Recorder(create_app([agent], billing_runner, token=B_TOKEN))
    with serve_in_thread(recorder) as server:
        yield server, recorder


@pytest.fixture
def b_host(billing: tuple[RunningServer, Recorder]) -> str:
    billing[1].clear()
    return host_of(billing[0].url)


@pytest.fixture
def b_log(billing: tuple[RunningServer, Recorder]) -> Recorder:
    return billing[1]


def with_token(host: str, **options: Any) -> Guard:
    return front_desk(host, tokens={host: B_TOKEN}, **options)


# -- the happy path --------------------------------------------------------------------------------------


def test_a_remote_agent_is_called_and_recorded_like_any_capability(b_host: str) -> None:
    guard = front_desk(b_host, tokens={b_host: B_TOKEN})
    with guard.engagement() as eng:
        result = guard.call("billing-agent", {"input": {"invoice": "I-1", "amount": 40}}, kind="agent")
        view = eng.view()
        exposed = eng.exposed()
    expected_exposes = {"invoices": 1, "last": "lookup-invoice"}
    assert result == {
        "output": {"invoice": "I-1", "amount": 40, "due": "2026-12-01"},
        "exposes": expected_exposes,
    }
    assert view["history"]["_list"] == ["billing-agent"]
    assert view["recent"]["billing-agent"]["inputs"] == {"input": {"invoice": "I-1", "amount": 40}}
    assert view["recent"]["billing-agent"]["outputs"] == result
    assert exposed == {"billed": expected_exposes}


async def test_the_async_pipeline_awaits_the_remote_agent(b_host: str) -> None:
    guard = with_token(b_host)
    async with guard.engagement():
        first, second = await asyncio.gather(  # both in flight at once: the loop is not blocked
            guard.acall(
                "billing-agent", {"input": {"invoice": "I-2", "amount": 1, "seconds": 0.3}}, kind="agent"
            ),
            guard.acall(
                "billing-agent", {"input": {"invoice": "I-3", "amount": 2, "seconds": 0.3}}, kind="agent"
            ),
        )
    assert (first["output"]["invoice"], second["output"]["invoice"]) == ("I-2", "I-3")


def test_both_agents_restrictions_apply(b_host: str, b_log: Recorder) -> None:
    guard = with_token(b_host)
    with pytest.raises(RestrictionViolation) as local:  # A's own: B is never asked
        ask(guard, invoice="I-1", amount=2000)
    assert local.value.capability == "billing-agent"
    assert b_log.seen("POST") == []
    with pytest.raises(RemoteAgentError) as remote:  # within A's limit, beyond B's
        ask(guard, invoice="I-1", amount=700)
    error = remote.value
    assert error.remote_status == "denied"
    assert error.remote_error is not None
    assert (error.remote_error["rule"], error.remote_error["capability"]) == ("restriction", "lookup-invoice")
    assert "ended denied: [restriction] assertion is false" in str(error)


def test_a_served_agent_calls_a_remote_one_end_to_end(b_host: str) -> None:
    guard = with_token(b_host)

    async def runner(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
        result = await guard.acall("billing-agent", {"input": input}, kind="agent")
        return result["output"]

    with serve_in_thread(create_app([guard], runner)) as front, httpx.Client(base_url=front.url) as http:
        ok = wait_for(http, start(http, "front-desk", {"invoice": "I-9", "amount": 10}))
        assert ok["status"] == "completed"
        assert ok["output"]["invoice"] == "I-9"
        assert ok["exposes"] == {"billed": {"invoices": 1, "last": "lookup-invoice"}}

        remote_denial = wait_for(http, start(http, "front-desk", {"invoice": "I-9", "amount": 700}))
        assert remote_denial["status"] == "failed"
        assert remote_denial["error"]["type"] == "RemoteAgentError"
        assert remote_denial["error"]["remote"]["status"] == "denied"
        assert remote_denial["error"]["remote"]["error"]["rule"] == "restriction"

        local_denial = wait_for(http, start(http, "front-desk", {"invoice": "I-9", "amount": 5000}))
        assert local_denial["status"] == "denied"
        assert (local_denial["error"]["rule"], local_denial["error"]["capability"]) == (
            "restriction",
            "billing-agent",
        )


def test_the_definition_is_revalidated_with_its_etag(b_host: str, b_log: Recorder) -> None:
    guard = with_token(b_host)
    ask(guard, invoice="I-1", amount=1)
    ask(guard, invoice="I-2", amount=2)
    definition_gets = [r for r in b_log.seen("GET") if r[1] == "/agents/billing-agent"]
    assert [status for _, _, status, _ in definition_gets] == [200, 304]
    assert "if-none-match" in definition_gets[1][3]


def test_state_is_long_polled(b_host: str, b_log: Recorder) -> None:
    ask(with_token(b_host), invoice="I-1", amount=1, seconds=0.5)
    polls = [path for _, path, _, _ in b_log.seen("GET") if path.startswith("/engagements/")]
    assert len(polls) == 1
    assert "?wait=" in polls[0]


# -- B down, slow, refusing ------------------------------------------------------------------------------


def test_b_down_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    guard = front_desk(f"127.0.0.1:{port}")
    with pytest.raises(RemoteAgentError) as caught:
        ask(guard, invoice="I-1", amount=1)
    assert "cannot reach the server when fetching the definition: ConnectError" in str(caught.value)
    assert caught.value.agent == "billing-agent"
    assert caught.value.url == f"http://127.0.0.1:{port}/agents/billing-agent"


def test_b_slow_times_out_and_is_cancelled(b_host: str, b_log: Recorder) -> None:
    limits = RemoteLimits(request_timeout=5, call_timeout=1, poll_wait=0.5, poll_interval=0.01)
    guard = with_token(b_host, limits=limits)
    began = time.monotonic()
    with pytest.raises(RemoteAgentError, match=r"did not finish within 1 s") as caught:
        ask(guard, invoice="I-1", amount=1, seconds=3)
    assert time.monotonic() - began < 2.5
    assert caught.value.remote_status is None
    [(_, path, status, _)] = b_log.wait_seen("DELETE")
    assert status == 200
    state = httpx.get(f"http://{b_host}{path}", headers={"Authorization": f"Bearer {B_TOKEN}"}).json()
    assert state["status"] == "cancelled"


def test_b_refuses_without_its_token(b_host: str) -> None:
    with pytest.raises(RemoteAgentError) as caught:
        ask(front_desk(b_host), invoice="I-1", amount=1)
    assert caught.value.http_status == 401
    assert "answered HTTP 401 when fetching the definition: unauthorized" in str(caught.value)


# -- misbehaving servers ---------------------------------------------------------------------------------


class Fake:
    """A server that breaks the protocol in the way each agent name says."""

    def __init__(self) -> None:
        self.authorization: list[str | None] = []
        self.recorder = Recorder(
            Starlette(
                routes=[
                    Route("/agents/{name}", self.agent, methods=["GET", "POST"]),
                    Route("/engagements/{name}", self.state, methods=["GET", "DELETE"]),
                ]
            )
        )
        self.port = 0

    async def agent(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.authorization.append(request.headers.get("authorization"))
        if request.method == "POST":
            if name == "wanderer":
                return Response(status_code=303, headers={"Location": f"http://localhost:{self.port}/x"})
            if name == "no-location":
                return Response(status_code=303)
            return Response(status_code=303, headers={"Location": f"/engagements/{name}"})
        if name == "bad-yaml":
            return PlainTextResponse("kind: [unclosed", media_type="application/yaml")
        if name == "impostor":
            return PlainTextResponse(
                spec_text("capabilities: {}\n", name="somebody-else"), media_type="application/yaml"
            )
        if name == "moved":
            return Response(status_code=302, headers={"Location": "/agents/elsewhere"})
        text = spec_text("capabilities: {}\n", name=name) + ("# padding\n" * 20_000 if name == "huge" else "")
        return PlainTextResponse(text, media_type="application/yaml")

    async def state(self, request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "DELETE":
            return JSONResponse({"status": "cancelled"})
        if name == "garbled":
            return PlainTextResponse("not json")
        if name == "odd":
            return JSONResponse({"status": "pondering"})
        if name == "echo":
            return JSONResponse({"status": "completed", "output": self.authorization[-1], "exposes": None})
        return JSONResponse({"status": "running"})


@pytest.fixture(scope="module")
def fake() -> Iterator[Fake]:
    fake = Fake()
    with serve_in_thread(fake.recorder) as server:
        fake.port = httpx.URL(server.url).port or 0
        yield fake


def call_fake(fake: Fake, agent: str, **options: Any) -> Any:
    return ask(front_desk(f"127.0.0.1:{fake.port}", agent, **options), agent, invoice="I-1", amount=1)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("bad-yaml", "the definition is not a valid OpenAgentSpec agent"),
        ("impostor", "the definition is of agent 'somebody-else', not 'impostor'"),
        ("moved", "answered HTTP 302 when fetching the definition (redirects are not followed)"),
        ("huge", "the answer when fetching the definition is larger than 65536 bytes"),
        ("wanderer", "redirected to another origin"),
        ("no-location", "answered 303 without a Location"),
        ("garbled", "the engagement state is not JSON"),
        ("odd", "the engagement state has an unknown status 'pondering'"),
    ],
)
def test_a_misbehaving_server_is_a_clear_error(fake: Fake, agent: str, message: str) -> None:
    limits = RemoteLimits(request_timeout=5, call_timeout=5, poll_wait=1, max_response_bytes=65_536)
    with pytest.raises(RemoteAgentError, match=r"^remote agent") as caught:
        call_fake(fake, agent, limits=limits)
    assert message in str(caught.value)
    if agent == "bad-yaml":
        assert isinstance(caught.value.__cause__, SpecError)


def test_a_state_that_never_completes_is_bounded_and_cancelled(fake: Fake) -> None:
    fake.recorder.clear()
    limits = RemoteLimits(request_timeout=5, call_timeout=0.5, poll_wait=0.1, poll_interval=0.05)
    with pytest.raises(RemoteAgentError, match=r"did not finish within 0\.5 s"):
        call_fake(fake, "stuck", limits=limits)
    assert [path for _, path, _, _ in fake.recorder.wait_seen("DELETE")] == ["/engagements/stuck"]
    assert 2 <= len([r for r in fake.recorder.seen("GET") if r[1].startswith("/engagements/")]) <= 10


def test_tokens_go_only_to_their_host(fake: Fake, b_host: str) -> None:
    fake_host = f"127.0.0.1:{fake.port}"
    guard = Guard.from_yaml(
        spec_text(
            f"capabilities:\n  oagent://{fake_host}/agents/echo:\n  oagent://{b_host}/agents/billing-agent:\n"
        )
    )
    attach_remote_agents(
        guard, allow_hosts=[fake_host, b_host], tokens={b_host: B_TOKEN}, allow_insecure_loopback=True
    )
    with guard.engagement():
        assert guard.call("echo", {"input": {}}, kind="agent")["output"] is None
        assert guard.call("billing-agent", {"input": {"invoice": "I", "amount": 1}}, kind="agent")["exposes"]
    assert set(fake.authorization[-3:]) == {None}


def test_a_token_can_follow_the_users_identity(fake: Fake) -> None:
    fake_host = f"127.0.0.1:{fake.port}"
    guard = front_desk(fake_host, "echo", tokens={"127.0.0.1": lambda creds: f"for-{creds.subject}"})
    with guard.engagement(user=User(id="u-42")):
        result = guard.call("echo", {"input": {"invoice": "I", "amount": 1}}, kind="agent")
    assert result == {"output": "Bearer for-u-42", "exposes": {}}


# -- safety settings -------------------------------------------------------------------------------------


def test_remote_hosts_must_be_allowed() -> None:
    spec = front_desk_spec("agents.corp.com:8443")
    with pytest.raises(ConfigurationError, match="not in allow_hosts"):
        attach_remote_agents(Guard.from_yaml(spec), allow_hosts=["other.corp.com"])
    with pytest.raises(ConfigurationError, match="not in allow_hosts"):
        attach_remote_agents(Guard.from_yaml(spec), allow_hosts=["agents.corp.com:443"])
    with pytest.raises(ConfigurationError, match="tokens given for hosts that are not in allow_hosts"):
        attach_remote_agents(Guard.from_yaml(spec), allow_hosts=["agents.corp.com"], tokens={"evil.com": "t"})
    guard = Guard.from_yaml(spec)
    [agent] = attach_remote_agents(guard, allow_hosts=["AGENTS.corp.com:8443"]).values()
    assert agent.url == "https://agents.corp.com:8443/agents/billing-agent"
    with pytest.raises(ConfigurationError, match="already registered"):
        attach_remote_agents(guard, allow_hosts=["agents.corp.com"])


def test_plain_http_only_for_loopback_and_only_when_asked(b_host: str) -> None:
    insecure = {"allow_insecure_loopback": True}
    [remote] = attach_remote_agents(Guard.from_yaml(front_desk_spec("agents.corp.com")),
                                    allow_hosts=["agents.corp.com"], **insecure).values()  # fmt: skip
    assert remote.url.startswith("https://")
    [loopback] = attach_remote_agents(Guard.from_yaml(front_desk_spec("localhost:99")),
                                      allow_hosts=["localhost"], **insecure).values()  # fmt: skip
    assert loopback.url == "http://localhost:99/agents/billing-agent"
    # Without the option, the plain-HTTP server is spoken to in TLS -- and that fails; nothing downgrades.
    guard = front_desk(b_host, tokens={b_host: B_TOKEN}, allow_insecure_loopback=False)
    with pytest.raises(RemoteAgentError, match=r"https://127\.0\.0\.1.*cannot reach"):
        ask(guard, invoice="I-1", amount=1)


def test_input_must_be_a_json_object(b_host: str) -> None:
    guard = Guard.from_yaml(spec_text(f"capabilities:\n  oagent://{b_host}/agents/billing-agent:\n"))
    attach_remote_agents(guard, allow_hosts=[b_host], tokens={b_host: B_TOKEN}, allow_insecure_loopback=True)
    with guard.engagement(), pytest.raises(RemoteAgentError, match="input must be a JSON object, not str"):
        guard.call("billing-agent", {"input": "text"}, kind="agent")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def aask(guard: Guard, agent: str = "billing-agent", **input: Any) -> Any:
    async with guard.engagement():
        return await guard.acall(agent, {"input": input}, kind="agent")


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_remote_agent_over_https(certificate: tuple[Path, Path], flavour: str) -> None:
    cert, key = certificate
    agent = ServedAgent.from_guard(Guard.from_yaml(BILLING_SPEC))

    def call(guard: Guard) -> Any:
        if flavour == "sync":
            return ask(guard, invoice="I-5", amount=5)
        return asyncio.run(aask(guard, invoice="I-5", amount=5))

    with serve_tls(create_app([agent], billing_runner), cert, key) as url:
        host = host_of(url)
        trusted = ssl.create_default_context(cafile=str(cert))
        guard = front_desk(host, allow_insecure_loopback=False, verify=trusted)
        assert call(guard)["output"]["invoice"] == "I-5"
        untrusted = front_desk(host, allow_insecure_loopback=False)  # the system's CAs do not know it
        with pytest.raises(RemoteAgentError, match="CERTIFICATE_VERIFY_FAILED"):
            call(untrusted)


def test_capability_describes_the_remote_agent(b_host: str) -> None:
    guard = with_token(b_host)
    [tool] = guard.agent_descriptor()["tools"]
    assert tool["type"] == "agent_call"
    assert (
        tool["description"]
        == f"Ask the remote agent 'billing-agent' served at http://{b_host}/agents/billing-agent."
    )
    assert tool["arguments"] == [
        {"name": "input", "required": True, "type": "object",
         "description": "the JSON object that starts the remote agent's engagement"},
    ]  # fmt: skip
