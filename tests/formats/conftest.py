"""Paths to the descriptor fixtures, the secrets they reference, and a guard built from their policy."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from agentguard import Guard

FIXTURES = Path(__file__).parent / "fixtures"

SUPPORT_SECRETS: Mapping[str, object] = {
    "support-llm.api_key": "sk-test",
    "refund-tool.sensitive_headers": {"Authorization": "Bearer test"},
}
"""The values support.agentspec.yaml references but does not contain."""


def fixture(name: str) -> Path:
    return FIXTURES / name


@pytest.fixture
def guard() -> Guard:
    """A guard enforcing fixtures/agent.yaml, whose capabilities are the fixtures' tools."""
    return Guard.from_file(FIXTURES / "agent.yaml")
