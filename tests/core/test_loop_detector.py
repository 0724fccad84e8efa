"""The incremental short-circuit detector against its definition (decision 5).

:class:`~agentguard.record.LoopDetector` updates packed countdowns, one per block length, on every attempt;
a wrong bit there would let a loop run on. So every answer it gives is checked against the definition
written out plainly (:func:`_definition`) over the whole sequence of attempts, through every operation the
record performs on it: attempts asked about first or not, questions whose ``k`` or ``max_block`` change,
take-backs, names unseen for longer than the window, and windows narrower than a block.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import Guard, PolicyViolation, ShortCircuitViolation
from agentguard.record import LoopDetector, find_short_circuit, repeated_block
from tests.conftest import spec_text


def _definition(attempts: list[str], k: int, max_block: int) -> int | None:
    """The shortest block (at most ``max_block`` long) the attempts end with ``k`` times in a row."""
    if k < 1:
        return None
    for block in range(1, min(max_block, len(attempts) // k) + 1):
        tail = attempts[len(attempts) - k * block :]
        if all(tail[i] == tail[i % block] for i in range(len(tail))):
            return block
    return None


_names = st.sampled_from(["a", "b", "c", "d"])
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("attempt"), _names),
        st.tuples(st.just("ask"), _names, st.integers(1, 4), st.integers(1, 9)),
        st.tuples(st.just("ask-then-attempt"), _names, st.integers(1, 4), st.integers(1, 9)),
        st.tuples(st.just("attempt-unless-repeat"), _names, st.integers(1, 4), st.integers(1, 9)),
        st.tuples(st.just("take-back"), _names),
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(_operations, st.sampled_from([(2, 3), (3, 4), (3, 100)]))
def test_every_answer_is_the_definitions(
    operations: list[tuple[object, ...]], fixed: tuple[int, int]
) -> None:
    detector = LoopDetector(window=400)  # wider than any k * max_block asked: nothing is trimmed
    attempts: list[str] = []
    for operation in operations:
        kind, name = operation[0], str(operation[1])
        if kind == "attempt":
            detector.attempt(name)
            attempts.append(name)
        elif kind == "take-back":
            detector.take_back(name)
            for position in range(len(attempts) - 1, -1, -1):
                if attempts[position] == name:
                    del attempts[position]
                    break
        else:
            k, max_block = (int(operation[2]), int(operation[3])) if len(attempts) % 3 else fixed
            expected = _definition([*attempts, name], k, max_block)
            if kind == "attempt-unless-repeat":  # the direct path: counted only when it does not repeat
                assert detector.attempt_unless_repeat(name, k, max_block) == expected
                if expected is None:
                    attempts.append(name)
                continue
            assert detector.would_repeat(name, k, max_block) == expected
            if kind == "ask-then-attempt":
                detector.attempt(name)
                attempts.append(name)
    assert detector.last(6) == attempts[-6:]


@settings(max_examples=300, deadline=None)
@given(st.lists(_names, max_size=300), st.integers(1, 5), st.integers(1, 60))
def test_a_long_engagement_with_one_question(attempts: list[str], k: int, max_block: int) -> None:
    detector = LoopDetector(window=1)  # widened to k * max_block by the first question
    for index, name in enumerate(attempts):
        expected = _definition(attempts[: index + 1], k, max_block)
        assert detector.would_repeat(name, k, max_block) == expected
        detector.attempt(name)


def test_a_name_unseen_for_longer_than_any_block_starts_afresh() -> None:
    detector = LoopDetector(window=9)
    attempts = ["a", *"bc" * 3]  # "a", then 6 attempts of others: more than max_block (3) apart
    for name in attempts:
        detector.would_repeat(name, 3, 3)
        detector.attempt(name)
    assert detector.would_repeat("a", 3, 3) is None
    assert detector.would_repeat("b", 3, 2) == 2  # ... c b c b c b: the block "cb" three times


@pytest.mark.parametrize(("k", "block"), [(2, 1), (3, 7), (6, 7), (6, 10), (9, 33)])
def test_countdowns_rebuilt_inside_a_near_loop(k: int, block: int) -> None:
    # Attempts counted before any question (or a take-back) leave the countdowns to be rebuilt from the
    # sequence: here one attempt short of a loop, the longest agreement a rebuild can meet.
    names = [f"tool-{i}" for i in range(block)]
    attempts = ["x", *names * (k - 1), *names[:-1]]
    detector = LoopDetector(window=k * block)  # as a guard makes it: attempts before a question are kept
    for name in attempts:
        detector.attempt(name)
    assert detector.would_repeat(names[-1], k, block) == block
    assert detector.would_repeat(names[-1], k, block - 1 or 1) == _definition(
        [*attempts, names[-1]], k, block - 1 or 1
    )
    detector.attempt("x")
    detector.take_back("x")  # the countdowns are rebuilt again, on the same sequence
    assert detector.would_repeat(names[-1], k, block) == block
    assert detector.would_repeat("y", k, block) is None


def test_large_k_and_block_lengths() -> None:
    block = [f"tool-{i}" for i in range(250)]
    detector = LoopDetector(window=10)
    attempts = block * 4
    answers = []
    for name in attempts:
        answers.append(detector.would_repeat(name, 4, 250))
        detector.attempt(name)
    assert answers[-1] == 250
    assert answers[:-1] == [None] * (len(attempts) - 1)


def test_the_regex_definition_agrees() -> None:
    # The regex that was the detector, and find_short_circuit built on it, stay public and agree.
    assert repeated_block("ababab", 3, 100) == 2
    assert find_short_circuit(list("xababab"), 3, 2) == 2
    assert find_short_circuit(list("xababab"), 3, 1) is None


_GUARDED = spec_text(
    """
    capabilities:
      a:
        input_restriction:
          assertion: recent["a"].inputs.x < 10
      b:
        input_restriction:
          assertion: recent["b"].inputs.x < 10
      c:
    lifespan:
      short_circuit: {k}
    """
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "unknown"]), st.sampled_from([1, 10])), max_size=40),
    st.integers(2, 4),
    st.integers(1, 6),
    st.booleans(),
)
def test_a_guard_stops_a_loop_exactly_where_the_definition_does(
    calls: list[tuple[str, int]], k: int, max_block: int, asynchronous: bool
) -> None:
    """Through the guard: direct calls (one pass of the detector), calls its input restriction refuses and
    calls of a tool that is no capability (refused attempts count, decision 5), sync and async. The first
    attempt that ends the attempts with a block repeated k times is stopped, and so is every later one."""
    guard = Guard.from_yaml(_GUARDED.replace("{k}", str(k)), short_circuit_max_block=max_block)

    def tool(x: int) -> dict[str, int]:
        return {"x": x}

    attempts: list[str] = []
    stopped = False
    with guard.engagement():
        for name, x in calls:
            attempts.append(name)
            must_stop = stopped or _definition(attempts, k, max_block) is not None
            try:
                if asynchronous:
                    asyncio.run(guard.acall(name, {"x": x}, tool))
                else:
                    guard.call(name, {"x": x}, tool)
            except ShortCircuitViolation:
                assert must_stop, f"stopped at {attempts} with k={k}"
                stopped = True
                continue
            except PolicyViolation:
                assert not must_stop, f"not stopped at {attempts} with k={k}"
                continue
            assert not must_stop, f"not stopped at {attempts} with k={k}"
            assert name != "unknown"
            assert x < 10 or name == "c"
