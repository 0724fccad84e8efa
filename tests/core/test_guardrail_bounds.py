"""A guardrail tool is run under the same bounds as a tool, and every way it can fail to judge a text fails the
guardrail: recorded, the engagement failed, and no tool runs in it after (the spec's guardrail rule).

Before these fixes the guardrail path converted the tool's answer outside its ``try`` and without the Guard's
ValueLimits (an answer nested 5,000 deep, or holding itself, escaped ``check_output`` as a ``RecursionError``
with nothing recorded and the engagement still running; the next ``guard.call`` ran its tool), ignored the
``timeout`` and ``retry`` the tool was registered with (a late ``{"ok": true}`` passed), and wrote the tool's
exception text -- which often quotes the withheld text -- into the reason, the stop reason and the decisions.
Each case runs through ``check_input`` / ``check_output`` and their async twins.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentguard import (
    EngagementStatus,
    Guard,
    GuardrailViolation,
    Outcome,
    PolicyViolation,
    Rule,
    User,
    ValueLimits,
)
from agentguard.engagement import Engagement
from agentguard.runs import Retry, Timeout
from tests.conftest import spec_text
from tests.core.test_value_limits import ENDLESS, LYING

SPEC = spec_text(
    """
    capabilities:
      echo: {}
    guardrails:
      input:
        tool_name: check-in
        assertion: output.ok == true
      output:
        tool_name: check-out
        assertion: output.ok == true
    """
)

SECRET = "TOPSECRET-4111-1111"
TOOL = {"input": "check-in", "output": "check-out"}


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"ok": True}
    for _ in range(levels):
        value = {"ok": True, "d": value}
    return value


def _cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"ok": True}
    value["self"] = value
    return value


def _ok(text: str) -> dict[str, bool]:
    return {"ok": True}


def _guard(
    check_in: Callable[..., Any] = _ok,
    check_out: Callable[..., Any] = _ok,
    *,
    timeout: Timeout | None = None,
    retry: Retry | None = None,
    **options: Any,
) -> tuple[Guard, list[Any]]:
    """A guard whose two guardrail tools are ``check_in`` and ``check_out`` (both registered with ``timeout``
    and ``retry``), and the list of what its ``echo`` tool ran with."""
    guard = Guard.from_yaml(SPEC, **options)
    guard.register("check-in", check_in, timeout=timeout, retry=retry)
    guard.register("check-out", check_out, timeout=timeout, retry=retry)
    ran: list[Any] = []
    guard.register("echo", lambda x: ran.append(x) or x)
    return guard, ran


def _arg(phase: str) -> str:
    """The keyword of :func:`_guard` that sets the guardrail tool of ``phase``."""
    return "check_in" if phase == "input" else "check_out"


def _check(eng: Engagement, phase: str, text: str, *, asynchronous: bool) -> str:
    """``eng.check_<phase>(text)``, or its async twin run on a loop of its own."""
    if not asynchronous:
        return eng.check_input(text) if phase == "input" else eng.check_output(text)

    async def run() -> str:
        return await (eng.acheck_input(text) if phase == "input" else eng.acheck_output(text))

    return asyncio.run(run())


def _guardrail_decisions(eng: Engagement) -> list[tuple[Outcome, str]]:
    return [(d.outcome, d.reason) for d in eng.decisions if d.rule is Rule.GUARDRAIL]


def _assert_failed_for_good(eng: Engagement, guard: Guard, ran: list[Any], phase: str) -> None:
    """The guardrail failure is recorded, the engagement failed, and the next tool call refused unrun."""
    denials = [reason for outcome, reason in _guardrail_decisions(eng) if outcome is Outcome.DENY]
    assert len(denials) == 1, _guardrail_decisions(eng)
    assert eng.state.status is EngagementStatus.FAILED
    assert (eng.state.status_reason or "").startswith(f"{phase} guardrail failed: ")
    with pytest.raises(PolicyViolation):
        guard.call("echo", {"x": 1})
    assert ran == []


BEYOND = [
    pytest.param(lambda: _deep(5_000), {}, "ValueLimits.max_depth", id="nested-5000-deep"),
    pytest.param(_cyclic, {}, "ValueLimits.max_depth", id="holds-itself"),
    pytest.param(
        lambda: _deep(10),
        {"value_limits": ValueLimits(max_depth=5)},
        "nested deeper than 5 levels (ValueLimits.max_depth)",
        id="deeper-than-configured",
    ),
    pytest.param(
        lambda: {"ok": True, "x": list(range(2_000))},
        {"value_limits": ValueLimits(max_values=1_000)},
        "more than 1000 values (ValueLimits.max_values)",
        id="more-values-than-configured",
    ),
    *(  # a container's len() said 1 (or 0): 10,000 values were judged under max_values=100
        pytest.param(
            functools.partial(lying, 10_000),
            {"value_limits": ValueLimits(max_values=100)},
            "more than 100 values (ValueLimits.max_values)",
            id=f"len-lies-{kind}",
        )
        for kind, lying in LYING.items()
    ),
    *(  # converted for ever (memory growing, no Timeout applying)
        pytest.param(
            endless,
            {"value_limits": ValueLimits(max_values=100)},
            "more than 100 values (ValueLimits.max_values)",
            id=f"never-ends-{kind}",
        )
        for kind, endless in ENDLESS.items()
    ),
]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("phase", ["input", "output"])
@pytest.mark.parametrize(("answer", "options", "bound"), BEYOND)
def test_an_answer_beyond_the_value_limits_fails_the_guardrail(
    answer: Callable[[], Any], options: dict[str, Any], bound: str, phase: str, asynchronous: bool
) -> None:
    value = answer()
    guard, ran = _guard(**{_arg(phase): lambda text: value}, **options)
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match=r"answered with a value that ") as info:
            _check(eng, phase, "hello", asynchronous=asynchronous)
        assert bound in info.value.reason
        assert info.value.capability == TOOL[phase]
        _assert_failed_for_good(eng, guard, ran, phase)


class _Unconvertible:
    """An answer whose own conversion raises, with a message that quotes the text it was given."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        raise RuntimeError(f"cannot show {self.text}")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_answer_that_cannot_be_converted_fails_the_guardrail_naming_only_the_error_type(
    asynchronous: bool,
) -> None:
    guard, ran = _guard(check_out=_Unconvertible)
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match="could not be converted: RuntimeError") as info:
            _check(eng, "output", SECRET, asynchronous=asynchronous)
        assert SECRET not in info.value.reason
        _assert_failed_for_good(eng, guard, ran, "output")


# -- the registered Timeout and Retry ------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_sync_guardrail_past_its_timeout_fails_fast_and_its_late_pass_is_never_used(phase: str) -> None:
    release = threading.Event()

    def slow(text: str) -> dict[str, bool]:
        release.wait(3)
        return {"ok": True}

    guard, ran = _guard(**{_arg(phase): slow}, timeout=Timeout(ms=50))
    with guard.engagement(user=User(id="u")) as eng:
        started = time.monotonic()
        with pytest.raises(GuardrailViolation) as info:
            _check(eng, phase, "hello", asynchronous=False)
        assert time.monotonic() - started < 1.5
        assert (
            info.value.reason == f"guardrail tool {TOOL[phase]!r} did not answer within 50 ms (its Timeout)"
        )
        _assert_failed_for_good(eng, guard, ran, phase)
        release.set()  # the late answer arrives in the tool's own thread: recorded, and discarded
        runs: list[tuple[Outcome, str]] = []
        for _ in range(300):
            runs = [(d.outcome, d.reason) for d in eng.decisions if d.rule is Rule.RUN]
            if len(runs) == 2:
                break
            time.sleep(0.01)
    assert runs == [
        (Outcome.DENY, "did not finish within 50 ms (on_timeout: fail)"),
        (Outcome.WARN, "late result discarded: the call finished after its 50 ms timeout (returned)"),
    ]


@pytest.mark.parametrize("kind", ["async-tool", "sync-tool"])
def test_an_async_check_past_the_guardrails_timeout_fails_fast(kind: str) -> None:
    cancelled: list[bool] = []
    release = threading.Event()

    async def slow_async(text: str) -> dict[str, bool]:
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return {"ok": True}

    def slow_sync(text: str) -> dict[str, bool]:
        release.wait(3)
        return {"ok": True}

    guard, ran = _guard(check_out=slow_async if kind == "async-tool" else slow_sync, timeout=Timeout(ms=50))
    with guard.engagement(user=User(id="u")) as eng:
        started = time.monotonic()
        with pytest.raises(GuardrailViolation, match="did not answer within 50 ms"):
            _check(eng, "output", "hello", asynchronous=True)
        assert time.monotonic() - started < 1.5
        release.set()
        _assert_failed_for_good(eng, guard, ran, "output")
    assert cancelled == ([True] if kind == "async-tool" else [])


def test_a_guardrail_timeout_blocks_even_where_guardrail_failures_only_warn() -> None:
    """Run timeouts always block (decision 15): the run was denied, so its text is not let through either."""
    release = threading.Event()

    def slow(text: str) -> dict[str, bool]:
        release.wait(3)
        return {"ok": True}

    guard, _ = _guard(check_in=slow, timeout=Timeout(ms=50), severity={"guardrail": "warning"})
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match="did not answer within 50 ms"):
            eng.check_input("hello")
        release.set()
        assert eng.state.status is EngagementStatus.FAILED


def test_on_timeout_continue_waits_for_the_answer_and_judges_it() -> None:
    def slow(text: str) -> dict[str, bool]:
        time.sleep(0.1)
        return {"ok": "bad" not in text}

    guard, _ = _guard(check_in=slow, timeout=Timeout(ms=20, on_timeout="continue"))
    with guard.engagement(user=User(id="u")) as eng:
        assert eng.check_input("fine") == "fine"
        with pytest.raises(GuardrailViolation, match="assertion is false"):
            eng.check_input("bad")
    warnings = [d.reason for d in eng.decisions if d.rule is Rule.RUN]
    assert warnings == ["exceeded its 20 ms timeout; still waiting (on_timeout: continue)"] * 2


def test_on_timeout_cancel_cancels_the_engagement_and_fails_the_guardrail() -> None:
    release = threading.Event()

    def slow(text: str) -> dict[str, bool]:
        release.wait(3)
        return {"ok": True}

    guard, ran = _guard(check_in=slow, timeout=Timeout(ms=50, on_timeout="cancel"))
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match="did not answer within 50 ms"):
            eng.check_input("hello")
        release.set()
        assert eng.state.status is EngagementStatus.CANCELLED
        with pytest.raises(PolicyViolation):
            guard.call("echo", {"x": 1})
    assert ran == []


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_registered_retry_is_honoured(asynchronous: bool) -> None:
    tries: list[str] = []

    def flaky(text: str) -> dict[str, bool]:
        tries.append(text)
        if len(tries) == 1:
            raise ConnectionError("reset while checking " + text)
        return {"ok": True}

    guard, _ = _guard(check_in=flaky, retry=Retry(attempts=1, retry_on=(ConnectionError,)))
    with guard.engagement(user=User(id="u")) as eng:
        assert _check(eng, "input", "hello", asynchronous=asynchronous) == "hello"
    assert tries == ["hello", "hello"]
    assert [d.reason for d in eng.decisions if d.rule is Rule.RUN] == [
        "retry 1 of 1 in 0 ms after ConnectionError"
    ]
    assert _guardrail_decisions(eng)[-1][0] is Outcome.ALLOW


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_retries_spent_fail_the_guardrail(asynchronous: bool) -> None:
    def down(text: str) -> dict[str, bool]:
        raise ConnectionError("down")

    guard, ran = _guard(check_out=down, retry=Retry(attempts=2))
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match=r"failed: ConnectionError$"):
            _check(eng, "output", "hello", asynchronous=asynchronous)
        assert len([d for d in eng.decisions if d.rule is Rule.RUN]) == 2
        _assert_failed_for_good(eng, guard, ran, "output")


class _SlowModel:
    """A pydantic-like answer whose conversion takes long (a lazy field, a network call): until ``release``."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def model_dump(self, mode: str = "python") -> dict[str, bool]:
        self.release.wait(3)
        return {"ok": True}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("returns", ["answer", "coroutine"])
def test_an_answer_converting_past_the_timeout_fails_fast_and_is_never_judged(
    returns: str, asynchronous: bool
) -> None:
    """The answer was converted after the Timeout, outside it: a 50 ms guardrail whose answer took 3 s to
    convert held the check 3 s, and its late ``{"ok": true}`` passed. (``coroutine``: a sync tool returning an
    awaitable, converted once awaited, in the same thread.)"""
    release = threading.Event()

    async def later() -> _SlowModel:
        return _SlowModel(release)

    def slow(text: str) -> Any:
        return _SlowModel(release) if returns == "answer" else later()

    guard, ran = _guard(check_in=slow, timeout=Timeout(ms=50))
    with guard.engagement(user=User(id="u")) as eng:
        started = time.monotonic()
        try:
            with pytest.raises(GuardrailViolation, match=r"did not answer within 50 ms \(its Timeout\)$"):
                _check(eng, "input", "hello", asynchronous=asynchronous)
            assert time.monotonic() - started < 1.5
        finally:
            release.set()
        _assert_failed_for_good(eng, guard, ran, "input")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_answer_that_cannot_be_converted_is_not_retried(asynchronous: bool) -> None:
    """The conversion runs with the tool, under its Retry too; what it cannot convert is a failure to judge,
    not an error of the tool's to run it again for."""
    tries: list[str] = []

    def deep(text: str) -> dict[str, Any]:
        tries.append(text)
        return _deep(5_000)

    guard, ran = _guard(check_in=deep, retry=Retry(attempts=2, retry_on=(Exception,)))
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation, match=r"answered with a value that is nested deeper"):
            _check(eng, "input", "hello", asynchronous=asynchronous)
        _assert_failed_for_good(eng, guard, ran, "input")
    assert tries == ["hello"]
    assert [d for d in eng.decisions if d.rule is Rule.RUN] == []


# -- a CancelledError --------------------------------------------------------------------------------------


async def _raises_cancelled(text: str) -> dict[str, bool]:
    raise asyncio.CancelledError  # an inner task of its moderation client was cancelled, say


def _sync_raises_cancelled(text: str) -> dict[str, bool]:
    raise asyncio.CancelledError


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("tool", [_raises_cancelled, _sync_raises_cancelled], ids=["async-tool", "sync-tool"])
@pytest.mark.parametrize("timeout", [None, Timeout(ms=1_000)], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_guardrail_tool_raising_cancelled_error_fails_the_guardrail(
    phase: str, timeout: Timeout | None, tool: Callable[[str], Any], asynchronous: bool
) -> None:
    """The tool's own ``CancelledError``, while nothing cancels the check, is a failure like any error: it
    escaped the check with nothing recorded and the engagement running, and a caller that went on ran its next
    tool."""
    guard, ran = _guard(**{_arg(phase): tool}, timeout=timeout)
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation) as info:
            _check(eng, phase, "hello", asynchronous=asynchronous)
        assert info.value.reason == f"guardrail tool {TOOL[phase]!r} failed: CancelledError"
        _assert_failed_for_good(eng, guard, ran, phase)


@pytest.mark.parametrize("timeout", [None, Timeout(ms=5_000)], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_check_cancelled_while_its_guardrail_runs_is_recorded_and_fails_the_engagement(
    phase: str, timeout: Timeout | None
) -> None:
    """The task running the check is cancelled (the host's own timeout): the cancellation goes on, and the
    guardrail that did not judge is recorded as a denial, the engagement failed (it was left running with
    nothing recorded: the next tool ran)."""
    started = asyncio.Event()

    async def slow(text: str) -> dict[str, bool]:
        started.set()
        await asyncio.sleep(3)
        return {"ok": True}

    guard, ran = _guard(**{_arg(phase): slow}, timeout=timeout)

    async def run(eng: Engagement) -> None:
        check = asyncio.ensure_future(eng.acheck_input("hi") if phase == "input" else eng.acheck_output("hi"))
        await started.wait()
        check.cancel()
        with pytest.raises(asyncio.CancelledError):
            await check

    with guard.engagement(user=User(id="u")) as eng:
        asyncio.run(run(eng))
        assert _guardrail_decisions(eng) == [
            (Outcome.DENY, f"guardrail tool {TOOL[phase]!r} was cancelled with its check")
        ]
        _assert_failed_for_good(eng, guard, ran, phase)


# -- what a failing guardrail tool says is not repeated ------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_raising_guardrail_tool_is_reported_by_its_error_type_only(phase: str, asynchronous: bool) -> None:
    def leaky(text: str) -> dict[str, bool]:
        raise ValueError(f"refusing to judge {text!r}")

    guard, ran = _guard(**{_arg(phase): leaky})
    with guard.engagement(user=User(id="u")) as eng:
        with pytest.raises(GuardrailViolation) as info:
            _check(eng, phase, SECRET, asynchronous=asynchronous)
        assert info.value.reason == f"guardrail tool {TOOL[phase]!r} failed: ValueError"
        _assert_failed_for_good(eng, guard, ran, phase)
        recorded = [eng.state.status_reason, *(d.reason for step in eng.steps for d in step.decisions)]
        assert all(SECRET not in (text or "") for text in recorded), recorded
