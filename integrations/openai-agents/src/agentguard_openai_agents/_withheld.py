"""The output tripwire agentguard raises carries no trace of the output it stopped.

The SDK's own ``OutputGuardrailTripwireTriggered`` holds the output it stopped (``guardrail_result.agent_output``)
and, once the run's error handling has attached it, the run's data (``run_data``: the run items, the model's raw
responses and every output guardrail's result, each holding that output again). An app that logs the exception,
or reports it to an error tracker, would record the very text agentguard withheld. So every output tripwire the
adapter raises is an :class:`OutputWithheld`:

- its ``agent_output`` is :data:`WITHHELD`; its ``output_info`` (and :attr:`OutputWithheld.violation`) is
  agentguard's typed error, which names the rule, never the text;
- the SDK attaches ``run_data`` after the exception left the adapter (``Runner.run``'s error handler, or the
  streamed result when the caller reads the error), so ``run_data`` is a property that stores what it is given
  without the stopped response: the earlier items and responses stay, for the app to log.

Raised from the output guardrail (a model the adapter does not hold) the SDK treats it as its own tripwire: the run
ends, nothing of the answer is saved to the session.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentguard import PolicyViolation
from agentguard_openai_agents._host import (
    Agent,
    GuardrailFunctionOutput,
    OutputGuardrail,
    OutputGuardrailResult,
    OutputGuardrailTripwireTriggered,
    RunErrorDetails,
    TResponseOutputItem,
)
from agentguard_openai_agents._messages import answer_message

__all__ = ["WITHHELD", "OutputWithheld"]

WITHHELD = "[withheld by agentguard]"
"""What an :class:`OutputWithheld` (and each output guardrail result in its ``run_data``) says the output was."""


class OutputWithheld(OutputGuardrailTripwireTriggered):
    """The SDK's output tripwire for an output agentguard stopped, holding no trace of that output."""

    def __init__(
        self, guardrail: OutputGuardrail[Any], agent: Agent[Any], violation: PolicyViolation
    ) -> None:
        self.violation = violation
        """agentguard's typed error, kept here too: the SDK replaces ``guardrail_result`` with one without it when
        the stopped output was a tool's result (``tool_use_behavior``)."""
        verdict = GuardrailFunctionOutput(output_info=violation, tripwire_triggered=True)
        super().__init__(
            OutputGuardrailResult(guardrail=guardrail, agent_output=WITHHELD, agent=agent, output=verdict)
        )

    @property
    def run_data(self) -> RunErrorDetails | None:
        return self._run_data

    @run_data.setter
    def run_data(self, details: RunErrorDetails | None) -> None:
        self._run_data = None if details is None else _without_answer(details)


def _without_answer(details: RunErrorDetails) -> RunErrorDetails:
    """``details`` without the stopped response and with no output guardrail result holding the output.

    A run ends on a response that answers and leaves nothing to run, so when the SDK itself took the stopped
    answer (its output guardrail stopped it), that response is the last one: it goes, with every item made of it.
    When the adapter stopped the answer before the SDK saw it (a model the adapter holds), the last response the
    SDK has asked for tools, and stays.
    """
    responses = list(details.raw_responses)
    stopped: list[TResponseOutputItem] = []
    if responses and answer_message(responses[-1].output) is not None:
        stopped = list(responses.pop().output)
    return dataclasses.replace(
        details,
        new_items=[item for item in details.new_items if not _among(item.raw_item, stopped)],
        raw_responses=responses,
        output_guardrail_results=[
            dataclasses.replace(result, agent_output=WITHHELD) for result in details.output_guardrail_results
        ],
    )


def _among(raw: object, items: list[TResponseOutputItem]) -> bool:
    """Is ``raw`` one of ``items`` (the same object, or an equal copy of it)?"""
    return any(raw is item or raw == item for item in items)
