"""Shared test helpers: spec text builders."""

from __future__ import annotations

import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
