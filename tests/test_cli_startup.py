"""Start-up stays cheap: ``import agentguard`` and ``agentguard --help`` import only what they use.

The times themselves are measured by ``benchmarks/startup.py``; these tests pin what makes them small, so a
new eager import shows up as a failing test rather than as a slower benchmark nobody reruns.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

import agentguard
from agentguard.cli import _COMMANDS, _build_parser

HEAVY = ("pydantic", "yaml", "httpx", "opentelemetry", "agentguard.guard", "agentguard.aos")


def _modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    script = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.splitlines()[-1])
    return modules


@pytest.mark.parametrize(
    "code",
    [
        "import agentguard",
        "from agentguard.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from agentguard.cli import main\ntry:\n    main(['validate', '--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["import", "help", "validate-help"],
)
def test_start_up_imports_nothing_heavy(code: str) -> None:
    loaded = _modules_after(code)
    assert [m for m in loaded if m.startswith(HEAVY)] == []


def test_every_public_name_is_importable_and_listed() -> None:
    assert sorted(dir(agentguard)) == sorted(agentguard.__all__)
    for name in agentguard.__all__:
        assert getattr(agentguard, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'Gaurd'"):
        _ = agentguard.Gaurd


def test_a_public_name_is_the_object_of_its_module() -> None:
    from agentguard.guard import Guard
    from agentguard.policy import Approval

    assert (agentguard.Guard, agentguard.Approval) == (Guard, Approval)


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_the_help_summary_is_the_subcommands_own(name: str) -> None:
    """``--help`` shows the table's summary; running the subcommand builds its own parser, which must agree."""
    parser = _build_parser([name])
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    assert helps[name] == _COMMANDS[name].summary
