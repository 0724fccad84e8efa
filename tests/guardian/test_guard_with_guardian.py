"""The Guard and a real reference guardian on 127.0.0.1: allow, deny, modify, failures, observe mode.

Every request the Guard sends is checked twice: by agentguard's own AOS models (the text's shapes) and by
the published AOS JSON Schema with its known defects patched (see tests/aos/schema_check.py).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agentguard import (
    Guard,
    GuardianDenied,
    Outcome,
    Phase,
    RestrictionViolation,
    Rule,
    User,
    steps,
)
from agentguard.aos import parse_request
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.aos.schema_check import schema_errors
from tests.conftest import spec_text
from tests.guardian_server.support import SHELL_AND_EMAIL_RULES

RULES = (
    "default_decision: allow"
    + SHELL_AND_EMAIL_RULES
    + """\
  - name: reroute
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "forward"
    decision: modify
    message: Rerouted
    set:
      params.toolCallRequest.inputs: '[{"name": "to", "value": "eve@evil.test"}]'
  - name: secret-results
    methods: [steps/toolCallResult]
    when: params.result.outputs.exists(p, p.text.contains("SECRET"))
    decision: deny
    message: Result carries a secret
  - name: shorten-results
    methods: [steps/toolCallResult]
    when: params.result.outputs.exists(p, p.text.contains("LONG"))
    decision: modify
    message: Shortened
    set:
      params.result.outputs: '[{"kind": "text", "text": "short"}]'
  - name: polite
    methods: [steps/message]
    when: params.message.content.exists(p, p.text.contains("stupid"))
    decision: modify
    message: Made polite
    set:
      params.message.content: '[{"kind": "text", "text": "[removed]"}]'
  - name: no-secret-knowledge
    methods: [steps/knowledgeRetrieval]
    when: params.knowledgeStep.results.exists(r, r.content.contains("SECRET"))
    decision: deny
    message: Knowledge carries a secret
"""
)

SPEC = spec_text(
    """
    capabilities:
      shell:
      send-email:
      forward:
        input_restriction:
          assertion: recent["forward"].inputs.to.endsWith("@corp.com")
      search:
    """
)


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server:
        yield server


def _guard(url: str, **client_options: Any) -> tuple[Guard, dict[str, list[Any]]]:
    client = GuardianClient(url, timeout=2.0, **client_options)
    guard = Guard.from_yaml(SPEC, guardian=client)
    seen: dict[str, list[Any]] = {}

    @guard.tool
    def shell(cmd: str) -> str:
        seen.setdefault("shell", []).append(cmd)
        return "ran"

    @guard.tool
    def send_email(to: str, body: str) -> str:
        seen.setdefault("send-email", []).append((to, body))
        return "sent"

    @guard.tool
    def forward(to: str) -> str:
        seen.setdefault("forward", []).append(to)
        return "forwarded"

    @guard.tool
    def search(q: str) -> Any:
        return {"hits": [q]} if q != "long" else "LONG " * 5

    return guard, seen


def _check_wire(requests: list[dict[str, Any]]) -> None:
    assert requests
    for request in requests:
        parse_request(request)  # agentguard's own models: the text's shapes
        assert schema_errors(request) == []


def test_allow_records_request_and_result_steps(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement(user=User(id="u1", email="ann@corp.com")) as eng:
        assert guard.call("search", {"q": "x"}) == {"hits": ["x"]}
    step = eng.steps[-1]
    assert [d.rule for d in step.decisions if d.rule is Rule.GUARDIAN] == [Rule.GUARDIAN, Rule.GUARDIAN]
    assert [r["method"] for r in step.aos] == ["steps/toolCallRequest", "steps/toolCallResult"]
    context = step.aos[0]["params"]["context"]
    assert context["session"]["id"] == eng.id
    assert context["user"] == {"id": "u1", "email": "ann@corp.com", "organization": {"id": "unknown"}}
    assert step.aos[0]["params"]["toolCallRequest"]["executionId"] == step.aos[1]["params"]["executionId"]
    _check_wire(step.aos)


def test_deny_stops_the_call_before_it_runs(guardian: RunningServer) -> None:
    guard, seen = _guard(guardian.url)
    with guard.engagement() as eng:
        with pytest.raises(GuardianDenied) as info:
            guard.call("shell", {"cmd": "rm -rf /"})
        assert info.value.reason == "No shell access"
        assert info.value.reason_code == "shell"
        assert eng.view()["history"]["_total"] == 0
    assert "shell" not in seen


def test_a_guardian_set_after_the_guard_was_built_is_asked_from_the_next_step(
    guardian: RunningServer,
) -> None:
    guard, seen = _guard(guardian.url)
    client = guard.guardian
    guard.guardian = None
    with guard.engagement():
        assert guard.call("shell", {"cmd": "ls"}) == "ran"  # no guardian: the spec allows it
        guard.guardian = client
        with pytest.raises(GuardianDenied, match="No shell access"):
            guard.call("shell", {"cmd": "ls"})
    assert seen["shell"] == ["ls"]
    assert guard.guardian is client


def test_modify_rewrites_the_inputs_the_tool_receives(guardian: RunningServer) -> None:
    guard, seen = _guard(guardian.url)
    with guard.engagement() as eng:
        assert guard.call("send-email", {"to": "bob@corp.com", "body": "the password is 42"}) == "sent"
        assert eng.view()["recent"]["send-email"]["inputs"]["body"] == "[redacted]"
        assert eng.steps[-1].outcome is Outcome.MODIFY
    assert seen["send-email"] == [("bob@corp.com", "[redacted]")]


def test_a_modified_request_is_checked_against_local_rules_again(guardian: RunningServer) -> None:
    guard, seen = _guard(guardian.url)
    with guard.engagement() as eng:
        with pytest.raises(RestrictionViolation):
            guard.call("forward", {"to": "bob@corp.com"})
        assert eng.view()["history"]["_total"] == 0
    assert "forward" not in seen


def test_result_deny_withholds_and_result_modify_replaces(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement() as eng:
        assert guard.call("search", {"q": "long"}) == "short"
        assert eng.view()["recent"]["search"]["outputs"] == "short"
    guard2 = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=GuardianClient(guardian.url))

    @guard2.tool(name="lookup")
    def lookup2() -> str:
        return "SECRET plans"

    with guard2.engagement() as eng2:
        with pytest.raises(GuardianDenied) as info:
            guard2.call("lookup", {}, lookup2)
        assert info.value.phase is Phase.OUTPUT
        assert eng2.view()["recent"]["lookup"]["outputs"] is None


def test_messages_and_other_steps_go_to_the_guardian(guardian: RunningServer) -> None:
    guard, _ = _guard(guardian.url)
    with guard.engagement() as eng:
        assert eng.check_input("what is this?") == "what is this?"
        assert eng.check_output("you are stupid") == "[removed]"
        assert eng.report_message("system", "note") == "note"
        eng.report(steps.MemoryStore(memory=["m"]))
        eng.report(steps.AgentTrigger(event_type="email", event_id="e1", text="hi"))
        eng.report(
            steps.A2A("message/send", {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}})
        )
        eng.report(steps.MCP({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        with pytest.raises(GuardianDenied):
            eng.report_knowledge_retrieval("q", [{"id": "kb1", "content": "SECRET"}])
    _check_wire([r for s in eng.steps for r in s.aos])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_guardian_down_follows_on_failure_deny() -> None:
    guard, _ = _guard(f"http://127.0.0.1:{_free_port()}/")
    with guard.engagement() as eng:
        with pytest.raises(GuardianDenied, match="without guardian decision"):
            guard.call("search", {"q": "x"})
        decision = eng.steps[-1].decisions[-1]
        assert decision.outcome is Outcome.DENY
        assert "transport" in decision.reason


def test_guardian_down_follows_on_failure_allow_and_is_recorded() -> None:
    guard, _ = _guard(f"http://127.0.0.1:{_free_port()}/", on_failure="allow")
    with guard.engagement() as eng:
        assert guard.call("search", {"q": "x"}) == {"hits": ["x"]}
    outcomes = [d.outcome for d in eng.steps[-1].decisions if d.rule is Rule.GUARDIAN]
    assert outcomes == [Outcome.NO_DECISION, Outcome.NO_DECISION]
    assert eng.steps[-1].outcome is Outcome.NO_DECISION


def test_async_calls_use_the_async_client(guardian: RunningServer) -> None:
    guard, seen = _guard(guardian.url)

    async def main() -> None:
        async with guard.engagement() as eng:
            assert await guard.acall("send-email", {"to": "a@corp.com", "body": "x"}) == "sent"
            with pytest.raises(GuardianDenied):
                await guard.acall("shell", {"cmd": "ls"})
            assert await eng.acheck_output("stupid") == "[removed]"

    asyncio.run(main())
    assert seen["send-email"] == [("a@corp.com", "[redacted]")]


def test_observe_mode_never_blocks_and_delivers_everything(guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url, mode="observe")
    guard = Guard.from_yaml(SPEC, guardian=client)

    @guard.tool
    def shell(cmd: str) -> str:
        return "ran"

    with guard.engagement() as eng:
        for i in range(20):
            assert shell(cmd=f"echo {i}") == "ran"  # observe: the guardian's deny does not stop it
    assert client.stats.delivered == 40  # request + result of each call, flushed at engagement end
    assert client.stats.dropped == 0
    _check_wire([r for s in eng.steps for r in s.aos])


def test_observe_mode_requests_are_handed_over_by_the_driver_sync_async_and_after_the_fact(
    guardian: RunningServer,
) -> None:
    """The observe-mode hand-over is an effect the driver performs (agentguard.pipeline.Observe), so that
    the client's own code -- its queue, its drop listeners -- never runs inside a policy flow; under the sync
    API, the async API, and for a call recorded after the fact."""
    client = GuardianClient(guardian.url, mode="observe")
    guard = Guard.from_yaml(SPEC, guardian=client)
    handed: list[str] = []
    submit = client.submit

    def counted(request: dict[str, object]) -> None:
        handed.append(str(request["method"]))
        submit(request)

    client.submit = counted  # type: ignore[method-assign]

    @guard.tool
    async def shell(cmd: str) -> str:
        return "ran"

    async def main() -> None:
        async with guard.engagement() as eng:
            assert await shell(cmd="ls") == "ran"
            eng.record_call("shell", {"cmd": "pwd"}, "ran before")
            assert guard.call("send-email", {"to": "a@corp.com"}, lambda to: "sent") == "sent"

    asyncio.run(main())
    assert handed == ["steps/toolCallRequest", "steps/toolCallResult"] * 3
    assert client.stats.delivered == 6
