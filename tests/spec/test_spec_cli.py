"""``agentguard validate``: exit codes, text and JSON output, several files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentguard.cli import main

BAD = """\
kind: openagentspec:v1/agent
name: Bad_Agent
description: The agent helps.
intent: You help.
owner: team-a
capabilities:
  refund:
    input_restriction:
      assertion: recent["refund"].inputs.amount <=
"""


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD, encoding="utf-8")
    return path


def test_valid_file(example_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(example_path)]) == 0
    assert capsys.readouterr().out == f"{example_path}: ok\n1 file checked: all valid\n"


def test_invalid_file(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--cel-backend", "cel-expr-python", str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{bad}:2:1: name: invalid name 'Bad_Agent': ")
    assert lines[1].startswith(
        f"{bad}:9:7: capabilities.refund.input_restriction.assertion: invalid CEL expression: "
    )
    assert lines[1].endswith("(in expression at 1:34)")
    assert lines[2:] == ["1 file checked: 1 invalid, 2 problems"]


def test_several_files(
    example_path: Path, bad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert main(["validate", str(example_path), str(bad), str(missing)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{example_path}: ok"
    assert f"{missing}: <document>: cannot read the file: No such file or directory" in out
    assert out[-1] == "3 files checked: 2 invalid, 3 problems"


def test_all_valid_files(example_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(example_path), str(example_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 files checked: all valid"


def test_json_output(example_path: Path, bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "json", str(example_path), str(bad)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document[0] == {"file": str(example_path), "valid": True, "problems": [], "warnings": []}
    assert document[1]["file"] == str(bad)
    assert document[1]["valid"] is False
    assert [p["field"] for p in document[1]["problems"]] == [
        "name",
        "capabilities.refund.input_restriction.assertion",
    ]
    assert document[1]["problems"][0] == {
        "source": str(bad),
        "field": "name",
        "reason": "invalid name 'Bad_Agent': may contain only lowercase letters, digits, '-' and '.', "
        "not 'B' (names are lowercase)",
        "line": 2,
        "column": 1,
        "expression_line": None,
        "expression_column": None,
        "severity": "error",
    }


def test_json_output_all_valid(example_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "json", str(example_path)]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"file": str(example_path), "valid": True, "problems": [], "warnings": []}
    ]


def test_unknown_cel_backend(example_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--cel-backend", "no-such-engine", str(example_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentguard validate: error: unknown CEL backend 'no-such-engine'")


@pytest.mark.parametrize(
    "argv", [[], ["validate"], ["no-such-command"], ["validate", "--format", "xml", "a.yaml"]]
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "usage: agentguard" in capsys.readouterr().err


def test_python_dash_m(example_path: Path, bad: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentguard", "validate", str(example_path), str(bad)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"{example_path}: ok"
    assert result.stdout.splitlines()[-1] == "2 files checked: 1 invalid, 2 problems"
