"""Counting the walks of :func:`agentguard.cel._expr.unrepresentable`, for the tests of checking values once."""

from __future__ import annotations

from typing import Any

import pytest

from agentguard.cel import _expr


def counted_walks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """From now on (for the test), each value walked for the C++ engine is appended to the list returned."""
    walked: list[object] = []
    unrepresentable = _expr.unrepresentable

    def counted(value: Any) -> str | None:
        walked.append(value)
        return unrepresentable(value)

    monkeypatch.setattr(_expr, "unrepresentable", counted)
    return walked
