"""Reading descriptor files: format detection by content, JSON and YAML, positions, unreadable files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agentguard.errors import SpecError
from agentguard.formats import detect_format, load_descriptor, parse_descriptor, read_document
from tests.formats.conftest import fixture


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("support.agentspec.yaml", "agentspec"),
        ("autonomous.agentspec.json", "agentspec"),
        ("components.agentspec.yaml", "agentspec"),
        ("mailcomposer.manifest.json", "manifest"),
        ("support-os.md", "osp-app"),
        ("agent.yaml", "openagentspec"),
    ],
)
def test_format_is_told_by_content(name: str, expected: str, tmp_path: Path) -> None:
    renamed = tmp_path / "descriptor.txt"  # the file name plays no part
    renamed.write_text(fixture(name).read_text())
    assert read_document(renamed.read_text(), str(renamed)).format == expected


def test_openagentspec_without_kind_is_still_a_policy() -> None:
    assert detect_format({"name": "x", "capabilities": {}}) == "openagentspec"


def test_unknown_format_is_a_problem_with_the_file_name() -> None:
    with pytest.raises(SpecError) as info:
        parse_descriptor("name: something\nversion: 1\n", source="mystery.yaml")
    (problem,) = info.value.problems
    assert problem.source == "mystery.yaml"
    assert problem.reason.startswith("cannot tell the format: expected an OpenAgentSpec agent")


def test_an_openagentspec_policy_is_not_a_descriptor() -> None:
    with pytest.raises(SpecError, match=r"OpenAgentSpec agent, a policy: load it with Guard\.from_file"):
        load_descriptor(fixture("agent.yaml"))


def test_invalid_json_reports_line_and_column() -> None:
    with pytest.raises(SpecError) as info:
        parse_descriptor('{\n  "component_type": "Agent",\n  "name": \n}', source="bad.json")
    (problem,) = info.value.problems
    assert (problem.line, problem.column) == (4, 1)
    assert problem.reason.startswith("invalid JSON: Expecting value")


def test_duplicate_json_keys_are_refused() -> None:
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        parse_descriptor('{"component_type": "Agent", "name": "a", "name": "b"}')


def test_duplicate_yaml_keys_are_refused_with_their_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_descriptor("component_type: Agent\nname: a\nname: b\n", source="dup.yaml")
    assert any(p.line == 3 and "duplicate key 'name'" in p.reason for p in info.value.problems)


def test_json_numbers_are_read_as_json_not_yaml() -> None:
    doc = read_document('{"component_type": "Agent", "limit": 1e5}')
    assert doc.data == {"component_type": "Agent", "limit": 100000.0}  # YAML 1.1 would read "1e5"


def test_json_fields_have_positions() -> None:
    doc = read_document('{\n  "component_type": "Agent",\n  "tools": [\n    {"name": "x"}\n  ]\n}')
    assert doc.at(("tools", 0, "name"), "r").line == 4


def test_tab_indented_json_is_read_without_positions() -> None:
    doc = read_document('{\n\t"component_type": "Agent"\n}')
    assert doc.format == "agentspec"
    assert doc.problems == []


def test_app_frontmatter_positions_are_lines_of_the_file() -> None:
    doc = read_document(fixture("support-os.md").read_text())
    assert doc.format == "osp-app"
    assert doc.at(("providers", "checks", "audit"), "r").line == 16
    assert doc.body.startswith("# Support OS")


def test_unreadable_file_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_descriptor(tmp_path / "missing.json")
    assert info.value.problems[0].reason == "cannot read the file: No such file or directory"


@pytest.mark.parametrize("encode", [json.dumps, lambda data: yaml.safe_dump(data, allow_unicode=False)])
@pytest.mark.parametrize(
    ("where", "field"), [("description", "description"), ("key", "tools.0.inputs.0.\ud800")]
)
def test_a_lone_surrogate_is_refused_in_json_as_in_yaml(
    encode: Callable[[object], str], where: str, field: str
) -> None:
    """JSON may escape half a character (``\\ud800``); such a descriptor loaded and made every later UTF-8
    encoding of it (a guardian request, an audit report) fail at run time."""
    data = json.loads(fixture("autonomous.agentspec.json").read_text())
    if where == "description":
        data["description"] = "Archives \ud800 tickets."
    else:
        data["tools"][0]["inputs"][0]["\ud800"] = 1
    with pytest.raises(SpecError) as info:
        parse_descriptor(encode(data), source="a.json")
    [problem] = info.value.problems
    assert problem.source == "a.json"
    assert problem.field == field
    assert "lone surrogate" in problem.reason
