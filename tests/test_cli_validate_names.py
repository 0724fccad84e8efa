"""``agentguard validate`` reports names and fields that will fail at run time: errors, warnings, --strict,
JSON severity, and a built guard's missing reviewers (``--guard``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentguard.cli import main

SPEC = """\
kind: openagentspec:v1/agent
name: travel-agent
description: The agent books trips.
intent: You book trips.
owner: travel-team
capabilities:
  web-search:
  book-flight:
    input_restriction:
      require_review: nobody
      assertion: 'recent["web-serch"].inputs.q != "" && user.mail.endsWith("@corp.com")'
exposes:
  hotel: 'recent["hotels"].outputs'
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.fixture
def warned(tmp_path: Path) -> Path:
    """A spec whose only finding is a warning."""
    path = tmp_path / "warned.yaml"
    path.write_text(
        SPEC.replace('recent["web-serch"].inputs.q != "" && user.mail', "user.email"), encoding="utf-8"
    )
    return path


def test_errors_and_warnings_in_text(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(spec)]) == 1
    lines = capsys.readouterr().out.splitlines()
    field = f"{spec}:11:7: capabilities.book-flight.input_restriction.assertion: "
    assert lines == [
        field + "user.mail: user has no field 'mail' (did you mean 'email'?); its fields are id, email",
        field
        + "recent[\"web-serch\"]: 'web-serch' is not a capability of this spec (did you mean 'web-search'?)",
        f"{spec}:13:3: exposes.hotel: recent[\"hotels\"]: 'hotels' is not a capability of this spec: a call to it "
        "is refused unless the guard is built with unknown_capability='allow' or 'observe' (warning)",
        "1 file checked: 1 invalid, 2 problems (1 warning)",
    ]


def test_warnings_alone_pass_unless_strict(warned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(warned)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{warned}: ok"
    assert out[1].endswith("(warning)")
    assert out[-1] == "1 file checked: all valid (1 warning)"
    assert main(["validate", "--strict", str(warned)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f'{warned}:13:3: exposes.hotel: recent["hotels"]: ')
    assert not out[0].endswith("(warning)")
    assert out[-1] == "1 file checked: 1 invalid, 1 problem"


def test_json_carries_the_severity(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--format", "json", str(spec)]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["valid"] is False
    assert [(p["severity"], p["line"], p["column"]) for p in entry["problems"]] == [("error", 11, 7)] * 2
    assert [(w["severity"], w["field"]) for w in entry["warnings"]] == [("warning", "exposes.hotel")]
    assert main(["validate", "--format", "json", "--strict", str(spec)]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert [p["severity"] for p in entry["problems"]] == ["error"] * 3
    assert entry["warnings"] == []


def test_dashed_name_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dashed.yaml"
    path.write_text(SPEC.replace('recent["web-serch"]', "recent.book-flight"), encoding="utf-8")
    assert main(["validate", str(path)]) == 1
    assert 'write recent["book-flight"] (a dash in a field name reads as a minus)' in capsys.readouterr().out


GUARD_MODULE = """\
from agentguard import Guard

guard = Guard.from_file({spec!r})
"""


@pytest.fixture
def guard_module(spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module in the current directory that builds a guard from ``spec`` without its reviewer."""
    (tmp_path / "travel_guard.py").write_text(GUARD_MODULE.format(spec=str(spec)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "travel_guard", raising=False)
    return "travel_guard:guard"


def test_guard_reports_reviewers_it_lacks(
    guard_module: str, spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--guard", guard_module]) == 1
    out = capsys.readouterr().out
    assert (
        f"{spec}:10:7: capabilities.book-flight.input_restriction.require_review: not registered with the "
        "guard: reviewer 'nobody'"
    ) in out
    # the guard refuses unknown names (unknown_capability="deny"): what the file alone warns of is an error
    assert "is not a capability of this spec, and the guard refuses any other" in out
    assert out.splitlines()[-1] == "1 file checked: 1 invalid, 4 problems"


def test_the_file_alone_does_not_know_the_reviewers(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", str(spec)])
    assert "nobody" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("guard", "message"),
    [("no_colon", "--guard must be MODULE:NAME"), ("travel_guard:other", "not a Guard (found NoneType)")],
)
def test_guard_usage_errors(
    guard_module: str, guard: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--guard", guard]) == 2
    assert message in capsys.readouterr().err


def test_nothing_to_check_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["validate"])
    assert caught.value.code == 2
    assert "name a FILE or a --guard to check" in capsys.readouterr().err


def test_examples_have_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted(
        str(path) for path in (Path(__file__).resolve().parents[1] / "examples").rglob("*.yaml")
    )
    assert examples
    assert main(["validate", "--strict", *examples]) == 0
    assert "(warning)" not in capsys.readouterr().out
