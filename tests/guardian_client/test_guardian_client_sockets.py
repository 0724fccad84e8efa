"""The guardian client over real sockets against a fault-injecting guardian (see conftest.py).

Every fault ends in the configured policy, through the sync and the async driver alike.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from agentguard.guardian import (
    GuardianClient,
    GuardianOutcome,
    GuardianRetry,
    GuardianUnavailable,
    GuardianVerdict,
)
from tests.guardian_client.guardian_client_support import FaultServer, decide, step

WAIT = 30.0

FAULTS = {
    "slow": "timeout",
    "garbage": "malformed response: body is not JSON",
    "jsonrpc-error": "jsonrpc -32603: 'Internal error'",
    "unappliable": "unappliable modify: modifiedRequest.method 'steps/memoryStore'",
    "503": "http 503",
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_allow_over_a_socket(fault: FaultServer, flavour: str) -> None:
    verdict = decide(flavour, fault.url("allow"), step())
    assert (verdict.outcome, verdict.message, verdict.proceeded) == (GuardianOutcome.ALLOW, "ok", True)


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize("mode", FAULTS)
def test_each_fault_ends_in_the_policy(fault: FaultServer, mode: str, on_failure: str, flavour: str) -> None:
    verdict = decide(flavour, fault.url(mode), step(), timeout=0.25, on_failure=on_failure)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith(FAULTS[mode]), verdict.failure
    assert verdict.proceeded is (on_failure == "allow")


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_guardian_down_ends_in_the_policy(dead_url: str, on_failure: str, flavour: str) -> None:
    retry = GuardianRetry(attempts=2, delay_ms=1, backoff="linear")
    verdict = decide(flavour, dead_url, step(), on_failure=on_failure, retry=retry)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("transport: ConnectError"), verdict.failure
    assert verdict.proceeded is (on_failure == "allow")
    assert verdict.attempts == 3


def test_ping_and_ping_failures(fault: FaultServer, dead_url: str) -> None:
    with GuardianClient(fault.url("allow")) as client:
        assert client.ping()["status"] == "connected"
    with GuardianClient(dead_url) as client, pytest.raises(GuardianUnavailable, match="ConnectError"):
        client.ping()


async def test_aping(fault: FaultServer) -> None:
    async with GuardianClient(fault.url("allow")) as client:
        assert (await client.aping())["version"] == "fault-1"


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_ping_on_start_against_a_dead_guardian(dead_url: str, on_failure: str) -> None:
    verdict = decide("sync", dead_url, step(), ping_on_start=True, on_failure=on_failure)
    assert verdict.failure is not None
    assert verdict.failure.startswith("ping: transport: ConnectError")
    assert verdict.proceeded is (on_failure == "allow")


def test_keep_alive_connections_are_reused(fault: FaultServer) -> None:
    with GuardianClient(fault.url("record"), token="t0k3n") as client:
        for n in range(20):
            assert client.decide(step(n)).outcome is GuardianOutcome.ALLOW
    assert fault.state.arrivals == list(range(20))
    assert {headers["authorization"] for headers in fault.state.headers} == {"Bearer t0k3n"}
    assert {headers["content-type"] for headers in fault.state.headers} == {"application/json"}


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_one_client_serves_several_event_loops(fault: FaultServer) -> None:
    # An agent may call asyncio.run once per request: a pooled connection must not be reused on another
    # loop. The pools of the finished loops cannot be closed from a new loop; they are left to the garbage
    # collector (collected here, where their ResourceWarnings are expected).
    client = GuardianClient(fault.url("record"))

    async def once(n: int) -> GuardianVerdict:
        verdict = await client.adecide(step(n))
        if n == 2:
            await client.aclose()
        return verdict

    assert [asyncio.run(once(n)).outcome for n in range(3)] == [GuardianOutcome.ALLOW] * 3
    assert fault.state.arrivals == [0, 1, 2]
    gc.collect()


# -- observe mode -------------------------------------------------------------------------------------------


def test_500_observed_steps_arrive_in_order(fault: FaultServer) -> None:
    with GuardianClient(fault.url("record"), mode="observe") as client:
        for n in range(500):
            client.submit(step(n))
        assert client.flush(WAIT)
        stats = client.stats
    assert fault.state.arrivals == list(range(500))
    assert (stats.sent, stats.delivered, stats.failed, stats.dropped) == (500, 500, 0, 0)


async def test_observed_steps_from_async_code_arrive_in_order(fault: FaultServer) -> None:
    async with GuardianClient(fault.url("record"), mode="observe") as client:
        for n in range(100):
            client.submit(step(n, method="steps/message"))
        assert await client.aflush(WAIT)
    assert fault.state.arrivals == list(range(100))
    assert set(fault.state.methods) == {"steps/message"}


def test_nothing_is_lost_when_closing_without_flush(fault: FaultServer) -> None:
    client = GuardianClient(fault.url("record"), mode="observe")
    for n in range(200):
        client.submit(step(n))
    client.close()
    assert fault.state.arrivals == list(range(200))
    assert client.stats.delivered == 200


def test_a_slow_guardian_and_a_tiny_queue_drop_steps_countably(fault: FaultServer) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    with GuardianClient(
        fault.url("gate"), mode="observe", queue_size=2, on_event=lambda *e: events.append(e)
    ) as client:
        client.submit(step(0))
        assert fault.state.arrived.wait(WAIT)  # step 0 is at the guardian, which holds it
        for n in range(1, 11):
            client.submit(step(n))  # 1 and 2 wait in the queue, 3..10 are dropped
        assert client.flush(0) is False
        dropped = [data["id"] for name, data in events if name == "dropped"]
        assert dropped == list(range(3, 11))
        fault.state.gate.set()
        assert client.flush(WAIT)
        stats = client.stats
    assert fault.state.arrivals == [0, 1, 2]
    assert (stats.delivered, stats.dropped, stats.failed) == (3, 8, 0)


def test_observed_steps_to_a_dead_guardian_fail_countably(dead_url: str) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    with GuardianClient(dead_url, mode="observe", on_event=lambda *e: events.append(e)) as client:
        for n in range(5):
            client.submit(step(n))
        assert client.flush(WAIT)
        stats = client.stats
    assert [(name, data["id"]) for name, data in events] == [("failed", n) for n in range(5)]
    assert stats.failed == 5
    assert stats.last_failure is not None
    assert stats.last_failure.startswith("transport: ConnectError")
