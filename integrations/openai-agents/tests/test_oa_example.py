"""The OpenAI Agents SDK example runs as written, and its output shows each part of the adapter at work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openai_agents_support.py"


def test_example_runs_offline_and_shows_denial_review_and_loop_stop() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, cwd=EXAMPLE.parent
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "tool send-email    DENIED      restriction (input)" in text
    assert "I can only email corp.com addresses" in text
    assert "supervisor asked: [('refund'" in text
    assert text.count("(refund tool ran: A-1 30.0)") == 1
    assert "reviewed (input) by supervisor: approved" in text
    assert "run stopped: ShortCircuitViolation" in text
