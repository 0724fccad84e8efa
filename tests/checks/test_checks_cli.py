"""``agentguard audit ls / show / query``: tables, lookups by id, filters, JSON, and exit status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentguard.checks import Audit, AuditEntry
from agentguard.cli import main

DAY = 86_400_000
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _write(directory: Path, **fields: Any) -> Path:
    base: dict[str, Any] = {
        "createdAt": T0,
        "objectives": "Check the agent.",
        "scope": ["steps/toolCallRequest search"],
        "opinion": "unqualified",
        "findings": {},
    }
    return Audit.write(AuditEntry.model_validate({**base, **fields}), directory, body="# Body\n\ntimeline\n")


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    _write(
        tmp_path, id="aaa111", agentId="support", executionId="e1", opinion="adverse", findings={"major": 2}
    )
    _write(
        tmp_path,
        id="aaa222",
        createdAt=T0 + DAY,
        agentId="support",
        opinion="qualified",
        findings={"minor": 1},
    )
    _write(tmp_path, id="bbb333", createdAt=T0 + 2 * DAY, agentId="billing", opinion="disclaimer")
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_ls_prints_a_table_oldest_first(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "audit", "ls", str(reports))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID", "CREATED", "(UTC)", "OPINION", "CRIT", "MAJ", "MIN", "AGENT", "EXECUTION", "FILE"
    ]  # fmt: skip
    assert lines[1].split()[:8] == ["aaa111", "2023-11-14", "22:13:20", "adverse", "0", "2", "0", "support"]
    assert lines[1].split()[8:] == ["e1", "2023-11-14-aaa111.md"]
    assert [line.split()[0] for line in lines[1:4]] == ["aaa111", "aaa222", "bbb333"]
    assert lines[-1] == "3 reports"


def test_query_filters(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def ids(*options: str) -> list[str]:
        status, out, _ = _run(capsys, "audit", "query", str(reports), *options)
        assert status == 0
        return [line.split()[0] for line in out.splitlines()[1:-1]]

    assert ids("--opinion", "adverse") == ["aaa111"]
    assert ids("--opinion", "adverse", "--opinion", "disclaimer") == ["aaa111", "bbb333"]
    assert ids("--min-major", "1") == ["aaa111"]
    assert ids("--min-critical", "1") == []
    assert ids("--agent", "support") == ["aaa111", "aaa222"]
    assert ids("--execution", "e1") == ["aaa111"]
    assert ids("--since", "2023-11-15") == ["aaa222", "bbb333"]
    assert ids("--until", str(T0 + DAY)) == ["aaa111", "aaa222"]
    assert ids("--since", "2023-11-15T00:00:00+00:00", "--until", "2023-11-16") == ["aaa222"]


def test_query_as_json(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "audit", "query", str(reports), "--agent", "billing", "--format", "json")
    assert status == 0
    [item] = json.loads(out)
    assert item["path"].endswith("bbb333.md")
    assert item["entry"]["opinion"] == "disclaimer"
    assert item["entry"]["findings"] == {"critical": 0, "major": 0, "minor": 0}


def test_show_by_file_id_and_prefix(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = next(reports.glob("*aaa111.md"))
    status, by_file, _ = _run(capsys, "audit", "show", str(path))
    assert status == 0
    assert "opinion:     adverse" in by_file
    assert "findings:    0 critical, 2 major, 0 minor" in by_file
    assert by_file.endswith("# Body\n\ntimeline\n")
    assert _run(capsys, "audit", "show", "aaa111", "--dir", str(reports))[1] == by_file
    assert _run(capsys, "audit", "show", "bbb", "--dir", str(reports))[1].startswith(str(reports))

    status, out, _ = _run(capsys, "audit", "show", "bbb", "--dir", str(reports), "--format", "json")
    document = json.loads(out)
    assert (document["entry"]["id"], document["body"]) == ("bbb333", "# Body\n\ntimeline\n")


def test_show_errors(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "audit", "show", "aaa", "--dir", str(reports))
    assert status == 1
    assert "'aaa' matches 2 reports (aaa111, aaa222): give more of the id" in err
    status, _, err = _run(capsys, "audit", "show", "zzz", "--dir", str(reports))
    assert (status, err.strip()) == (1, f"agentguard audit: no report 'zzz' in {reports}")
    broken = reports / "broken.txt"
    broken.write_text("no frontmatter")
    status, _, err = _run(capsys, "audit", "show", str(broken))
    assert status == 1
    assert "broken.txt: no YAML frontmatter" in err


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "audit", "ls", str(tmp_path / "missing"))
    assert status == 1
    assert "is not a directory" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "query", str(tmp_path), "--since", "yesterday"])
    assert exit_info.value.code == 2
    assert "not an ISO 8601 time or Unix milliseconds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["audit", "query", str(tmp_path), "--opinion", "fine"])


def test_an_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "audit", "ls", str(tmp_path))
    assert status == 0
    assert out.splitlines()[-1] == "0 reports"


def test_control_characters_in_a_report_are_shown_not_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, an engagement id (a host may take it from its client) holding ``"\\x1b[1A\\x1b[2K"`` printed as
    it was: the terminal moved up and erased the row above, an adverse report's, and a line feed in it added
    a row of its own."""
    erase = "\x1b[1A\x1b[2K"
    _write(tmp_path, id="aaa111", executionId="e1", opinion="adverse", findings={"major": 1})
    _write(tmp_path, id="bbb222", createdAt=T0 + DAY, executionId=f"e2{erase}\nfake row", agentId="a\u202e")
    status, out, _ = _run(capsys, "audit", "ls", str(tmp_path))
    assert status == 0
    assert "\x1b" not in out
    assert "\\x1b[1A\\x1b[2K\\nfake row" in out
    assert "a\\u202e" in out
    assert len(out.splitlines()) == 4  # the header, two reports, the count
    status, out, _ = _run(capsys, "audit", "show", "bbb222", "--dir", str(tmp_path))
    assert status == 0
    assert "\x1b" not in out
    assert "execution:   e2\\x1b[1A\\x1b[2K\\nfake row" in out
