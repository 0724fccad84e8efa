"""A model's reasoning summary: the SDK hands it to the caller (a ``ReasoningItem`` in ``result.new_items``, its
summary streamed as ``reasoning_summary_text`` deltas) and hosts show it as the model's "thinking", with no output
guardrail ever run on it. So it is checked as text beside tool calls is: before the SDK sees the response, in real
``Runner`` runs (``run``, ``run_sync``, ``run_streamed``), with the real output guardrail tool and a real guardian
on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_openai_agents import violation_of
from agents import OutputGuardrailTripwireTriggered
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Content, Summary

from agentguard import Guard, GuardrailViolation
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer

from .test_oa_beside import MODES, guardian, lookup, message, run
from .test_oa_streaming import UNCHECKED

__all__ = ["guardian"]  # the real guardian of the text-beside-tool-calls tests (masks an SSN)


def reasoning(*summary: str, text: str | None = None, item_id: str = "rs-1") -> ResponseReasoningItem:
    """A reasoning item with summary parts and, optionally, the raw reasoning text some providers send."""
    return ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[Summary(type="summary_text", text=s) for s in summary],
        content=None if text is None else [Content(type="reasoning_text", text=text)],
        encrypted_content="opaque",
    )


def _reasonings(out: Any) -> list[str]:
    """The summary text of each reasoning item the run handed the caller."""
    return [
        "".join(s.text for s in item.raw_item.summary)
        for item in out.result.new_items
        if item.type == "reasoning_item"
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("output", "secret"),
    [
        pytest.param([reasoning("The user is stupid; look it up."), lookup()], "stupid", id="beside-tool-calls"),
        pytest.param([reasoning("The user is stupid."), message("A-1 has shipped.")], "stupid",
                     id="before-the-answer"),
        pytest.param([reasoning("Fine.", "What a stu", "pid user"), lookup()], "pid user", id="split-over-parts"),
        pytest.param([reasoning(text="The user is stupid."), lookup()], "stupid", id="raw-reasoning-text"),
    ],
)  # fmt: skip
def test_a_reasoning_summary_that_fails_the_guardrail_ends_the_run_unseen(
    output: list[Any], secret: str, mode: str
) -> None:
    out = run([output, [message("never")]], mode)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert isinstance(violation_of(out.error), GuardrailViolation)
    assert out.shop.runs == {}  # no tool of the response ran
    assert len(out.model.calls) == 1
    assert secret not in out.seen()


@pytest.mark.parametrize("mode", ["run", "run_sync", "streamed"])
def test_a_model_given_by_name_has_its_reasoning_checked_by_the_hooks_before_its_tools(mode: str) -> None:
    out = run([[reasoning("The user is stupid."), lookup()], [message("Done.")]], mode, by_name=True)
    assert isinstance(out.error, OutputGuardrailTripwireTriggered)
    assert out.shop.runs == {}


@pytest.mark.parametrize("mode", MODES)
def test_a_reasoning_summary_that_passes_reaches_the_caller_checked_once(mode: str) -> None:
    out = run([[reasoning("Look A-1 up."), lookup()], [message("A-1 has shipped.")]], mode)
    assert out.error is None
    assert out.checked == ["Look A-1 up.", "A-1 has shipped."]  # each once: hooks and model agree
    assert _reasonings(out) == ["Look A-1 up."]
    assert out.shop.runs == {"lookup_order": 1}


@pytest.mark.parametrize("mode", MODES)
def test_a_guardian_modify_of_a_reasoning_summary_reaches_the_caller_replaced(
    guardian: RunningServer, mode: str
) -> None:
    guard = Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url))
    said = reasoning("Their SSN is 123-45-6789.", text="SSN 123-45-6789, then look A-1 up.")
    out = run([[said, lookup()], [message("Done.")]], mode, guard=guard)
    assert out.error is None
    assert _reasonings(out) == ["[masked]"]
    assert "123-45" not in out.seen()
    assert "123-45" not in out.model_input(1)  # the model's history holds the replacement
    assert out.shop.runs == {"lookup_order": 1}
