"""Shared test helpers: spec text builders and paths to the conformance data outside the repository."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def spec_text(body: str = "", *, name: str = "test-agent") -> str:
    """A valid OpenAgentSpec document with the required header and ``body`` (YAML, dedented) appended."""
    head = (
        "kind: openagentspec:v1/agent\n"
        f"name: {name}\n"
        "description: The agent is used in tests.\n"
        "intent: You help the tests pass.\n"
        "owner: tests@corp.com\n"
    )
    return head + textwrap.dedent(body)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"conformance data not found at {SHARED} (shared/ must sit beside the repository)")
    return SHARED
