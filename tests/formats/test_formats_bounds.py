"""Issue 13: descriptor files are held to the spec loader's LoadLimits -- size checked before reading,
nodes bounded for YAML and JSON alike -- each refusal naming the file and the limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentguard.errors import SpecError
from agentguard.formats import load_descriptor, parse_descriptor
from agentguard.spec import LoadLimits

MIB = 1024 * 1024


def test_a_50_mb_descriptor_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text('{"component_type": "Agent", "name": "' + "x" * (50 * MIB) + '"}')
    started = time.monotonic()
    with pytest.raises(SpecError) as error:
        load_descriptor(path)
    assert time.monotonic() - started < 10
    [problem] = error.value.problems
    assert str(problem) == (
        f"{path}: <document>: the document is larger than the limit of {4 * MIB} bytes (LoadLimits.max_bytes)"
    )


@pytest.mark.parametrize("as_json", [True, False])
def test_a_descriptor_with_too_many_nodes_is_refused(as_json: bool) -> None:
    data = {"component_type": "Agent", "name": "a", "tools": list(range(2000))}
    text = (
        json.dumps(data) if as_json else "component_type: Agent\nname: a\ntools: " + json.dumps(data["tools"])
    )
    with pytest.raises(SpecError, match=r"more than 1000 YAML nodes \(LoadLimits.max_nodes\)"):
        parse_descriptor(text, source="agent.json", limits=LoadLimits(max_nodes=1000))
