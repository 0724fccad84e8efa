"""OS Protocol run control: Timeout, Retry and Cancel on guarded calls, each recorded as a decision."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from agentguard import ConfigurationError, EngagementClosed, EngagementStatus, Guard, Outcome, Rule
from agentguard.runs import Cancel, Retry, Timeout, ToolTimeout, backoff_delay_ms
from tests.conftest import spec_text

SPEC = spec_text("capabilities:\n  slow:\n  flaky:\n  other:\n")


def _runs(eng: Any) -> list[tuple[str, str]]:
    return [(d.outcome.value, d.reason) for d in eng.decisions if d.rule is Rule.RUN]


def test_backoff_follows_the_os_protocol_table() -> None:
    assert [backoff_delay_ms(100, "none", None, n) for n in (1, 2, 3, 4)] == [100, 100, 100, 100]
    assert [backoff_delay_ms(100, "linear", None, n) for n in (1, 2, 3, 4)] == [100, 200, 300, 400]
    assert [backoff_delay_ms(100, "exponential", 500, n) for n in (1, 2, 3, 4)] == [100, 200, 400, 500]
    with pytest.raises(ValueError, match="1-based"):
        backoff_delay_ms(100, "none", None, 0)


def test_sync_timeout_fails_fast_and_the_late_result_is_recorded() -> None:
    guard = Guard.from_yaml(SPEC)
    release = threading.Event()

    @guard.tool(timeout=Timeout(ms=50))
    def slow() -> str:
        release.wait(5)
        return "late"

    with guard.engagement() as eng:
        started = time.monotonic()
        with pytest.raises(ToolTimeout, match="within 50 ms"):
            slow()
        assert time.monotonic() - started < 2
        assert eng.state.calls[-1].status == "failed"
        release.set()  # the late decision arrives from the tool's own thread
        for _ in range(500):
            if len(_runs(eng)) == 2:
                break
            time.sleep(0.01)
    assert _runs(eng) == [
        ("deny", "did not finish within 50 ms (on_timeout: fail)"),
        ("warn", "late result discarded: the call finished after its 50 ms timeout (returned)"),
    ]


def test_async_timeout_cancels_the_tool() -> None:
    guard = Guard.from_yaml(SPEC)
    cancelled = []

    @guard.tool(timeout=Timeout(ms=30))
    async def slow() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def main() -> None:
        async with guard.engagement():
            with pytest.raises(ToolTimeout):
                await slow()
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert cancelled == [True]


@pytest.mark.parametrize("keep_running", [False, True])
def test_a_caller_cancelled_during_a_timed_call_cancels_the_tool(keep_running: bool) -> None:
    """A call with a ``Timeout`` runs its async tool as a task of its own: a caller cancelled meanwhile (a client
    that went away, an outer timeout) left that task running, its effects going on for no one (a call without a
    timeout is cancelled with its caller). ``keep_running`` is about the timeout, not the caller."""
    guard = Guard.from_yaml(SPEC)
    started, cancelled = asyncio.Event(), []

    @guard.tool(timeout=Timeout(ms=5_000, on_timeout="continue" if keep_running else "fail"))
    async def slow() -> str:
        started.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    async def main() -> None:
        async with guard.engagement():
            caller = asyncio.create_task(slow())
            await started.wait()
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            await asyncio.sleep(0.05)
            assert cancelled == [True]  # now, not when asyncio.run cancels what is left as it ends

    asyncio.run(main())


@pytest.mark.parametrize("is_async", [False, True])
def test_timeout_continue_records_a_warning_and_waits(is_async: bool) -> None:
    guard = Guard.from_yaml(SPEC)

    if is_async:

        @guard.tool(timeout=Timeout(ms=20, on_timeout="continue"))
        async def slow() -> str:
            await asyncio.sleep(0.1)
            return "done"

    else:

        @guard.tool(timeout=Timeout(ms=20, on_timeout="continue"))
        def slow() -> str:
            time.sleep(0.1)
            return "done"

    async def run_async() -> Any:
        async with guard.engagement() as eng:
            assert await slow() == "done"
            return eng

    if is_async:
        eng = asyncio.run(run_async())
    else:
        with guard.engagement() as eng:
            assert slow() == "done"
    assert [o for o, _ in _runs(eng)] == ["warn"]
    assert eng.view()["recent"]["slow"]["outputs"] == "done"


def test_timeout_cancel_cancels_the_engagement_and_calls_back() -> None:
    guard = Guard.from_yaml(SPEC)
    called = []

    @guard.tool(timeout=Timeout(ms=20, on_timeout="cancel", on_timeout_callback=lambda: called.append(1)))
    def slow() -> None:
        time.sleep(0.2)

    @guard.tool
    def other() -> str:
        return "x"

    with guard.engagement() as eng:
        with pytest.raises(ToolTimeout):
            slow()
        assert eng.status is EngagementStatus.CANCELLED
        with pytest.raises(EngagementClosed):
            other()
    assert called == [1]


def test_retry_with_backoff_until_success() -> None:
    guard = Guard.from_yaml(SPEC)
    attempts: list[int] = []
    retried: list[tuple[str, int]] = []

    @guard.tool(
        retry=Retry(
            attempts=3,
            delay_ms=1,
            backoff="exponential",
            retry_on=(ConnectionError,),
            on_retry=lambda e, n: retried.append((str(e), n)),
        )
    )
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError(f"reset {len(attempts)}")
        return "ok"

    with guard.engagement() as eng:
        assert flaky() == "ok"
        assert eng.view()["history"]["_total"] == 1  # one call, three attempts
    assert len(attempts) == 3
    assert retried == [("reset 1", 1), ("reset 2", 2)]
    # The recorded reason names the error's type, not its text: the tool's output, which no check saw.
    assert [r for _, r in _runs(eng)] == [
        "retry 1 of 3 in 1 ms after ConnectionError",
        "retry 2 of 3 in 2 ms after ConnectionError",
    ]


def test_retry_gives_up_and_filters_errors() -> None:
    guard = Guard.from_yaml(SPEC)
    calls: list[str] = []

    @guard.tool(retry=Retry(attempts=2, retry_on=(ConnectionError,)))
    def flaky(kind: str) -> None:
        calls.append(kind)
        raise (ConnectionError if kind == "net" else ValueError)(kind)

    @guard.tool(retry=Retry(attempts=5, should_retry=lambda e: "transient" in str(e)))
    def other(msg: str) -> None:
        calls.append(msg)
        raise RuntimeError(msg)

    with guard.engagement():
        with pytest.raises(ConnectionError):
            flaky("net")
        with pytest.raises(ValueError, match="bad"):
            flaky("bad")
        with pytest.raises(RuntimeError):
            other("fatal")
    assert calls == ["net", "net", "net", "bad", "fatal"]


def test_retries_reset_the_timeout_clock() -> None:
    guard = Guard.from_yaml(SPEC)
    attempts: list[int] = []

    @guard.tool(timeout=Timeout(ms=50), retry=Retry(attempts=1))
    async def slow() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.sleep(1)
        return "second try"

    async def main() -> Any:
        async with guard.engagement() as eng:
            assert await slow() == "second try"
            return eng

    eng = asyncio.run(main())
    assert [o for o, _ in _runs(eng)] == ["deny", "allow"]


def test_cancel_refuses_later_steps_and_runs_hooks() -> None:
    guard = Guard.from_yaml(SPEC)
    log: list[str] = []

    @guard.tool
    def other() -> str:
        return "x"

    with guard.engagement() as eng:
        other()
        assert not eng.cancel(Cancel("nope", before_cancel=lambda: False))
        assert eng.status is EngagementStatus.ACTIVE
        assert eng.cancel(Cancel("user hung up", after_cancel=lambda: log.append("after")))
        with pytest.raises(EngagementClosed, match="user hung up"):
            other()
        with pytest.raises(EngagementClosed):
            eng.check_input("hello")
    assert log == ["after"]
    outcomes = [(d.rule, d.outcome) for d in eng.decisions if d.rule is Rule.ENGAGEMENT]
    assert (Rule.ENGAGEMENT, Outcome.DENY) in outcomes


@pytest.mark.parametrize("graceful", [True, False])
def test_cancel_with_a_call_in_flight(graceful: bool) -> None:
    guard = Guard.from_yaml(SPEC)
    started, release = threading.Event(), threading.Event()
    result: list[Any] = []

    @guard.tool
    def slow() -> str:
        started.set()
        release.wait(5)
        return "finished"

    with guard.engagement() as eng:

        def worker() -> None:
            with eng.activate():
                try:
                    result.append(slow())
                except EngagementClosed as error:
                    result.append(error)

        thread = threading.Thread(target=worker)
        thread.start()
        assert started.wait(5)
        threading.Timer(0.05, release.set).start()
        assert eng.cancel(Cancel("stop", graceful=graceful, graceful_timeout_ms=5000))
        thread.join(5)
    if graceful:
        assert result == ["finished"]  # the graceful cancel waited for it and let it deliver
    else:
        assert isinstance(result[0], EngagementClosed)
        assert eng.view()["recent"]["slow"]["outputs"] is None


def test_async_cancel_with_async_before_hook() -> None:
    guard = Guard.from_yaml(SPEC)

    async def allowed() -> bool:
        return True

    async def main() -> Any:
        async with guard.engagement() as eng:
            assert await eng.acancel(Cancel("bye", before_cancel=allowed))
            return eng

    eng = asyncio.run(main())
    assert eng.status is EngagementStatus.CANCELLED
    with pytest.raises(ConfigurationError, match="acancel"):
        guard.engagement().cancel(Cancel("x", before_cancel=allowed))
