"""The evaluation budget: how much work one CEL evaluation may do, on either engine.

Why: an assertion is a small program run on data the agent's tools produced. Pairwise concatenation over
60 earlier calls with 1 MB inputs (``history.all(a, history.all(b, size(a.inputs.x + b.inputs.x) > 0))``)
took 17.6 s and 6.1 GB, and the C++ engine held the GIL throughout; a comprehension nested in itself grows
exponentially with the expression's length. A bound hit is a failed evaluation, that is a failed assertion
(decision 4) with the reason.

The two engines are bounded differently, because they can be:

* ``cel-python`` is pure Python: a :class:`Meter` counts every comprehension iteration and every byte made
  by ``+``, and checks a deadline at each, while the evaluation runs (other threads keep the GIL turns they
  always get). The fast path in front of the C++ engine (:mod:`agentguard.cel._fast`) runs its
  comprehensions under a :class:`Meter` too, granted in batches (:meth:`Meter.grant`).
* ``cel-expr-python`` (cel-cpp) offers no iteration budget, deadline or memory limit through its Python
  binding, and cannot be interrupted. So the work is bounded before it starts: :class:`CostProfile` reads,
  from the checked syntax tree, how comprehensions nest and where strings are concatenated, and
  :meth:`CostProfile.check` multiplies that by the size of the values actually bound (the longest list or
  map, the longest string). An estimate over budget is refused without running the engine. The estimate
  errs high where it cannot know (a range computed by the expression, a concatenation whose operand types
  the checker left open), so a refusal can be spurious on very large data; it never lets an over-budget
  evaluation run on purpose. Not bounded: the cost of matching one regular expression (RE2: linear) and of
  converting the bound values (linear in their size).

The budget is process-wide (engines and compiled programs are shared)::

    from agentguard.cel import EvalBudget, set_eval_budget

    set_eval_budget(EvalBudget(max_iterations=100_000, max_bytes=64 * 1024 * 1024, max_seconds=1.0))
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentguard.cel._base import CelEvaluationError
from agentguard.cel._checked import CheckedExpr, Message, children, message, text

__all__ = [
    "CostProfile",
    "EvalBudget",
    "Exceeded",
    "Meter",
    "eval_budget",
    "measure",
    "metered",
    "set_eval_budget",
    "spent",
    "tick",
]


@dataclass(frozen=True)
class EvalBudget:
    """What one evaluation may cost.

    ``max_iterations``
        comprehension iterations (``exists``, ``all``, ``map``, ``filter``, ... each element once), all
        nesting levels together. Default 5,000,000. (cel-expr-python 0.1.3 also stops any evaluation by
        itself after 10,000 iterations, a limit its binding fixes: an estimate over this budget is refused
        before it runs, one under it may still meet the engine's own limit, with the same failed assertion.
        The comprehensions its fast path answers are not the engine's, and only this budget bounds them.)
    ``max_bytes``
        bytes made by concatenation (``+`` on strings, bytes and lists). Default 256 MiB.
    ``max_seconds``
        wall-clock time of one evaluation, checked at each iteration and concatenation on ``cel-python``,
        every few milliseconds in the comprehensions of the fast path; not by the C++ engine, which cannot
        be stopped once started (it is bounded by the two estimates). Default 5.
    """

    max_iterations: int = 5_000_000
    max_bytes: int = 256 * 1024 * 1024
    max_seconds: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_bytes", "max_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"EvalBudget.{name} must be positive, got {getattr(self, name)!r}")


_budget = EvalBudget()


def eval_budget() -> EvalBudget:
    """The budget every evaluation runs under."""
    return _budget


def set_eval_budget(budget: EvalBudget) -> EvalBudget:
    """Make ``budget`` the budget of every later evaluation; return the one it replaces."""
    global _budget
    previous, _budget = _budget, budget
    return previous


# -- cel-python: counted while it runs ----------------------------------------------------------------------


class Meter:
    """The work one evaluation has done so far. Once over budget, it stays over: every later tick raises."""

    __slots__ = ("_batch", "_budget", "_deadline", "_granted_at", "bytes", "exceeded", "iterations")

    def __init__(self, budget: EvalBudget) -> None:
        self._budget = budget
        now = time.monotonic()
        self._deadline = now + budget.max_seconds
        self.iterations = 0
        self.bytes = 0
        self.exceeded: str | None = None
        self._batch = _FIRST_BATCH
        self._granted_at = now

    def check(self) -> None:
        budget = self._budget
        if self.exceeded is None:
            if self.iterations > budget.max_iterations:
                self.exceeded = (
                    f"more than {budget.max_iterations} comprehension iterations (EvalBudget.max_iterations)"
                )
            elif self.bytes > budget.max_bytes:
                self.exceeded = (
                    f"more than {budget.max_bytes} bytes made by concatenation (EvalBudget.max_bytes)"
                )
            elif time.monotonic() > self._deadline:
                self.exceeded = f"more than {budget.max_seconds:g} s (EvalBudget.max_seconds)"
        if self.exceeded is not None:
            raise Exceeded(self.exceeded)

    def grant(self, wanted: int) -> int:
        """Charge the next iterations of a loop that wants ``wanted`` more, a batch of them and no more than
        the budget has left, check the deadline, and return how many were charged. Raises :class:`Exceeded`
        when the budget has none left: the loop needed one more than ``max_iterations``.

        Why batches: a loop that asks once per batch is counted exactly (with :meth:`refund` for the ones it
        did not run) at a fraction of the cost of a call per iteration, and still stops at the limit. The
        batch grows while the grants come quickly and shrinks when they do not (an iteration may scan a long
        list or string), so that the deadline is checked about every :data:`_PACE` seconds."""
        budget = self._budget
        granted = max(1, min(wanted, self._batch, budget.max_iterations - self.iterations))
        self.iterations += granted
        now = time.monotonic()
        if self.iterations > budget.max_iterations or now > self._deadline or self.exceeded is not None:
            self.check()  # says which bound, and raises
        if now - self._granted_at > _PACE:  # the next batch, paced by the time since the last grant
            self._batch = max(1, self._batch // 4)
        elif self._batch < _LAST_BATCH:
            self._batch *= 2
        self._granted_at = now
        return granted

    def refund(self, count: int) -> None:
        """Give back ``count`` granted iterations the loop did not run (it stopped early)."""
        self.iterations -= count

    def failure(self, source: str) -> CelEvaluationError:
        """The failed evaluation of ``source`` once this meter is over budget (:attr:`exceeded`)."""
        return CelEvaluationError(source, f"evaluation budget exceeded: {self.exceeded}")


_FIRST_BATCH, _LAST_BATCH = 8, 1024
_PACE = 0.005
"""Seconds between the deadline checks of :meth:`Meter.grant`, about (one iteration may take longer)."""


class Exceeded(Exception):
    """Raised inside the evaluation to stop it; the evaluation then fails with the meter's reason
    (:meth:`Meter.failure`)."""


_METER: ContextVar[Meter | None] = ContextVar("agentguard_cel_meter", default=None)


def tick() -> None:
    """One comprehension iteration of the evaluation in progress (if it is metered)."""
    meter = _METER.get()
    if meter is not None:
        meter.iterations += 1
        meter.check()


def spent(value: Any) -> Any:
    """Count ``value``, just made by a concatenation, against the evaluation in progress; return it."""
    meter = _METER.get()
    if meter is not None and isinstance(value, str | bytes | list | tuple):
        meter.bytes += len(value)
        meter.check()
    return value


@contextmanager
def metered(source: str) -> Iterator[Meter]:
    """Meter the evaluation of ``source`` run inside; raise its failure if it went over budget.

    The engine may catch the exception that stops it and carry on with an error value (``true || error``
    is ``true`` in CEL), so the meter, not the engine's answer, has the last word.
    """
    meter = Meter(_budget)
    token = _METER.set(meter)
    try:
        yield meter
    except Exceeded:
        pass
    finally:
        _METER.reset(token)
    if meter.exceeded is not None:
        raise meter.failure(source)


# -- cel-expr-python: estimated before it runs --------------------------------------------------------------

_COPYING_ADDS = frozenset({"add_string", "add_bytes"})
_ADDS = _COPYING_ADDS | {"add_list"}


@dataclass(frozen=True, slots=True)
class _Loop:
    size: int | None  # elements of a literal range; None: as long as the largest list or map bound
    computed: bool  # the range is computed by the expression (not a path into the data): it may have grown
    body: _Cost


@dataclass(frozen=True, slots=True)
class _Cost:
    loops: tuple[_Loop, ...] = ()
    copies: int = 0  # operands of string / bytes concatenations, each up to the longest string bound


class CostProfile:
    """How an expression's work grows with its data, read from its checked syntax tree (see the module)."""

    __slots__ = ("_cost", "_growth", "_last", "trivial")

    def __init__(self, serialized: bytes) -> None:
        tree = CheckedExpr(serialized)
        walk = _Walk(tree.overloads)
        self._cost = walk.cost(tree.expr) if tree.expr is not None else _Cost()
        # Each concatenation that is not a comprehension's own append can at most double a value a later
        # step reuses (through cel.bind or an accumulator), so the longest value, and a computed range, may
        # grow by 2 ** adds: pessimistic, and 1 for the many expressions without one.
        self._growth = 2 ** min(walk.adds, 60)
        self.trivial = not self._cost.loops and not self._cost.copies
        # (largest, iterations, copies) of the last check: the estimate depends on the largest list or map
        # only, which is the same from one request to the next of a kind.
        self._last = (-1, 0, 0)

    def check(self, source: str, sizes: tuple[int, int], budget: EvalBudget | None = None) -> None:
        """Raise :class:`CelEvaluationError` if evaluating on data of ``sizes`` (:func:`measure` of the
        bound values) could go over ``budget``. Not needed when :attr:`trivial`: nothing grows with data."""
        if self.trivial:
            return
        budget = budget or _budget
        longest, largest = sizes
        last = self._last
        if last[0] == largest:
            iterations, copies = last[1], last[2]
        else:
            iterations = _iterations(self._cost, largest, self._growth)
            copies = _copies(self._cost, largest, self._growth)
            self._last = (largest, iterations, copies)
        if iterations > budget.max_iterations:
            raise CelEvaluationError(
                source,
                f"evaluation budget: on this data it could take {iterations} comprehension iterations, more "
                f"than {budget.max_iterations} (EvalBudget.max_iterations); not evaluated",
            )
        made = copies * longest * self._growth
        if made > budget.max_bytes:
            raise CelEvaluationError(
                source,
                f"evaluation budget: on this data its concatenations could make {made} bytes, more than "
                f"{budget.max_bytes} (EvalBudget.max_bytes); not evaluated",
            )


class _Walk:
    """Reads a :class:`_Cost` off a syntax tree and counts the additions that can grow a value."""

    def __init__(self, overloads: Mapping[int, frozenset[str]]) -> None:
        self._overloads = overloads
        self.adds = 0

    def cost(self, buf: bytes, accumulator: str | None = None) -> _Cost:
        expr = message(buf)
        if 9 in expr:
            loop = message(expr[9][0])
            outside = self._sum([*loop.get(2, []), *loop.get(4, []), *loop.get(7, [])], accumulator)
            body = self._sum([*loop.get(5, []), *loop.get(6, [])], text(loop, 3))
            ranged = message(loop[2][0]) if 2 in loop else {}
            size = len(message(ranged[7][0]).get(1, [])) if 7 in ranged else None
            return _Cost((*outside.loops, _Loop(size, not _is_path(ranged), body)), outside.copies)
        below = [child for child, _ in children(expr, frozenset())]
        if 6 not in expr or text(message(expr[6][0]), 2) != "_+_":
            return self._sum(below, accumulator)
        operands = message(expr[6][0]).get(3, [])
        if accumulator is not None and operands and _is_identifier(operands[0], accumulator):
            # How map and filter build their result: one element, a reference, appended per iteration.
            return self._sum(operands[1:], accumulator)
        overloads = self._overloads.get(expr.get(2, [0])[0])
        inner = self._sum(below, accumulator)
        if overloads is None or overloads & _ADDS:
            self.adds += 1
        if overloads is None or overloads & _COPYING_ADDS:
            return _Cost(inner.loops, inner.copies + len(operands))
        return inner

    def _sum(self, nodes: list[bytes], accumulator: str | None) -> _Cost:
        loops: list[_Loop] = []
        copies = 0
        for child in nodes:
            found = self.cost(child, accumulator)
            loops += found.loops
            copies += found.copies
        return _Cost(tuple(loops), copies)


def _is_identifier(buf: bytes, name: str) -> bool:
    expr = message(buf)
    return 4 in expr and text(message(expr[4][0]), 1) == name


def _is_path(expr: Message) -> bool:
    """Whether ``expr`` is a variable or a selection from one (``history``, ``history["lookup"].x``)."""
    while True:
        if 5 in expr:  # a.field
            expr = message(message(expr[5][0])[1][0])
            continue
        call = message(expr[6][0]) if 6 in expr else {}
        operands = call.get(3, [])
        if text(call, 2) == "_[_]" and len(operands) == 2 and 3 in message(operands[1]):  # a["key"]
            expr = message(operands[0])
            continue
        return 4 in expr


def _range(loop: _Loop, largest: int, growth: int) -> int:
    if loop.size is not None:
        return loop.size
    return largest * growth if loop.computed else largest


def _iterations(cost: _Cost, largest: int, growth: int) -> int:
    return sum(
        _range(loop, largest, growth) * (1 + _iterations(loop.body, largest, growth)) for loop in cost.loops
    )


def _copies(cost: _Cost, largest: int, growth: int) -> int:
    return cost.copies + sum(
        _range(loop, largest, growth) * _copies(loop.body, largest, growth) for loop in cost.loops
    )


def measure(values: Iterable[Any]) -> tuple[int, int]:
    """The longest string or bytes and the largest list or map anywhere in ``values`` (the bound values)."""
    longest = largest = 0
    stack = list(values)
    while stack:
        value = stack.pop()
        kind: type | None = type(value)
        if kind is not str and kind is not dict and kind is not list:  # the common JSON types need no check
            kind = _kind(value)
        if kind is str:
            if len(value) > longest:
                longest = len(value)
        elif kind is dict:
            if len(value) > largest:
                largest = len(value)
            stack.extend(value.values())
        elif kind is list:
            if len(value) > largest:
                largest = len(value)
            stack.extend(value)
    return longest, largest


def _kind(value: Any) -> type | None:
    """How :func:`measure` counts ``value``: as a string (bytes too), a map (any Mapping), a list (a tuple
    too), or not at all."""
    if isinstance(value, str | bytes):
        return str
    if isinstance(value, Mapping):
        return dict
    if isinstance(value, list | tuple):
        return list
    return None
