"""Behaviour both CEL backends promise, and the choice between them."""

from __future__ import annotations

import datetime as dt
import doctest
import importlib.util
import sys
import threading
from typing import Any

import pytest

import agentguard.cel
from agentguard.cel import (
    CelBackend,
    CelCompileError,
    CelEvaluationError,
    CelProgram,
    VarType,
    available_backends,
    get_backend,
)

# The shape of what the policy layer declares: Engagement fields, all DYN except the start time.
ENGAGEMENT = {
    "history": VarType.DYN,
    "recent": VarType.DYN,
    "inputs": VarType.DYN,
    "outputs": VarType.DYN,
    "started_at": VarType.TIMESTAMP,
    "tool": VarType.STRING,
}

RECENT = {
    "send-email": {"inputs": {"to": "bob@corp.com", "subject": "hi"}, "outputs": {"ok": True}},
    "files.read": {"inputs": {"path": "/etc/hosts"}, "outputs": {"bytes": 120}},
}

UTC = dt.UTC


def evaluate(backend: CelBackend, expression: str, **variables: Any) -> Any:
    return backend.compile(expression, ENGAGEMENT).evaluate(variables)


# --- Compile errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "line", "column"),
    [
        ('recent["send-email"', 1, 20),  # end of input: reported just past the last character
        ("recent[", 1, 8),
        ("inputs.to ==\n  outputs.to +", 2, 15),
        ("inputs.to == = 1", 1, 14),
        ("recnt.size() > 0", 1, 1),  # undeclared (misspelt) variable
        ("history.exists(h, h.tool == hh)", 1, 29),  # undeclared, inside a macro body
        ('inputs.to == "é" && outputs.x ^ 2', 1, 31),  # columns count characters, not bytes
    ],
)
def test_compile_errors_carry_the_position_inside_the_expression(
    backend: CelBackend, expression: str, line: int, column: int
) -> None:
    with pytest.raises(CelCompileError) as caught:
        backend.compile(expression, ENGAGEMENT)
    error = caught.value
    assert (error.line, error.column) == (line, column)
    assert error.expression == expression
    assert str(error).startswith(f"CEL compile error at {line}:{column}: ")


def test_compile_error_message_has_no_position_decoration(backend: CelBackend) -> None:
    with pytest.raises(CelCompileError) as caught:
        backend.compile("recent[\n", ENGAGEMENT)
    message = caught.value.message
    assert message
    for decoration in ("<input>", "ERROR:", "^", "\n", "INVALID_ARGUMENT"):
        assert decoration not in message


def test_undeclared_variable_is_a_compile_error_naming_it(backend: CelBackend) -> None:
    with pytest.raises(CelCompileError, match="undeclared reference to 'recnt'"):
        backend.compile('recnt["send-email"] != null', ENGAGEMENT)


@pytest.mark.parametrize("expression", ["max(inputs.a, 1) > 0", "inputs.a.trim() == ''"])
def test_unknown_function_is_a_compile_error(backend: CelBackend, expression: str) -> None:
    with pytest.raises(CelCompileError, match=r"undeclared reference to .*'(max|trim)'"):
        backend.compile(expression, ENGAGEMENT)


def test_default_backend_type_checks_against_declarations() -> None:
    backend = get_backend("cel-expr-python")
    with pytest.raises(CelCompileError, match="no matching overload") as caught:
        backend.compile("tool + 1 == 2", ENGAGEMENT)  # tool is a STRING
    assert (caught.value.line, caught.value.column) == (1, 6)


# --- Evaluation -------------------------------------------------------------------------------------------


def test_map_keys_with_dash_and_dot(backend: CelBackend) -> None:
    assert evaluate(backend, 'recent["send-email"].inputs.to.endsWith("@corp.com")', recent=RECENT) is True
    assert evaluate(backend, 'recent["files.read"].outputs.bytes > 100', recent=RECENT) is True
    assert evaluate(backend, '"send-email" in recent && !("send.email" in recent)', recent=RECENT) is True


@pytest.mark.parametrize(
    ("expression", "outputs", "expected"),
    [
        ("outputs.score == 1", {"score": 1.0}, True),
        ("1 == outputs.score", {"score": 1.0}, True),
        ("outputs.score == 1.0", {"score": 1}, True),
        ("outputs.score != 1", {"score": 1.0}, False),
        ("outputs.score < 2", {"score": 1.5}, True),
        ("2 > outputs.score", {"score": 1.5}, True),
        ("outputs.score >= 2", {"score": 2.0}, True),
        ("outputs.scores == [1, 2]", {"scores": [1.0, 2.0]}, True),
        ('outputs.scores == {"a": 1}', {"scores": {"a": 1.0}}, True),
        ("1 in outputs.scores", {"scores": [1.0, 3.5]}, True),
        ("outputs.score == 1", {"score": 1.5}, False),
        ('outputs.score == "1"', {"score": 1}, False),  # different kinds are unequal, not an error
        ("outputs.flag == 1", {"flag": True}, False),  # bools are not numbers
    ],
)
def test_json_numbers_compare_by_value(
    backend: CelBackend, expression: str, outputs: dict[str, Any], expected: bool
) -> None:
    assert evaluate(backend, expression, outputs=outputs) is expected


@pytest.mark.parametrize(
    ("expression", "variables", "fragment"),
    [
        ("1 / 0 == 1", {}, "divide by zero"),
        ("outputs.missing == 1", {"outputs": {}}, "missing"),
        ('recent["nope"].inputs.to == ""', {"recent": RECENT}, "nope"),
        ("outputs.n + 1 == 2", {"outputs": {"n": "one"}}, ""),
        ("size(history) > 0", {}, "history"),  # referenced but not bound
        ("tool == 'x'", {"tool": 3}, ""),  # declared STRING, given an int
        ("inputs == null", {"inputs": object()}, ""),  # not a JSON-like value
        ("inputs > 0", {"inputs": 2**64}, ""),  # beyond 64 bits
        ("outputs.score * 2 > 1", {"outputs": {"score": 1.0}}, ""),  # no mixed int/double arithmetic
        ("inputs.n / 3.0 > 1.0", {"inputs": {"n": 100}}, ""),
    ],
)
def test_evaluation_errors(
    backend: CelBackend, expression: str, variables: dict[str, Any], fragment: str
) -> None:
    program = backend.compile(expression, ENGAGEMENT)
    with pytest.raises(CelEvaluationError) as caught:
        program.evaluate(variables)
    assert caught.value.expression == expression
    assert fragment in caught.value.message
    assert str(caught.value).startswith("CEL evaluation error: ")


def test_errors_short_circuit_like_cel(backend: CelBackend) -> None:
    assert evaluate(backend, "outputs.missing == 1 || true", outputs={}) is True
    assert evaluate(backend, "false && outputs.missing == 1", outputs={}) is False


def test_timestamps(backend: CelBackend) -> None:
    started = dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert evaluate(backend, 'started_at > timestamp("2024-05-01T11:59:59Z")', started_at=started) is True
    assert evaluate(backend, 'started_at + duration("90m")', started_at=started) == dt.datetime(
        2024, 5, 1, 13, 30, tzinfo=UTC
    )
    elapsed = evaluate(backend, 'timestamp("2024-05-01T12:00:30Z") - started_at', started_at=started)
    assert elapsed == dt.timedelta(seconds=30)
    assert evaluate(backend, "started_at.getHours()", started_at=started) == 12
    # A naive datetime is taken as UTC; another offset is converted.
    assert evaluate(backend, "started_at", started_at=dt.datetime(2024, 5, 1, 12, 0)) == started
    plus_two = dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    result = evaluate(backend, "started_at", started_at=plus_two)
    assert result == started
    assert result.utcoffset() == dt.timedelta(0)


def test_results_are_plain_python_values(backend: CelBackend) -> None:
    result = evaluate(
        backend,
        '{"i": 1, "u": 2u, "d": 2.5, "s": "x", "b": b"\\x00", "n": null, "t": true, "l": [1, "a"], '
        '"ty": type(1), "m": {"k": [null]}}',
    )
    assert result == {
        "i": 1,
        "u": 2,
        "d": 2.5,
        "s": "x",
        "b": b"\x00",
        "n": None,
        "t": True,
        "l": [1, "a"],
        "ty": "int",
        "m": {"k": [None]},
    }
    exact = {key: type(value) for key, value in result.items()}
    assert exact == {
        "i": int,
        "u": int,
        "d": float,
        "s": str,
        "b": bytes,
        "n": type(None),
        "t": bool,
        "l": list,
        "ty": str,
        "m": dict,
    }
    assert type(result["l"][1]) is str


# --- Referenced variables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('recent["send-email"].inputs.to.endsWith("@corp.com")', {"recent"}),
        ('inputs.to == "history" && inputs.outputs == "recent"', {"inputs"}),  # literals, field names
        ("inputs.history.size() > 0", {"inputs"}),
        ('history.exists(h, h.tool == "send-email")', {"history"}),
        ("history.all(h, h.inputs == inputs)", {"history", "inputs"}),
        ("[1, 2].exists(history, history > 1)", set()),  # macro variable shadows the declaration
        (
            "history.map(outputs, outputs.ok).size() > size(outputs)",
            {"history", "outputs"},
        ),  # not in receiver
        ('{"inputs": 1}.size() == 1 && has(outputs.recent)', {"outputs"}),
        ("[history].exists(h, .history == h)", {"history"}),  # leading dot: the declared variable
        ("1 + 2 == 3 && started_at < timestamp(0) + duration('1s')", {"started_at"}),
        ("type(inputs) == map && int('1') == 1", {"inputs"}),  # type and function names
    ],
)
def test_variables_are_the_referenced_declarations(
    backend: CelBackend, expression: str, expected: set[str]
) -> None:
    assert backend.compile(expression, ENGAGEMENT).variables == expected


def test_only_referenced_variables_are_bound(backend: CelBackend) -> None:
    program = backend.compile("outputs.ok", ENGAGEMENT)
    # history holds something no engine can convert; it is not referenced, so it is never touched.
    assert program.evaluate({"outputs": {"ok": True}, "history": object(), "extra": 1}) is True


def test_programs_satisfy_the_protocols(backend: CelBackend, backend_name: str) -> None:
    program = backend.compile("true", {})
    assert isinstance(backend, CelBackend)
    assert isinstance(program, CelProgram)
    assert backend.name == backend_name
    assert program.source == "true"
    assert program.variables == frozenset()


def test_programs_are_thread_safe(backend: CelBackend) -> None:
    program = backend.compile('recent["send-email"].inputs.to == inputs.expected', ENGAGEMENT)
    threads_count, rounds = 8, 300
    barrier = threading.Barrier(threads_count)
    wrong: list[tuple[int, int]] = []

    def work(thread: int) -> None:
        barrier.wait()
        for round_ in range(rounds):
            address = f"user{thread}-{round_}@corp.com"
            recent = {"send-email": {"inputs": {"to": address}}}
            same = program.evaluate({"recent": recent, "inputs": {"expected": address}})
            other = program.evaluate({"recent": recent, "inputs": {"expected": "x"}})
            if same is not True or other is not False:
                wrong.append((thread, round_))

    threads = [threading.Thread(target=work, args=(number,)) for number in range(threads_count)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to give races a chance to show
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


# --- Differences the backends document -------------------------------------------------------------------


def test_two_variable_macros(backend: CelBackend, backend_name: str) -> None:
    expression = 'recent.exists(name, call, name == "send-email" && call.outputs.ok)'
    if backend_name == "cel-python":  # celpy cannot evaluate them: refused at load, not on every call
        with pytest.raises(CelCompileError, match="not supported by the cel-python backend"):
            backend.compile(expression, ENGAGEMENT)
        return
    program = backend.compile(expression, ENGAGEMENT)
    assert program.variables == {"recent"}
    assert program.evaluate({"recent": RECENT}) is True
    assert evaluate(backend, "[10, 20].transformList(i, v, v + i)") == [10, 21]


def test_transform_map_is_refused_at_compile_time_where_it_cannot_run(backend: CelBackend) -> None:
    with pytest.raises(CelCompileError, match="transformMap"):
        backend.compile("recent.transformMap(k, v, k)", ENGAGEMENT)


def test_cel_python_operators_do_not_leak_into_celpy() -> None:
    evaluation = pytest.importorskip("celpy.evaluation")
    get_backend("cel-python").compile("1.0 == 1", {})
    assert evaluation.base_functions["_==_"] is evaluation.bool_eq


def test_cel_python_backend_does_not_lower_the_recursion_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    celpy_backend = pytest.importorskip("agentguard.cel._celpy")
    monkeypatch.setattr(sys, "getrecursionlimit", lambda: 10_000)
    calls: list[int] = []
    monkeypatch.setattr(sys, "setrecursionlimit", calls.append)
    celpy_backend.CelpyBackend()
    assert calls[-1] == 10_000


# --- Choosing a backend ----------------------------------------------------------------------------------


def test_get_backend_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGUARD_CEL_BACKEND", raising=False)
    assert get_backend().name == "cel-expr-python"
    monkeypatch.setenv("AGENTGUARD_CEL_BACKEND", " ")
    assert get_backend().name == "cel-expr-python"
    if importlib.util.find_spec("celpy") is not None:
        monkeypatch.setenv("AGENTGUARD_CEL_BACKEND", "cel-python")
        assert get_backend().name == "cel-python"
        assert get_backend("cel-expr-python").name == "cel-expr-python"  # an explicit name wins


def test_get_backend_shares_instances() -> None:
    assert get_backend("cel-expr-python") is get_backend("cel-expr-python")


def test_unknown_backend_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown CEL backend 'cel-go' \(backend name\).*'cel-python'"):
        get_backend("cel-go")
    monkeypatch.setenv("AGENTGUARD_CEL_BACKEND", "celpy")
    with pytest.raises(ValueError, match=r"'celpy' \(\$AGENTGUARD_CEL_BACKEND\)"):
        get_backend()


@pytest.mark.parametrize(
    ("name", "module", "implementation", "advice"),
    [
        ("cel-python", "celpy", "agentguard.cel._celpy", "pip install 'agentguard[celpy]'"),
        ("cel-expr-python", "cel_expr_python", "agentguard.cel._expr", "AGENTGUARD_CEL_BACKEND=cel-python"),
    ],
)
def test_missing_engine_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, name: str, module: str, implementation: str, advice: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes "import <module>" raise ImportError
    monkeypatch.delitem(sys.modules, implementation, raising=False)
    monkeypatch.setattr(agentguard.cel, "_backends", {})
    with pytest.raises(ImportError, match=f"CEL backend '{name}'.*'{module}'") as caught:
        get_backend(name)
    assert advice in str(caught.value)
    assert caught.value.name == module


def test_available_backends() -> None:
    names = available_backends()
    assert names[0] == "cel-expr-python"
    assert ("cel-python" in names) == (importlib.util.find_spec("celpy") is not None)


def test_module_docstring_example_runs() -> None:
    results = doctest.testmod(agentguard.cel, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0
    assert results.failed == 0
