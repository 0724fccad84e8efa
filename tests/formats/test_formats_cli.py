"""``agentguard validate`` on every format, told apart by content, with warnings and --strict."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentguard.cli import main
from tests.formats.conftest import fixture

VALID = [
    "agent.yaml",
    "specialized.agentspec.yaml",
    "autonomous.agentspec.json",
    "mailcomposer.manifest.json",
]


def test_all_four_formats_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(fixture(name)) for name in [*VALID, "support-os.md"]]
    assert main(["validate", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.endswith(": ok")] == [f"{name}: ok" for name in files]
    # validate has no secrets: one it cannot check is a warning, not an error
    assert any(
        line.startswith(f"{files[-1]}:15:112:")
        and "token_secret: the secret 'guardian-token' is not supplied" in line
        and line.endswith("(warning)")
        for line in out
    )
    assert out[-1] == "5 files checked: all valid (3 warnings)"


def test_valid_descriptors_with_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(fixture("support.agentspec.yaml"))
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: ok"
    assert out[1].startswith(
        f"{path}:16:3: llm_config.api_key: the secret 'support-llm.api_key' is not supplied"
    )
    assert out[1].endswith("(warning)")
    assert out[-1] == "1 file checked: all valid (2 warnings)"


@pytest.mark.parametrize(
    ("name", "where"),
    [
        (
            "broken-reference.agentspec.yaml",
            ":15:5: tools.0.client_transport: $component_ref 'crm-transprot'",
        ),
        ("version-gated.agentspec.yaml", ":16:5: tools.0.requires_confirmation: requires_confirmation needs"),
        ("misspelled-field.agentspec.yaml", ":15:5: tools.0.requires_confirmaton: unknown field"),
        ("misconfigured-os.md", ":6:16: providers.checks.guardian.provider: unknown agentguard provider"),
    ],
)
def test_invalid_descriptors_report_file_field_and_line(
    name: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(fixture(name))
    assert main(["validate", path]) == 1
    assert capsys.readouterr().out.startswith(path + where)


def test_json_output_names_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    spec, manifest = str(fixture("agent.yaml")), str(fixture("mailcomposer.manifest.json"))
    support = str(fixture("support.agentspec.yaml"))
    assert main(["validate", "--format", "json", spec, manifest, support]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document[0] == {"file": spec, "valid": True, "problems": [], "warnings": []}
    assert document[1] == {
        "file": manifest,
        "valid": True,
        "problems": [],
        "format": "manifest",
        "warnings": [],
    }
    assert document[2]["format"] == "agentspec"
    assert [w["field"] for w in document[2]["warnings"]] == [
        "llm_config.api_key",
        "tools.2.sensitive_headers",
    ]
    assert document[2]["warnings"][0]["line"] == 16
    assert document[2]["warnings"][0]["severity"] == "warning"


def test_unknown_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.yaml"
    path.write_text("title: my notes\n")
    assert main(["validate", str(path)]) == 1
    assert f"{path}:1:1: <document>: cannot tell the format" in capsys.readouterr().out


def test_strict(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip(
        "pyagentspec", reason="pyagentspec is not installed (pip install 'agentguard[agentspec]')"
    )
    path = str(fixture("support.agentspec.yaml"))
    assert main(["validate", "--strict", path]) == 1  # pyagentspec needs the secrets, agentguard does not
    assert "pyagentspec rejects the configuration" in capsys.readouterr().out
    assert main(["validate", "--strict", str(fixture("specialized.agentspec.yaml"))]) == 0


def test_strict_without_pyagentspec_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyagentspec.serialization", None)
    assert main(["validate", "--strict", str(fixture("specialized.agentspec.yaml"))]) == 2
    assert "pip install 'agentguard[agentspec]'" in capsys.readouterr().err
