"""Calls run directly, without the trampoline, when their flow would yield nothing but the tool's run.

The direct path (``agentguard.pipeline._tool.run_tool_call``) must decide exactly what the flow decides: the
same outputs, errors, records and decisions, for every sequence of calls. Each test runs the same calls
through a guard that takes the direct path and through one that cannot (an observer watches every step),
and compares everything the two recorded. Whether a call may go direct is read live, call by call: a rule,
a review gate or an observer added between two calls applies to the next one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentguard.cel._fast as fast_module
import agentguard.pipeline._tool as tool_module
from agentguard import (
    Approval,
    CheckResult,
    Guard,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    RuleViolation,
    User,
)
from agentguard.cel import EvalBudget, set_eval_budget
from agentguard.cel._budget import Meter
from agentguard.observers import Observer
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      web-search:
        output_restriction:
          assertion: '!recent["web-search"].outputs.exists(r, r.contains("secret"))'
      boom:
      lazy:
      quiet:
        collect_results: false
      keyed:
    lifespan:
      short_circuit: 3
    """
)


class Watching(Observer):
    """An observer that watches every step and does nothing: its guard runs every call as a flow."""

    def decision(self, state: Any, step: Any, decision: Any) -> None:
        return None


def send_email(to: str) -> dict[str, str]:
    return {"status": "sent", "to": to}


def web_search(q: str) -> list[str]:
    return [f"a page about {q}"]


def boom(x: str) -> str:
    raise ValueError(f"boom {x}")


def lazy(x: str) -> Iterator[str]:
    return iter([x])


def quiet(x: str) -> dict[str, str]:
    return {"x": x}


async def asend_email(to: str) -> dict[str, str]:
    await asyncio.sleep(0)
    return send_email(to)


def keyed(x: Any) -> dict[str, Any]:
    """A tool that needs credentials: it runs only for a user (or a static identity)."""
    return {"x": str(x)}


TOOLS = {
    "send-email": send_email,
    "web-search": web_search,
    "boom": boom,
    "lazy": lazy,
    "quiet": quiet,
    "keyed": keyed,
}
ARGUMENT = {name: "x" for name in [*TOOLS, "nope"]} | {"send-email": "to", "web-search": "q"}
# Inputs that are not JSON-like (a tuple, a set, an object) are converted before they are checked.
VALUES = st.sampled_from(["a@corp.com", "b@evil.com", "secret", "x", "", ("a@corp.com",), {"x"}, Watching()])
CALLS = st.lists(st.tuples(st.sampled_from([*TOOLS, "nope"]), VALUES), max_size=12)
# Shadow mode: a check that fails records a warning and lets the call go on.
SEVERITIES = st.sampled_from(
    [{}, {"restriction": "warning"}, {"short-circuit": "info"}, {"restriction:output": "warning"}]
)


def _guard(*, watched: bool, severity: dict[str, Any] | None = None) -> Guard:
    guard = Guard.from_yaml(
        SPEC, observers=[Watching()] if watched else [], telemetry=False, severity=severity
    )
    for name, fn in TOOLS.items():
        guard.register(name, fn, needs_credentials=name == "keyed")
    return guard


def _outcome(run: Any) -> tuple[Any, ...]:
    try:
        return ("returned", run())
    except PolicyViolation as exc:
        return ("denied", type(exc).__name__, str(exc))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


def _recorded(eng: Any) -> dict[str, Any]:
    """Everything an engagement recorded, without the times and ids that differ from run to run."""
    view = eng.view()
    del view["started_at"]
    return {
        "view": view,
        "status": (eng.state.status, eng.state.status_reason),
        "calls": [(c.name, c.status, c.error, c.inputs, c.outputs) for c in eng.state.calls],
        "steps": [
            (
                s.kind,
                s.name,
                s.outcome,
                [(d.rule, d.outcome, d.phase, d.reason, d.capability, d.expression) for d in s.decisions],
            )
            for s in eng.steps
        ],
    }


U1 = User(id="u1")


def _run(
    guard: Guard, calls: list[tuple[str, Any]], user: User | None = U1
) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    with guard.engagement(user=user) as eng:
        outcomes = [
            _outcome(
                lambda name=name, value=value: guard.call(
                    name, {ARGUMENT[name]: value}, TOOLS.get(name, quiet)
                )
            )
            for name, value in calls
        ]
        return outcomes, _recorded(eng)


@pytest.fixture
def flows(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the calls that went through the flow (and not directly)."""
    seen: list[str] = []
    flow = tool_module.tool_call_flow

    def counted(ctx: Any, state: Any, call: Any, watchers: Any = None) -> Any:
        seen.append(call.name)
        return flow(ctx, state, call, watchers)

    monkeypatch.setattr(tool_module, "tool_call_flow", counted)
    return seen


@settings(max_examples=200, deadline=None)
@given(calls=CALLS, severity=SEVERITIES, user=st.sampled_from([User(id="u1"), None]))
def test_a_direct_call_decides_and_records_what_the_flow_does(
    calls: list[tuple[str, Any]], severity: dict[str, Any], user: User | None
) -> None:
    direct = _run(_guard(watched=False, severity=severity), calls, user)
    flowing = _run(_guard(watched=True, severity=severity), calls, user)
    assert direct == flowing


def test_the_step_of_a_call_read_while_it_runs_is_the_step_it_finishes_on() -> None:
    """A direct call's record stands for its step until the step is read; read mid-call (here by the tool
    itself), the step is made then, and the decisions taken after land on that same object."""
    guard = _guard(watched=False)
    seen: list[Any] = []

    def reading(q: str) -> list[str]:
        step = guard.current_engagement().steps[-1]  # type: ignore[union-attr]
        seen.append((step, [d.rule for d in step.decisions]))
        return [q]

    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("web-search", {"q": "news"}, reading)
        step, during = seen[0]
        assert during == ["capability", "short-circuit"]  # web-search has no input assertion
        assert eng.steps[-1] is step
        assert [d.rule for d in step.decisions] == ["capability", "short-circuit", "restriction"]
        assert step.call is eng.state.calls[-1]
        assert step.call_id == eng.state.calls[-1].call_id
        assert step.at == step.call.started_at
        assert step.turn_id == eng.state.turn_id


def test_steps_read_from_another_thread_lose_no_decision() -> None:
    """Calls made directly in one thread while another reads (and so makes) their steps: every step ends
    with every decision its call took."""
    guard = _guard(watched=False)
    done = threading.Event()

    def read(eng: Any) -> None:
        while not done.is_set():
            for step in eng.steps:
                step.decisions  # noqa: B018  # reading is what makes the step

    with guard.engagement(user=User(id="u1")) as eng:
        reader = threading.Thread(target=read, args=(eng,))
        reader.start()
        try:
            for number in range(3000):
                odd = bin(number).count("1") % 2  # Thue-Morse: never a block three times in a row
                name, argument = ("web-search", "q") if odd else ("send-email", "to")
                guard.call(name, {argument: f"{number}@corp.com"}, TOOLS[name])
        finally:
            done.set()
            reader.join()
        rules = {tuple(d.rule for d in step.decisions) for step in eng.steps}
    assert rules == {("capability", "short-circuit", "restriction")}  # both tools have one assertion
    assert len(eng.steps) == 3000


def test_steps_is_a_live_read_only_sequence() -> None:
    guard = _guard(watched=False)
    with guard.engagement(user=User(id="u1")) as eng:
        steps = eng.steps
        assert len(steps) == 0
        assert list(steps) == []
        assert steps == []
        guard.call("quiet", {"x": "1"}, quiet)
        guard.call("web-search", {"q": "a"}, web_search)
        assert [s.name for s in steps] == ["quiet", "web-search"]  # the same object sees later steps
        assert [s.name for s in reversed(steps)] == ["web-search", "quiet"]
        assert steps[0:1] == [steps[0]]
        assert steps[-1] is steps[1]
        assert steps == list(steps)
        assert steps != [steps[0]]
        with pytest.raises(IndexError):
            steps[2]
        with pytest.raises(TypeError):
            hash(steps)


def test_calls_go_direct_only_when_nothing_but_the_tool_has_to_happen(flows: list[str]) -> None:
    outcomes, _ = _run(_guard(watched=False), [("send-email", "a@corp.com"), ("nope", "x"), ("boom", "x")])
    assert [o[0] for o in outcomes] == ["returned", "denied", "raised"]
    assert flows == ["nope"]  # an unknown capability takes the flow (it has no rule to go direct with)
    flows.clear()
    _run(_guard(watched=True), [("send-email", "a@corp.com")])
    assert flows == ["send-email"]


def test_a_rule_added_between_calls_applies_to_the_next_one(flows: list[str]) -> None:
    guard = _guard(watched=False)
    with guard.engagement(user=User(id="u1")):
        assert guard.call("quiet", {"x": "1"}, quiet) == {"x": "1"}
        guard.rules.add("never", lambda context: CheckResult(False, "never"), capabilities={"quiet"})
        with pytest.raises(RuleViolation, match="never"):
            guard.call("quiet", {"x": "2"}, quiet)
    assert flows == ["quiet"]


def test_a_review_gate_added_between_calls_applies_to_the_next_one(flows: list[str]) -> None:
    guard = _guard(watched=False)
    guard.add_reviewer("nobody", lambda request: Approval(False, "no"))
    with guard.engagement(user=User(id="u1")):
        guard.call("quiet", {"x": "1"}, quiet)
        guard.add_review_gate("quiet", "nobody")
        with pytest.raises(ReviewDenied):
            guard.call("quiet", {"x": "2"}, quiet)
    assert flows == ["quiet"]


def test_an_observer_added_between_calls_sees_the_next_one(flows: list[str]) -> None:
    guard = _guard(watched=False)

    class Steps(Observer):
        def __init__(self) -> None:
            self.names: list[str | None] = []

        def step_started(self, state: Any, step: Any) -> None:
            self.names.append(step.name)

    steps = Steps()
    with guard.engagement(user=User(id="u1")):
        guard.call("quiet", {"x": "1"}, quiet)
        guard.add_observer(steps)
        guard.call("quiet", {"x": "2"}, quiet)
    assert steps.names == ["quiet"]
    assert flows == ["quiet"]


def test_an_async_direct_call_decides_what_the_flow_does(flows: list[str]) -> None:
    calls = [("send-email", "a@corp.com"), ("send-email", "b@evil.com"), ("send-email", "c@corp.com")]

    async def run(guard: Guard) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
        outcomes: list[tuple[Any, ...]] = []
        async with guard.engagement(user=User(id="u1")) as eng:
            for name, value in calls:
                try:
                    outcomes.append(("returned", await guard.acall(name, {"to": value}, asend_email)))
                except PolicyViolation as exc:
                    outcomes.append(("denied", type(exc).__name__, str(exc)))
            return outcomes, _recorded(eng)

    direct = asyncio.run(run(_guard(watched=False)))
    assert flows == []
    flowing = asyncio.run(run(_guard(watched=True)))
    assert direct == flowing
    # a refused attempt is an attempt: the third send-email repeats [send-email] three times
    assert [o[:2] for o in direct[0]] == [
        ("returned", {"status": "sent", "to": "a@corp.com"}),
        ("denied", "RestrictionViolation"),
        ("denied", "ShortCircuitViolation"),
    ]


# -- the restrictions a direct call asks quickly, under the engagement's lock ---------------------------------
#
# A direct call asks its input and output restrictions through the program's plain-Python closure
# (``Assertion.quick``) and takes only its ``True``; anything else goes to the general check. Odd values and odd
# syntax must decide exactly what the flow decides.

INPUT_RESTRICTIONS = [
    'recent["probe"].inputs.v == true',
    'recent["probe"].inputs.v > 1',
    'recent["probe"].inputs.v.size() < 3',
    'size(recent["probe"].inputs.v) < 3',
    'recent["probe"].inputs.v.startsWith("a")',
    'recent["probe"].inputs.v.matches("^a")',
    'recent["probe"].inputs.v in ["a", 1, true]',
    'recent["probe"].inputs.v.exists(x, x == 1)',
    'has(recent["probe"].inputs.v) && recent["probe"].inputs.v != "secret"',
    'recent["probe"].inputs.v == user.id',
    'int(recent["probe"].inputs.v) > 0',
    'recent["probe"].inputs.v == true // a comment the happy path never writes',
    "history.probe.size() < 3 && history._total >= 0",
    'recent._name == "probe"',
    'size(recent) == 2 && recent.exists(k, k == "probe")',
    '"probe" in history && history._list.size() == history._total',
    'started_at < timestamp("2999-01-01T00:00:00Z") && recent["probe"].inputs.v != null',
]
OUTPUT_RESTRICTIONS = [
    'recent["probe"].outputs.v == true',
    'recent["probe"].outputs.size() > 0',
    '!recent["probe"].outputs.exists(k, k == "secret")',
    'recent["probe"].outputs.v != "x" && recent["probe"].inputs.v == recent["probe"].inputs.v',
    "history.probe.all(e, e.outputs == null || e.outputs.v != 2)",
    "history._total < 3",
]
ODD = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from(["true", "false", "a", "secret", "x", "u1", "", "a\x00b", "\ud800", "1"])
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats()
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=6,
)


def _probe_guard(
    input_restriction: str, output_restriction: str, *, watched: bool, collect: bool = True, **options: Any
) -> Guard:
    spec = spec_text(
        f"""
        capabilities:
          probe:
            collect_results: {str(collect).lower()}
            input_restriction:
              assertion: {input_restriction!r}
            output_restriction:
              assertion: {output_restriction!r}
        """
    )
    return Guard.from_yaml(spec, observers=[Watching()] if watched else [], telemetry=False, **options)


@pytest.mark.parametrize("input_restriction", INPUT_RESTRICTIONS)
@settings(max_examples=40, deadline=None)
@given(
    output_restriction=st.sampled_from(OUTPUT_RESTRICTIONS),
    calls=st.lists(st.tuples(ODD, ODD), min_size=1, max_size=5),
    collect=st.booleans(),
)
def test_restrictions_asked_quickly_decide_what_the_flow_decides(
    input_restriction: str, output_restriction: str, calls: list[tuple[Any, Any]], collect: bool
) -> None:
    """Every odd input and output (``"false"`` for a bool, lists for strings, NaN, integers past 64 bits,
    NUL, a lone surrogate), every form of restriction (method calls, comments, macros, ``history``): the
    direct call returns, denies and records exactly what the flow does."""

    def run(watched: bool) -> str:
        guard = _probe_guard(input_restriction, output_restriction, watched=watched, collect=collect)
        with guard.engagement(user=U1) as eng:
            outcomes = [
                _outcome(
                    lambda value=value, output=output: guard.call(
                        "probe", {"v": value}, lambda v: {"v": output}
                    )
                )
                for value, output in calls
            ]
            return repr((outcomes, _recorded(eng)))  # repr: NaN is not equal to itself

    assert run(watched=False) == run(watched=True)


class _Raising:
    """A restriction's quick closure that fails as no engine would: the general check must decide."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __call__(self, variables: Any) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    "answer", [RuntimeError("engine bug"), RecursionError(), "true", 1, [True], None, False]
)
def test_a_quick_answer_other_than_true_is_left_to_the_general_check(
    answer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a closure's ``True`` passes quickly: an exception, ``"true"``, ``1``, ``[True]`` and the rest go
    to the general check, which evaluates from scratch and records one decision (here both restrictions
    hold there, so the call returns, with one allow decision each)."""
    guard = _probe_guard(
        'recent["probe"].inputs.v == 1', 'recent["probe"].outputs.v == 2', watched=False, collect=True
    )
    rule = guard.policy.capability_for("probe", "tool", ())
    assert rule is not None
    assert rule.input_assertion is not None
    assert rule.output_assertion is not None
    for assertion in (rule.input_assertion, rule.output_assertion):
        assert assertion.quick is not None  # the default backend offers one
        object.__setattr__(assertion, "quick", _Raising(answer))
    with guard.engagement(user=U1) as eng:
        assert guard.call("probe", {"v": 1}, lambda v: {"v": 2}) == {"v": 2}
        with pytest.raises(PolicyViolation):
            guard.call("probe", {"v": 5}, lambda v: {"v": 2})
        with pytest.raises(PolicyViolation):
            guard.call("probe", {"v": 1}, lambda v: {"v": 3})
        decisions = [[(d.rule, d.outcome, d.phase) for d in step.decisions] for step in eng.steps]
    allow_in = ("restriction", "allow", "input")
    allow_out = ("restriction", "allow", "output")
    begun = [("capability", "allow", "input")]
    assert decisions == [
        [*begun, allow_in, allow_out],
        [*begun, ("restriction", "deny", "input")],
        [*begun, allow_in, ("restriction", "deny", "output")],
    ]


class _LyingProgram:
    """Another backend's program with a ``quick`` of its own that says ``True`` to everything."""

    def __init__(self, program: Any) -> None:
        self._program = program

    def quick(self, variables: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)


class _LyingBackend:
    name = "lying"

    def compile(self, expression: str, declarations: Any) -> Any:
        from agentguard.cel import get_backend

        return _LyingProgram(get_backend().compile(expression, declarations))


def test_only_agentguards_own_programs_are_asked_quickly() -> None:
    """A pass taken from a quick closure skips ``evaluate``: another backend's program is asked through
    ``evaluate`` alone, whatever it calls ``quick``."""
    guard = _probe_guard(
        'recent["probe"].inputs.v == 1',
        'recent["probe"].outputs.v == 2',
        watched=False,
        cel_backend=_LyingBackend(),
    )
    rule = guard.policy.capability_for("probe", "tool", ())
    assert rule is not None
    assert rule.input_assertion is not None
    assert rule.input_assertion.quick is None
    with guard.engagement(user=U1):
        assert guard.call("probe", {"v": 1}, lambda v: {"v": 2}) == {"v": 2}
        with pytest.raises(PolicyViolation, match="assertion is false"):
            guard.call("probe", {"v": 5}, lambda v: {"v": 2})
        with pytest.raises(PolicyViolation, match="assertion is false"):
            guard.call("probe", {"v": 1}, lambda v: {"v": 3})


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_in_a_quick_input_check_leaves_no_call_behind(
    interrupt: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt raised while the input restriction is asked (under the record's lock) is not swallowed,
    and the call it interrupted is taken back, as any call refused before it ran: not in ``recent`` or
    ``history``, not in flight, and its attempt counted."""
    guard = _probe_guard(
        'recent["probe"].inputs.v == 1', 'recent["probe"].outputs.v == 2', watched=False, collect=True
    )
    rule = guard.policy.capability_for("probe", "tool", ())
    assert rule is not None
    assert rule.input_assertion is not None
    object.__setattr__(rule.input_assertion, "quick", _Raising(interrupt))
    ran: list[Any] = []
    with guard.engagement(user=U1) as eng:
        with pytest.raises(type(interrupt)):
            guard.call("probe", {"v": 1}, lambda v: ran.append(v))
        assert ran == []
        assert eng.state.in_flight == 0
        assert eng.view()["history"]["_total"] == 0
        assert "probe" not in eng.view()["recent"]
        assert [c.status for c in eng.state.calls] == ["denied"]
        assert eng.state.attempts(1) == ["probe"]


def test_an_interrupt_in_a_quick_output_check_withholds_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted while its output restriction is asked, a call that ran stays in ``history`` with its
    output withheld, and the interrupt propagates."""
    guard = _probe_guard('recent["probe"].inputs.v == 1', 'recent["probe"].outputs.v == 2', watched=False)
    rule = guard.policy.capability_for("probe", "tool", ())
    assert rule is not None
    assert rule.output_assertion is not None
    object.__setattr__(rule.output_assertion, "quick", _Raising(KeyboardInterrupt()))
    with guard.engagement(user=U1) as eng:
        with pytest.raises(KeyboardInterrupt):
            guard.call("probe", {"v": 1}, lambda v: {"v": 2})
        assert eng.state.in_flight == 0
        assert eng.view()["history"]["probe"] == [{"inputs": {"v": 1}, "outputs": None}]
        assert [(c.status, c.outputs) for c in eng.state.calls] == [("failed", None)]


@pytest.mark.parametrize("input_restriction", INPUT_RESTRICTIONS)
@settings(max_examples=15, deadline=None)
@given(
    output_restriction=st.sampled_from(OUTPUT_RESTRICTIONS),
    calls=st.lists(st.tuples(ODD, ODD), min_size=1, max_size=5),
)
def test_restrictions_asked_quickly_decide_what_the_flow_decides_under_asyncio(
    input_restriction: str, output_restriction: str, calls: list[tuple[Any, Any]]
) -> None:
    """The same comparison through ``acall`` and an async tool (the direct path's async driver)."""

    async def run(watched: bool) -> str:
        guard = _probe_guard(input_restriction, output_restriction, watched=watched)
        outcomes: list[tuple[Any, ...]] = []
        async with guard.engagement(user=U1) as eng:
            for value, output in calls:

                async def tool(v: Any, output: Any = output) -> Any:
                    await asyncio.sleep(0)
                    return {"v": output}

                try:
                    outcomes.append(("returned", await guard.acall("probe", {"v": value}, tool)))
                except PolicyViolation as exc:
                    outcomes.append(("denied", type(exc).__name__, str(exc)))
            return repr((outcomes, _recorded(eng)))

    assert asyncio.run(run(watched=False)) == asyncio.run(run(watched=True))


# -- a bound of the evaluation budget is hit once per check --------------------------------------------------


class _CountedMeter(Meter):
    """The fast path's meter, counting the evaluations it meters (one per run of a closure that loops)."""

    made = 0

    def __init__(self, budget: EvalBudget) -> None:
        type(self).made += 1
        super().__init__(budget)


@pytest.mark.parametrize("phase", ["input", "output"])
@pytest.mark.parametrize("watched", [False, True], ids=["direct", "flow"])
def test_a_bound_the_restriction_hits_is_hit_once_and_denies(
    phase: str, watched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comprehension over more elements than ``max_iterations`` stops with a failed evaluation. A direct
    call meets it in the quick closure under the lock, and the general check judges that error as it is; the
    general check itself evaluates once, and reads the reason shown to the caller from the same answer. Any
    second evaluation would run the same closure into the same bound (``max_seconds`` twice over, for a
    restriction that runs out of time)."""
    monkeypatch.setattr(fast_module, "Meter", _CountedMeter)
    monkeypatch.setattr(_CountedMeter, "made", 0)
    loops = 'recent["probe"].{part}.v.all(x, x > 0)'
    input_restriction = loops.format(part="inputs") if phase == "input" else "true"
    output_restriction = loops.format(part="outputs") if phase == "output" else "true"
    guard = _probe_guard(input_restriction, output_restriction, watched=False)
    if watched:
        guard.add_observer(Watching())
    many = list(range(1, 101))
    previous = set_eval_budget(EvalBudget(max_iterations=50))
    try:
        with guard.engagement(user=U1) as eng:
            with pytest.raises(RestrictionViolation, match="more than 50") as caught:
                guard.call(
                    "probe",
                    {"v": many if phase == "input" else [1]},
                    lambda v: {"v": many if phase == "output" else [1]},
                )
            (step,) = eng.steps
    finally:
        set_eval_budget(previous)
    assert caught.value.phase.value == phase
    assert _CountedMeter.made == 1
    denied = [d for d in step.decisions if d.outcome == "deny"]
    assert [(d.rule, d.phase) for d in denied] == [("restriction", phase)]
    assert "more than 50" in denied[0].reason
