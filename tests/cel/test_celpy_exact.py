"""The cel-python backend never answers ``true`` where the default engine does not.

Why it matters: the default backend evaluates an expression on cel-python whenever a bound value holds a NUL
or a lone surrogate (and always when a ``matches()`` pattern comes from the data), so a model that adds
``"\\x00"`` to any argument picks cel-python's answer. Where celpy's own indexing and conversions were more
lenient than CEL (``int("0x10")``, ``list[-1]``), that turned a denial into a run. Here: the cases the review
found, end to end through a Guard and one by one on both backends, and a differential property test over
generated expressions and values (an error counts as not true).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard import Guard, PolicyViolation, User
from agentguard.cel import CelCompileError, CelEvaluationError, CelProgram, VarType, get_backend
from agentguard.cel._expr import ExprBackend
from tests.conftest import spec_text

pytest.importorskip("celpy")

SPEC = spec_text(
    """
    capabilities:
      transfer:
        input_restriction:
          assertion: int(recent["transfer"].inputs.amount) <= 100
      approve:
        input_restriction:
          assertion: recent["approve"].inputs.chain[-1] == "manager"
    """
)


def _ran(name: str, inputs: dict[str, Any]) -> list[Any]:
    ran: list[Any] = []
    guard = Guard.from_yaml(SPEC)
    guard.register("transfer", lambda amount, memo="": ran.append(amount) or "ok")
    guard.register("approve", lambda chain, memo="": ran.append(chain) or "ok")
    with guard.engagement(user=User(id="u")), contextlib.suppress(PolicyViolation):
        guard.call(name, inputs)
    return ran


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        ("transfer", {"amount": "0x10"}),  # CEL: int("0x10") is an error
        ("transfer", {"amount": "1_0"}),
        ("approve", {"chain": ["clerk", "manager"]}),  # CEL: index -1 is an error
    ],
)
@pytest.mark.parametrize("elsewhere", ["\x00", "\ud800"])
def test_a_nul_elsewhere_does_not_turn_a_denial_into_a_run(
    name: str, inputs: dict[str, Any], elsewhere: str
) -> None:
    assert _ran(name, inputs) == []
    assert _ran(name, {**inputs, "memo": elsewhere}) == [], "an unrelated argument picked the lenient engine"


SPEC_LOGIC = spec_text(
    """
    capabilities:
      deploy:
        input_restriction:
          assertion: (recent["deploy"].inputs.force || recent["deploy"].inputs.sudo) != true
      wait:
        input_restriction:
          assertion: duration(recent["wait"].inputs.delay).getMilliseconds() >= 900
      run:
        input_restriction:
          assertion: "!has(recent['run'].inputs.sudo) && int(recent['run'].inputs.n) < 10"
    """
)


def _ran_logic(name: str, inputs: dict[str, Any]) -> list[Any]:
    ran: list[Any] = []
    guard = Guard.from_yaml(SPEC_LOGIC)
    for tool in ("deploy", "wait", "run"):
        guard.register(tool, lambda memo="", **arguments: ran.append(arguments) or "ok")
    with guard.engagement(user=User(id="u")), contextlib.suppress(PolicyViolation):
        guard.call(name, inputs)
    return ran


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        ("deploy", {"force": False, "sudo": "yes"}),  # CEL: false || "yes" is an error, not "yes"
        ("wait", {"delay": "1.5s"}),  # CEL: getMilliseconds() of 1.5s is 500, not 1500
    ],
)
@pytest.mark.parametrize("elsewhere", ["\x00", "\ud800"])
def test_a_nul_elsewhere_does_not_turn_a_denial_into_a_run_logic_and_time(
    name: str, inputs: dict[str, Any], elsewhere: str
) -> None:
    assert _ran_logic(name, inputs) == []
    assert _ran_logic(name, {**inputs, "memo": elsewhere}) == [], (
        "an unrelated argument picked the lenient engine"
    )


@pytest.mark.parametrize("elsewhere", ["", "\x00"])
def test_not_has_is_allowed_whatever_engine_answers(elsewhere: str) -> None:
    # celpy's has() gave a Python bool, which its `!` refused: a NUL turned an allowed call into a denial.
    assert _ran_logic("run", {"n": 5, "memo": elsewhere}) == [{"n": 5}]
    assert _ran_logic("run", {"n": 5, "sudo": True, "memo": elsewhere}) == []


def test_the_same_assertions_still_allow_what_cel_allows() -> None:
    assert _ran("transfer", {"amount": "16", "memo": "\x00"}) == ["16"]
    assert _ran("approve", {"chain": ["clerk", "manager"][1:], "memo": "\x00"}) == []  # [-1] is never valid


_DYN = {"v": VarType.DYN, "w": VarType.DYN}
_ENGINE = ExprBackend(fast_path=False)
_CELPY = get_backend("cel-python")  # created here: it raises the recursion limit, which hypothesis dislikes


def _answer(program: CelProgram, value: Any, other: Any = None) -> Any:
    try:
        return program.evaluate({"v": value, "w": other})
    except CelEvaluationError as error:
        return error


def _compiled(backend: Any, source: str) -> CelProgram | None:
    try:
        program: CelProgram = backend.compile(source, _DYN)
    except CelCompileError:
        return None
    return program


# Each of these was true on cel-python and an error or false on cel-expr-python (and in CEL).
LENIENT = [
    ("int(v) > 0", "0x10"),
    ("int(v) > 0", "1_0"),
    ("int(v) == 3", "٣"),
    ("uint(v) == 0u", -0.5),
    ("uint(v) == 0u", "-0"),
    ("double(v) == 10.0", "1_0"),
    ("double(v) == 1.0", True),
    ("v[-1] == 1", [1]),
    ("v[0] == 'a'", "abc"),
    ("v[1] == 1", {True: 1}),
    ("v % -1 == 0", -(2**63)),
    ("v / -1 > 0", -(2**63)),
    ("string(v) == '1.0'", 1.0),
    ("string(v) == '1234567.0'", 1234567.0),
    ("string(v) == 'True'", True),
    ("v in {1.0: 1}", 1),
    ("{v: 1}[v] == 1", None),
    ("duration(v) > duration('0s')", "1d"),
    ("duration(v) > duration('0s')", 1),
    ("duration(v) >= duration('0s')", "-1ns"),
    ("v % -1 == 0", False),
    ("v % 2.0 == 1.0", 3.0),
    ("timestamp(v) > timestamp('2020-01-01T00:00:00Z')", "2024-01-01"),
    ("timestamp(v) > timestamp('2020-01-01T00:00:00Z')", "2024-01-01 00:00:00Z"),
    ("bool(v)", 1),
    ("v in w", "a"),  # w == "a": no `in` on strings
    ("v.contains(1)", [1]),
    ("v.startsWith(b'a')", b"ab"),
    ("timestamp('2300-01-01T00:00:00Z') - timestamp(v) > duration('0s')", "2000-01-01T00:00:00Z"),
    ("v.exists(x, 1 / x > 0)", [0]),  # celpy's macros made an error true
    ("!v.exists(x, x)", [0]),
    ("!v.all(x, x)", [True, None]),
    ("v.filter(x, x).size() == 1", [1, True]),
    ("w < 1", False),  # no ordering between bool and int
    ("v[false] == 0", [0]),  # a bool is no list index
    ("size(v) == 0", None),
    # Second review: each was true on cel-python.
    ("(v || w) != true", False),  # w is "yes" below: || handed its string operand through
    ("(false || v) == 'x'", "x"),
    ("(v && true) == 'x'", "x"),
    ("type(v + v) != string", "a"),  # type() of a computed value was the Python type
    ("type(v + v) != double", 1.0),
    ("duration(v).getMilliseconds() > 999", "1.5s"),  # the total, not the millisecond part
    ("duration(v).getMilliseconds() < -999", "-1.5s"),
    ("timestamp('2024-03-10T23:30:00Z').getHours(v) == 23", "utc"),  # time zone names are exact
    ("v[1] == 'a'", {1.0: "a"}),  # a double key in the data
    ("v.exists(k, k == null)", {None: "a"}),
    ("v.exists(k, k == b'a')", {b"a": 1}),
    ("v[2.0 * 4503599627370496.0] == 1", {2**53 + 1: 1}),  # a double finds only its exact int key
    ("9223372036854775808.0 in v", {2**63 - 1: 1}),
    ("string(timestamp(v)) == '50-01-01T00:00:00Z'", "0050-01-01T00:00:00Z"),
    ("!string(timestamp(v)).startsWith('0')", "0050-01-01T00:00:00Z"),
    ("!bool(v)", "F"),
    ("bool(v)", "T"),
    ("!v.matches('^a')", b"b"),  # matches() on bytes
    ("has(v.a.b) == false", {}),  # an error in has()'s operand was false
    ("!has(v.a.b)", {"a": "x"}),
]

_OTHER = {"(v || w) != true": "yes"}


@pytest.mark.parametrize(("source", "value"), LENIENT)
def test_cel_python_is_not_more_lenient_than_cel(source: str, value: Any) -> None:
    celpy = _compiled(_CELPY, source)
    engine = _compiled(_ENGINE, source)
    assert celpy is not None
    other = _OTHER.get(source, value)
    assert _answer(celpy, value, other) is not True
    assert engine is None or _answer(engine, value, other) is not True


# Each was an error on cel-python (celpy's `!` and `?:` refused has()'s Python bool; its `||` did not absorb an
# error of has()), true on the engine: a NUL in any argument turned an allowed call into a denial.
ROBUST = [
    ("!has(v.a)", {}),
    ("!has(v.a) || v.a == 1", {}),
    ("has(v.a) ? v.a == 1 : true", {}),
    ("has(v.a) || true", None),
    ("has(v.a) || true", "x"),
    ("has(v.a.b)", {"a": {"b": None}}),
    ("v.exists(x, has(x.a))", [{}, {"a": 1}]),
    ("true || v", "x"),
    ("v && false || true", "x"),
    ("type(v + v) == string", "a"),
]


@pytest.mark.parametrize(("source", "value"), ROBUST)
def test_cel_python_answers_true_where_the_engine_does(source: str, value: Any) -> None:
    for backend in (_ENGINE, _CELPY):
        assert _answer(backend.compile(source, _DYN), value) is True


@pytest.mark.parametrize(
    ("source", "expected"), [("has(v['a'])", "field selection"), ("has(v)", "field selection")]
)
def test_has_of_anything_but_a_field_selection_does_not_compile(source: str, expected: str) -> None:
    with pytest.raises(CelCompileError, match=expected):
        _CELPY.compile(source, _DYN)


def test_a_bound_map_key_cel_does_not_allow_is_a_binding_error() -> None:
    program = _CELPY.compile("size(v) > 0", _DYN)
    for key in (1.0, None, b"a"):
        with pytest.raises(CelEvaluationError, match=r"cannot be bound: a \w+ is not a valid map key"):
            program.evaluate({"v": {key: 1}})
    assert program.evaluate({"v": {1: 1, "a": 3, 2**64 - 1: 4}}) is True
    assert program.evaluate({"v": {True: 2}}) is True


# --- Duration and timestamp accessors, against the engine --------------------------------------------------

_ACCESSORS = [
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
]
_ZONES = [
    "",
    "UTC",
    "utc",
    "Europe/Paris",
    "europe/paris",
    "Asia/Kolkata",
    "+05:30",
    "-2:0",
    "+99:99",
    "Z",
    "+0200",
]
_INSTANTS = [
    "2024-03-10T23:30:07.123Z",
    "2024-12-31T23:59:59.999Z",
    "0050-01-01T00:00:00Z",
    "2024-02-29T12:00:00Z",
]
_DURATIONS = ["1.5s", "-1.5s", "-7199.999s", "0.0005s", "-0.0015s", "90061.25s", "0"]


def _same_answer(source: str, value: Any, other: Any = None) -> None:
    """Both backends give the same value, or both fail (the engine may refuse it at load time)."""
    engine_program, celpy_program = _compiled(_ENGINE, source), _compiled(_CELPY, source)
    engine = None if engine_program is None else _answer(engine_program, value, other)
    celpy = None if celpy_program is None else _answer(celpy_program, value, other)
    if engine is None or isinstance(engine, CelEvaluationError):
        assert celpy is None or isinstance(celpy, CelEvaluationError), (
            f"cel-python: {celpy!r}; engine: {engine}"
        )
    else:
        assert type(celpy) is type(engine)
        assert celpy == engine


@pytest.mark.parametrize("accessor", _ACCESSORS)
@pytest.mark.parametrize("instant", _INSTANTS)
def test_timestamp_accessors_answer_as_the_engine(accessor: str, instant: str) -> None:
    _same_answer(f"timestamp(v).{accessor}()", instant)
    for zone in _ZONES:
        _same_answer(f"timestamp(v).{accessor}(w)", instant, zone)


@pytest.mark.parametrize("accessor", _ACCESSORS)
@pytest.mark.parametrize("duration", _DURATIONS)
def test_duration_accessors_answer_as_the_engine(accessor: str, duration: str) -> None:
    _same_answer(f"duration(v).{accessor}()", duration)
    _same_answer(f"duration(v).{accessor}(w)", duration, "UTC")


def test_matches_with_a_lone_surrogate_is_an_error_value_cel_can_absorb() -> None:
    program = _CELPY.compile("v.matches(w) || true", _DYN)
    assert program.evaluate({"v": "a", "w": "\ud800"}) is True
    with pytest.raises(CelEvaluationError, match="not valid Unicode"):
        _CELPY.compile("v.matches(w)", _DYN).evaluate({"v": "\ud800", "w": "a"})


# And CEL's answers where they are values, on both.
EXACT = [
    ("int(v)", " 42", 42),
    ("int(v)", "-9223372036854775808", -(2**63)),
    ("int(v)", -2.9, -2),
    ("int(v)", True, 1),
    ("uint(v)", "+7", 7),
    ("uint(v)", 1.9, 1),
    ("double(v)", "1e400", math.inf),
    ("double(v)", " .5", 0.5),
    ("string(v)", 1.0, "1"),
    ("string(v)", 123456789.0, "1.23456789e+08"),
    ("string(v)", 100000.0, "100000"),
    ("string(v)", 0.0001, "0.0001"),
    ("string(v)", 1e-05, "1e-05"),
    ("string(v)", -0.0, "-0"),
    ("string(v)", True, "true"),
    ("string(v)", b"a", "a"),
    ("string(duration(v))", "1.5s", "1.500s"),
    ("string(duration(v))", "-90m", "-5400s"),
    ("string(timestamp(v))", "2024-01-01T00:00:00.5+01:00", "2023-12-31T23:00:00.500Z"),
    ("int(timestamp(v))", "1969-12-31T23:59:59.5Z", -1),
    ("bytes(v)", "é", b"\xc3\xa9"),
    ("bool(v)", "TRUE", True),
    ("v[0.0]", [7], 7),
    ("v[1.0]", {1: "a"}, "a"),
    ("v[1u]", ["a", "b"], "b"),
    ("1.0 / v", -0.0, -math.inf),
    ("type(v) == int", 1, True),
    ("type(v) == double && type(1u) == uint", 1.0, True),
    ("string(timestamp(v))", "0050-01-01T00:00:00Z", "0050-01-01T00:00:00Z"),
    ("duration(v).getMilliseconds()", "1.5s", 500),
    ("duration(v).getMilliseconds()", "-1.5s", -500),
    ("type(v + v)", "a", "string"),
    ("type(v * v)", 1.5, "double"),
    ("v[9007199254740992.0]", {2**53: "a", 2**53 + 1: "b"}, "a"),
    ("bool(v)", "t", True),
]


@pytest.mark.parametrize("backend_name", ["cel-python", "cel-expr-python"])
@pytest.mark.parametrize(("source", "value", "expected"), EXACT)
def test_conversions_and_indexing_answer_as_cel(
    backend_name: str, source: str, value: Any, expected: Any
) -> None:
    backend = _CELPY if backend_name == "cel-python" else _ENGINE
    result = backend.compile(source, _DYN).evaluate({"v": value})
    assert type(result) is type(expected)
    assert result == expected


def test_errors_say_why_without_quoting_the_value() -> None:
    program = _CELPY.compile("int(v) <= 100", _DYN)
    with pytest.raises(CelEvaluationError) as caught:
        program.evaluate({"v": "0xSECRET"})
    assert caught.value.message == "cannot convert string to int"
    program = _CELPY.compile("duration(v) > duration('0s')", _DYN)
    with pytest.raises(CelEvaluationError, match="keeps durations to the microsecond"):
        program.evaluate({"v": "1ns"})


# --- Differential property test ---------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.0, 1e6, 123456.0, 1e-5, 2.0**63, -(2.0**63), 2.0**64]),
    st.text(alphabet="0123456789+-_ .xeEabcdfinstuyhmT:Z٣é", max_size=12),
    st.sampled_from(
        [
            "0x10",
            "1_0",
            " 5",
            "+5",
            "-0",
            "1e3",
            "inf",
            "nan",
            "true",
            "TRUE",
            "t",
            "1",
            "yes",
            "1h",
            "1.5s",
            "-1ns",
            "1d",
            "1us",
            "0",
            "2024-01-01",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00.123456789Z",
            "2024-01-01t00:00:00+01:00",
            "0001-01-01T00:00:00Z",
            "0050-01-01T00:00:00Z",
            "2024-03-10T23:30:07.123Z",
            "-1.5s",
            "-7199.999s",
            "T",
            "F",
            "UTC",
            "utc",
            "Europe/Paris",
            "+05:30",
            "-2:0",
            "^a",
            "a",
        ]
    ),
    st.binary(max_size=4),
    st.none(),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(
                st.text(alphabet="ab", max_size=2),
                st.integers(-2, 2),
                st.booleans(),
                st.sampled_from([2**53 + 1, 2**63 - 1, 2**64 - 1]),
                st.sampled_from([1.0, 2.0**53, None, b"a"]),  # keys CEL refuses in a map
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=6,
)

_TERMS = [
    "v",
    "w",
    "int(v)",
    "uint(v)",
    "double(v)",
    "string(v)",
    "bytes(v)",
    "bool(v)",
    "duration(v)",
    "timestamp(v)",
    "v[0]",
    "v[-1]",
    "v[1]",
    "v[0u]",
    "v[1.0]",
    "v['a']",
    "v[w]",
    "v.a",
    "size(v)",
    "-v",
    "v % -1",
    "v / -1",
    "v + w",
    "v - w",
    "v * w",
    "v / w",
    "v % w",
    "type(v)",
    "dyn(v)",
    "[v]",
    "{'a': v}",
    "{v: 1}",
    "string(int(v))",
    "int(string(v))",
    "double(string(v))",
    "string(double(v))",
    "timestamp(v) - timestamp(w)",
    "duration(v) + duration(w)",
    "(v || w)",
    "(v && w)",
    "(!v)",
    "(v ? w : 1)",
    "has(v.a)",
    "has(v.a.b)",
    "type(v + w)",
    "type(v * w)",
    "type(-v)",
    "type(v[0])",
    "w[v]",
    *(f"duration(v).{accessor}()" for accessor in _ACCESSORS),
    *(f"timestamp(v).{accessor}()" for accessor in _ACCESSORS),
    *(f"timestamp(v).{accessor}(w)" for accessor in _ACCESSORS),
]
_LITERALS = [
    "0",
    "1",
    "-1",
    "0u",
    "1u",
    "0.0",
    "1.0",
    "-0.0",
    "'1'",
    "'a'",
    "''",
    "true",
    "false",
    "null",
    "b'a'",
    "[1]",
    "{'a': 1}",
    "duration('1s')",
    "timestamp('2024-01-01T00:00:00Z')",
    "int",
    "string",
]
_COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]


def _engine(source: str) -> CelProgram | None:
    """The reference: the engine itself, also where the default backend hands the evaluation to cel-python
    (a ``matches()`` pattern from the data), or it would compare cel-python with itself."""
    program = _compiled(_ENGINE, source)
    if program is not None:
        program._quiet = None  # type: ignore[attr-defined]
    return program


@st.composite
def _expressions(draw: st.DrawFn) -> str:
    left = draw(st.sampled_from(_TERMS))
    shape = draw(st.integers(0, 8))
    if shape == 0:
        return f"{left} {draw(st.sampled_from(_COMPARISONS))} {draw(st.sampled_from([*_LITERALS, *_TERMS]))}"
    if shape == 1:
        return f"!({left} {draw(st.sampled_from(_COMPARISONS))} {draw(st.sampled_from(_LITERALS))})"
    if shape == 2:
        return f"{draw(st.sampled_from([*_LITERALS, 'v', 'w']))} in {left}"
    if shape == 3:
        return f"{left}.{draw(st.sampled_from(['contains', 'startsWith', 'endsWith', 'matches']))}(w)"
    if shape == 4:
        macro = draw(st.sampled_from(["exists", "all", "exists_one"]))
        return f"v.{macro}(x, x {draw(st.sampled_from(_COMPARISONS))} w)"
    if shape == 5:
        return f"!v.{draw(st.sampled_from(['exists', 'all']))}(x, x)"
    if shape == 6:
        return f"{left} == {draw(st.sampled_from(_TERMS))} || {left} == w"
    logic = draw(st.sampled_from(["||", "&&"]))
    right = draw(st.sampled_from([*_LITERALS, *_TERMS]))
    if shape == 7:
        return f"({left} {logic} {right}) {draw(st.sampled_from(['==', '!=']))} {draw(st.sampled_from(_LITERALS))}"
    return f"!({left} {logic} {right})"


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_expressions(), value=_VALUES, other=_VALUES)
def test_cel_python_never_allows_what_the_engine_does_not(source: str, value: Any, other: Any) -> None:
    celpy = _compiled(_CELPY, source)
    if celpy is None:
        return  # refused at load time: never evaluated, never allowed
    if _answer(celpy, value, other) is not True:
        return
    engine = _engine(source)
    if engine is None:
        return  # the default backend refuses it at load time: it never falls back to cel-python
    answer = _answer(engine, value, other)
    assert answer is True, f"cel-python: true; cel-expr-python: {answer!r}"
