"""The MCP example runs as written, offline, and its output shows the adapter at work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_guarded_server.py"


def test_example_runs_offline_and_shows_filtering_denial_and_loop_stop() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, cwd=EXAMPLE.parent
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "offered tools: ['lookup_order', 'send_email']" in text
    assert text.count("(send_email ran:") == 1
    assert (
        "send_email to eve@evil.test: isError=True: agentguard denied this tool call: [restriction input]"
        in text
    )
    assert "loop stopped: JSON-RPC error -32000: rule short-circuit" in text
    assert "tool lookup-order  DENIED      short-circuit (input)" in text
