"""The guardian client against agentguard's own reference guardian (``agentguard.guardian.server``).

Real sockets, real JSON-RPC, real rules: the client and the server were written apart, from the same
specification, so agreeing here is evidence that both read it the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from agentguard import Guard, GuardianDenied, Outcome, Rule, steps
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianVerdict
from tests.conftest import spec_text
from tests.guardian_client import guardian_client_support as support
from tests.guardian_server.support import SHELL_AND_EMAIL_RULES

server = pytest.importorskip("agentguard.guardian.server", reason="the reference guardian is not available")

WAIT = 30.0
TOKEN = "reference-token"


def tool_call(request_id: str | int, tool: str, **inputs: Any) -> dict[str, Any]:
    """A complete ``steps/toolCallRequest`` in wire JSON, as the Guard would send it."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "steps/toolCallRequest",
        "params": {
            "context": {
                "agent": {
                    "name": "support-agent",
                    "id": "support-agent",
                    "instructions": "You help customers.",
                    "version": "1.0.0",
                    "provider": {"name": "Corp", "url": "https://corp.example"},
                },
                "session": {"id": "engagement-1"},
                "turnId": "turn-1",
                "stepId": f"step-{request_id}",
                "timestamp": "2025-07-01T12:00:00Z",
            },
            "toolCallRequest": {
                "executionId": f"call-{request_id}",
                "toolId": tool,
                "inputs": [{"name": name, "value": value} for name, value in inputs.items()],
            },
        },
    }


@pytest.fixture(scope="module")
def guardian_url() -> Iterator[str]:
    app = server.create_app(server.parse_rules(SHELL_AND_EMAIL_RULES), token=TOKEN)
    with server.serve_in_thread(app) as running:
        yield running.url + "aos"


@pytest.fixture(params=["sync", "async"])
def decide(request: pytest.FixtureRequest, guardian_url: str) -> Any:
    flavour = request.param

    def run(aos_request: dict[str, Any], **options: Any) -> GuardianVerdict:
        options.setdefault("token", TOKEN)
        return support.decide(flavour, guardian_url, aos_request, **options)

    return run


def test_allow(decide: Any) -> None:
    verdict = decide(tool_call("a-1", "lookup-order", order=17))
    assert verdict.outcome is GuardianOutcome.ALLOW
    assert verdict.proceeded is True


def test_deny(decide: Any) -> None:
    verdict = decide(tool_call(7, "shell", command="rm -rf /"))
    assert verdict.outcome is GuardianOutcome.DENY
    assert (verdict.message, verdict.reason_codes, verdict.proceeded) == (
        "No shell access",
        ("shell",),
        False,
    )


def test_modify_is_a_whole_replacement_request(decide: Any) -> None:
    original = tool_call("m-1", "send-email", to="bob@corp.example", body="secret")
    verdict = decide(copy.deepcopy(original))
    assert verdict.outcome is GuardianOutcome.MODIFY
    replacement = verdict.modified_request
    assert replacement is not None
    assert (replacement["id"], replacement["method"]) == ("m-1", "steps/toolCallRequest")
    expected = copy.deepcopy(original["params"])
    expected["toolCallRequest"]["inputs"][1]["value"] = "[redacted]"
    assert replacement["params"]["toolCallRequest"] == expected["toolCallRequest"]
    assert replacement["params"]["context"]["session"] == {"id": "engagement-1"}


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_a_refused_token_ends_in_the_policy(decide: Any, on_failure: str) -> None:
    verdict = decide(tool_call("t-1", "lookup-order"), token="wrong", on_failure=on_failure)
    assert (verdict.outcome, verdict.failure) == (GuardianOutcome.NO_DECISION, "http 401")
    assert verdict.proceeded is (on_failure == "allow")


def test_an_invalid_request_is_a_jsonrpc_error(decide: Any) -> None:
    bad = tool_call("bad-1", "lookup-order")
    del bad["params"]["context"]
    verdict = decide(bad)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("jsonrpc -32602"), verdict.failure


def test_ping(guardian_url: str) -> None:
    with GuardianClient(guardian_url, token=TOKEN) as client:
        result = client.ping(2000)
    assert result["status"] == "connected"
    assert isinstance(result["version"], str)


def test_ping_on_start_then_decide(guardian_url: str) -> None:
    with GuardianClient(guardian_url, token=TOKEN, ping_on_start=True) as client:
        assert client.decide(tool_call(1, "shell")).outcome is GuardianOutcome.DENY


def test_observe_mode_delivers_everything_in_order(guardian_url: str) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    with GuardianClient(
        guardian_url, mode="observe", token=TOKEN, on_event=lambda *e: events.append(e)
    ) as client:
        for n in range(100):
            client.submit(tool_call(n, "shell" if n % 2 else "lookup-order"))
        assert client.flush(WAIT)
        stats = client.stats
    assert [data["id"] for _, data in events] == list(range(100))
    outcomes = [data["verdict"].outcome for _, data in events]  # type: ignore[attr-defined]
    assert outcomes == [GuardianOutcome.ALLOW, GuardianOutcome.DENY] * 50
    assert (stats.delivered, stats.failed, stats.dropped) == (100, 0, 0)


def test_a_relayed_peers_unknown_method_is_recorded_as_one_bounded_line(guardian_url: str) -> None:
    """A host relaying an A2A peer's message passes the method the peer wrote; the guardian answers
    ``Method not found: <that method>``, which the client quoted whole into the step's recorded reason (here
    200 KB, a forged line, a NUL and a lone surrogate)."""
    method = "tasks/send\nFORGED LINE " + "A" * 200_000 + "\x00\ud800"
    a2a = steps.A2A(a2a_method=method, payload={"message": "hi"})  # type: ignore[arg-type]
    with GuardianClient(guardian_url, token=TOKEN, timeout=WAIT) as client:
        guard = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=client)
        with guard.engagement() as engagement, pytest.raises(GuardianDenied) as denied:
            engagement.report(a2a)
    (decision,) = [d for d in engagement.steps[-1].decisions if d.rule is Rule.GUARDIAN]
    assert decision.outcome is Outcome.DENY
    assert decision.reason.startswith(
        "denied without guardian decision: jsonrpc -32601: 'Method not found: tasks/send\\nFORGED LINE AAA"
    ), decision.reason[:200]
    assert len(decision.reason) <= 1_000, len(decision.reason)
    assert decision.reason.isprintable(), decision.reason
    assert decision.reason in str(denied.value)
