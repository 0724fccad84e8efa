"""Issue 13 item 4: one evaluation's work is bounded on both engines; a bound hit is a failed assertion (deny)
with the reason, and other threads keep running meanwhile.

cel-expr-python is refused before it runs (an estimate from the syntax tree and the bound data's size);
cel-python is metered while it runs. Times are "within generous slack", never exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import Guard, RestrictionViolation
from agentguard.cel import (
    CelBackend,
    CelEvaluationError,
    EvalBudget,
    VarType,
    available_backends,
    eval_budget,
    get_backend,
    set_eval_budget,
)
from tests.conftest import spec_text

SLACK = 10.0
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
# Seven nested comprehensions over ten elements: 11 million iterations, over the default budget of 5 million.
EXPONENTIAL = "true"
for _name in "abcdefg":
    EXPONENTIAL = f"{TEN}.all({_name}, {EXPONENTIAL})"
PAIRWISE = 'history["put"].all(a, history["put"].all(b, size(a.inputs.x + b.inputs.x) > 0))'
BACKENDS = available_backends()


@pytest.fixture
def budget() -> Iterator[None]:
    """Restore the process-wide budget after a test that changes it."""
    previous = eval_budget()
    yield
    set_eval_budget(previous)


class Ticker:
    """Another thread counting while an evaluation runs: the engine must not hold the GIL throughout."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.ticks += 1

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_pairwise_concatenation_over_large_inputs_is_a_prompt_denial(backend_name: str) -> None:
    """The issue's row, at 100 KB inputs: 60 earlier calls, then a check of every pair, concatenated."""
    spec = spec_text(
        f"""
        capabilities:
          put:
          check:
            input_restriction:
              assertion: '{PAIRWISE}'
        """
    )
    guard = Guard.from_yaml(spec, cel_backend=backend_name)
    ran: list[str] = []

    @guard.tool
    def put(x: str) -> str:
        return "ok"

    @guard.tool
    def check() -> str:
        ran.append("check")
        return "checked"

    with guard.engagement():
        for index in range(60):
            put(x=str(index) * 100_000)
        with Ticker() as ticker:
            started = time.monotonic()
            with pytest.raises(RestrictionViolation, match="evaluation budget") as denial:
                check()
            elapsed = time.monotonic() - started
    assert ran == []
    assert "EvalBudget" in str(denial.value)
    assert elapsed < SLACK
    assert ticker.ticks >= 1 or elapsed < 0.05  # the other thread ran while the check did (or it was instant)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_an_exponential_comprehension_fails_with_the_reason(backend_name: str) -> None:
    program = get_backend(backend_name).compile(EXPONENTIAL, {})
    started = time.monotonic()
    with Ticker() as ticker, pytest.raises(CelEvaluationError, match="budget") as error:
        program.evaluate({})
    elapsed = time.monotonic() - started
    assert elapsed < SLACK
    assert "EvalBudget" in error.value.message
    if backend_name == "cel-python":  # metered while it runs: the GIL is shared all along
        assert ticker.ticks >= 1


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_the_budget_is_configurable_and_real_policies_pass(backend_name: str, budget: None) -> None:
    backend = get_backend(backend_name)
    declarations = {"history": VarType.DYN}
    calls = [{"inputs": {"x": "a" * 100}} for _ in range(1000)]
    common = backend.compile('history["put"].exists(h, h.inputs.x.startsWith("b"))', declarations)
    pairs = backend.compile(
        'history["put"].all(a, history["put"].exists(b, a.inputs.x == b.inputs.x))', declarations
    )
    assert common.evaluate({"history": {"put": calls}}) is False
    assert pairs.evaluate({"history": {"put": calls[:300]}}) is True
    set_eval_budget(EvalBudget(max_iterations=500))
    with pytest.raises(CelEvaluationError, match="500"):
        common.evaluate({"history": {"put": calls}})
    assert common.evaluate({"history": {"put": calls[:100]}}) is False


def test_the_meter_stops_cel_python_at_the_deadline(budget: None) -> None:
    if "cel-python" not in BACKENDS:
        pytest.skip("cel-python is not installed")
    set_eval_budget(EvalBudget(max_iterations=10**12, max_seconds=0.5))
    program = get_backend("cel-python").compile(EXPONENTIAL, {})
    started = time.monotonic()
    with pytest.raises(CelEvaluationError, match=r"more than 0.5 s"):
        program.evaluate({})
    assert time.monotonic() - started < 0.5 + SLACK


def test_a_bound_hit_is_not_rescued_by_an_or(budget: None) -> None:
    """CEL's `true || error` is true: a hit inside one branch must still fail the whole evaluation."""
    if "cel-python" not in BACKENDS:
        pytest.skip("cel-python is not installed")
    set_eval_budget(EvalBudget(max_iterations=50))
    program = get_backend("cel-python").compile(f"true || {TEN}.all(a, {TEN}.all(b, a > 0))", {})
    with pytest.raises(CelEvaluationError, match="50 comprehension iterations"):
        program.evaluate({})


def test_eval_budget_is_validated() -> None:
    for name in ("max_iterations", "max_bytes", "max_seconds"):
        with pytest.raises(ValueError, match=f"EvalBudget.{name}"):
            EvalBudget(**{name: 0})


@settings(max_examples=60, deadline=None)
@given(
    depth=st.integers(min_value=1, max_value=4),
    width=st.integers(min_value=1, max_value=12),
    limit=st.integers(min_value=1, max_value=5000),
)
def test_the_estimate_never_lets_an_over_budget_nest_run(depth: int, width: int, limit: int) -> None:
    """Nested comprehensions over literal lists: refused exactly when their iterations pass the limit."""
    items = "[" + ", ".join(str(index) for index in range(width)) + "]"
    expression = "true"
    for level in range(depth):
        expression = f"{items}.all(v{level}, {expression})"
    iterations = sum(width ** (level + 1) for level in range(depth))
    backend: CelBackend = get_backend("cel-expr-python")
    program = backend.compile(expression, {})
    previous = set_eval_budget(EvalBudget(max_iterations=limit))
    try:
        if iterations > limit:
            with pytest.raises(CelEvaluationError, match=r"EvalBudget\.max_iterations"):
                program.evaluate({})
        else:
            assert program.evaluate({}) is True
    finally:
        set_eval_budget(previous)
