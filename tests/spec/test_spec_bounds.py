"""Issue 13: loading has a budget (LoadLimits) -- a hostile spec file is refused quickly, naming the file and
the limit, and a CEL expression repeated through YAML aliases is compiled once.

Times are checked as "well within generous slack", never exactly, and as the CPU time of this process
(``time.process_time``), which a loaded machine's other work does not inflate (wall-clock time of one of
these loads took 12 s on a 2-core machine busy with other test runs); the unbounded loader took 37-122 s
on these inputs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard.cel import CelBackend, CelProgram, VarType
from agentguard.errors import SpecError
from agentguard.spec import LoadLimits, load_spec, load_spec_text, read_yaml
from tests.conftest import spec_text

SLACK = 10.0
MIB = 1024 * 1024
LIMIT_NAMES = ("max_bytes", "max_nodes", "max_expanded_chars", "max_cel_chars")


class CountingBackend:
    """The real backend, counting how often each expression is compiled."""

    def __init__(self, inner: CelBackend) -> None:
        self._inner = inner
        self.compiled: list[str] = []

    @property
    def name(self) -> str:
        return self._inner.name

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> CelProgram:
        self.compiled.append(expression)
        return self._inner.compile(expression, declarations)


def _one_problem(error: pytest.ExceptionInfo[SpecError]) -> str:
    [problem] = error.value.problems
    return str(problem)


def _huge(kind: str, size: int) -> str:
    head = spec_text("capabilities:\n  lookup:\n")
    if kind == "scalar":
        return head + "exposes:\n  big: '" + "x" * size + "'\n"
    if kind == "comment":
        return head + "# " + "x" * size + "\n"
    if kind == "capabilities":
        return head + "".join(f"  t{index}:\n" for index in range(size // 8))
    return head + "exposes:\n  flow: [" + "1," * (size // 2) + "1]\n"


@pytest.mark.parametrize("kind", ["scalar", "comment", "capabilities", "flow"])
def test_a_50_mb_spec_file_is_refused_before_parsing(tmp_path: Path, kind: str, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(_huge(kind, 50 * MIB))
    started = time.process_time()
    with pytest.raises(SpecError) as error:
        load_spec(path, backend=backend)
    assert time.process_time() - started < SLACK
    assert _one_problem(error) == (
        f"{path}: <document>: the document is larger than the limit of {4 * MIB} bytes (LoadLimits.max_bytes)"
    )


@pytest.mark.parametrize("kind", ["capabilities", "flow"])
def test_a_file_under_the_size_cap_with_too_many_nodes_stops_parsing_early(
    kind: str, backend: CelBackend
) -> None:
    text = _huge(kind, 5 * MIB // 2)  # about 330 k / 1.3 M nodes; composing them all took 25-70 s
    assert len(text) < 4 * MIB
    started = time.process_time()
    with pytest.raises(SpecError) as error:
        load_spec_text(text, backend=backend, source="agent.yaml")
    assert time.process_time() - started < SLACK
    assert "agent.yaml:1:1" in _one_problem(error)
    assert "more than 100000 YAML nodes (LoadLimits.max_nodes)" in _one_problem(error)


def test_the_size_cap_is_configurable(tmp_path: Path, backend: CelBackend) -> None:
    path = tmp_path / "agent.yaml"
    text = _huge("comment", 5 * MIB)
    path.write_text(text)
    assert (
        "lookup" in load_spec(path, backend=backend, limits=LoadLimits(max_bytes=6 * MIB)).spec.capabilities
    )
    with pytest.raises(SpecError, match="larger than the limit of 1000 characters"):
        load_spec_text(text, backend=backend, limits=LoadLimits(max_bytes=1000))


def _aliased(capabilities: int, assertion_length: int) -> str:
    """One long assertion anchored once and aliased by every other capability (the issue's 140 KB file)."""
    clauses = " && ".join(f'recent["lookup"].inputs.q != {index}' for index in range(assertion_length // 32))
    lines = ["capabilities:", "  lookup:", "    input_restriction: &rule", f"      assertion: '{clauses}'"]
    lines += [f"  tool-{index}:\n    input_restriction: *rule" for index in range(capabilities)]
    return spec_text("\n".join(lines) + "\n")


def test_an_assertion_aliased_4000_times_is_refused_quickly(backend: CelBackend) -> None:
    text = _aliased(4000, 4500)
    assert len(text) < 200_000
    started = time.process_time()
    with pytest.raises(SpecError) as error:
        load_spec_text(text, backend=backend, source="agent.yaml")
    assert time.process_time() - started < SLACK
    assert "agent.yaml" in _one_problem(error)
    assert "(LoadLimits.max_expanded_chars)" in _one_problem(error)


def test_an_aliased_assertion_is_compiled_once_and_shared(backend: CelBackend) -> None:
    counting = CountingBackend(backend)
    limits = LoadLimits(max_expanded_chars=100 * MIB)
    started = time.process_time()
    compiled = load_spec_text(_aliased(4000, 4500), backend=counting, limits=limits)
    assert time.process_time() - started < SLACK  # 122 s when each alias was compiled again
    assert len(counting.compiled) == 1
    programs = {id(program) for program in compiled.input_assertions.values()}
    assert len(compiled.input_assertions) == 4001
    assert len(programs) == 1


def test_distinct_cel_source_is_budgeted(backend: CelBackend) -> None:
    body = "capabilities:\n" + "".join(
        f"  tool-{index}:\n    input_restriction:\n      assertion: 'recent[\"tool-{index}\"].inputs.q != {index}'\n"
        for index in range(50)
    )
    text = spec_text(body)
    assert load_spec_text(text, backend=backend).input_assertions
    counting = CountingBackend(backend)
    with pytest.raises(SpecError) as error:
        load_spec_text(text, backend=counting, source="agent.yaml", limits=LoadLimits(max_cel_chars=300))
    assert "longer than 300 characters in all (LoadLimits.max_cel_chars)" in _one_problem(error)
    assert "agent.yaml" in _one_problem(error)
    assert sum(map(len, counting.compiled)) <= 300  # stopped compiling at the budget


def test_load_limits_are_validated() -> None:
    for name in LIMIT_NAMES:
        with pytest.raises(ValueError, match=f"LoadLimits.{name}"):
            LoadLimits(**{name: 0})


# Alias structures: some anchored assertions, each aliased by some capabilities, some repeated verbatim.
_ASSERTIONS = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=4, unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=_ASSERTIONS,
    uses=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=60),
    budget=st.integers(min_value=200, max_value=20_000),
)
def test_alias_structures_compile_each_distinct_expression_once_or_are_refused_by_a_named_limit(
    values: list[int], uses: list[tuple[int, bool]], budget: int, backend: CelBackend
) -> None:
    lines = ["capabilities:"]
    for index, value in enumerate(values):
        lines += [f"  anchor-{index}:", f"    input_restriction: &rule{index}"]
        lines.append(f"      assertion: 'recent[\"lookup\"].inputs.q != {value}'")
    for number, (which, verbatim) in enumerate(uses):
        which %= len(values)
        if verbatim:  # the same text written out again is the same expression, compiled once as well
            lines += [f"  use-{number}:", "    input_restriction:"]
            lines.append(f"      assertion: 'recent[\"lookup\"].inputs.q != {values[which]}'")
        else:
            lines.append(f"  use-{number}:\n    input_restriction: *rule{which}")
    text = spec_text("\n".join(lines) + "\n")
    counting = CountingBackend(backend)
    limits = LoadLimits(max_expanded_chars=budget)
    try:
        compiled = load_spec_text(text, backend=counting, limits=limits)
    except SpecError as error:
        reasons = " ".join(problem.reason for problem in error.problems)
        assert any(f"LoadLimits.{name}" in reasons for name in LIMIT_NAMES)
        return
    assert sorted(counting.compiled) == sorted(set(counting.compiled))
    assert len(counting.compiled) == len(values)
    assert len(compiled.input_assertions) == len(values) + len(uses)


def test_read_yaml_reports_the_limit_as_over_limit() -> None:
    document = read_yaml("a: [1, 2, 3, 4]\n", "doc.yaml", limits=LoadLimits(max_nodes=3))
    assert document.over_limit
    assert not document.readable
    assert "LoadLimits.max_nodes" in document.problems[0].reason
