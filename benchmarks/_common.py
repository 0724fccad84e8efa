"""What the benchmark scripts share: the guarded call they time, the table they print, the results they write.

The scripts run as files (``.venv/bin/python benchmarks/core.py``), so this module is imported as ``_common``
from their own folder.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""Where every benchmark writes its ``<name>.json``."""

SPEC = """
kind: openagentspec:v1/agent
name: bench-agent
description: The agent is measured.
intent: You are measured.
owner: bench@corp.com
capabilities:
  tool-a:
    input_restriction:
      assertion: {input_a}
    output_restriction:
      assertion: recent["tool-a"].outputs.ok == true
  tool-b:
    input_restriction:
      assertion: {input_b}
    output_restriction:
      assertion: recent["tool-b"].outputs.ok == true
lifespan:
  short_circuit: 3
"""
"""The measured agent: two tools, each with an input and an output CEL assertion, and ``short_circuit: 3``."""

RECENT = 'recent["{name}"].inputs.x < 1000 && user.id == "u1"'
"""The input assertion of the measured call, ``{name}`` standing for the tool's name."""


def spec_text(assertion: str = RECENT) -> str:
    """:data:`SPEC` with ``assertion`` as both tools' input assertion."""
    return SPEC.format(
        input_a=json.dumps(assertion.format(name="tool-a")),
        input_b=json.dumps(assertion.format(name="tool-b")),
    )


def tool_a(x: int) -> dict[str, bool]:
    return {"ok": True}


def tool_b(x: int) -> dict[str, bool]:
    return {"ok": True}


def thue_morse(n: int) -> list[str]:
    """The first n terms of the Thue-Morse sequence over tool-a / tool-b.

    The sequence never repeats a block three times in a row (it is cube-free), so the short-circuit rule
    (k = 3) is active on every call without ever firing.
    """
    return ["tool-b" if bin(i).count("1") % 2 else "tool-a" for i in range(n)]


def print_table(
    columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[str]], *, sep: str = "", header: bool = True
) -> None:
    """Print a header line (unless not ``header``) and a line per row of cells, ``sep`` between the cells.

    ``columns`` are ``(title, alignment and width)``: ``("backend", "<18")``, ``("bare µs", ">9")``.
    """
    if header:
        print(sep.join(f"{title:{align}}" for title, align in columns))
    for row in rows:
        print(sep.join(f"{cell:{align}}" for cell, (_, align) in zip(row, columns, strict=True)))


def write_results(benchmark: str, fields: Mapping[str, object]) -> Path:
    """Write ``results/<benchmark>.json``: the benchmark's name, Python version and machine, then ``fields``."""
    path = RESULTS / f"{benchmark}.json"
    document = {"benchmark": benchmark, "python": platform.python_version(), "machine": platform.machine()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**document, **fields}, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def aos_request(request_id: int, *, to: str = "bob@corp.example") -> dict[str, Any]:
    """A realistic ``steps/toolCallRequest`` (about 700 bytes on the wire), for the guardian benchmarks."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "steps/toolCallRequest",
        "params": {
            "context": {
                "agent": {
                    "name": "support-agent",
                    "id": "support-agent",
                    "instructions": "You help customers with their orders.",
                    "version": "1.2.0",
                    "provider": {"name": "Corp", "url": "https://corp.example"},
                },
                "session": {"id": "engagement-42"},
                "turnId": "turn-1",
                "stepId": f"step-{request_id}",
                "timestamp": "2025-07-01T12:00:00Z",
                "user": {"id": "user-7", "organization": {"id": "corp"}},
            },
            "toolCallRequest": {
                "executionId": f"call-{request_id}",
                "toolId": "send-email",
                "inputs": [
                    {"name": "to", "value": to},
                    {"name": "subject", "value": "Your refund"},
                    {"name": "body", "value": "Your refund of 42.00 EUR is on its way. " * 4},
                ],
            },
            "reasoning": "The customer asked for a refund confirmation.",
        },
    }
