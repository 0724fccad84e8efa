"""Every example runs, so the docs cannot rot."""

from __future__ import annotations

import runpy
import subprocess
import sys

from tests.conftest import ROOT


def test_quickstart_runs_and_shows_every_rule_firing() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("[restriction]", "[review]", "[capability]", "[short-circuit]", "timeline:", "exposed:"):
        assert expected in out


def test_quickstart_main_in_process() -> None:
    namespace = runpy.run_path(str(ROOT / "examples" / "quickstart.py"))
    namespace["main"]()
