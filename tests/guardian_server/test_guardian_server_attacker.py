"""A hostile client against the reference guardian over a real socket on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agentguard.guardian.server import GuardianRules, RunningServer, create_app, serve_in_thread

PING = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2025-07-01T12:00:00Z"}}'


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(GuardianRules())) as server:
        yield server


@pytest.mark.parametrize("coding", ["gzip", "identity, br", "x-unknown"])
def test_a_body_with_a_content_coding_is_refused_not_read_as_plain(
    guardian: RunningServer, coding: str
) -> None:
    """A body labelled ``Content-Encoding: gzip`` was read as if it were not compressed: one request to the
    guardian, another to any proxy or log that inflates it (the OpenAgentSpec server refuses it: 415)."""
    headers = {"Content-Type": "application/json", "Content-Encoding": coding}
    answer = httpx.post(guardian.url, content=PING, headers=headers, timeout=15)
    assert answer.status_code == 415
    assert answer.json()["error"]["code"] == -32003
    assert answer.headers["accept-encoding"] == "identity"
    plain = httpx.post(
        guardian.url, content=PING, headers={**headers, "Content-Encoding": "identity"}, timeout=15
    )
    assert plain.json()["result"]["status"] == "connected"  # "identity" is no coding


@pytest.mark.parametrize("number", ["9007199254740993", "-9007199254740993", "1" + "0" * 40])
def test_an_integer_a_peer_reads_differently_is_a_parse_error(guardian: RunningServer, number: str) -> None:
    """``"id": 9007199254740993`` was answered under that id: a JavaScript client reads it, and the id it
    waits for, as ``9007199254740992`` (and a number in a tool's inputs, a rule compared exactly, was another
    number to the agent). Refused as JSON that parsers read differently."""
    body = PING.replace(b'"id":1', b'"id":' + number.encode())
    answer = httpx.post(guardian.url, content=body, headers={"Content-Type": "application/json"}, timeout=15)
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert error["code"] == -32700
    assert "integer" in error["message"]
