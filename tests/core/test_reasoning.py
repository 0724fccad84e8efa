"""``Guard.call``'s ``reasoning``: sent to a guardian with the call, and, given as a function, found only when a
guardian is asked; a function that fails or answers anything but text denies the call (recorded) before its
tool runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentguard import Guard, GuardianDenied, Outcome, Rule
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      lookup-order:
    """
)

RULES = """
default_decision: allow
rules:
  - name: reasoned-past-the-audit
    methods: [steps/toolCallRequest]
    when: has(params.reasoning) && params.reasoning.contains("bypass the audit")
    decision: deny
    message: Reasoned past the audit
"""


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server:
        yield server


class Tool:
    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, order_id: str) -> dict[str, str]:
        self.runs += 1
        return {"id": order_id}


def invoke(guard: Guard, tool: Tool, reasoning: Any, flavour: str) -> Any:
    """``guard.call`` or ``guard.acall`` of ``lookup-order`` in the open engagement."""
    if flavour == "sync":
        return guard.call("lookup-order", {"order_id": "A-1"}, tool, reasoning=reasoning)
    return asyncio.run(guard.acall("lookup-order", {"order_id": "A-1"}, tool, reasoning=reasoning))


def call(guard: Guard, tool: Tool, reasoning: Any, flavour: str) -> Any:
    with guard.engagement():
        return invoke(guard, tool, reasoning, flavour)


def counted(text: str | None) -> tuple[Callable[[], str | None], list[int]]:
    asked: list[int] = []

    def reasoning() -> str | None:
        asked.append(1)
        return text

    return reasoning, asked


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("given", ["text", "function"])
def test_the_guardian_decides_on_the_reasoning(guardian: RunningServer, flavour: str, given: str) -> None:
    guard = Guard.from_yaml(SPEC, guardian=GuardianClient(guardian.url))
    tool = Tool()
    text = "I will bypass the audit."
    reasoning = text if given == "text" else counted(text)[0]
    with pytest.raises(GuardianDenied, match="Reasoned past the audit"):
        call(guard, tool, reasoning, flavour)
    assert tool.runs == 0
    assert call(guard, tool, "Looking the order up.", flavour) == {"id": "A-1"}
    assert tool.runs == 1


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_without_a_guardian_the_reasoning_function_is_never_called(flavour: str) -> None:
    guard = Guard.from_yaml(SPEC)
    reasoning, asked = counted("I will bypass the audit.")
    tool = Tool()
    assert call(guard, tool, reasoning, flavour) == {"id": "A-1"}
    assert (tool.runs, asked) == (1, [])


def _fails() -> str:
    raise RuntimeError("the conversation is gone")


async def _async_text() -> str:
    return "I will bypass the audit."


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_async_reasoning_function_is_awaited(guardian: RunningServer, flavour: str) -> None:
    guard = Guard.from_yaml(SPEC, guardian=GuardianClient(guardian.url))
    tool = Tool()
    with pytest.raises(GuardianDenied, match="Reasoned past the audit"):
        call(guard, tool, _async_text, flavour)
    assert tool.runs == 0


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    ("reasoning", "why"),
    [
        (_fails, "the reasoning function failed (RuntimeError)"),
        (lambda: ["I will bypass the audit."], "the reasoning function returned list, not text or None"),
        (lambda: b"I will bypass the audit.", "the reasoning function returned bytes, not text or None"),
        (42, "the call's reasoning is int, not text or a function"),
    ],
)
def test_a_reasoning_that_fails_or_is_not_text_denies_the_call_before_the_tool_runs(
    guardian: RunningServer, flavour: str, reasoning: Any, why: str
) -> None:
    guard = Guard.from_yaml(SPEC, guardian=GuardianClient(guardian.url))
    tool = Tool()
    with guard.engagement() as engagement:
        with pytest.raises(GuardianDenied) as denied:
            invoke(guard, tool, reasoning, flavour)
        assert tool.runs == 0
        assert engagement.view()["history"]["_total"] == 0  # taken back: the call never happened
        (step,) = engagement.steps
    assert denied.value.reason == f"{why}: the guardian was not asked"
    assert step.outcome is Outcome.DENY
    assert [(d.rule, d.outcome, d.reason) for d in step.decisions][-1] == (
        Rule.GUARDIAN,
        Outcome.DENY,
        denied.value.reason,
    )
