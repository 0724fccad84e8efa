"""docs/conformance.md cannot rot: every test it cites exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

CELL = re.compile(r"`([\w/.-]+\.py)::(\w+)`|`(test_\w+)`")


def test_every_cited_test_exists() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text()
    cited = 0
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        current = None
        for match in CELL.finditer(line):
            path, name = (match.group(1), match.group(2)) if match.group(1) else (current, match.group(3))
            assert path is not None, f"bare test name {name} without a file in: {line}"
            current = path
            source = (ROOT / path).read_text()
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name} does not exist"
            cited += 1
    assert cited > 40
