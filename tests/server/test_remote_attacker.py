"""A hostile remote agent's server against the remote-agent client: what it writes stays bounded, and an
engagement it started is never left running unannounced.

Every answer comes from a raw loopback socket (tests/guardian_client/hostile_http.py), byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentguard.remote import RemoteAgentError, RemoteLimits
from tests.guardian_client.hostile_http import HostileServer, Script, http_response
from tests.server.support import REMOTE_DEFINITION, call_remote, remote_front_desk, remote_script

LIMITS = RemoteLimits(request_timeout=5, call_timeout=20, poll_wait=1, poll_interval=0.01)


def _started_at(location: bytes) -> Script:
    """A remote ``billing-agent`` whose start answers 303 with ``location`` as its Location, byte for byte."""

    def script(method: str, path: str) -> Iterator[bytes]:
        if method == "GET" and path.endswith("/billing-agent"):
            yield http_response(REMOTE_DEFINITION, content_type="application/yaml")
        elif method == "POST":
            yield http_response(b"", status="303 See Other").replace(
                b"\r\n\r\n", b"\r\nLocation: " + location + b"\r\n\r\n", 1
            )
        elif method == "DELETE":
            yield http_response(b"", status="204 No Content")
        else:
            yield http_response(json.dumps({"status": "completed", "output": "ran"}).encode())

    return script


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_location_with_a_control_character_still_cancels_the_engagement(flavour: str) -> None:
    """A Location with a tab in it is no URL to follow, so the call fails -- but the POST started an
    engagement over there, and it ran on: nothing cancelled it. It is cancelled at the Location as a
    browser reads it (the tab percent-encoded), on the agent's own origin."""
    with HostileServer(_started_at(b"/agents/billing-agent/engagements/e\t1")) as server:
        with pytest.raises(RemoteAgentError, match="invalid Location") as caught:
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        requests = list(server.requests)
    assert ("DELETE", "/agents/billing-agent/engagements/e%091") in requests
    assert not [path for method, path in requests if method == "GET" and "engagements" in path]
    assert "asked to cancel" in str(caught.value)


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    "location", [b"http://evil.example/engagements/e1", b"mailto:x", b"//evil.example/e1"]
)
def test_a_location_on_another_origin_says_the_engagement_is_not_cancelled(
    location: bytes, flavour: str
) -> None:
    """A Location on another origin is not followed, and nothing (no token) is sent there: the error says that
    the engagement the POST may have started is not cancelled, rather than leave it unsaid. (``mailto:x``
    escaped as httpx's ``InvalidURL``, which is no ``RemoteAgentError``, nor even an ``httpx.HTTPError``.)"""
    with HostileServer(_started_at(location)) as server:
        with pytest.raises(RemoteAgentError, match="another origin") as caught:
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        methods = [method for method, _ in server.requests]
    assert "DELETE" not in methods
    assert "not cancelled" in str(caught.value)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_remote_error_is_kept_bounded(flavour: str) -> None:
    """The remote engagement's ``error`` object was kept whole as ``RemoteAgentError.remote_error`` (only the
    message was clipped): a remote server filled the caller's records with up to the answer's size limit of
    its own text, line breaks, thousands of members and nesting included."""
    error: dict[str, object] = {
        "type": "PolicyViolation",
        "rule": "restriction",
        "reason": "line one\n" + "r" * 100_000,
        "k" * 5_000: "v",
        "nested": {"deep": ["x" * 50_000]},
        "count": 3,
        **{f"member{i}": i for i in range(5_000)},
    }
    body = json.dumps({"status": "denied", "error": error}).encode()
    limits = RemoteLimits(request_timeout=5, call_timeout=20, poll_wait=1, max_response_bytes=1 << 20)
    denied = pytest.raises(RemoteAgentError, match="ended denied")
    with HostileServer(remote_script([http_response(body)])) as server, denied as caught:
        call_remote(remote_front_desk(server.url, limits), flavour)
    kept = caught.value.remote_error
    assert kept is not None
    assert (kept["type"], kept["rule"], kept["count"]) == ("PolicyViolation", "restriction", 3)
    assert kept["reason"].startswith("line one r")
    assert len(json.dumps(kept)) < 10_000
    assert all(isinstance(value, str | int | None) for value in kept.values())
    assert not any("\n" in name or "\n" in str(value) for name, value in kept.items())


def _with_definition(definition: bytes) -> Script:
    return remote_script(definition=definition)


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    "script",
    [
        # a definition with 300 unknown fields, each named at length: every problem quoted them
        _with_definition(REMOTE_DEFINITION + b"".join(b"x%d%s: 1\n" % (i, b"k" * 200) for i in range(300))),
        # a name no spec allows, 50 KB long
        _with_definition(REMOTE_DEFINITION.replace(b"name: billing-agent", b"name: " + b"n" * 50_000)),
        # an answer head httpx refuses, quoting the 30 KB line it refused
        remote_script(
            [b"HTTP/1.1 200 OK\r\nX-Bad\x01: " + b"A" * 30_000 + b"\r\nContent-Length: 2\r\n\r\n{}"]
        ),
        remote_script([b"HTTP/1.1 2000 " + b"C" * 30_000 + b"\r\nContent-Length: 2\r\n\r\n{}"]),
    ],
    ids=["definition-problems", "definition-name", "header-line", "status-line"],
)
def test_what_a_remote_server_wrote_is_one_clipped_line_of_the_error(script: Script, flavour: str) -> None:
    """The remote server's text reached the caller's error message whole -- 144 KB over 300 lines of spec
    problems quoting its definition, or the 30 KB header line httpx refused -- and that message goes to
    the model, often. It is one line, clipped."""
    with HostileServer(script) as server, pytest.raises(RemoteAgentError) as caught:
        call_remote(remote_front_desk(server.url, LIMITS), flavour)
    message = str(caught.value)
    assert "\n" not in message
    assert len(message) < 1_000


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    "content_type", ["text/plain", "text/html; charset=utf-8", "application/json; charset=utf-16"]
)
def test_a_state_that_does_not_say_it_is_json_is_not_read(content_type: str, flavour: str) -> None:
    """The Location may name any URL of the origin -- a file a user uploaded there, served as text -- whose
    text reads as ``{"status": "completed", "output": ...}``: the caller took it for the engagement's answer.
    A state is read only when it says it is JSON; otherwise the call fails and the engagement is cancelled."""
    forged = http_response(b'{"status": "completed", "output": "forged"}', content_type=content_type)
    with HostileServer(remote_script([forged])) as server:
        with pytest.raises(RemoteAgentError, match="Content-Type"):
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        methods = [method for method, _ in server.requests]
    assert methods[-1] == "DELETE"


def _accepted_at(status: bytes) -> Script:
    """A remote ``billing-agent`` whose start answers ``status`` (a 2xx, not the protocol's 303) with a
    Location: the engagement is running over there all the same."""

    def script(method: str, path: str) -> Iterator[bytes]:
        if method == "POST":
            yield http_response(b"{}", status=status.decode()).replace(
                b"\r\n\r\n", b"\r\nLocation: /agents/billing-agent/engagements/e1\r\n\r\n", 1
            )
        else:
            yield from _started_at(b"unused")(method, path)

    return script


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("status", [b"201 Created", b"202 Accepted"])
def test_a_start_accepted_without_a_303_is_cancelled(status: bytes, flavour: str) -> None:
    """A start answered 201 or 202 with a Location failed the call -- the protocol says 303 -- and left the
    engagement it had started running. It is cancelled there (the Location is on the agent's origin)."""
    with HostileServer(_accepted_at(status)) as server:
        with pytest.raises(RemoteAgentError, match="not 303") as caught:
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        requests = list(server.requests)
    assert ("DELETE", "/agents/billing-agent/engagements/e1") in requests
    assert "asked to cancel" in str(caught.value)
