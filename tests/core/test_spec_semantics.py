"""OpenAgentSpec MUSTs that are about what assertions may see and how the agent is described."""

from __future__ import annotations

import pytest

from agentguard import Guard, SpecError
from tests.conftest import spec_text


@pytest.mark.parametrize("backend", ["cel-expr-python", "cel-python"])
def test_restriction_assertions_see_the_engagement_and_only_it(backend: str) -> None:
    text = spec_text(
        """
        capabilities:
          lookup:
            input_restriction:
              assertion: environ.HOME == "/root"
        """
    )
    with pytest.raises(SpecError) as info:
        Guard.from_yaml(text, cel_backend=backend)
    assert info.value.problems[0].field == "capabilities.lookup.input_restriction.assertion"


@pytest.mark.parametrize("backend", ["cel-expr-python", "cel-python"])
def test_guardrail_assertions_see_the_tool_output_and_only_it(backend: str) -> None:
    text = spec_text(
        """
        capabilities: {}
        guardrails:
          input:
            tool_name: pii-check
            assertion: recent._name == "x"
        """
    )
    with pytest.raises(SpecError) as info:
        Guard.from_yaml(text, cel_backend=backend)
    assert info.value.problems[0].field == "guardrails.input.assertion"


def test_the_guard_describes_each_tool_and_its_parameters() -> None:
    guard = Guard.from_yaml(spec_text("capabilities:\n  send-email:\n  research:\n"))

    @guard.tool
    def send_email(to: str, body: str, cc: list[str] | None = None) -> dict[str, str]:
        """Send an email to one recipient.

        Args:
            to: the recipient's address
            body: plain text
        """
        return {}

    @guard.agent(name="research")
    def research(question: str) -> str:
        """Ask the research agent."""
        return ""

    descriptor = guard.agent_descriptor()
    assert descriptor["name"] == "test-agent"
    assert descriptor["instructions"] == "You help the tests pass."
    assert descriptor["provider"] == {"name": "tests@corp.com", "url": ""}
    tools = {t["name"]: t for t in descriptor["tools"]}
    assert tools["send-email"] == {
        "name": "send-email",
        "id": "send-email",
        "type": "function_call",
        "description": "Send an email to one recipient.",
        "arguments": [
            {"name": "to", "required": True, "type": "string", "description": "the recipient's address"},
            {"name": "body", "required": True, "type": "string", "description": "plain text"},
            {"name": "cc", "required": False, "type": "array"},
        ],
        "outputs": [{"name": "result", "type": "object"}],
    }
    assert tools["research"]["type"] == "agent_call"
