"""Which parts of the Engagement view one compiled expression reads (decision 1, bound from the syntax tree)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentguard.cel import CelProgram

__all__ = ["QuickCheck", "ViewPlan"]

_ENTRY_PARTS = frozenset({"inputs", "outputs"})


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """Which parts of the Engagement view one expression reads.

    ``recent_keys`` / ``history_keys`` list the members an expression selects with a constant name
    (``recent["send-email"]``, ``history._total``); ``None`` means the variable is used as a whole
    (``history[x]`` with a computed key, ``size(history)``, ``history.exists(...)``, ...) and is bound whole.
    """

    variables: frozenset[str]
    recent_keys: frozenset[str] | None
    history_keys: frozenset[str] | None
    # For each name in ``recent_keys``: the parts of its entry read (``inputs`` / ``outputs``), or ``None``
    # for the whole entry. An input assertion on ``recent["x"].inputs`` is not given ``x``'s outputs.
    recent_fields: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    # The same, laid out for the per-call binding (EngagementState.bindings): which variables are read, and
    # each selected recent entry with the parts read of it, in a fixed order.
    reads_recent: bool = field(init=False, repr=False, compare=False)
    reads_user: bool = field(init=False, repr=False, compare=False)
    reads_started_at: bool = field(init=False, repr=False, compare=False)
    reads_history: bool = field(init=False, repr=False, compare=False)
    recent_parts: tuple[tuple[str, tuple[str, ...] | None], ...] = field(
        init=False, repr=False, compare=False
    )
    # (name, part) when the expression reads one part of one recent entry and nothing else of ``recent``
    # (``recent["send-email"].inputs.to``): the common shape, which the binding writes out.
    recent_one: tuple[str, str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        variables = self.variables
        object.__setattr__(self, "reads_recent", "recent" in variables)
        object.__setattr__(self, "reads_user", "user" in variables)
        object.__setattr__(self, "reads_started_at", "started_at" in variables)
        object.__setattr__(self, "reads_history", "history" in variables)
        parts = self.recent_fields
        layout = tuple(
            (key, tuple(sorted(wanted)) if (wanted := parts.get(key)) is not None else None)
            for key in sorted(self.recent_keys or ())
        )
        object.__setattr__(self, "recent_parts", layout)
        one = None
        if len(layout) == 1 and layout[0][1] is not None and len(layout[0][1]) == 1:
            one = (layout[0][0], layout[0][1][0])
        object.__setattr__(self, "recent_one", one)

    @classmethod
    def of(cls, program: CelProgram) -> ViewPlan:
        """The plan of a compiled expression, from what its syntax tree reads (:attr:`CelProgram.reads`).

        Never from the text: a comment, a string literal or a macro cannot hide a read from the tree.
        """
        reads = program.reads
        recent, history = reads.get("recent", {}), reads.get("history", {})
        fields: dict[str, frozenset[str] | None] = {}
        if recent is not None:
            for key, parts in recent.items():
                fields[key] = frozenset(parts) if parts is not None and parts.keys() <= _ENTRY_PARTS else None
        return cls(
            program.variables,
            frozenset(recent) if recent is not None else None,
            frozenset(history) if history is not None else None,
            fields,
        )


class QuickCheck(Protocol):
    """A check the record can ask under its own lock (an :class:`agentguard.policy.Assertion` is one): a closure
    of the view's variables, of which only a ``True`` answer counts (``quick`` is ``None`` when the check has
    no such closure), and the parts of the view it reads."""

    @property
    def quick(self) -> Callable[[Mapping[str, Any]], Any] | None: ...

    @property
    def plan(self) -> ViewPlan: ...
