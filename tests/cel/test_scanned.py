"""``Scanned``: variables checked once for what cel-expr-python cannot represent, shared by many programs.

What must hold: a value reaches the engine only after its check, whichever program binds it first; what a
check found holds for every later program on the same wrapper; the evaluation budget still sizes the
values; and a value is walked once however many programs bind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import agentguard.cel
from agentguard.cel import (
    CelEvaluationError,
    CelProgram,
    EvalBudget,
    VarType,
    get_backend,
    set_eval_budget,
)
from agentguard.cel._expr import ExprBackend, Scanned
from tests.cel.walks import counted_walks

# Where a test is about the engine's own path (the walks, the estimate), its programs skip the fast path, which
# answers these comprehensions without either (tests/cel/test_fast_comprehensions.py).
ENGINE = ExprBackend(fast_path=False)

DECLARATIONS = {"method": VarType.STRING, "params": VarType.DYN}
MATCHES = 'params.cmd.matches("^[a-z ]*$")'  # cel-cpp reads "ls\x00; rm -rf /" as "ls": true


def _no_celpy(name: str | None = None) -> Any:
    raise ImportError("cel-python is not installed")


def test_a_nul_in_a_scanned_value_never_reaches_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    program = get_backend("cel-expr-python").compile(MATCHES, DECLARATIONS)
    engine = program._expression  # type: ignore[attr-defined]
    reached: list[object] = []

    class Spy:
        def eval(self, data: Any) -> Any:
            reached.append(data)
            return engine.eval(data=data)

        def serialize(self) -> bytes:
            return bytes(engine.serialize())

    monkeypatch.setattr(program, "_expression", Spy())
    monkeypatch.setattr(agentguard.cel, "get_backend", _no_celpy)
    variables = Scanned({"method": "m", "params": {"cmd": "ls\x00; rm -rf /"}})
    for _ in range(2):  # the first evaluation checks, the second uses what the first found
        with pytest.raises(CelEvaluationError, match=r"NUL character.*agentguard\[celpy\]"):
            program.evaluate(variables)
    assert reached == []
    assert program.evaluate(Scanned({"method": "m", "params": {"cmd": "ls"}})) is True
    assert len(reached) == 1


def test_what_one_program_found_holds_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = get_backend("cel-expr-python")
    first = backend.compile('params.cmd.startsWith("ls") || params.cmd.contains("x")', DECLARATIONS)
    second = backend.compile(MATCHES, DECLARATIONS)
    monkeypatch.setattr(agentguard.cel, "get_backend", _no_celpy)
    variables = Scanned({"method": "m", "params": {"cmd": "ls\x00; rm -rf /"}})
    assert first.evaluate(variables) is True  # the fast path reads the string in Python: exact, no check
    with pytest.raises(CelEvaluationError, match="NUL character"):
        second.evaluate(variables)


def _outcome(program: CelProgram, variables: Mapping[str, Any]) -> object:
    try:
        return program.evaluate(variables)
    except CelEvaluationError as error:
        return error.message


@pytest.mark.parametrize("text", ["ls\x00; rm -rf /", "ls\ud800", "ls"])
def test_the_answer_is_the_one_without_the_wrapper(text: str) -> None:
    program = get_backend("cel-expr-python").compile(MATCHES, DECLARATIONS)
    plain = {"method": "m", "params": {"cmd": text}}
    assert _outcome(program, Scanned(plain)) == _outcome(program, plain)


def test_a_value_the_expression_does_not_bind_is_not_its_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    program = get_backend("cel-expr-python").compile('method.matches("^[a-z]+$")', DECLARATIONS)
    monkeypatch.setattr(agentguard.cel, "get_backend", _no_celpy)
    assert program.evaluate(Scanned({"method": "ping", "params": {"cmd": "ls\x00"}})) is True


def test_each_value_is_walked_once_for_many_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = ENGINE
    programs = [
        backend.compile(f'params.inputs.exists(i, i.name == "{name}")', DECLARATIONS)
        for name in ("to", "cc", "bcc")
    ]
    walked = counted_walks(monkeypatch)
    params = {"inputs": [{"name": "to", "value": "bob@corp.example"}]}
    variables = Scanned({"method": "m", "params": params})
    assert [program.evaluate(variables) for program in programs] == [True, False, False]
    assert walked == [params]


def test_the_budget_still_sizes_scanned_values() -> None:
    program = ENGINE.compile("params.items.all(a, params.items.all(b, a != b || a == b))", DECLARATIONS)
    variables = Scanned({"method": "m", "params": {"items": list(range(50))}})
    previous = set_eval_budget(EvalBudget(max_iterations=1_000))
    try:
        with pytest.raises(CelEvaluationError, match="max_iterations"):
            program.evaluate(variables)
    finally:
        set_eval_budget(previous)
    assert program.evaluate(variables) is True


def test_a_scanned_mapping_reads_like_its_variables() -> None:
    variables = Scanned({"method": "m", "params": {}})
    assert dict(variables) == {"method": "m", "params": {}}
    assert len(variables) == 2
    assert variables["method"] == "m"
    assert get_backend().compile('method == "m"', DECLARATIONS).evaluate(variables) is True


def test_values_the_caller_vouches_for_are_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    program = get_backend("cel-expr-python").compile(MATCHES + ' && method == "m"', DECLARATIONS)
    walked = counted_walks(monkeypatch)
    variables = Scanned({"method": "m", "params": {"cmd": "ls"}}, representable=("params",))
    assert program.evaluate(variables) is True
    assert walked == ["m"]  # only what the caller did not vouch for


def test_the_estimate_follows_the_data_from_one_evaluation_to_the_next() -> None:
    program = ENGINE.compile("params.items.all(a, params.items.all(b, a != b || a == b))", DECLARATIONS)
    previous = set_eval_budget(EvalBudget(max_iterations=1_000))
    try:
        for size, allowed in [(10, True), (50, False), (10, True), (50, False)]:
            variables = {"method": "m", "params": {"items": list(range(size))}}
            for bound in (variables, Scanned(variables)):
                if allowed:
                    assert program.evaluate(bound) is True
                else:
                    with pytest.raises(CelEvaluationError, match="max_iterations"):
                        program.evaluate(bound)
    finally:
        set_eval_budget(previous)
