"""Issue 12, items 1-3 and 7: CEL sees the real Engagement, strings exactly, every path, and no withheld value.

Each case below let a forbidden call run (or a withheld value out) before the binding plan came from the
syntax tree, before values the C++ engine cannot represent were kept away from it, and before evaluation
errors stopped quoting data.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agentguard.cel
from agentguard import Guard, RestrictionViolation
from agentguard.cel import CelEvaluationError, get_backend
from agentguard.record import EngagementState, User, ViewPlan
from agentguard.spec import ENGAGEMENT_DECLARATIONS
from tests.conftest import spec_text

for _name in ("cel-expr-python", "cel-python"):
    get_backend(_name)  # created at import: cel-python raises the recursion limit once, not inside a test


def _guard(assertion: str, *, phase: str = "input_restriction") -> Guard:
    text = spec_text(
        f"""
        capabilities:
          send-email:
          shell:
          wire:
            {phase}:
              assertion: {json.dumps(assertion)}
        """
    )
    guard = Guard.from_yaml(text)
    for name in ("send-email", "shell"):
        guard.tool(name=name)(lambda **kwargs: "ok")
    return guard


# -- item 1: the plan comes from the syntax tree ----------------------------------------------------------


@pytest.mark.parametrize(
    "assertion",
    [
        '!history.exists(n, n == "send-email")',
        "history.size() < 3",
        'recent.all(k, k != "wire")',
        '// don\'t wire money after an e-mail\n!("send-email" in recent)',
        '"history[\'x\']" != "" && !history.exists(n, n == "send-email")',
        "!history.filter(n, n == 'send-email').exists(n, true)",
        '!(history._list.exists(n, n == "send-email"))',
    ],
)
def test_a_forbidden_call_is_denied_whatever_form_the_assertion_takes(assertion: str) -> None:
    guard = _guard(assertion)
    ran: list[int] = []

    @guard.tool(name="wire")
    def wire(amount: int) -> str:
        ran.append(amount)
        return "sent"

    with guard.engagement(user=User(id="u1")):
        guard.call("send-email", {"to": "a@corp.com"}, lambda **kwargs: "sent")
        with pytest.raises(RestrictionViolation):
            wire(amount=10)
    assert ran == []


NAMES = ["send-email", "wire", "a", "x.y", "inputs"]
names = st.sampled_from(NAMES)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "a", "send-email", "wire"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["k", "to", "n"]), inner, max_size=3)
    ),
    max_leaves=6,
)


def _path() -> st.SearchStrategy[str]:
    root = st.sampled_from(["recent", "history", "user"])
    step = st.one_of(
        names.map(lambda n: f'["{n}"]'),
        st.sampled_from([".inputs", ".outputs", "._total", "._list", "._name", ".id", ".k", "[0]"]),
        st.just("[recent._name]"),
    )
    return st.tuples(root, st.lists(step, max_size=3)).map(lambda t: t[0] + "".join(t[1]))


def _expression() -> st.SearchStrategy[str]:
    path = _path()
    literal = names.map(lambda n: f'"{n}"') | st.sampled_from(["1", "null", "true", "'history'"])
    atom = st.one_of(
        path.map(lambda p: f"has({p}.k)" if not p.endswith("]") else f"size({p}) > 0"),
        path.map(lambda p: f"size({p}) < 3"),
        path.map(lambda p: f"{p}.size() == 2"),
        st.tuples(literal, path).map(lambda t: f"{t[0]} in {t[1]}"),
        st.tuples(path, literal).map(lambda t: f"{t[0]} == {t[1]}"),
        path.map(lambda p: f"{p}.exists(v, v == 'send-email')"),
        path.map(lambda p: f"{p}.all(v, v != 'wire')"),
        path.map(lambda p: f"{p}.map(v, v).size() > 1"),
        path.map(lambda p: f"type({p}) == map"),
        st.tuples(path, path).map(lambda t: f"{t[0]} == {t[1]}"),
    )
    comment = st.sampled_from(["", "// it's a 'history' note\n", '// "recent"\n'])
    return st.recursive(
        st.tuples(comment, atom).map("".join),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) && ({t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) || ({t[1]})"),
            inner.map(lambda e: f"!({e})"),
        ),
        max_leaves=3,
    )


def _outcome_text(program: Any, variables: dict[str, Any]) -> str:
    """The evaluation error's text, or ``""`` when the expression evaluated."""
    try:
        program.evaluate(variables)
    except CelEvaluationError as error:
        return str(error)
    return ""


def _outcome(program: Any, variables: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "value", program.evaluate(variables)
    except CelEvaluationError:
        return "error", None


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expression=_expression(),
    calls=st.lists(st.tuples(names, json_values, json_values), max_size=5),
    email=st.none() | st.just("ann@corp.com"),
)
def test_the_pruned_binding_gives_the_verdict_of_the_whole_engagement(
    backend_name: str, expression: str, calls: list[tuple[str, Any, Any]], email: str | None
) -> None:
    try:
        program = get_backend(backend_name).compile(expression, ENGAGEMENT_DECLARATIONS)
    except agentguard.cel.CelCompileError:
        return
    state = EngagementState(user=User(id="u1", email=email))
    for name, inputs, outputs in calls:
        state.complete_call(state.begin_call(name, {"v": inputs}), outputs)
    assert _outcome(program, state.bindings(ViewPlan.of(program))) == _outcome(program, state.view())


# -- item 2: strings are seen exactly ---------------------------------------------------------------------


def test_a_nul_character_does_not_cut_a_string_short() -> None:
    guard = _guard('recent["wire"].inputs.cmd.matches("^[a-z ]*$")')

    @guard.tool(name="wire")
    def wire(cmd: str) -> str:
        raise AssertionError("must not run")

    with guard.engagement(), pytest.raises(RestrictionViolation):
        wire(cmd="ls\x00; rm -rf /")


def test_nul_strings_are_distinct_map_keys() -> None:
    program = get_backend().compile(
        'recent["m"].outputs["a"] == 2 && size(recent["m"].outputs) == 2', ENGAGEMENT_DECLARATIONS
    )
    assert program.evaluate({"recent": {"m": {"outputs": {"a\x00b": 1, "a": 2}}}}) is True
    collide = get_backend().compile('recent["m"].outputs["a"] == 1', ENGAGEMENT_DECLARATIONS)
    assert collide.evaluate({"recent": {"m": {"outputs": {"a\x00b": 1, "a": 2}}}}) is False


def test_without_a_faithful_engine_an_unrepresentable_value_is_a_failed_assertion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_celpy(name: str | None = None) -> Any:
        raise ImportError("cel-python is not installed")

    program = get_backend("cel-expr-python").compile(
        'recent["x"].inputs.cmd.matches("^[a-z]*$")', ENGAGEMENT_DECLARATIONS
    )
    monkeypatch.setattr(agentguard.cel, "get_backend", no_celpy)
    with pytest.raises(CelEvaluationError, match=r"NUL character.*agentguard\[celpy\]"):
        program.evaluate({"recent": {"x": {"inputs": {"cmd": "ls\x00rm"}}}})


every_character = st.characters(codec=None, categories=None)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(every_character, max_size=40)
    | st.text(every_character, max_size=3).map(lambda t: t * 40_000)
)
def test_every_string_is_seen_exactly_or_refused(text: str) -> None:
    backend = get_backend()
    checks = {
        'recent["x"].inputs.cmd.matches("^[a-z ]*$")': re.fullmatch(r"[a-z ]*", text) is not None,
        f'size(recent["x"].inputs.cmd) == {len(text)}': True,
        'recent["x"].inputs.cmd == "ls"': text == "ls",
        'recent["x"].inputs.cmd.startsWith("ls")': text.startswith("ls"),
        'size(recent["x"].outputs) == 2': text != "a",
    }
    variables = {"recent": {"x": {"inputs": {"cmd": text}, "outputs": {text: 1, "a": 2}}}}
    valid_unicode = not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    for expression, expected in checks.items():
        program = backend.compile(expression, ENGAGEMENT_DECLARATIONS)
        try:
            value = program.evaluate(variables)
        except CelEvaluationError:
            assert not valid_unicode, expression  # refusing is allowed only for text that is not Unicode
            continue
        assert value is expected, expression


# -- item 3: standard CEL on every Engagement path ---------------------------------------------------------


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('history["lookup-order"].exists(h, h.inputs.order_id == "A-1")', True),
        ('history["lookup-order"].all(h, h.inputs.order_id == "A-1")', False),
        ('history["lookup-order"].filter(h, h.inputs.order_id == "A-1").size() == 1', True),
        ('history["lookup-order"].map(h, h.inputs.order_id) == ["A-1", "B-2"]', True),
        ('history["lookup-order"].exists_one(h, h.inputs.order_id == "B-2")', True),
        ('recent["lookup-order"].inputs["tags"].exists(t, t == "vip")', True),
    ],
)
def test_comprehensions_over_indexed_engagement_paths(
    backend_name: str, expression: str, expected: bool
) -> None:
    state = EngagementState()
    state.complete_call(state.begin_call("lookup-order", {"order_id": "A-1", "tags": []}), None)
    state.complete_call(state.begin_call("lookup-order", {"order_id": "B-2", "tags": ["vip"]}), None)
    program = get_backend(backend_name).compile(expression, ENGAGEMENT_DECLARATIONS)
    assert program.evaluate(state.bindings(ViewPlan.of(program))) is expected


def test_the_checker_workaround_still_reports_other_problems() -> None:
    with pytest.raises(agentguard.cel.CelCompileError, match="undeclared reference"):
        get_backend().compile('history["x"].exists(h, h.inputs.id == usr.id)', ENGAGEMENT_DECLARATIONS)


# -- item 7: evaluation errors quote no values ------------------------------------------------------------


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
@pytest.mark.parametrize(
    "expression",
    [
        'recent["x"].outputs[recent["x"].outputs.token] == 1',
        'recent["x"].outputs.list[recent["x"].outputs.n] == 1',
        'recent["x"].outputs.token.matches(recent["x"].outputs.pattern)',
        'int(recent["x"].outputs.token) == 1',
    ],
)
def test_an_evaluation_error_never_quotes_the_data(backend_name: str, expression: str) -> None:
    secret = "SECRET-42"
    outputs = {"token": secret, "list": [1], "n": 4242, "pattern": f"({secret}"}
    program = get_backend(backend_name).compile(expression, ENGAGEMENT_DECLARATIONS)
    with pytest.raises(CelEvaluationError) as caught:
        program.evaluate({"recent": {"x": {"outputs": outputs}}})
    assert secret not in str(caught.value)
    assert "4242" not in str(caught.value)


def test_a_withheld_output_is_not_in_the_denial() -> None:
    guard = _guard('recent["wire"].outputs[recent["wire"].outputs.token] == 1', phase="output_restriction")

    @guard.tool(name="wire")
    def wire() -> dict[str, str]:
        return {"token": "SECRET-42"}

    with guard.engagement() as eng:
        with pytest.raises(RestrictionViolation) as caught:
            wire()
        assert "SECRET-42" not in str(caught.value)
        assert "SECRET-42" not in caught.value.reason
        for step in eng.steps:
            assert "SECRET-42" not in repr(step.decisions)
            assert "SECRET-42" not in repr(step.payload)


ERRING = [
    'recent["x"].outputs[recent["x"].outputs.token] == 1',
    'recent["x"].outputs.token.matches(recent["x"].outputs.token)',
    'int(recent["x"].outputs.token) == 1',
    'timestamp(recent["x"].outputs.token) > started_at',
    'recent["x"].outputs.token + 1 == 2',
    '{recent["x"].outputs.token: 1, recent["x"].outputs.token: 2}.size() == 2',
    'recent["x"].outputs.list[int(size(recent["x"].outputs.token)) + 100] == 1',
]


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
@settings(max_examples=60, deadline=None)
@given(secret=st.text(st.characters(codec="utf-8"), min_size=4, max_size=30).map(lambda s: "S3CR3T" + s))
def test_no_evaluation_error_quotes_a_value(backend_name: str, secret: str) -> None:
    backend = get_backend(backend_name)
    variables = {"recent": {"x": {"outputs": {"token": secret, "list": [1]}}}}
    for expression in ERRING:
        outcome = _outcome_text(backend.compile(expression, ENGAGEMENT_DECLARATIONS), variables)
        assert "S3CR3T" not in outcome, expression


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
@settings(max_examples=60, deadline=None)
@given(
    secret=st.text(st.characters(codec="utf-8"), max_size=20).map(lambda s: "S3CR3T" + s),
    big=st.sampled_from([-(2**63) - 1, 2**64, -(10**30)]),
    shape=st.sampled_from(["beside", "key", "nested"]),
)
@example(secret="S3CR3T", big=-(2**63) - 1, shape="beside")  # hypothesis found it through the MCP adapter
def test_an_integer_out_of_range_beside_the_data_quotes_none_of_it(
    backend_name: str, secret: str, big: int, shape: str
) -> None:
    """cel-expr-python names an integer it cannot hold by the path to it, each step with the repr of the
    container, quotes nested in quotes: the data around it must not survive the redaction."""
    outputs = {
        "beside": {"a": [big, secret]},
        "key": {secret: {"n": big}},
        "nested": {"a": {"b": [secret, {"c": big}]}},
    }[shape]
    program = get_backend(backend_name).compile(
        'type(recent["x"].outputs) != string || !recent["x"].outputs.contains("x")', ENGAGEMENT_DECLARATIONS
    )
    outcome = _outcome_text(program, {"recent": {"x": {"outputs": outputs}}})
    assert "S3CR3T" not in outcome
    assert str(abs(big)) not in outcome


@pytest.mark.parametrize("backend_name", ["cel-expr-python", "cel-python"])
def test_an_invalid_pattern_from_the_data_is_not_written_to_stderr(
    backend_name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    program = get_backend(backend_name).compile(
        'recent["x"].inputs.q.matches(recent["x"].outputs.pattern)', ENGAGEMENT_DECLARATIONS
    )
    with pytest.raises(CelEvaluationError):
        program.evaluate({"recent": {"x": {"inputs": {"q": "a"}, "outputs": {"pattern": "SECRET-42("}}}})
    captured = capfd.readouterr()
    assert "SECRET-42" not in captured.err + captured.out


# -- issue 14 item 6: a denial names the clause that failed ------------------------------------------------


def test_a_denial_names_the_failing_clause_and_its_values() -> None:
    guard = _guard('recent["wire"].inputs.amount > 0 && recent["wire"].inputs.amount <= 100 && true')
    guard.tool(name="wire")(lambda amount: None)
    with guard.engagement(), pytest.raises(RestrictionViolation) as caught:
        guard.call("wire", {"amount": 250})
    assert caught.value.reason == (
        'assertion is false: clause 2 of 3, recent["wire"].inputs.amount <= 100 is false (250 <= 100)'
    )


def test_an_output_denial_names_the_clause_without_the_withheld_values() -> None:
    guard = _guard(
        'recent["wire"].outputs.status == "ok" && recent["wire"].outputs.code < 3', phase="output_restriction"
    )
    guard.tool(name="wire")(lambda: {"status": "ok", "code": 4242})
    with guard.engagement(), pytest.raises(RestrictionViolation) as caught:
        guard.call("wire", {})
    assert (
        caught.value.reason == 'assertion is false: clause 2 of 2, recent["wire"].outputs.code < 3 is false'
    )
    assert "4242" not in str(caught.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expression=_expression(),
    calls=st.lists(st.tuples(names, json_values, json_values), max_size=5),
)
def test_the_engine_given_only_what_the_tree_reads_answers_as_given_everything(
    expression: str, calls: list[tuple[str, Any, Any]]
) -> None:
    """The C++ engine is handed each value narrowed to the members the syntax tree selects, nested."""
    from agentguard.cel._expr import ExprBackend, ExprProgram

    try:
        narrowing = ExprBackend(fast_path=False).compile(expression, ENGAGEMENT_DECLARATIONS)
    except agentguard.cel.CelCompileError:
        return
    whole = ExprProgram(
        narrowing.source, narrowing._expression, narrowing.variables
    )  # reads all of each value
    state = EngagementState(user=User(id="u1"))
    for name, inputs, outputs in calls:
        state.complete_call(state.begin_call(name, {"v": inputs}), outputs)
    view = state.view()
    assert _outcome(narrowing, view) == _outcome(whole, view)


class _Truthy:
    """A value that says it is true and equal to everything: not the boolean ``true``."""

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


ANSWERS = st.one_of(
    st.none(),
    st.booleans().map(lambda b: [b]),
    st.sampled_from([1, 1.0, "true", "True", b"true", {"ok": True}, (True,), _Truthy(), Exception("x")]),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.builds(CelEvaluationError, st.just("x"), st.text(max_size=8)),
)


@settings(max_examples=300, deadline=None)
@given(answer=ANSWERS, values=st.booleans())
def test_only_the_boolean_true_passes_whatever_the_answer(answer: Any, values: bool) -> None:
    """``Assertion.judge`` reads an answer already had (an evaluation's value, or the exception a quick
    closure raised): a truthy object, ``1``, ``"true"``, ``[True]``, an exception, none of them passes."""
    guard = _guard('recent["wire"].inputs.x == 1')
    rule = guard.policy.capability_for("wire", "tool", ())
    assert rule is not None
    assert rule.input_assertion is not None
    passed, reason = rule.input_assertion.judge(answer, {"recent": {}}, values=values)
    assert passed is False
    assert reason.startswith("assertion ")
    assert rule.input_assertion.judge(True, {}) == (True, "assertion holds")
