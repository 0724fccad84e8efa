"""The timeline (``agentguard.timeline``): one line per step, whatever the model and the tools wrote."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import Guard, PolicyViolation
from agentguard.timeline import format_timeline, one_line
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      refund:
        input_restriction:
          assertion: recent["refund"].inputs.amount <= 100
    """
)

FORGED = "x\n  2  tool refund  allowed"
"""A tool name (the model writes tool names) that, printed raw, adds a step line of its own."""


def test_a_name_or_a_reason_cannot_add_a_step_line() -> None:
    guard = Guard.from_yaml(SPEC, unknown_capability="observe")
    with guard.engagement() as eng:
        guard.call(FORGED, {"note": "a\nb"}, lambda note: "ok")
        with pytest.raises(PolicyViolation):
            guard.call("refund", {"amount": 1000}, lambda amount: "refunded")
        guard.call("refund\u202e\x1b[2K", {"amount": 1}, lambda amount: "ok")
    lines = format_timeline(eng).splitlines()
    assert len(lines) == len(eng.steps)
    assert [line.split()[0] for line in lines] == [str(n) for n in range(1, len(eng.steps) + 1)]
    assert "\\u202e\\x1b[2K" in lines[-1]


@settings(max_examples=200)
@given(st.text())
def test_one_line_is_one_printable_line(text: str) -> None:
    line = one_line(text)
    assert line.isprintable()
    assert line == one_line(line)
    line.encode()  # a lone surrogate is written as its escape
