"""A guardian rules file with problems: every one reported at once, in file order, with file, line, column,
field and "did you mean", under a header naming the rules file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentguard.errors import SpecError
from agentguard.guardian.server import load_rules

BROKEN = """\
default_decison: allow
rules:
  - name: no-shell
    whn: params.toolCallRequest.toolId == "shell"
    decision: dney
    message: No shell
  - name: bad-cel
    when: params.x ==
    decision: deny
    message: m
    reason_code: [x]
  - name: ok-rule
    when: method ==
    decision: deny
    message: m
"""


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(BROKEN, encoding="utf-8")
    return path


def test_every_problem_at_once_in_file_order(broken: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_rules(broken)
    found = [(p.line, p.column, p.field, p.reason.split(":")[0]) for p in caught.value.problems]
    assert found == [
        (1, 1, "default_decison", "unknown field 'default_decison' (did you mean 'default_decision'?)"),
        (4, 5, "rules[0].whn", "rule 'no-shell'"),
        (5, 5, "rules[0].decision", "rule 'no-shell'"),
        (8, 5, "rules[1].when", "rule 'bad-cel'"),  # compiled although the rule has another problem
        (11, 5, "rules[1].reason_code", "rule 'bad-cel'"),
        (13, 5, "rules[2].when", "rule 'ok-rule'"),  # a valid rule of an invalid file is compiled too
    ]
    assert all(p.source == str(broken) for p in caught.value.problems)


def test_the_header_names_the_rules_file(broken: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_rules(broken)
    assert str(caught.value).startswith(f"6 problems in guardian rules file {broken}:\n")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (4, "rule 'no-shell': unknown field 'whn' (did you mean 'when'?)"),
        (5, "rule 'no-shell': must be 'allow', 'deny' or 'modify', not 'dney'"),
        (11, "rule 'bad-cel': unknown field 'reason_code' (did you mean 'reason_codes'?)"),
    ],
)
def test_reasons_are_worded_as_spec_problems(broken: Path, line: int, reason: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_rules(broken)
    assert [p.reason for p in caught.value.problems if p.line == line] == [reason]


def test_a_cel_problem_points_inside_the_expression(broken: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_rules(broken)
    (problem,) = [p for p in caught.value.problems if p.field == "rules[1].when"]
    assert problem.reason.startswith("rule 'bad-cel': CEL does not compile: ")
    assert (problem.expression_line, problem.expression_column) == (1, 12)


def test_one_problem_says_problem(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("on_rule_eror: deny\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_rules(path)
    assert str(caught.value) == (
        f"1 problem in guardian rules file {path}:\n"
        f"  - {path}:1:1: on_rule_eror: unknown field 'on_rule_eror' (did you mean 'on_rule_error'?)"
    )
