"""Fixtures shared by the spec and CLI tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agentguard.cel import CelBackend, get_backend

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support-agent" / "agent.yaml"

_MINIMAL = textwrap.dedent(
    """\
    kind: openagentspec:v1/agent
    name: minimal-agent
    description: The agent looks up orders.
    intent: You look up orders.
    owner: team-a
    capabilities:
      lookup-order:
    """
)


@pytest.fixture(scope="session")
def backend() -> CelBackend:
    return get_backend()


@pytest.fixture
def minimal() -> str:
    """The smallest valid agent document: one capability with all defaults."""
    return _MINIMAL


@pytest.fixture
def example_path() -> Path:
    """The support-agent example shipped in ``examples/``."""
    return _EXAMPLE
