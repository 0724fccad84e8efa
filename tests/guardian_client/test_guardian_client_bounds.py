"""Issue 13: a hostile guardian on a real socket cannot stretch a step past its timeout or flood the client.

Every bound is checked as "finished within the bound plus generous slack", never as an exact time, and the
guarded tool must not have run (``on_failure="deny"``, the default).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator

import pytest

from agentguard import Guard, GuardianDenied, Outcome, Rule
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianRetry
from tests.conftest import spec_text
from tests.guardian_client.guardian_client_support import decide, step
from tests.guardian_client.hostile_http import HostileServer, flood, http_response, trickle

SLACK = 4.0  # seconds: far more than any scheduling hiccup, far less than what an unbounded read takes

ALLOW = json.dumps({"jsonrpc": "2.0", "id": "step-1", "result": {"decision": "allow"}}).encode()


def _trickling(method: str, path: str) -> Iterator[bytes]:
    """An allow decision, status line and headers included, one byte every ``pause`` seconds (~25 s)."""
    return trickle(http_response(ALLOW))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_trickled_answer_ends_at_the_timeout_and_is_denied(flavour: str) -> None:
    with HostileServer(_trickling, pause=0.1) as server:
        started = time.monotonic()
        verdict = decide(flavour, server.url, step(), timeout=1.0)
        elapsed = time.monotonic() - started
    assert elapsed < 1.0 + SLACK
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure == "timeout"
    assert verdict.proceeded is False


def test_a_trickled_answer_with_retries_is_bounded_by_attempts_times_timeout() -> None:
    retry = GuardianRetry(attempts=1, delay_ms=0)
    with HostileServer(_trickling, pause=0.1) as server:
        started = time.monotonic()
        verdict = decide("sync", server.url, step(), timeout=0.5, retry=retry)
        elapsed = time.monotonic() - started
        assert len(server.requests) == 2
    assert elapsed < 2 * 0.5 + SLACK
    assert verdict.attempts == 2
    assert verdict.failure == "timeout"


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_the_guard_applies_on_failure_to_a_trickling_guardian_and_records_it(on_failure: str) -> None:
    ran: list[str] = []
    with HostileServer(_trickling, pause=0.1) as server:
        client = GuardianClient(server.url, timeout=1.0, on_failure=on_failure)  # type: ignore[arg-type]
        guard = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=client)

        @guard.tool
        def lookup(q: str) -> str:
            ran.append(q)
            return "found"

        started = time.monotonic()
        with guard.engagement() as engagement:
            if on_failure == "deny":
                with pytest.raises(GuardianDenied, match="without guardian decision"):
                    lookup(q="x")
            else:
                assert lookup(q="x") == "found"
        elapsed = time.monotonic() - started
        client.close(timeout=0)
    guardian_decisions = [d for d in engagement.steps[-1].decisions if d.rule is Rule.GUARDIAN]
    assert guardian_decisions[0].outcome is (Outcome.DENY if on_failure == "deny" else Outcome.NO_DECISION)
    assert "timeout" in guardian_decisions[0].reason
    if on_failure == "deny":
        assert ran == []
        assert elapsed < 1.0 + SLACK
    else:  # the request and the result are each asked about, each within its own timeout
        assert ran == ["x"]
        assert elapsed < 2 * 1.0 + SLACK


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_150_mb_answer_is_cut_at_the_default_cap(flavour: str) -> None:
    with HostileServer(lambda method, path: flood(150 * 1024 * 1024)) as server:
        verdict = decide(flavour, server.url, step(), timeout=30.0)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure == f"reply too large: more than {16 * 1024 * 1024} bytes"
    assert verdict.proceeded is False
    assert verdict.attempts == 1


def test_a_declared_length_over_the_cap_is_refused_before_reading_and_follows_on_failure() -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": "step-1", "result": {"decision": "allow", "message": "x" * 500}}
    )
    with HostileServer(lambda method, path: [http_response(body.encode())]) as server:
        verdict = decide("sync", server.url, step(), max_reply_bytes=100, on_failure="allow")
        small = decide("sync", server.url, step(), max_reply_bytes=len(body))
    assert verdict.failure == "reply too large: more than 100 bytes"
    assert verdict.proceeded is True  # on_failure="allow", recorded as a failure all the same
    assert small.outcome is GuardianOutcome.ALLOW  # exactly at the cap is accepted


def test_max_reply_bytes_and_flush_timeout_are_validated() -> None:
    with pytest.raises(ValueError, match="max_reply_bytes"):
        GuardianClient("http://127.0.0.1:9/", max_reply_bytes=0)
    with pytest.raises(ValueError, match="flush_timeout"):
        GuardianClient("http://127.0.0.1:9/", flush_timeout=-1)


def test_closing_an_engagement_behind_a_full_observe_queue_is_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The queue is shared: other engagements' steps ahead of this one must not hold its close."""
    with HostileServer(_trickling, pause=0.1) as server:
        client = GuardianClient(server.url, mode="observe", timeout=2.0, queue_size=4, flush_timeout=0.5)
        guard = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=client)

        @guard.tool
        def lookup(q: str) -> str:
            return "found"

        for index in range(10):  # another engagement fills the queue (and overflows it: counted drops)
            client.submit({"jsonrpc": "2.0", "id": f"other-{index}", "method": "steps/message", "params": {}})
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="agentguard.guardian"), guard.engagement():
            assert lookup(q="x") == "found"  # observe mode: the tool runs, the steps are queued
        elapsed = time.monotonic() - started
        assert elapsed < 0.5 + SLACK
        assert client.stats.dropped >= 6
        assert any("flush gave up after 0.5 s" in record.getMessage() for record in caplog.records)
        closing = time.monotonic()
        client.close(timeout=0.5)
        # the delivery in progress ends by its own timeout (2 s); the rest is dropped and counted
        assert time.monotonic() - closing < 0.5 + 2.0 + SLACK
    stats = client.stats
    assert stats.sent + stats.dropped >= 10
    assert stats.queue_depth == 0


def test_aflush_uses_the_flush_timeout() -> None:
    with HostileServer(_trickling, pause=0.1) as server:
        client = GuardianClient(server.url, mode="observe", timeout=2.0, flush_timeout=0.3)
        client.submit(step())

        async def main() -> bool:
            return await client.aflush()

        started = time.monotonic()
        assert asyncio.run(main()) is False
        assert time.monotonic() - started < 0.3 + SLACK
        client.close(timeout=0)
