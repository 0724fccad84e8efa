"""The fast path's comprehensions (``agentguard/cel/_fast.py``): exact where they answer, bounded always.

Exact: on generated comprehensions over generated data with the types a tool's history should not hold but
may (a string where a list was expected, ``"false"`` where a bool was, null, NUL characters, lone surrogates,
integers beyond 64 bits, nested lists), every answer the fast path gives is the engine's, and the pure-Python
engine's. Bounded: every iteration counts against the evaluation budget, nesting included, a hit is a failed
evaluation with the reason, and a body that would concatenate is never run by the fast path.
"""

from __future__ import annotations

import ast
import functools
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard.cel import (
    CelCompileError,
    CelEvaluationError,
    CelProgram,
    EvalBudget,
    VarType,
    _expr,
    available_backends,
    eval_budget,
    get_backend,
    set_eval_budget,
)
from tests.cel.test_fast_path import (
    ENGINE,
    FAST,
    MISSING,
    convertible,
    engine_answer,
    fast_and_engine,
    fast_answer,
    same,
)
from tests.cel.walks import counted_walks

DECLARED = {"xs": VarType.DYN, "m": VarType.DYN, "n": VarType.INT, "history": VarType.DYN}


@pytest.fixture
def budget() -> Iterator[None]:
    """Restore the process-wide budget after a test that changes it."""
    previous = eval_budget()
    yield
    set_eval_budget(previous)


# --- generated data and expressions -----------------------------------------------------------------------

PLAIN = st.one_of(st.integers(-3, 6), st.sampled_from(["a", "b", "ab", ""]), st.booleans())
ODD = st.one_of(
    st.none(),
    st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**64, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["false", "true", "a\x00b", "\x00", "\ud800", "é"]),
    st.lists(st.lists(PLAIN, max_size=2), max_size=2),  # nested lists
)
SCALARS = st.one_of(
    PLAIN, PLAIN, PLAIN, PLAIN, PLAIN, ODD
)  # mostly plain, so that there are answers to check
ENTRIES = st.fixed_dictionaries(
    {"inputs": st.fixed_dictionaries({}, optional={"x": SCALARS, "a": SCALARS})},
    optional={"x": SCALARS, "a": SCALARS, "ok": SCALARS},
)
ELEMENTS = st.one_of(ENTRIES, ENTRIES, SCALARS, st.lists(SCALARS, max_size=3))
DATA = st.fixed_dictionaries(
    {
        "xs": st.one_of(st.lists(ELEMENTS, max_size=5), st.lists(ELEMENTS, max_size=5), ODD),
        "m": st.one_of(
            st.dictionaries(st.sampled_from(["a", "b", "ab", "é", "\x00", "\ud800"]), ELEMENTS, max_size=3),
            st.lists(ELEMENTS, max_size=3),
            ODD,
        ),
        "n": st.integers(-3, 6),
        "history": st.fixed_dictionaries({"tool-a": st.lists(ENTRIES, max_size=4)}),
    }
)

FIELDS = st.sampled_from(["x", "a", "ok", "inputs.x", "inputs.a"])
LITERALS = st.sampled_from(["1", "0", "-1", "2.5", '"a"', '"b"', '""', "true", "false", "null"])
OPERATORS = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


@functools.cache  # one strategy per arguments: a strategy's repr grows with its copies
def predicate(names: tuple[str, ...], depth: int) -> st.SearchStrategy[str]:
    """A CEL condition over comprehension variables ``names`` (the innermost first, the most used)."""
    name = st.sampled_from([names[0], *names])
    atom = st.one_of(
        name, st.builds("{}.{}".format, name, FIELDS), st.builds("{}[0]".format, name), st.just("n")
    )
    simple = st.one_of(
        st.builds("{} {} {}".format, atom, OPERATORS, LITERALS),
        st.builds("{} {} {}".format, atom, OPERATORS, atom),
        st.builds("has({}.{})".format, name, FIELDS),
        st.builds('{}.startsWith("a")'.format, atom),
        st.builds("size({}) > 1".format, atom),
        st.builds("{} in {}".format, atom, st.sampled_from(["xs", *names])),
        st.builds("{} + 1 > 2".format, atom),
        atom,
    )
    if depth <= 0:
        return simple
    inner = st.deferred(lambda: predicate(names, depth - 1))
    return st.one_of(
        simple,
        simple,
        st.builds("!({})".format, inner),
        st.builds("({} && {})".format, inner, inner),
        st.builds("({} || {})".format, inner, inner),
        st.builds("({} ? {} : {})".format, inner, inner, inner),
        st.deferred(lambda: comprehension(names, depth - 1)),
    )


@functools.cache
def comprehension(outer: tuple[str, ...], depth: int) -> st.SearchStrategy[str]:
    """A macro over a range (a variable, an enclosing comprehension's variable, a list literal, or another
    macro's list), or a use of a list a macro made."""
    names = (f"v{len(outer)}", *outer)
    ranges = st.sampled_from(["xs", "xs", "m", 'history["tool-a"]', "[n, xs, 1]", *outer])
    body = predicate(names, depth)
    value = st.one_of(st.sampled_from([names[0], f"{names[0]}.x", f"{names[0]}.inputs.x"]), body)
    listed = st.one_of(
        st.builds("{}.filter({}, {})".format, ranges, st.just(names[0]), body),
        st.builds("{}.map({}, {})".format, ranges, st.just(names[0]), value),
        st.builds("{}.map({}, {}, {})".format, ranges, st.just(names[0]), body, value),
    )
    macros = st.sampled_from(["all", "exists", "exists_one"])
    return st.one_of(
        st.builds("{}.{}({}, {})".format, ranges, macros, st.just(names[0]), body),
        st.builds("{}.{}({}, {})".format, ranges, macros, st.just(names[0]), body),
        st.builds("size({})".format, listed),
        st.builds("{}[{}]".format, listed, st.sampled_from(["0", "1"])),
        st.builds("{} in {}".format, st.sampled_from(['"a"', "1"]), listed),
        st.builds("{}.{}({}, {})".format, listed, macros, st.just(names[0]), body),
    )


# Made now, not during a hypothesis example: it raises the recursion limit, which hypothesis would warn of.
CELPY = get_backend("cel-python") if "cel-python" in available_backends() else None


def answer(program: CelProgram, variables: dict[str, Any]) -> Any:
    try:
        return program.evaluate(variables)
    except CelEvaluationError:
        return MISSING


def representable(value: Any) -> Any:
    """``value`` with each NUL made ``\\x01`` and each lone surrogate U+FFFD: the C++ engine represents it, and
    nothing the fast path answers changes (no string of the generated data or expressions has either; order
    and equality between strings are kept)."""
    if type(value) is str:
        return value.replace("\x00", "\x01").replace("\ud800", "\ufffd")
    if type(value) is dict:
        return {representable(key): representable(item) for key, item in value.items()}
    if type(value) is list:
        return [representable(item) for item in value]
    return value


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=comprehension((), 2), variables=DATA)
def test_generated_comprehensions_agree_with_both_engines(source: str, variables: dict[str, Any]) -> None:
    """The C++ engine is the oracle; it hands values with a NUL or a lone surrogate to cel-python, which
    answers there. Where either fails and the fast path answers: as in test_fast_path, a value an engine
    cannot take fails the whole variable, read or not (an element passed over by exists / all is not read),
    and cel-python has defects of its own (its has() is a Python bool, which its && refuses; a method on a
    value of the wrong type is an error that escapes || ): the C++ engine answers on values it can represent
    (:func:`representable`, :func:`convertible`). cel-python, where it answers, must agree too."""
    compared = fast_and_engine(source, DECLARED, variables)
    if compared is None:
        return
    got, slow = compared
    want = answer(slow, variables)
    if want is MISSING:
        want = answer(slow, convertible(representable(variables)))
    assert want is not MISSING, f"{source!r}: fast {got!r}, engine error"
    assert same(got, want), f"{source!r}: fast {got!r}, engine {want!r}"
    try:
        celpy = CELPY.compile(source, DECLARED) if CELPY is not None else None
    except CelCompileError:
        celpy = None  # a macro cel-python does not have (map with three arguments)
    if celpy is not None:
        want = answer(celpy, variables)
        assert want is MISSING or same(got, want), f"{source!r}: fast {got!r}, cel-python {want!r}"


# --- CEL's error rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "xs", "answer"),
    [
        ("xs.exists(x, x > 1)", ["a", 5], True),  # an error elsewhere does not undo a true
        ("xs.exists(x, x > 1)", ["a", 0], MISSING),  # no true: the error is the answer, the engine's to give
        ("xs.exists(x, x > 1)", [0, 1], False),
        ("xs.all(x, x > 1)", ["a", 0], False),  # a false decides, whatever the others give
        ("xs.all(x, x > 1)", ["a", 5], MISSING),
        ("xs.all(x, x > 1)", [], True),
        ("xs.exists_one(x, x > 1)", [5, 0], True),
        ("xs.exists_one(x, x > 1)", [5, "a"], MISSING),  # errors propagate
        ("xs.exists_one(x, x > 1)", [5, 6], False),
        ("size(xs.filter(x, x > 1))", [5, 0, 7], 2),
        ("size(xs.filter(x, x > 1))", [5, "a"], MISSING),
        ("xs.map(x, x + 1)[1]", [5, 0], 1),
        ("xs.map(x, x > 1, x - 1)[0]", [0, 5], 4),
        ('"a" in xs.map(x, x.k)', [{"k": "b"}, {"k": "a"}], True),
        ("xs.filter(x, x > 1)", [5], MISSING),  # a list result: the engine's to give
        ("xs.exists(x, x > 1)", "false", MISSING),  # a string where a list was expected
        ("xs.exists(x, x == true)", ["false", True], True),
    ],
)
def test_comprehensions_follow_cels_error_rules(source: str, xs: Any, answer: Any) -> None:
    program = FAST.compile(source, DECLARED)
    assert program._fast is not None
    assert same(fast_answer(program, {"xs": xs}), answer)
    slow = ENGINE.compile(source, DECLARED)
    if answer is not MISSING:
        assert same(engine_answer(slow, {"xs": xs}), answer)


INT64 = range(-(2**63), 2**63)


@pytest.mark.parametrize("symbol", ["==", "!=", "<", "<=", ">", ">="])
@pytest.mark.parametrize("literal", [-(2**63) + 1, -1, 0, 5, 2**63 - 1])
def test_an_int_against_a_literal_answers_within_int64_only(symbol: str, literal: int) -> None:
    """The inline check of the hottest comparison (one bound, picked by the outcome, for an ordering)."""
    for written in (f"x {symbol} {literal}", f"{literal} {symbol} x"):
        source = f"xs.all(x, {written})"
        fast, engine = FAST.compile(source, DECLARED), ENGINE.compile(source, DECLARED)
        for value in (-(2**63) - 1, -(2**63), -(2**63) + 1, -1, 0, 5, 6, 2**63 - 1, 2**63, 2**64):
            got = fast_answer(fast, {"xs": [value]})
            if value in INT64:
                assert same(got, engine_answer(engine, {"xs": [value]})), (written, value)
            else:
                assert got is MISSING, (written, value)


def test_over_a_map_only_order_free_macros_answer() -> None:
    variables = {"m": {"b": 1, "a": 2}}
    assert (
        fast_answer(FAST.compile('m.all(k, k in ["a", "b"] || k.size() == 1)', DECLARED), variables) is True
    )
    assert fast_answer(FAST.compile('m.exists_one(k, k == "a")', DECLARED), variables) is True
    assert fast_answer(FAST.compile("m.map(k, k)[0]", DECLARED), variables) is MISSING  # the engine's order
    assert fast_answer(FAST.compile("m.exists(k, k == 1)", DECLARED), {"m": {1: "a"}}) is MISSING


@pytest.mark.parametrize(
    "source",
    [
        "xs.exists(i, x, x > i)",  # two variables
        "xs.exists(x, [x, x].size() > 1)",  # a list made in the body
        'xs.exists(x, x + "a" == "ab")',  # a concatenation the checker sees
    ],
)
def test_other_comprehensions_go_to_the_engine(source: str) -> None:
    assert FAST.compile(source, DECLARED)._fast is None


# --- the budget -------------------------------------------------------------------------------------------


def test_every_iteration_counts_and_a_hit_is_a_failure_with_the_reason(budget: None) -> None:
    program = FAST.compile("xs.exists(x, x == 5)", DECLARED)
    xs = list(range(10))
    set_eval_budget(EvalBudget(max_iterations=6))  # 0..5: six iterations, then it stops
    assert program.evaluate({"xs": xs}) is True
    set_eval_budget(EvalBudget(max_iterations=5))
    with pytest.raises(CelEvaluationError, match=r"more than 5 comprehension iterations.*max_iterations"):
        program.evaluate({"xs": xs})


def test_nested_comprehensions_count_in_total(budget: None) -> None:
    program = FAST.compile("xs.all(a, xs.all(b, a >= 0 && b >= 0))", DECLARED)
    xs = list(range(9))  # 9 outer iterations, 9 x 9 inner ones: 90
    set_eval_budget(EvalBudget(max_iterations=90))
    assert program.evaluate({"xs": xs}) is True
    set_eval_budget(EvalBudget(max_iterations=89))
    with pytest.raises(CelEvaluationError, match="more than 89 comprehension iterations"):
        program.evaluate({"xs": xs})


def test_iterations_a_stopped_loop_did_not_run_are_not_counted(budget: None) -> None:
    """Each inner loop stops at its first element (it is granted a batch): 10 + 10 iterations, not 10 + 100."""
    program = FAST.compile("xs.all(a, xs.exists(b, b >= 0)) && xs.all(a, a >= 0)", DECLARED)
    set_eval_budget(EvalBudget(max_iterations=30))
    assert program.evaluate({"xs": list(range(10))}) is True


def test_a_hit_is_not_rescued_by_an_or_or_an_exists(budget: None) -> None:
    set_eval_budget(EvalBudget(max_iterations=50))
    for source in ("xs.all(a, xs.all(b, a >= 0)) || n == 1", "xs.exists(a, xs.all(b, b >= 0) && a > 100)"):
        with pytest.raises(CelEvaluationError, match="50 comprehension iterations"):
            FAST.compile(source, DECLARED).evaluate({"xs": list(range(10)), "n": 1})


def test_the_deadline_stops_a_fast_path_comprehension(budget: None) -> None:
    set_eval_budget(EvalBudget(max_iterations=10**12, max_seconds=0.2))
    program = FAST.compile("xs.all(a, xs.all(b, xs.all(c, a >= 0)))", DECLARED)
    started = time.monotonic()
    with pytest.raises(CelEvaluationError, match=r"more than 0.2 s \(EvalBudget.max_seconds\)"):
        program.evaluate({"xs": list(range(1000))})
    assert time.monotonic() - started < 0.2 + 5.0


def test_the_deadline_is_checked_often_however_long_an_iteration(budget: None) -> None:
    """Each iteration scans a list of 400,000 strings (~20 ms): the batches shrink to one iteration."""
    set_eval_budget(EvalBudget(max_seconds=0.1))
    program = FAST.compile('xs.all(a, !("b" in m))', DECLARED)
    started = time.monotonic()
    with pytest.raises(CelEvaluationError, match=r"more than 0.1 s"):
        program.evaluate({"xs": list(range(500)), "m": ["a"] * 400_000})
    assert time.monotonic() - started < 1.0  # at most the first batch of 8, then one at a time


def test_a_concatenating_body_is_never_run_by_the_fast_path() -> None:
    """The issue 13 row: the fast path makes none of the pairs (it is unsure before ``+`` makes anything), and
    the engine's estimate refuses the expression before it runs."""
    source = 'history["put"].all(a, history["put"].all(b, size(a.inputs.x + b.inputs.x) > 0))'
    program = FAST.compile(source, DECLARED)
    history = {"put": [{"inputs": {"x": str(index % 10) * 100_000}} for index in range(60)]}
    tracemalloc.start()
    try:
        assert fast_answer(program, {"history": history}) is MISSING
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000  # not one string of a pair
    with pytest.raises(CelEvaluationError, match=r"concatenations could make .* \(EvalBudget.max_bytes\)"):
        program.evaluate({"history": history})


# --- at 10,000 calls --------------------------------------------------------------------------------------

TEN_THOUSAND = 'history["tool-a"].exists(e, e.inputs.x > 5000000)'


def test_a_comprehension_over_ten_thousand_calls_answers() -> None:
    calls = [{"inputs": {"x": index}, "outputs": {"ok": True}} for index in range(10_000)]
    bindings = {"history": {"_list": ["tool-a"] * 10_000, "_total": 10_000, "tool-a": calls}}
    with pytest.raises(CelEvaluationError, match="Iteration budget exceeded"):  # the engine alone stops
        ENGINE.compile(TEN_THOUSAND, DECLARED).evaluate(bindings)
    assert FAST.compile(TEN_THOUSAND, DECLARED).evaluate(bindings) is False
    calls[9_999] = {"inputs": {"x": 5_000_001}}
    assert FAST.compile(TEN_THOUSAND, DECLARED).evaluate(bindings) is True


def test_unsure_at_ten_thousand_calls_is_still_a_failure_with_a_reason() -> None:
    calls: list[Any] = [{"inputs": {"x": index}} for index in range(10_000)]
    calls[5] = {"inputs": {"x": 1.5}}  # a double against an int: the engine's to compare
    with pytest.raises(CelEvaluationError, match="Iteration budget exceeded"):
        FAST.compile(TEN_THOUSAND, DECLARED).evaluate({"history": {"tool-a": calls}})


def test_the_engine_path_does_not_walk_the_values_when_the_fast_path_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    program = FAST.compile(TEN_THOUSAND, DECLARED)
    walked = counted_walks(monkeypatch)
    measured: list[object] = []

    def measure(values: object) -> tuple[int, int]:
        measured.append(values)
        return 0, 0

    monkeypatch.setattr(_expr, "measure", measure)
    history: dict[str, list[Any]] = {"tool-a": [{"inputs": {"x": index}} for index in range(100)]}
    variables = {"history": history}
    assert program.evaluate(variables) is False
    assert walked == measured == []
    history["tool-a"].append({"inputs": {"x": "é"}})  # unsure: now the engine, after its walks
    with pytest.raises(CelEvaluationError):
        program.evaluate(variables)
    assert walked == [variables]
    assert len(measured) == 1


# --- layering ---------------------------------------------------------------------------------------------


def test_the_cel_layer_imports_nothing_of_agentguard_outside_it() -> None:
    package = Path(_expr.__file__).parent
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                if name.split(".")[0] == "agentguard":
                    assert name == "agentguard.cel" or name.startswith("agentguard.cel."), (module.name, name)
