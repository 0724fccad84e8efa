"""A tool's inputs and outputs are bounded (``ValueLimits``): nested too deep, or holding too many values (a
value that holds itself holds endlessly many), a call is denied and an output withheld, both recorded.

Before the bounds, tool arguments nested 500 deep -- JSON that ``json.loads`` reads, so a model can send it --
failed the call with a ``RecursionError`` and nothing recorded, and an output that held itself made the guard
loop for good. Both paths of the pipeline are tested: the direct one (no observer) and the flow (one watches).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import ConfigurationError, Guard, Outcome, RestrictionViolation, ValueLimits
from agentguard.observers import Observer
from agentguard.record import NOT_PLAIN, ValueTooComplex, is_plain, plain_copy, to_plain, unfaithful
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      echo:
        output_restriction:
          assertion: recent["echo"].outputs.ok == true
      free:
    """
)


class Watching(Observer):
    """Watches every decision, so that its guard runs every call as a flow."""

    def decision(self, state: Any, step: Any, decision: Any) -> None:
        return None


PATHS = ["direct", "flow"]


def _guard(path: str, **options: Any) -> tuple[Guard, list[Any]]:
    observers = [Watching()] if path == "flow" else []
    guard = Guard.from_yaml(SPEC, observers=observers, telemetry=False, **options)
    ran: list[Any] = []

    @guard.tool(name="echo")
    def echo(x: Any = None, out: str | None = None) -> Any:
        ran.append(x)
        return OUTPUTS[out]() if out is not None else {"ok": True}

    @guard.tool(name="free")
    def free(x: Any = None) -> Any:
        ran.append(x)
        return Box([x])

    return guard, ran


def nested(depth: int) -> Any:
    """``depth`` lists in one another, around a string: what JSON text of that depth reads as."""
    return json.loads("[" * depth + '"x"' + "]" * depth)


def _blocked(eng: Any) -> list[str]:
    return [d.reason for step in eng.state.steps for d in step.decisions if d.outcome is Outcome.DENY]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("depth", [101, 500, 800])
def test_inputs_nested_too_deep_are_a_recorded_denial_and_the_tool_does_not_run(
    path: str, depth: int
) -> None:
    guard, ran = _guard(path)
    with guard.engagement() as eng, pytest.raises(RestrictionViolation, match=r"ValueLimits\.max_depth"):
        guard.call("echo", {"x": nested(depth)})
    assert ran == []
    (reason,) = _blocked(eng)
    assert "nested deeper than 100 levels" in reason
    assert eng.view()["history"]["_total"] == 0  # taken back, as any call refused before it ran


@pytest.mark.parametrize("path", PATHS)
def test_an_output_nested_too_deep_is_withheld_and_recorded(path: str) -> None:
    guard, ran = _guard(path)
    with guard.engagement() as eng, pytest.raises(RestrictionViolation, match=r"the output is nested deeper"):
        guard.call("echo", {"x": 1, "out": "deep"})
    assert ran == [1]
    (reason,) = _blocked(eng)
    assert "ValueLimits.max_depth" in reason
    assert eng.state.calls[-1].outputs is None


def _itself(kind: str) -> Any:
    if kind == "dict":
        d: dict[str, Any] = {"ok": True}
        d["self"] = d
        return d
    if kind == "twice":  # each level holds the value twice: 2**depth values in all
        t: dict[str, Any] = {"ok": True}
        t["a"] = t["b"] = t
        return t
    if kind == "list":
        loop: list[Any] = []
        loop.append(loop)
        return {"ok": True, "rows": loop}
    shared: Any = "leaf"  # no cycle, but shared 40 levels deep: 2**40 values written out
    for _ in range(40):
        shared = [shared, shared]
    return {"ok": True, "rows": shared}


class LyingMapping(Mapping[str, Any]):
    """A mapping whose ``len()`` says 1 while iterating it yields ``"ok"`` and ``size`` keys more (``None``: it
    never ends)."""

    def __init__(self, size: int | None) -> None:
        self.size = size

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        yield "ok"
        yield from (f"k{i}" for i in (itertools.count() if self.size is None else range(self.size)))

    def __getitem__(self, key: str) -> Any:
        return True


class LyingList(list[Any]):
    """A list that holds nothing (its ``len()`` is the builtin's: 0) and iterates as ``size`` ints (``None``:
    never ends)."""

    def __init__(self, size: int | None) -> None:
        super().__init__()
        self.size = size

    def __iter__(self) -> Iterator[Any]:
        return iter(itertools.count() if self.size is None else range(self.size))


class LyingDict(dict[str, Any]):
    """A dict of ``"ok"`` and ``size`` keys more, whose ``len()`` says 1."""

    def __init__(self, size: int) -> None:
        super().__init__({"ok": True}, **{f"k{i}": i for i in range(size)})

    def __len__(self) -> int:
        return 1


LYING: dict[str, Callable[[int], Any]] = {
    "mapping": LyingMapping,
    "list": lambda size: {"ok": True, "rows": LyingList(size)},
    "dict": LyingDict,
}
"""Values whose containers' ``len()`` is not what iterating them yields, by kind: ``size`` values more."""

ENDLESS: dict[str, Callable[[], Any]] = {
    "mapping": lambda: LyingMapping(None),
    "list": lambda: {"ok": True, "rows": LyingList(None)},
}
"""Values holding a container whose iteration never ends, by kind."""

OUTPUTS: dict[str, Callable[[], Any]] = {
    "deep": lambda: {"ok": True, "rows": nested(500)},
    "ten": lambda: {"ok": True, "rows": list(range(10))},
    **{kind: lambda kind=kind: _itself(kind) for kind in ("dict", "twice", "list", "shared")},
    **{f"lying-{kind}": functools.partial(lying, 10_000) for kind, lying in LYING.items()},
    **{f"endless-{kind}": endless for kind, endless in ENDLESS.items()},
}
"""What the tool returns, by name: built by the tool, so that only its output is beyond the limits."""


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["dict", "twice", "list", "shared"])
def test_an_output_that_holds_itself_or_is_endlessly_shared_is_withheld_not_looped_on(
    path: str, kind: str
) -> None:
    guard, _ = _guard(path)
    outcome: list[BaseException] = []

    def call() -> None:
        with guard.engagement():
            try:
                guard.call("echo", {"x": 1, "out": kind})
            except BaseException as exc:
                outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(60)  # liveness, not speed: the guard looped for good on such a value
    assert not worker.is_alive(), "the guard did not finish the call"
    (exc,) = outcome
    assert isinstance(exc, RestrictionViolation)
    assert "ValueLimits" in str(exc)


@dataclass
class Box:
    """An object: the checks see the fields its conversion gives, and only its conversion looks inside."""

    content: Any


@pytest.mark.parametrize("path", PATHS)
def test_an_object_that_converts_beyond_the_limits_is_denied_not_checked_as_less(path: str) -> None:
    """``unfaithful`` does not look inside objects; their conversion does, and a conversion beyond the limits
    is the denial. (The record had no inputs to show for such a call: a spec with nothing to check on a
    capability let the tool run.)"""
    guard, ran = _guard(path)
    with guard.engagement() as eng:
        with pytest.raises(RestrictionViolation, match=r"an input is nested deeper than 100 levels"):
            guard.call("free", {"x": Box(nested(150))})
        with pytest.raises(RestrictionViolation, match=r"the output is nested deeper than 100 levels"):
            guard.call("free", {"x": nested(99)})  # 100 levels with the inputs; the output, 101
        assert guard.call("free", {"x": nested(10)}) == {"content": [nested(10)]}
    assert len(ran) == 2  # the tool ran for the two within the limits
    assert len(_blocked(eng)) == 2
    assert eng.view()["history"]["_total"] == 2


@pytest.mark.parametrize("path", PATHS)
def test_the_limits_are_the_guards_and_hold_alike_on_both_paths(path: str) -> None:
    guard, ran = _guard(path, value_limits=ValueLimits(max_depth=3, max_values=10))
    with guard.engagement():
        guard.call("echo", {"x": [[1]]})  # the inputs, a list, a list: 3 levels
        with pytest.raises(RestrictionViolation, match=r"max_depth"):
            guard.call("echo", {"x": [[[1]]]})
        guard.call("echo", {"x": list(range(9))})  # 1 + 9 values
        with pytest.raises(RestrictionViolation, match=r"more than 10 values"):
            guard.call("echo", {"x": list(range(10))})
        with pytest.raises(RestrictionViolation, match=r"more than 10 values"):
            guard.call("echo", {f"k{i}": i for i in range(11)} | {"x": 0})
        with pytest.raises(RestrictionViolation, match=r"the output holds more than 10 values"):
            guard.call("echo", {"x": 0, "out": "ten"})
    assert ran == [[[1]], list(range(9)), 0]


def test_an_async_call_is_bounded_too() -> None:
    guard, ran = _guard("flow")

    async def main() -> None:
        with guard.engagement():
            with pytest.raises(RestrictionViolation, match=r"max_depth"):
                await guard.acall("echo", {"x": nested(300)})
            with pytest.raises(RestrictionViolation, match=r"the output"):
                await guard.acall("echo", {"x": 2, "out": "dict"})

    asyncio.run(main())
    assert ran == [2]


def test_a_call_recorded_after_the_fact_beyond_the_limits_is_refused_whole() -> None:
    guard, _ = _guard("flow")
    with guard.engagement() as eng:
        with pytest.raises(ValueTooComplex, match="max_depth"):
            eng.record_call("echo", {"x": nested(150)})
        with pytest.raises(ValueTooComplex, match="max_values"):
            eng.record_call("echo", {"x": 1}, _itself("shared"))
        eng.record_call("echo", {"x": nested(20)}, {"ok": True})
    assert [call.inputs for call in eng.state.calls] == [{"x": nested(20)}]
    assert len(eng.state.steps) == 1


@pytest.mark.parametrize(
    "options",
    [{"max_depth": 0}, {"max_depth": 201}, {"max_depth": True}, {"max_values": 0}, {"max_values": 1.5}],
)
def test_a_limit_that_bounds_nothing_or_too_much_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="ValueLimits"):
        ValueLimits(**options)


def test_the_guard_takes_only_a_value_limits() -> None:
    with pytest.raises(ConfigurationError, match="ValueLimits"):
        Guard.from_yaml(SPEC, value_limits={"max_depth": 3})


@settings(max_examples=200, deadline=None)
@given(
    depth=st.integers(0, 12),
    width=st.integers(0, 4),
    max_depth=st.integers(1, 8),
    max_values=st.integers(1, 40),
)
def test_every_reading_of_a_value_agrees_on_its_limits(
    depth: int, width: int, max_depth: int, max_values: int
) -> None:
    """``is_plain``, ``plain_copy``, ``unfaithful`` and ``to_plain`` draw the same line: a value is within the
    limits for one exactly when it is for all (as JSON, and as tuples that only conversion makes JSON)."""
    limits = ValueLimits(max_depth=max_depth, max_values=max_values)
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] * max(width, 1)
    for candidate in (value, {"v": value}):
        within = unfaithful(candidate, limits) is None
        assert is_plain(candidate, limits) is within
        assert (plain_copy(candidate, limits=limits) is not NOT_PLAIN) is within
        if within:
            assert to_plain(candidate, limits=limits) == candidate
        else:
            with pytest.raises(ValueTooComplex):
                to_plain(candidate, limits=limits)
        assert (unfaithful(_tupled(candidate), limits) is None) is within


def _tupled(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    if isinstance(value, dict):
        return {k: _tupled(v) for k, v in value.items()}
    return value


# -- a container's own len() is not its size ----------------------------------------------------------------
# ValueLimits.max_values was counted with len() and the container then iterated: a mapping or list subclass
# whose __len__ lied had any number of values converted, judged and delivered, and one whose iteration never
# ends was converted for ever. Builtins keep the len() fast path: their len() is their size.

HUNDRED = ValueLimits(max_values=100)


@pytest.mark.parametrize("kind", LYING)
def test_a_container_whose_len_lies_is_counted_as_it_is_iterated(kind: str) -> None:
    value = LYING[kind](10_000)
    assert unfaithful(value, HUNDRED) == "holds more than 100 values (ValueLimits.max_values)"
    with pytest.raises(ValueTooComplex, match=r"holds more than 100 values \(ValueLimits.max_values\)"):
        to_plain(value, limits=HUNDRED)
    small = LYING[kind](3)  # within the limits: converted as iterating it reads, whatever len() said
    assert unfaithful(small, HUNDRED) is None
    assert to_plain(small, limits=HUNDRED) == to_plain(json.loads(json.dumps(_read(small))))


def _read(value: Any) -> Any:
    """``value`` as iterating it reads: what the checks must see of it."""
    if isinstance(value, Mapping):
        return {key: _read(value[key]) for key in iter(value)}
    if isinstance(value, list):
        return [_read(item) for item in iter(value)]
    return value


def _finishes(fn: Callable[[], Any]) -> Any:
    """``fn()``'s result or exception, from a daemon thread given 30 s: liveness, not speed (it never
    finished)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "never finished"
    return outcome[0]


@pytest.mark.parametrize("kind", ENDLESS)
def test_a_container_whose_iteration_never_ends_meets_max_values(kind: str) -> None:
    assert _finishes(lambda: unfaithful(ENDLESS[kind](), HUNDRED)) == (
        "holds more than 100 values (ValueLimits.max_values)"
    )
    converted = _finishes(lambda: to_plain(ENDLESS[kind](), limits=HUNDRED))
    assert isinstance(converted, ValueTooComplex)
    assert "more than 100 values" in str(converted)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("out", [*(f"lying-{k}" for k in LYING), *(f"endless-{k}" for k in ENDLESS)])
def test_an_output_whose_len_lies_or_never_ends_is_withheld(path: str, out: str) -> None:
    guard, ran = _guard(path, value_limits=HUNDRED)

    def call() -> Any:
        with guard.engagement() as eng:
            try:
                return guard.call("echo", {"x": 1, "out": out})
            except RestrictionViolation as exc:
                return exc, _blocked(eng), eng.state.calls[-1].outputs

    outcome = _finishes(call)
    assert isinstance(outcome, tuple), f"delivered {type(outcome).__name__}"
    exc, blocked, kept = outcome
    assert "the output holds more than 100 values (ValueLimits.max_values)" in exc.reason
    assert blocked == [exc.reason]
    assert kept is None
    assert ran == [1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", LYING)
def test_inputs_whose_len_lies_are_denied_and_the_tool_does_not_run(path: str, kind: str) -> None:
    guard, ran = _guard(path, value_limits=HUNDRED)
    with (
        guard.engagement() as eng,
        pytest.raises(RestrictionViolation, match=r"an input holds more than 100"),
    ):
        guard.call("free", {"x": LYING[kind](10_000)})
    assert ran == []
    assert len(_blocked(eng)) == 1
