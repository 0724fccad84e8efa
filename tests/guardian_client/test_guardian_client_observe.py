"""Observe mode without sockets: ordering, events, drops, context, the queue's lifecycle and GC."""

from __future__ import annotations

import contextvars
import doctest
import gc
import json
import logging
import math
import subprocess
import sys
import threading
import weakref

import httpx
import pytest

import agentguard.guardian._client
import agentguard.guardian._logged
import agentguard.guardian._retry
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianVerdict
from agentguard.guardian._observe import Backlog
from tests.guardian_client.guardian_client_support import Recorder, answer, status, step

URL = "http://guardian.test/aos"
WAIT = 30.0  # upper bound for event waits; never reached when things work

Events = list[tuple[str, dict[str, object]]]


class Gate:
    """A mock guardian that blocks on the first request until released, then allows everything."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.open = threading.Event()
        self.ids: list[object] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.ids.append(json.loads(request.content)["id"])
        self.arrived.set()
        assert self.open.wait(WAIT)
        return answer({"decision": "allow"})(request)


def test_steps_are_delivered_in_order_and_reported() -> None:
    recorder = Recorder(answer({"decision": "deny", "message": "observed"}))
    events: Events = []
    with GuardianClient(
        URL, mode="observe", transport=recorder.transport(), on_event=lambda *e: events.append(e)
    ) as client:
        for n in range(200):
            client.submit(step(n))
        assert client.flush(WAIT)
        stats = client.stats
    assert [body["id"] for body in recorder.bodies] == list(range(200))
    assert [name for name, _ in events] == ["delivered"] * 200
    assert [data["id"] for _, data in events] == list(range(200))
    verdict = events[0][1]["verdict"]
    assert isinstance(verdict, GuardianVerdict)
    assert verdict.outcome is GuardianOutcome.DENY
    assert (stats.sent, stats.delivered, stats.failed, stats.dropped, stats.queue_depth) == (
        200,
        200,
        0,
        0,
        0,
    )


def test_failed_deliveries_are_counted_with_their_cause() -> None:
    events: Events = []
    with GuardianClient(
        URL, mode="observe", transport=Recorder(status(503)).transport(), on_event=lambda *e: events.append(e)
    ) as client:
        client.submit(step("a"))
        client.submit(step("b"))
        assert client.flush(WAIT)
        stats = client.stats
    assert [(name, data["id"]) for name, data in events] == [("failed", "a"), ("failed", "b")]
    assert all(data["verdict"].failure == "http 503" for _, data in events)  # type: ignore[attr-defined]
    assert (stats.sent, stats.failed, stats.delivered, stats.last_failure) == (2, 2, 0, "http 503")


def test_a_full_queue_drops_new_steps_counts_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate()
    events: Events = []
    client = GuardianClient(
        URL,
        mode="observe",
        queue_size=3,
        transport=httpx.MockTransport(gate),
        on_event=lambda *e: events.append(e),
    )
    with client, caplog.at_level(logging.WARNING, logger="agentguard.guardian"):
        client.submit(step(0))
        assert gate.arrived.wait(WAIT)  # step 0 is in flight: the queue is empty again
        for n in range(1, 9):  # 1..3 fill the queue, 4..8 are dropped
            client.submit(step(n))
        assert client.stats.queue_depth == 3
        gate.open.set()
        assert client.flush(WAIT)
        stats = client.stats
    assert gate.ids == [0, 1, 2, 3]
    dropped = [data for name, data in events if name == "dropped"]
    assert [data["id"] for data in dropped] == [4, 5, 6, 7, 8]
    assert {data["reason"] for data in dropped} == {"queue full"}
    assert (stats.dropped, stats.delivered) == (5, 4)
    warnings = [r.getMessage() for r in caplog.records if "not sent (queue full)" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited, yet never silent


def test_flush_waits_only_for_what_was_queued_before_it() -> None:
    gate = Gate()
    with GuardianClient(URL, mode="observe", transport=httpx.MockTransport(gate)) as client:
        assert client.flush(0)  # nothing queued: drained
        client.submit(step("a"))
        assert gate.arrived.wait(WAIT)
        assert client.flush(0) is False  # "a" is still in flight behind a closed gate
        gate.open.set()
        assert client.flush(WAIT)


def test_callbacks_run_in_the_submitters_context() -> None:
    engagement: contextvars.ContextVar[str] = contextvars.ContextVar("engagement")
    seen: list[tuple[object, str, str]] = []

    def on_event(name: str, data: dict[str, object]) -> None:
        seen.append((data["id"], engagement.get("none"), threading.current_thread().name))

    with GuardianClient(
        URL, mode="observe", transport=Recorder(answer({"decision": "allow"})).transport(), on_event=on_event
    ) as client:
        for label in ("e-1", "e-2"):
            token = engagement.set(label)
            client.submit(step(label))
            engagement.reset(token)
        assert client.flush(WAIT)
    assert [(sid, value) for sid, value, _ in seen] == [("e-1", "e-1"), ("e-2", "e-2")]
    assert all(thread.startswith("agentguard-guardian-observe") for _, _, thread in seen)


def test_a_raising_callback_never_breaks_delivery(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(answer({"decision": "allow"}))

    def on_event(name: str, data: dict[str, object]) -> None:
        raise RuntimeError("telemetry is down")

    client = GuardianClient(URL, mode="observe", transport=recorder.transport(), on_event=on_event)
    with caplog.at_level(logging.WARNING, logger="agentguard.guardian"), client:
        for n in range(5):
            client.submit(step(n))
        assert client.flush(WAIT)
        assert client.stats.delivered == 5
    assert [body["id"] for body in recorder.bodies] == [0, 1, 2, 3, 4]
    assert any("on_event callback raised" in r.getMessage() and r.exc_info for r in caplog.records)


def test_an_unsendable_step_is_dropped_with_its_reason() -> None:
    events: Events = []
    recorder = Recorder(answer({"decision": "allow"}))
    with GuardianClient(
        URL, mode="observe", transport=recorder.transport(), on_event=lambda *e: events.append(e)
    ) as client:
        bad = step("nan")
        bad["params"] = {"score": math.nan}
        client.submit(bad)  # serialised on the worker, so accepted here
        client.submit(step("ok"))
        assert client.flush(WAIT)
        stats = client.stats
    assert events[0][0] == "dropped"
    assert str(events[0][1]["reason"]).startswith("unsendable request: ")
    assert events[1][0] == "delivered"
    assert (stats.dropped, stats.delivered, stats.sent) == (1, 1, 1)


def test_a_broken_transport_is_a_recorded_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise KeyError("bug in a custom transport")

    events: Events = []
    with GuardianClient(
        URL, mode="observe", transport=httpx.MockTransport(handler), on_event=lambda *e: events.append(e)
    ) as client:
        client.submit(step())
        assert client.flush(WAIT)
    ((name, data),) = events
    assert name == "failed"
    assert data["verdict"].failure.startswith("internal error: KeyError")  # type: ignore[attr-defined]


def test_ping_on_start_applies_to_the_first_observed_step() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["method"] == "ping":
            return httpx.Response(503)
        return answer({"decision": "allow"})(request)

    events: Events = []
    with GuardianClient(
        URL,
        mode="observe",
        ping_on_start=True,
        transport=httpx.MockTransport(handler),
        on_event=lambda *e: events.append(e),
    ) as client:
        client.submit(step("first"))
        client.submit(step("second"))
        assert client.flush(WAIT)
    assert [(name, data["id"]) for name, data in events] == [("failed", "first"), ("delivered", "second")]
    assert events[0][1]["verdict"].failure == "ping: http 503"  # type: ignore[attr-defined]


def test_close_delivers_everything_queued() -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    client = GuardianClient(URL, mode="observe", transport=recorder.transport())
    for n in range(100):
        client.submit(step(n))
    client.close()
    assert [body["id"] for body in recorder.bodies] == list(range(100))
    assert client.stats.delivered == 100


async def test_aflush_and_aclose() -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    async with GuardianClient(URL, mode="observe", transport=recorder.transport()) as client:
        for n in range(20):
            client.submit(step(n))
        assert await client.aflush(WAIT)
        assert (await client.adecide(step("enforced"))).outcome is GuardianOutcome.ALLOW
    assert [body["id"] for body in recorder.bodies] == [*range(20), "enforced"]


def test_an_unused_client_is_collected_and_its_queue_drained() -> None:
    gate = Gate()
    client = GuardianClient(URL, mode="observe", transport=httpx.MockTransport(gate))
    for n in range(3):
        client.submit(step(n))
    assert gate.arrived.wait(WAIT)
    worker = client._core.backlog._thread
    assert worker is not None
    collected = weakref.ref(client)
    del client
    gc.collect()
    assert collected() is None  # the worker thread does not keep the client alive
    gate.open.set()
    worker.join(WAIT)
    assert not worker.is_alive()
    assert gate.ids == [0, 1, 2]  # ... and what was queued was still delivered


# -- the queue itself -------------------------------------------------------------------------------------


def test_backlog_discards_what_is_left_when_stopped_with_discard() -> None:
    entered, release = threading.Event(), threading.Event()
    delivered: list[object] = []
    discarded: list[object] = []
    stopped = threading.Event()

    def deliver(request: dict[str, object]) -> None:
        entered.set()
        assert release.wait(WAIT)
        delivered.append(request["id"])

    backlog = Backlog(
        10,
        deliver=deliver,
        discard=lambda request: discarded.append(request["id"]),
        on_stop=stopped.set,
        name="test-backlog",
    )
    for n in range(4):
        assert backlog.offer({"id": n}) == "queued"
    assert entered.wait(WAIT)
    assert backlog.stop(discard_pending=True) is True  # a worker is running and will call on_stop
    assert backlog.offer({"id": 99}) == "closed"
    release.set()
    backlog.join()
    assert (delivered, discarded) == ([0], [1, 2, 3])
    assert stopped.is_set()
    assert backlog.flush(0)
    assert backlog.unfinished == 0


def test_backlog_refuses_a_flush_from_its_own_worker() -> None:
    errors: list[BaseException] = []
    holder: list[Backlog] = []

    def deliver(request: dict[str, object]) -> None:
        try:
            holder[0].flush(1)
        except RuntimeError as exc:
            errors.append(exc)

    backlog = Backlog(
        2, deliver=deliver, discard=lambda request: None, on_stop=lambda: None, name="self-flush"
    )
    holder.append(backlog)
    backlog.offer({"id": 1})
    assert backlog.flush(WAIT)
    backlog.stop(discard_pending=False)
    backlog.join()
    assert len(errors) == 1


def test_a_backlog_that_never_started_needs_no_worker_to_stop() -> None:
    backlog = Backlog(1, deliver=lambda r: None, discard=lambda r: None, on_stop=lambda: None, name="idle")
    assert backlog.stop(discard_pending=False) is False
    backlog.join()


# -- interpreter exit, import hygiene, docs ---------------------------------------------------------------

EXIT_SCRIPT = """
import atexit, json, time
seen = []
# atexit runs hooks last-registered first: this one, registered before agentguard.guardian is imported,
# therefore runs after the client's flush hook.
atexit.register(lambda: print(json.dumps(seen)))
import httpx
from agentguard.guardian import GuardianClient
def guardian(request):
    time.sleep(0.005)  # slower than the main thread: without the exit hook most steps would be lost
    seen.append(json.loads(request.content)["id"])
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": seen[-1], "result": {"decision": "allow"}})
client = GuardianClient("http://guardian.test/aos", mode="observe", transport=httpx.MockTransport(guardian))
for n in range(50):
    client.submit({"jsonrpc": "2.0", "id": n, "method": "steps/message", "params": {}})
# no flush, no close: interpreter exit must deliver them
"""


def test_interpreter_exit_flushes_the_queue() -> None:
    done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == list(range(50))


def test_importing_the_client_imports_no_server() -> None:
    code = (
        "import sys, agentguard.guardian; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn') "
        "or m.startswith('agentguard.guardian.server')]; "
        "print(bad); assert not bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "module", [agentguard.guardian._client, agentguard.guardian._logged, agentguard.guardian._retry]
)
def test_docstring_examples_run(module: object) -> None:
    failures, tried = doctest.testmod(module, raise_on_error=False)  # type: ignore[arg-type]
    assert tried > 0
    assert failures == 0
