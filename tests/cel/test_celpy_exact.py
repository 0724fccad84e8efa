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
]


@pytest.mark.parametrize(("source", "value"), LENIENT)
def test_cel_python_is_not_more_lenient_than_cel(source: str, value: Any) -> None:
    celpy = _compiled(_CELPY, source)
    engine = _compiled(_ENGINE, source)
    assert celpy is not None
    assert _answer(celpy, value, value) is not True
    assert engine is None or _answer(engine, value, value) is not True


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
            st.one_of(st.text(alphabet="ab", max_size=2), st.integers(-2, 2), st.booleans()),
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


@st.composite
def _expressions(draw: st.DrawFn) -> str:
    left = draw(st.sampled_from(_TERMS))
    shape = draw(st.integers(0, 6))
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
    return f"{left} == {draw(st.sampled_from(_TERMS))} || {left} == w"


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_expressions(), value=_VALUES, other=_VALUES)
def test_cel_python_never_allows_what_the_engine_does_not(source: str, value: Any, other: Any) -> None:
    celpy = _compiled(_CELPY, source)
    if celpy is None:
        return  # refused at load time: never evaluated, never allowed
    if _answer(celpy, value, other) is not True:
        return
    engine = _compiled(_ENGINE, source)
    if engine is None:
        return  # the default backend refuses it at load time: it never falls back to cel-python
    answer = _answer(engine, value, other)
    assert answer is True, f"cel-python: true; cel-expr-python: {answer!r}"
