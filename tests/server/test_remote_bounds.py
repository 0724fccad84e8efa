"""Issue 13: a hostile remote ``oagent://`` server cannot stretch a call past ``call_timeout``, flood it, or
make loading its definition run away -- and a refused definition means the remote agent is never called.

The hostile server is raw sockets on 127.0.0.1 (tests/guardian_client/hostile_http.py). Times are checked
as "within the bound plus generous slack", never exactly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentguard import SpecError
from agentguard.remote import RemoteAgentError, RemoteLimits
from agentguard.spec import LoadLimits
from tests.conftest import spec_text
from tests.guardian_client.hostile_http import HostileServer, flood, http_response, trickle
from tests.server.support import REMOTE_DEFINITION, call_remote, remote_front_desk, remote_script

SLACK = 4.0


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_trickled_definition_fails_at_call_timeout_and_nothing_is_started(flavour: str) -> None:
    def script(method: str, path: str) -> Iterator[bytes]:
        return trickle(http_response(REMOTE_DEFINITION, content_type="application/yaml"))

    with HostileServer(script, pause=0.4) as server:
        guard = remote_front_desk(server.url, RemoteLimits(request_timeout=10, call_timeout=3))
        started = time.monotonic()
        with pytest.raises(RemoteAgentError, match=r"did not finish within 3 s \(fetching the definition\)"):
            call_remote(guard, flavour)
        elapsed = time.monotonic() - started
        methods = [method for method, _ in server.requests]
    assert elapsed < 3 + SLACK
    assert methods == ["GET"]


def test_request_timeout_is_a_total_too() -> None:
    def script(method: str, path: str) -> Iterator[bytes]:
        return trickle(http_response(REMOTE_DEFINITION, content_type="application/yaml"))

    with HostileServer(script, pause=0.2) as server:
        guard = remote_front_desk(server.url, RemoteLimits(request_timeout=1, call_timeout=60))
        started = time.monotonic()
        with pytest.raises(RemoteAgentError, match=r"no answer within 1 s when fetching the definition"):
            call_remote(guard, "sync")
    assert time.monotonic() - started < 1 + SLACK


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_huge_definition_is_cut_at_the_cap(flavour: str) -> None:
    with HostileServer(
        lambda method, path: flood(64 * 1024 * 1024, content_type="application/yaml")
    ) as server:
        guard = remote_front_desk(server.url, RemoteLimits(call_timeout=30, max_response_bytes=100_000))
        with pytest.raises(RemoteAgentError, match="fetching the definition is larger than 100000 bytes"):
            call_remote(guard, flavour)
        assert [method for method, _ in server.requests] == ["GET"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_huge_state_is_cut_at_the_cap_and_the_engagement_cancelled(flavour: str) -> None:
    with HostileServer(remote_script(flood(64 * 1024 * 1024))) as server:
        guard = remote_front_desk(server.url, RemoteLimits(call_timeout=30, max_response_bytes=100_000))
        with pytest.raises(RemoteAgentError, match="reading the engagement is larger than 100000 bytes"):
            call_remote(guard, flavour)
        methods = [method for method, _ in server.requests]
    assert methods[:3] == ["GET", "POST", "GET"]
    assert methods[-1] == "DELETE"


def test_a_trickled_state_fails_at_call_timeout() -> None:
    state = trickle(http_response(b'{"status": "completed", "output": 1}'))
    with HostileServer(remote_script(state), pause=0.3) as server:
        guard = remote_front_desk(server.url, RemoteLimits(request_timeout=30, call_timeout=3, poll_wait=1))
        started = time.monotonic()
        with pytest.raises(RemoteAgentError, match="did not finish within 3 s"):
            call_remote(guard, "sync")
    assert time.monotonic() - started < 3 + SLACK


def _alias_bomb(capabilities: int, assertion_length: int) -> bytes:
    """A definition under 1 MiB: one long assertion anchored once and aliased by every capability."""
    clauses = " && ".join(f'recent["lookup"].inputs.q != {index}' for index in range(assertion_length // 32))
    lines = [
        "capabilities:",
        "  lookup:",
        "    input_restriction: &rule",
        f"      assertion: '{clauses}'",
    ]
    lines += [f"  tool-{index}:\n    input_restriction: *rule" for index in range(capabilities)]
    head = spec_text("", name="billing-agent")
    return (head + "\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_alias_multiplied_definition_is_refused_quickly_and_the_agent_is_not_called(flavour: str) -> None:
    bomb = _alias_bomb(capabilities=20_000, assertion_length=4_500)
    assert len(bomb) < 1024 * 1024
    with HostileServer(remote_script(definition=bomb)) as server:
        guard = remote_front_desk(server.url, RemoteLimits(call_timeout=20))
        started = time.monotonic()
        with pytest.raises(RemoteAgentError, match="not a valid OpenAgentSpec agent") as info:
            call_remote(guard, flavour)
        elapsed = time.monotonic() - started
        methods = [method for method, _ in server.requests]
    assert isinstance(info.value.__cause__, SpecError)
    assert "LoadLimits" in str(info.value)
    assert methods == ["GET"]  # never started
    # Refused while loading (about 2 s here, 14 s on a loaded machine), not at the call timeout.
    assert elapsed < 20


def test_definition_limits_are_configurable() -> None:
    with HostileServer(remote_script()) as server:
        limits = RemoteLimits(call_timeout=10, definition_limits=LoadLimits(max_nodes=3))
        guard = remote_front_desk(server.url, limits)
        with pytest.raises(RemoteAgentError, match=r"LoadLimits\.max_nodes"):
            call_remote(guard, "sync")
        assert [method for method, _ in server.requests] == ["GET"]
