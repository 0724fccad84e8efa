"""The fast path against the engine on hostile data: every answer it gives must be the engine's.

Why a third differential test: ``test_fast_path`` and ``test_fast_comprehensions`` generate well-typed data
around the shapes the fast path answers. A guard's data is whatever a tool returned, and a fast path that
answers ``True`` where the engine says ``False`` or fails lets a call through that the spec forbids. Here the
expressions mix everything the fast path compiles (selection, indexing, ``has``, ``size``, comparisons, ``in``,
``&& || ! ?:``, ``+ -``, the string methods, the comprehension macros) with operands it does not compile
(conversions, ``matches``, map and list literals, uint and bytes literals, ``*``, ``/``), over variables
declared ``dyn``, ``string``, ``int``, ``bool`` and ``timestamp``, bound to values of the wrong type or to
none: ``True`` where ``1`` was expected (equal in Python, not in CEL), ``"false"`` where a bool was, ``-0.0``,
NaN, integers beyond int64 and uint64, NUL characters, lone surrogates, case and normalisation variants, maps
keyed by null, doubles, bytes or tuples, values that are no CEL value at all.

The oracle is the engine alone (``ExprBackend(fast_path=False)``), through the same ``evaluate`` agentguard
uses (so values the C++ engine cannot represent go to ``cel-python`` there too). One difference is deliberate
and documented in :mod:`agentguard.cel._fast`: the engine refuses a ``dyn`` variable holding any value it
cannot convert, read or not; the fast path answers from what the expression reads. Where the engine fails and
the data holds such a value, the fast path's answer is checked against the engine's on the same data with
each such value replaced by a stand-in the engine converts (:func:`stand_ins`).

Besides the generated expressions, every operator is run on every pair of hostile values (and against every
literal, on either side, where the comparison's type check is inline), every unary form on every value, and
every read of a typed variable on every value; and each divergence found is pinned at its smallest.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentguard.cel import CelCompileError, VarType, available_backends, get_backend
from agentguard.cel._expr import ExprProgram
from tests.cel.test_fast_path import ENGINE, FAST, MISSING, engine_answer, fast_answer, same

DECLARED = {
    "m": VarType.DYN,
    "xs": VarType.DYN,
    "v": VarType.DYN,
    "s": VarType.STRING,
    "n": VarType.INT,
    "b": VarType.BOOL,
    "ts": VarType.TIMESTAMP,
}
DYNAMIC = frozenset(name for name, kind in DECLARED.items() if kind is VarType.DYN)

# Made now, not during an example (the engine hands it values it cannot represent): it raises the recursion
# limit, which hypothesis would warn of.
if "cel-python" in available_backends():
    get_backend("cel-python")

# --- hostile data -------------------------------------------------------------------------------------------

WHEN = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
INT64 = (-(2**63), 2**63 - 1)
TEXTS = ["", "a", "A", "ab", "b", "true", "false", "1", "null", "@corp.com", "a@corp.com"]
HOSTILE_TEXTS = ["a\x00", "\x00", "a\x00b", "\ud800", "é", "e\u0301", "É", "ß", "ǅ", "日本"]
NUMBERS = [0, 1, -1, 2, 5, *INT64, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30]
DOUBLES = [0.0, -0.0, 1.0, -1.0, 1.5, 2.0, math.nan, math.inf, -math.inf, 1e308, 5e-324]
# Python values that are no CEL value at all (the engine refuses a variable holding one), and bytes.
FOREIGN = [(1, 2), frozenset({1}), WHEN]
BYTES = [b"", b"a"]

PLAIN = st.one_of(
    st.none(), st.booleans(), st.sampled_from([0, 1, -1, 2, 5, 1.5, -0.0]), st.sampled_from(TEXTS)
)
HOSTILE = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(DOUBLES),
    st.sampled_from(HOSTILE_TEXTS),
    st.sampled_from(FOREIGN + BYTES),
)
scalars = st.one_of(PLAIN, PLAIN, PLAIN, HOSTILE)  # mostly plain, so that the fast path answers often
KEYS = st.sampled_from(["a", "b", "A", "é", "to", "ok", "", "a\x00"])
ODD_KEYS = st.sampled_from([None, 1, True, 1.5, b"a", (1,), 2**64])
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(KEYS, inner, max_size=3),
        st.dictionaries(st.one_of(KEYS, ODD_KEYS), inner, max_size=2),
    ),
    max_leaves=6,
)
data = st.fixed_dictionaries(
    {},
    optional={
        "m": st.one_of(st.dictionaries(KEYS, values, max_size=4), values),
        "xs": st.one_of(st.lists(values, max_size=4), values),
        "v": values,
        "s": st.one_of(st.sampled_from(TEXTS + HOSTILE_TEXTS), scalars),
        "n": st.one_of(st.sampled_from(NUMBERS), scalars),
        "b": st.one_of(st.booleans(), scalars),
        "ts": st.one_of(st.just(WHEN), scalars),
    },
)

# --- expressions --------------------------------------------------------------------------------------------

LITERALS = [
    "null", "true", "false", "0", "1", "-1", "2", "9223372036854775807", "-9223372036854775808",
    "0.0", "-0.0", "1.0", "1.5", "1e308", '""', '"a"', '"A"', '"ab"', '"true"', '"1"', '"@corp.com"', '"é"',
]  # fmt: skip
PATHS = ["m.a", "m.b", "m.a.b", "m.A", 'm["a"]', 'm["é"]', "v.a", "xs[0]", "xs[1]", "xs[-1]", "xs[n]", "m[s]"]
PATHS += ["m[v]", "xs[v]", "m", "xs", "v"]
TYPED = ["s", "n", "b", "ts"]
COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]
# Operands the fast path does not compile: a clause of && / || it leaves unsure, or the engine alone.
FOREIGN_VALUES = ["int({})", "string({})", "double({})", "uint({})", "dyn({})", "[{}, 1][0]", "{} * 2"]
FOREIGN_VALUES += ["{} / 2", "{{{}: 1}}.a"]
FOREIGN_CONDITIONS = [
    "type({}) == int", '{}.matches("^a")', '{{{}: 1, "a": 2}}.size() == 2', "1u == {}", 'b"a" == {}',
    'ts > timestamp("2020-01-01T00:00:00Z")', "{} in [1, 2]",
]  # fmt: skip


@functools.cache  # one strategy per arguments: building them anew for each example is most of the time
def value(names: tuple[str, ...], depth: int) -> st.SearchStrategy[str]:
    """A CEL value over the declared variables and the comprehension variables ``names``: mostly ``dyn``
    reads (the checker refuses most expressions mixing typed variables and literals of other types)."""
    reads = st.sampled_from([*PATHS, *names, *(f"{name}.a" for name in names)])
    atom = st.one_of(reads, reads, reads, st.sampled_from(LITERALS), st.sampled_from(TYPED))
    if depth <= 0:
        return atom
    inner = value(names, depth - 1)
    return st.one_of(
        atom,
        atom,
        atom,
        st.builds("size({})".format, inner),
        st.builds("({}).size()".format, inner),
        st.builds("-({})".format, inner),
        st.builds("({} {} {})".format, inner, st.sampled_from(["+", "-"]), inner),
        st.builds("({} ? {} : {})".format, condition(names, depth - 1), inner, inner),
        st.builds(lambda form, operand: form.format(operand), st.sampled_from(FOREIGN_VALUES), inner),
        *(made(names, local, depth) for local in (f"e{len(names)}", "s")),
    )


@functools.cache
def condition(names: tuple[str, ...], depth: int) -> st.SearchStrategy[str]:
    """A CEL condition (or, now and then, a value where one is expected: the checker lets ``dyn`` through)."""
    inner = value(names, depth)
    reads = st.sampled_from(["m.a", "v", "xs[0]", "b", *names])
    simple = st.one_of(
        st.builds("({} {} {})".format, inner, st.sampled_from(COMPARISONS), inner),
        st.builds("({} {} {})".format, inner, st.sampled_from(COMPARISONS), inner),
        st.builds("({} in {})".format, inner, inner),
        st.builds("has({}.{})".format, st.sampled_from(["m", "v", "m.a", *names]), st.sampled_from("aAb")),
        st.builds("{}.{}({})".format, inner, st.sampled_from(["startsWith", "endsWith", "contains"]), inner),
        st.builds(lambda form, operand: form.format(operand), st.sampled_from(FOREIGN_CONDITIONS), inner),
        reads,
        st.sampled_from(["true", "false"]),
    )
    if depth <= 0:
        return simple
    deeper = condition(names, depth - 1)
    return st.one_of(
        simple,
        simple,
        st.builds("!({})".format, deeper),
        st.builds("({} {} {})".format, deeper, st.sampled_from(["&&", "||"]), deeper),
        st.builds("({} {} {})".format, deeper, st.sampled_from(["&&", "||"]), deeper),
        st.builds("({} ? {} : {})".format, deeper, deeper, deeper),
        *(macro(names, local, depth) for local in (f"e{len(names)}", "v")),  # a local may hide a variable
    )


RANGES = ["xs", "m", "v", "m.a", 'm["a"]', "[1, v, xs]"]  # m["a"]: compiled without the checker


@functools.cache
def macro(names: tuple[str, ...], local: str, depth: int) -> st.SearchStrategy[str]:
    """A quantifier with the variable ``local``, over a variable, a list literal or a list a macro made."""
    body = condition((local, *names), depth - 1)
    ranges = st.one_of(st.sampled_from([*RANGES, *names]), made(names, local, depth - 1))
    macros = st.sampled_from(["all", "exists", "exists_one"])
    return st.builds("{}.{}({}, {})".format, ranges, macros, st.just(local), body)


@functools.cache
def made(names: tuple[str, ...], local: str, depth: int) -> st.SearchStrategy[str]:
    """A list made by ``filter`` or ``map`` (left whole to the engine), or a value read from one."""
    if depth <= 0:
        return st.sampled_from(RANGES)
    body, element = condition((local, *names), depth - 1), value((local, *names), depth - 1)
    ranges = st.sampled_from([*RANGES, *names])
    listed = st.one_of(
        st.builds("{}.filter({}, {})".format, ranges, st.just(local), body),
        st.builds("{}.map({}, {})".format, ranges, st.just(local), element),
        st.builds("{}.map({}, {}, {})".format, ranges, st.just(local), body, element),
    )
    return st.one_of(
        listed,
        st.builds("size({})".format, listed),
        st.builds("{}[{}]".format, listed, st.sampled_from(["0", "1", "n"])),
    )


EXPRESSIONS = st.one_of(condition((), 2), condition((), 2), condition((), 3), value((), 2))

# --- the oracle ---------------------------------------------------------------------------------------------


def foreign(value: Any, key: bool = False) -> bool:
    """Whether ``value`` (a map's ``key``) holds anything the C++ engine cannot convert (it then refuses the
    whole variable)."""
    kind = type(value)
    if key and kind not in (str, int, bool):
        return True
    if kind is int:
        return not -(2**63) <= value < 2**64
    if kind is dict:
        return any(foreign(name, key=True) or foreign(item) for name, item in value.items())
    if kind is list:
        return any(foreign(item) for item in value)
    return kind not in (str, float, bool, bytes, type(None))


def stand_ins(value: Any, made: list[int], dynamic: bool, key: bool = False) -> Any:
    """``value`` as the C++ engine can take it: each part it cannot convert (in a ``dyn`` variable) replaced by
    a string no expression here writes, distinct ones so that a map keeps its size; each NUL made ``\\x01`` and
    each lone surrogate U+FFFD, so that it is not handed to ``cel-python`` (whose defects are not the fast
    path's: its ``!has(...)`` fails). Neither changes what the fast path answers: no generated literal or value
    holds ``\\x01`` or U+FFFD, and order, equality and ASCII-ness between the strings are kept."""
    kind = type(value)
    if kind is str:
        return value.replace("\x00", "\x01").replace("\ud800", "\ufffd")
    if kind is dict:
        return {
            stand_ins(name, made, dynamic, key=True): stand_ins(item, made, dynamic)
            for name, item in value.items()
        }
    if kind is list:
        return [stand_ins(item, made, dynamic) for item in value]
    if dynamic and foreign(value, key):
        made.append(len(made))
        return f"#{len(made)}"
    return value


@functools.lru_cache(maxsize=256)  # the tables below evaluate each form on many values
def compiled(source: str) -> tuple[ExprProgram, ExprProgram] | None:
    """The program with the fast path and the engine's alone, or ``None`` when there is nothing to compare: the
    checker refuses ``source`` or the fast path does not compile it."""
    try:
        fast, slow = FAST.compile(source, DECLARED), ENGINE.compile(source, DECLARED)
    except CelCompileError:
        return None
    return None if fast._fast is None else (fast, slow)


def identical(a: Any, b: Any) -> bool:
    """:func:`same`, and a zero's sign too."""
    return same(a, b) and (type(a) is not float or math.copysign(1, a) == math.copysign(1, b))


def check(source: str, variables: Mapping[str, Any]) -> bool:
    """Where the fast path answers ``source`` on ``variables``, the engine gives the same answer; whether it
    answered."""
    programs = compiled(source)
    if programs is None:
        return False
    fast, slow = programs
    got = fast_answer(fast, variables)
    if got is MISSING:
        return False
    want = engine_answer(slow, variables)
    if want is MISSING:  # perhaps the deliberate difference, or cel-python's defect: see the docstrings
        made: list[int] = []
        stood = {name: stand_ins(value, made, name in DYNAMIC) for name, value in variables.items()}
        want = engine_answer(slow, stood)
    assert want is not MISSING, f"{source!r} on {variables!r}: fast {got!r}, engine error"
    assert identical(got, want), f"{source!r} on {variables!r}: fast {got!r}, engine {want!r}"
    return True


@example(source="size(s) == 1", variables={"s": ["a"]})  # the smallest of the divergences found (FOUND)
@example(source="{m.a: 1, m.b: 2}.size() == 2 || true", variables={"m": {"a": "k", "b": "k"}})
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=EXPRESSIONS, variables=data)
def test_hostile_data_gets_the_engines_answer(source: str, variables: dict[str, Any]) -> None:
    check(source, variables)


# --- every operator on every pair of hostile values ----------------------------------------------------------

SCALARS = [None, True, False, *NUMBERS, *DOUBLES, *TEXTS[:8], *HOSTILE_TEXTS, *BYTES, *FOREIGN]
CONTAINERS = [[], ["a"], ["a", 1], ["a", True], [1], [1.0], {}, {"a": 1}, {"a": None}, {1: "a"}, {None: 1}]
CONTAINERS += [{"a\x00": 1}, {"\ud800": 1}, {"é": 1}, {True: "a"}, (1,)]
BINARY = ["==", "!=", "<", "<=", ">", ">=", "+", "-", "in", "&&", "||"]
METHODS = ["startsWith", "endsWith", "contains"]


@pytest.mark.parametrize(
    "form",
    [f"m.a {symbol} m.b" for symbol in BINARY] + [f"m.a.{method}(m.b)" for method in METHODS] + ["m.a[m.b]"],
)
def test_every_operator_on_every_pair_of_hostile_values(form: str) -> None:
    """``True == 1`` in Python, not in CEL; ``1 == 1.0`` is heterogeneous; ``-0.0 == 0.0``; NaN is unordered;
    ``2**63`` is a uint; a NUL or a lone surrogate sends the engine to cel-python: every pair, every operator."""
    answered = 0
    for a in SCALARS + CONTAINERS:
        for b in SCALARS + CONTAINERS:
            answered += check(form, {"m": {"a": a, "b": b}})
    assert answered >= 10  # pairs the fast path answers, not only its refusals


LITERAL_FORMS = [f"m.a {symbol} {{}}" for symbol in BINARY] + [f"{{}} {symbol} m.a" for symbol in BINARY]
LITERAL_FORMS += [f"m.a.{method}({{}})" for method in METHODS]


@pytest.mark.parametrize("literal", LITERALS)
def test_every_operator_against_a_literal_on_every_hostile_value(literal: str) -> None:
    """The comparisons with a literal check the other operand's type inline, not in a helper: every one of
    them, the literal on either side."""
    for form in LITERAL_FORMS:
        for a in SCALARS + CONTAINERS:
            check(form.format(literal), {"m": {"a": a}})


UNARY = ["size(m.a)", "m.a.size()", "-m.a", "!m.a", "m.a", "has(m.a.a)", "m.a ? 1 : 2", "m.a[0]", "m.a.a"]
UNARY += ["m.a.all(x, x == 1)", "m.a.exists(x, x)", "m.a.exists_one(x, x == 'a')", "size(m.a.filter(x, x))"]
UNARY += ["m.a.map(x, x)[0]", "m.a.map(x, x, 1)[0]", "'a' in m.a.map(x, x)"]


@pytest.mark.parametrize("form", UNARY)
def test_every_unary_form_on_every_hostile_value(form: str) -> None:
    for a in SCALARS + CONTAINERS:
        check(form, {"m": {"a": a}})


TYPED_FORMS = [
    "size(s) == 1", "s == s", "s + s == s", 's.startsWith("a")', "s in m", "m[s] == 1", "s",
    "n == n", "n + 1 > 0", "-n < 0", "n", "xs[n] == 1",
    "b", "!b", "b == b", "b || m.a",
    "ts == ts", "m.a || ts == ts", "xs.exists(x, x == s)", "xs.all(x, x != n)",
]  # fmt: skip


@pytest.mark.parametrize("form", TYPED_FORMS)
def test_a_typed_variable_holding_another_type_is_the_engines(form: str) -> None:
    """The engine fails the read of a variable declared ``string``, ``int``, ``bool`` or ``timestamp`` that holds
    a value of another type (``size(s)`` of a list bound to ``s`` is an error, not the list's size)."""
    for value in SCALARS + CONTAINERS:
        check(form, {"s": value, "n": value, "b": value, "ts": value, "m": {"a": False}, "xs": [1, "b"]})


# --- the divergences found, each at its smallest ------------------------------------------------------------

# The fast path answered each (True, or a value) where the engine fails: a guard that passed what it refuses.
FOUND = [
    ("size(s) == 1", {"s": ["a"]}),  # a list bound to a string: the fast path gave the list's size
    ("s == s", {"s": None}),
    ("n == n", {"n": "b"}),
    ("b == b", {"b": "false"}),
    ("b", {"b": 1}),  # an int bound to a bool: the fast path answered 1
    ("ts == ts", {"ts": "x"}),  # a string bound to a timestamp
    # A duplicate key stops the engine's whole evaluation, where the fast path passed the operand over.
    ("{m.a: 1, m.b: 2}.size() == 2 || true", {"m": {"a": "k", "b": "k"}}),
    ("m.a in {m.b: 1, m.c: 2} || m.a == 'k'", {"m": {"a": "k", "b": "j", "c": "j"}}),
    ("[m.a, m.b].exists(x, {x: 1, 'k': 2}.size() == 2 || x == 'k')", {"m": {"a": "k", "b": "j"}}),
]


@pytest.mark.parametrize(("source", "variables"), FOUND)
def test_the_divergences_found_are_the_engines_answers(source: str, variables: dict[str, Any]) -> None:
    """Each was answered by the fast path (``True``, or a value) where the engine fails; now the fast path
    leaves it to the engine, and the evaluation fails."""
    bound = {
        name: variables.get(name, WHEN if kind is VarType.TIMESTAMP else 0) for name, kind in DECLARED.items()
    }
    fast, slow = FAST.compile(source, DECLARED), ENGINE.compile(source, DECLARED)
    assert engine_answer(slow, bound) is MISSING  # every one of them is an error on the engine
    assert engine_answer(fast, bound) is MISSING
    assert fast._fast is None or fast_answer(fast, bound) is MISSING
