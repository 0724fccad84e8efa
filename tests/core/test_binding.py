"""Argument binding: by parameter name, defaults applied; one Binder per code-and-defaults."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from agentguard._binding import Binder


def make(default: int) -> Any:
    def runner(x: int, y: int = default) -> int:
        return x + y

    return runner


def test_closures_of_the_same_code_share_a_binder() -> None:
    assert Binder.of(make(1)) is Binder.of(make(1))
    assert Binder.of(make(1)) is not Binder.of(make(2))  # different defaults, different binding
    assert Binder.of(make(2)).bind((3,), {}) == {"x": 3, "y": 2}


def test_wrapped_and_callable_objects_are_read_each_time() -> None:
    base = make(1)

    @functools.wraps(base)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        return int(base(*args, **kwargs))

    assert Binder.of(wrapper).bind((1,), {}) == {"x": 1, "y": 1}  # follows __wrapped__ to the signature

    class Tool:
        def __call__(self, q: str) -> str:
            return q

    assert Binder.of(Tool()).bind(("a",), {}) == {"q": "a"}


def test_flat_inputs_reach_a_var_keyword_runner() -> None:
    def runner(**kwargs: Any) -> Any:
        return kwargs

    assert Binder.of(runner).to_args({"to": "a", "body": "b"}) == ((), {"to": "a", "body": "b"})


def test_a_runner_taking_only_keywords_gets_the_inputs_as_they_are() -> None:
    """The host's runner (``fn(**kwargs)`` alone) is handed the inputs as they are, whatever their names: an
    input named like its ``**`` parameter is one more keyword, never spread (the model names the inputs, and
    a spread mapping reached the function as keywords no assertion over the inputs saw)."""

    def runner(**extra: Any) -> Any:
        return extra

    binder = Binder.of(runner)
    inputs = {"to": "a", "body": ["b"], "": None}
    assert binder.to_args(inputs) == ((), inputs)
    recorded = binder.bind((), {"to": "a"})
    assert recorded == {"to": "a"}
    assert binder.to_args(recorded) == ((), {"to": "a"})
    nested = {"extra": {"bcc": "eve"}, "to": "a"}
    assert binder.to_args(nested) == ((), nested)


def test_the_keywords_of_a_double_star_parameter_are_recorded_flat_and_passed_as_recorded() -> None:
    def tool(to: str, /, *items: int, cc: str = "", **extra: Any) -> Any:
        return to, items, cc, extra

    binder = Binder.of(tool)
    recorded = binder.bind(("a", 1, 2), {"bcc": "eve", "extra": {"x": 1}})
    assert recorded == {"to": "a", "items": (1, 2), "cc": "", "bcc": "eve", "extra": {"x": 1}}
    args, kwargs = binder.to_args(recorded)
    assert tool(*args, **kwargs) == ("a", (1, 2), "", {"bcc": "eve", "extra": {"x": 1}})
    with pytest.raises(TypeError, match="positional-only"):
        binder.bind(("a",), {"to": "b"})
    with pytest.raises(TypeError, match="must be a list"):
        binder.to_args({"to": "a", "items": "12"})

    def strict(a: int, *rest: int) -> Any:
        return a, rest

    with pytest.raises(TypeError, match="no parameter takes it"):
        Binder.of(strict).to_args({"a": 1, "b": 2})


def test_closures_without_defaults_share_a_binder_with_their_code() -> None:
    def make_plain() -> Any:
        def runner(q: str) -> str:
            return q

        return runner

    def make_keyword(default: str) -> Any:
        def runner(*, q: str = default) -> str:
            return q

        return runner

    assert Binder.of(make_plain()) is Binder.of(make_plain())
    assert Binder.of(make_keyword("a")) is Binder.of(make_keyword("a"))
    assert Binder.of(make_keyword("a")) is not Binder.of(make_keyword("b"))
    assert Binder.of(make_keyword("b")).bind((), {}) == {"q": "b"}
