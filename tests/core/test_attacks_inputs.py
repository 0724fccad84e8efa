"""Attacks on input restrictions, review gates and run control: the checked call must be the call that runs.

The attacker controls the agent's tool calls (argument names and values, concurrency) and a tool's behaviour
(how long it runs). Each test is what a demanding user expects; ``xfail(strict=True)`` marks a defect.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentguard import (
    Approval,
    EngagementStatus,
    Guard,
    Outcome,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    ReviewRequest,
    Rule,
)
from agentguard.runs import Retry, Timeout
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: >-
            recent["send-email"].inputs.to.all(t, t.endsWith("@corp.com"))
            && !("bcc" in recent["send-email"].inputs)
      mailing:
        input_restriction:
          assertion: recent["mailing"].inputs.to.all(t, t.endsWith("@corp.com"))
          require_review: boss
      slow:
      other:
    """
)


NOBODY = {"boss": lambda request: False}
"""The reviewer of a guard whose test does not review (a spec's reviewer must be registered)."""


# -- argument names the model chooses --------------------------------------------------------------------


@pytest.mark.parametrize("nest", ["inputs", "kwargs"])
def test_a_host_runner_gets_only_the_inputs_the_assertion_read(nest: str) -> None:
    """The LangChain middleware and the MCP adapter run a tool through ``guard.call`` with a ``**inputs``
    runner, handing it the model's arguments as they are: the model picks the argument names."""
    guard = Guard.from_yaml(SPEC, reviewers=NOBODY)
    received: list[dict[str, Any]] = []

    def runner_inputs(**inputs: Any) -> str:
        received.append(inputs)
        return "sent"

    def runner_kwargs(**kwargs: Any) -> str:
        received.append(kwargs)
        return "sent"

    runner = runner_inputs if nest == "inputs" else runner_kwargs
    arguments = {"to": ["bob@corp.com"], "body": "hi", nest: {"bcc": "eve@evil.test"}}
    with guard.engagement(), contextlib.suppress(RestrictionViolation):
        guard.call("send-email", arguments, runner)
    # Either the call is refused, or the runner gets exactly what the assertion read.
    assert all("bcc" not in r for r in received)


def test_positional_keyword_and_default_inputs_are_read_as_the_tool_gets_them() -> None:
    """Handled: the record binds positional arguments and defaults by name, as the tool receives them."""
    guard = Guard.from_yaml(SPEC, reviewers=NOBODY)
    got: list[Any] = []

    @guard.tool
    def send_email(to: list[str], body: str = "", bcc: str | None = None) -> str:
        got.append((to, bcc))
        return "sent"

    with guard.engagement():
        with pytest.raises(RestrictionViolation):
            send_email(["eve@evil.test"], "hi")
        with pytest.raises(RestrictionViolation):  # bcc is always there (its default): the spec forbids it
            send_email(["bob@corp.com"], "hi", "eve@evil.test")
    assert got == []


# -- review gates ----------------------------------------------------------------------------------------


def test_the_tool_runs_with_the_inputs_the_reviewer_approved() -> None:
    asked, changed = threading.Event(), threading.Event()
    approved: list[Any] = []

    def boss(request: ReviewRequest) -> Approval:  # a person takes a while
        approved.append(list(request.inputs["to"]))
        asked.set()
        changed.wait(5)
        return Approval(True, "ok", "boss")

    guard = Guard.from_yaml(SPEC, reviewers={"boss": boss})
    sent: list[str] = []

    @guard.tool
    def mailing(to: list[str]) -> str:
        sent.extend(to)
        return "sent"

    recipients = ["bob@corp.com"]

    def attacker() -> None:  # another task of the agent holds the same list
        asked.wait(5)
        recipients.append("eve@evil.test")
        changed.set()

    thread = threading.Thread(target=attacker)
    thread.start()
    with guard.engagement(), contextlib.suppress(PolicyViolation):
        mailing(to=recipients)
    thread.join()
    assert approved == [["bob@corp.com"]]
    assert "eve@evil.test" not in sent


@pytest.mark.parametrize("answer", ["yes", 1, [True], Approval("true", "ok", "boss"), None])  # type: ignore[arg-type]
def test_a_reviewer_answering_anything_but_true_denies(answer: Any) -> None:
    """Handled: only ``True`` / ``Approval(approved=True)`` approves."""
    guard = Guard.from_yaml(SPEC, reviewers={"boss": lambda request: answer})
    sent: list[Any] = []
    with guard.engagement(), pytest.raises(ReviewDenied):
        guard.call("mailing", {"to": ["bob@corp.com"]}, lambda to: sent.append(to))
    assert sent == []


# -- concurrency: the input check reads another call of the same tool ------------------------------------


class _Pause(Mapping[str, Any]):
    """An argument whose walk (after the call is begun, before its assertion) waits for a signal: the window
    a parallel call of the same tool has, made wide enough to see."""

    def __init__(self, begun: threading.Event, go: threading.Event) -> None:
        self._data = {"k": "v"}
        self._walks = 0
        self.begun, self.go = begun, go

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def values(self) -> Any:
        # Only the faithfulness walk reads values() (the record's conversion reads items(), before the call
        # is begun): it runs once the call is the pending recent["send-email"], before its assertion.
        self._walks += 1
        if self._walks == 1:
            self.begun.set()
            self.go.wait(5)
        return self._data.values()


def test_a_parallel_call_of_the_same_tool_does_not_stand_in_for_the_checked_inputs() -> None:
    guard = Guard.from_yaml(SPEC, reviewers=NOBODY)
    sent: list[Any] = []

    def send(to: list[str], body: str, meta: Any = None) -> str:
        sent.append(to)
        return "sent"

    begun, go = threading.Event(), threading.Event()
    results: dict[str, Any] = {}
    with guard.engagement() as eng:

        def bad() -> None:
            with eng.activate():
                try:
                    results["bad"] = guard.call(
                        "send-email", {"to": ["eve@evil.test"], "body": "x", "meta": _Pause(begun, go)}, send
                    )
                except PolicyViolation as exc:
                    results["bad"] = exc

        thread = threading.Thread(target=bad)
        thread.start()
        begun.wait(5)
        results["good"] = guard.call("send-email", {"to": ["bob@corp.com"], "body": "x"}, send)
        go.set()
        thread.join()
    assert isinstance(results["bad"], RestrictionViolation)
    assert ["eve@evil.test"] not in sent


# -- run control callbacks -------------------------------------------------------------------------------


def _raising_hook() -> None:
    raise RuntimeError("the hook broke")


def test_a_raising_timeout_hook_still_cancels_and_records_the_timeout() -> None:
    guard = Guard.from_yaml(SPEC, reviewers=NOBODY)
    release = threading.Event()
    runs: list[int] = []

    def slow() -> str:
        runs.append(1)
        release.wait(10)  # hangs until the test ends: always beyond the timeout
        return "late"

    others: list[str] = []
    try:
        with guard.engagement() as eng:
            raised: Exception | None = None
            try:
                guard.call(
                    "slow",
                    {},
                    slow,
                    timeout=Timeout(ms=20, on_timeout="cancel", on_timeout_callback=_raising_hook),
                    retry=Retry(attempts=2),
                )
            except Exception as exc:
                raised = exc
            denials = [d for d in eng.decisions if d.rule is Rule.RUN and d.outcome is Outcome.DENY]
            status = eng.status
            with contextlib.suppress(PolicyViolation):
                guard.call("other", {}, lambda: others.append("ran"))
    finally:
        release.set()
    assert raised is not None
    assert runs == [1]  # a cancelled engagement retries nothing
    assert denials
    assert status is EngagementStatus.CANCELLED
    assert others == []
