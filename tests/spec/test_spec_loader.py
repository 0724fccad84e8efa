"""The loader: safe YAML, positions of every problem, all problems at once, CEL compiled at load time."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agentguard.cel import CelBackend, CelCompileError, CelProgram, VarType, get_backend
from agentguard.errors import SpecError, SpecProblem
from agentguard.spec import (
    ENGAGEMENT_DECLARATIONS,
    GUARDRAIL_DECLARATIONS,
    AgentSpec,
    Capability,
    compile_spec,
    load_spec,
    load_spec_text,
    parse_spec,
)

HEADER = textwrap.dedent(
    """\
    kind: openagentspec:v1/agent
    name: support-agent
    description: The agent helps.
    intent: You help.
    owner: team-a
    """
)


def problems(
    text: str, *, backend: CelBackend | None = None
) -> list[tuple[int | None, int | None, str, str]]:
    """(line, column, field, reason) of every problem, in file order."""

    def load() -> object:
        if backend is None:
            return parse_spec(text, source="agent.yaml")
        return load_spec_text(text, backend=backend, source="agent.yaml")

    with pytest.raises(SpecError) as caught:
        load()
    assert all(problem.source == "agent.yaml" for problem in caught.value.problems)
    return [(p.line, p.column, p.field, p.reason) for p in caught.value.problems]


MULTI = textwrap.dedent(
    """\
    kind: openagentspec:v1/agent
    name: Support_Agent
    description: The agent helps.
    intent: You help.
    capabilities:
      lookup-order:
        colect_results: true
      Send_Email: {}
      refund:
        input_restriction:
          require_review: supervisor
          assertion: recent["refund"].inputs.amount <= 100
        input_restriction: {}
    guardrails:
      input:
        tool_name: pii-check
    lifespan:
      short_circuit: 0
    """
)


def test_every_problem_is_reported_with_its_line_and_column() -> None:
    assert problems(MULTI) == [
        (1, 1, "owner", "required field is missing"),
        (
            2,
            1,
            "name",
            "invalid name 'Support_Agent': may contain only lowercase letters, digits, '-' and '.', "
            "not 'S' (names are lowercase)",
        ),
        (
            7,
            5,
            "capabilities.lookup-order.colect_results",
            "unknown field 'colect_results' (did you mean 'collect_results'?)",
        ),
        (
            8,
            3,
            "capabilities.Send_Email",
            "key 'Send_Email' is not a valid reference: name 'Send_Email' may contain only lowercase "
            "letters, digits, '-' and '.', not 'S' (names are lowercase)",
        ),
        (
            13,
            5,
            "capabilities.refund.input_restriction",
            "duplicate key 'input_restriction' (first defined on line 10)",
        ),
        (15, 3, "guardrails.input.assertion", "required field is missing"),
        (18, 3, "lifespan.short_circuit", "must be at least 1, not 0"),
    ]


def test_spec_error_message_lists_every_problem() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(MULTI, source="agent.yaml")
    message = str(caught.value)
    assert message.startswith("7 problems in spec:\n")
    assert "  - agent.yaml:18:3: lifespan.short_circuit: must be at least 1, not 0" in message


def test_missing_field_points_at_the_parent_mapping() -> None:
    text = HEADER + "capabilities: {}\nguardrails:\n  output:\n    assertion: 'true'\n"
    assert problems(text) == [(8, 3, "guardrails.output.tool_name", "required field is missing")]


def test_duplicate_top_level_key() -> None:
    text = HEADER + "capabilities: {}\nname: other-agent\n"
    assert problems(text) == [(7, 1, "name", "duplicate key 'name' (first defined on line 2)")]


def test_duplicate_capability() -> None:
    text = HEADER + "capabilities:\n  refund:\n  lookup-order:\n  refund: {collect_results: false}\n"
    assert problems(text) == [
        (9, 3, "capabilities.refund", "duplicate key 'refund' (first defined on line 7)")
    ]


def test_duplicate_keys_in_flow_mappings() -> None:
    text = HEADER + "capabilities: {a: {}, a: {}}\n"
    assert problems(text) == [(6, 23, "capabilities.a", "duplicate key 'a' (first defined on line 6)")]


def test_yaml_syntax_error_has_the_position_yaml_reports() -> None:
    text = HEADER + "capabilities:\n  refund: {collect_results: true\nlifespan: {}\n"
    [(line, column, field, reason)] = problems(text)
    assert (line, column, field) == (8, 9, "")
    assert reason.startswith("invalid YAML: ")


def test_tab_indentation_is_a_syntax_error() -> None:
    [(line, column, _, reason)] = problems(HEADER + "capabilities:\n\trefund: {}\n")
    assert (line, column) == (7, 1)
    assert "'\\t'" in reason


def test_problem_renders_as_file_line_column_field_reason() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(HEADER + "capabilities: {}\nlifespan: {short_circuit: 0}\n", source="a.yaml")
    assert [str(p) for p in caught.value.problems] == [
        "a.yaml:7:12: lifespan.short_circuit: must be at least 1, not 0"
    ]


@pytest.mark.parametrize(
    ("text", "reason", "position"),
    [
        ("", "the document is empty; expected a mapping with kind, name, description, ...", (1, 1)),
        (
            "# only a comment\n",
            "the document is empty; expected a mapping with kind, name, description, ...",
            (1, 1),
        ),
        ("- kind\n- name\n", "the document must be a mapping of fields, not a list", (1, 1)),
        ("\n  just text\n", "the document must be a mapping of fields, not a single value", (2, 3)),
    ],
)
def test_document_must_be_a_mapping(text: str, reason: str, position: tuple[int, int]) -> None:
    assert problems(text) == [(*position, "", reason)]


def test_a_single_document_only() -> None:
    [(line, _, field, reason)] = problems(HEADER + "capabilities: {}\n---\nkind: x\n")
    assert (line, field) == (7, "")
    assert "expected a single document" in reason


@pytest.mark.parametrize(
    "text",
    [
        HEADER + "capabilities: !!python/object/apply:os.system ['echo pwned']\n",
        HEADER + "capabilities: !!python/object:collections.OrderedDict {}\n",
        HEADER + "capabilities:\n  refund: !!python/object/new:dict {}\n",
        HEADER + "capabilities: {}\nexposes:\n  x: !!python/name:os.system ''\n",
        HEADER + "capabilities: {}\nexposes: !!set {a, b}\n",
        HEADER + "capabilities: !custom {}\n",
    ],
)
def test_unsafe_and_unknown_tags_are_rejected(text: str) -> None:
    found = problems(text)
    assert len(found) == 1
    reason = found[0][3]
    assert "is not allowed in a spec file" in reason or "could not determine a constructor" in reason


def test_python_tags_are_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    touch = f"!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ['{marker}']]"
    text = HEADER + f"capabilities: {touch}\n"
    with pytest.raises(SpecError):
        parse_spec(text)
    assert not marker.exists()


def test_keys_must_be_strings() -> None:
    text = HEADER + "capabilities:\n  yes: {}\n  12: {}\n"
    assert problems(text) == [
        (7, 3, "capabilities.yes", "keys must be strings, not the boolean true"),
        (8, 3, "capabilities.12", "keys must be strings, not the number 12"),
    ]


def test_complex_keys_are_rejected() -> None:
    text = HEADER + "capabilities:\n  ? [a, b]\n  : {}\n"
    assert problems(text) == [
        (7, 5, "capabilities", "a mapping key must be a plain value, not a list or mapping")
    ]


def test_values_yaml_cannot_build_are_reported_once() -> None:
    text = HEADER + "capabilities: {}\nexposes:\n  when: 2024-02-30\n"
    assert problems(text) == [
        (8, 9, "exposes.when", "invalid value '2024-02-30': day is out of range for month")
    ]


def test_unquoted_dates_and_numbers_get_a_quoting_hint() -> None:
    text = HEADER.replace("owner: team-a", "owner: 2024-01-01") + "capabilities: {}\n"
    assert problems(text) == [
        (5, 1, "owner", "expected a string, got the date 2024-01-01 (quote the value to make it a string)")
    ]


def test_anchors_aliases_and_merge_keys() -> None:
    text = HEADER + textwrap.dedent(
        """\
        capabilities:
          send-email: &mailer
            user_identity: false
            static_identity: mailer
          send-sms:
            <<: *mailer
            static_identity: sms-gateway
          send-fax:
            <<: [*mailer, {collect_results: false, user_identity: true}]
          send-letter: *mailer
        """
    )
    spec = parse_spec(text)
    assert spec.capabilities["send-sms"] == Capability(user_identity=False, static_identity="sms-gateway")
    assert spec.capabilities["send-fax"] == Capability(
        user_identity=False, static_identity="mailer", collect_results=False
    )
    assert spec.capabilities["send-letter"] == spec.capabilities["send-email"]


def test_problems_inside_merged_mappings_point_at_their_source() -> None:
    text = HEADER + textwrap.dedent(
        """\
        defaults: &defaults
          user_identity: "no"
        capabilities:
          send-sms:
            <<: *defaults
        """
    )
    assert problems(text) == [
        (6, 1, "defaults", "unknown field 'defaults'"),
        (7, 3, "capabilities.send-sms.user_identity", "expected true or false, got the string 'no'"),
    ]


def test_merge_key_needs_mappings() -> None:
    text = HEADER + "capabilities:\n  a:\n    <<: 3\n"
    assert problems(text) == [
        (8, 9, "capabilities.a.<<", "a merge key (<<) needs a mapping or a list of mappings")
    ]


def test_recursive_alias() -> None:
    text = HEADER + "capabilities: {}\nexposes: &loop\n  self: *loop\n"
    assert problems(text) == [
        (8, 3, "exposes.self", "an alias refers to a node that contains it (recursive alias)")
    ]


def test_alias_bomb_is_stopped() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    [(_, _, _, reason)] = problems("\n".join(lines) + "\n")
    assert reason.startswith("the document expands to more than 100000 YAML nodes")


def test_deep_nesting_is_a_spec_error() -> None:
    [(_, _, field, reason)] = problems("a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert field == ""
    assert "nested too deeply" in reason


def test_nul_character_is_reported_with_its_position() -> None:
    assert problems(HEADER + "capabilities: {}\nx: a\x00b\n") == [
        (7, 5, "", "invalid YAML: special characters are not allowed (U+0000)")
    ]


# ----------------------------------------------------------------------------------------- compiling


class RecordingBackend:
    """A stand-in engine that records what it was asked to compile and fails on ``$$``."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, VarType]]] = []

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> CelProgram:
        self.calls.append((expression, dict(declarations)))
        if "$$" in expression:
            raise CelCompileError(expression, "unexpected '$$'", 1, expression.index("$$") + 1)
        return _Program(expression)


class _Program:
    def __init__(self, source: str) -> None:
        self.source = source
        self.variables = frozenset[str]()

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        return self.source


FULL = HEADER + textwrap.dedent(
    """\
    capabilities:
      lookup-order:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      web-search:
        output_restriction:
          require_review: supervisor
      oagent://billing:
        output_restriction:
          assertion: recent["billing"].outputs.ok
    guardrails:
      output:
        tool_name: toxicity-check
        assertion: output.ok == true
    exposes:
      total: history._total
    """
)


def test_compile_spec_places_every_program() -> None:
    backend = RecordingBackend()
    compiled = compile_spec(parse_spec(FULL, source="full.yaml"), backend)
    assert compiled.source == "full.yaml"
    assert compiled.backend_name == "recording"
    assert list(compiled.references) == ["lookup-order", "send-email", "web-search", "oagent://billing"]
    assert compiled.references["oagent://billing"].kind == "agent"
    assert {k: p.source for k, p in compiled.input_assertions.items()} == {
        "send-email": 'recent["send-email"].inputs.to.endsWith("@corp.com")'
    }
    assert {k: p.source for k, p in compiled.output_assertions.items()} == {
        "oagent://billing": 'recent["billing"].outputs.ok'
    }
    assert compiled.guardrail_input is None
    assert compiled.guardrail_output is not None
    assert compiled.guardrail_output.source == "output.ok == true"
    assert {k: p.source for k, p in compiled.exposes.items()} == {"total": "history._total"}


def test_declarations_follow_architecture_decision_1() -> None:
    backend = RecordingBackend()
    compile_spec(parse_spec(FULL), backend)
    declared = dict(backend.calls)
    engagement = {
        "started_at": VarType.TIMESTAMP,
        "user": VarType.DYN,
        "recent": VarType.DYN,
        "history": VarType.DYN,
    }
    assert dict(ENGAGEMENT_DECLARATIONS) == engagement
    assert dict(GUARDRAIL_DECLARATIONS) == {"output": VarType.DYN}
    assert declared['recent["send-email"].inputs.to.endsWith("@corp.com")'] == engagement
    assert declared['recent["billing"].outputs.ok'] == engagement
    assert declared["history._total"] == engagement
    assert declared["output.ok == true"] == {"output": VarType.DYN}


def test_compiled_mappings_are_read_only() -> None:
    compiled = compile_spec(parse_spec(FULL), RecordingBackend())
    with pytest.raises(TypeError):
        compiled.input_assertions["x"] = compiled.exposes["total"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        compiled.source = "x"  # type: ignore[misc]


def test_compile_errors_carry_field_line_and_expression_position() -> None:
    text = FULL.replace('.endsWith("@corp.com")', ' $$ "x"').replace("history._total", "$$total")
    with pytest.raises(SpecError) as caught:
        compile_spec(parse_spec(text, source="full.yaml"), RecordingBackend())
    assert caught.value.problems == (
        SpecProblem(
            source="full.yaml",
            field="capabilities.send-email.input_restriction.assertion",
            reason="invalid CEL expression: unexpected '$$'",
            line=10,
            column=7,
            expression_line=1,
            expression_column=32,
        ),
        SpecProblem(
            source="full.yaml",
            field="exposes.total",
            reason="invalid CEL expression: unexpected '$$'",
            line=22,
            column=3,
            expression_line=1,
            expression_column=1,
        ),
    )


def test_compile_spec_source_can_be_overridden() -> None:
    with pytest.raises(SpecError) as caught:
        compile_spec(
            parse_spec(FULL.replace("history._total", "$$")), RecordingBackend(), source="other.yaml"
        )
    assert caught.value.problems[0].source == "other.yaml"


def test_spec_built_in_code_compiles_without_positions() -> None:
    spec = parse_spec(FULL).model_copy(update={"exposes": {"bad": "$$"}})
    rebuilt = AgentSpec.model_validate(spec.model_dump())
    with pytest.raises(SpecError) as caught:
        compile_spec(rebuilt, RecordingBackend())
    [problem] = caught.value.problems
    assert (problem.source, problem.field, problem.line, problem.column) == (
        "<string>",
        "exposes.bad",
        None,
        None,
    )
    assert (problem.expression_line, problem.expression_column) == (1, 1)


def test_load_reports_schema_and_cel_problems_together() -> None:
    text = FULL.replace("owner: team-a\n", "").replace("history._total", "$$total")
    assert problems(text, backend=RecordingBackend()) == [
        (1, 1, "owner", "required field is missing"),
        (21, 3, "exposes.total", "invalid CEL expression: unexpected '$$'"),
    ]


def test_load_spec_text_uses_the_default_backend(minimal: str) -> None:
    compiled = load_spec_text(minimal)
    assert compiled.backend_name
    assert compiled.source == "<string>"


# ------------------------------------------------------------------------------------------- files


def test_load_spec_from_a_file(tmp_path: Path, minimal: str, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(minimal, encoding="utf-8")
    compiled = load_spec(path, backend=backend)
    assert compiled.source == str(path)
    assert compiled.spec.name == "minimal-agent"
    assert load_spec(str(path), backend=backend).spec == compiled.spec


def test_load_spec_accepts_a_byte_order_mark(tmp_path: Path, minimal: str, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + minimal.encode())
    assert load_spec(path, backend=backend).spec.name == "minimal-agent"


def test_problems_name_the_file(tmp_path: Path, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(HEADER + "capabilities: {}\nlifespan: {short_circuit: 0}\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(path, backend=backend)
    assert str(caught.value.problems[0]).startswith(f"{path}:7:12: lifespan.short_circuit: ")


def test_missing_file_is_one_problem(tmp_path: Path, backend: CelBackend) -> None:
    path = tmp_path / "missing.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(path, backend=backend)
    assert caught.value.problems == (
        SpecProblem(source=str(path), field="", reason="cannot read the file: No such file or directory"),
    )


def test_directory_is_one_problem(tmp_path: Path, backend: CelBackend) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path, backend=backend)
    [problem] = caught.value.problems
    assert problem.reason.startswith("cannot read the file: ")


def test_undecodable_file_is_one_problem(tmp_path: Path, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    path.write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path, backend=backend)
    [problem] = caught.value.problems
    assert problem.reason.startswith("cannot read the file: 'utf-8' codec can't decode")


def test_yaml_text_passed_as_a_path_gets_a_hint(minimal: str, backend: CelBackend) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(minimal, backend=backend)
    assert "use load_spec_text" in caught.value.problems[0].reason


def test_real_engine_compile_error_positions() -> None:
    text = HEADER + textwrap.dedent(
        """\
        capabilities:
          refund:
            input_restriction:
              assertion: |
                recent["refund"].inputs.amount <= 100 &&
                  refunds.total < 1000
        guardrails:
          input: {tool_name: pii-check, assertion: output.ok == true}
          output: {tool_name: toxicity-check, assertion: 'output.ok = true'}
        """
    )
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, backend=get_backend("cel-expr-python"), source="agent.yaml")
    found = [
        (p.field, p.line, p.column, p.expression_line, p.expression_column) for p in caught.value.problems
    ]
    assert found == [
        ("capabilities.refund.input_restriction.assertion", 9, 7, 2, 10),
        ("guardrails.output.assertion", 14, 39, 1, 11),
    ]
    assert caught.value.problems[0].reason == (
        "invalid CEL expression: undeclared reference to 'refunds.total' (in container '')"
    )
    assert str(caught.value.problems[0]).startswith(
        "agent.yaml:9:7: capabilities.refund.input_restriction.assertion: invalid CEL expression: "
    )
    assert str(caught.value.problems[0]).endswith("(in expression at 2:10)")
