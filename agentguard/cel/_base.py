"""The one small interface every CEL engine sits behind.

agentguard compiles each CEL expression of a spec once, at load time, and evaluates it many times, once per
guarded step. A backend turns source text into a :class:`CelProgram`; a program evaluates against a plain
Python mapping of variables (JSON-like values: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
``list``, ``dict`` with ``str`` keys, and ``datetime`` for timestamps) and returns a plain Python value.

Why this shape: the Engagement view that assertions read can be large (``history`` of thousands of calls),
and converting it into engine values dominates evaluation time. A program therefore reports which top-level
variables it reads (:attr:`CelProgram.variables`), so that callers bind only those.

Example::

    from agentguard.cel import get_backend, VarType

    backend = get_backend()                      # default: Google's cel-expr-python
    prog = backend.compile('recent["send-email"].inputs.to.endsWith("@corp.com")',
                           {"recent": VarType.DYN})
    prog.evaluate({"recent": {"send-email": {"inputs": {"to": "bob@corp.com"}}}})   # -> True
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "CelBackend",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CelProgram",
    "Reads",
    "VarType",
    "offers_quick",
    "quick_closure",
    "redacted",
]

Reads = Mapping[str, "Reads"] | None
"""What an expression reads of one value: ``None`` for the whole value, else the members it selects by a
constant name (``recent["send-email"]``, ``history._total``), each with what it reads of that member."""


class VarType(enum.Enum):
    """Declared type of a top-level variable. Engagement fields are ``DYN`` except ``started_at``."""

    DYN = "dyn"
    TIMESTAMP = "timestamp"
    STRING = "string"
    INT = "int"
    BOOL = "bool"


class CelError(Exception):
    """Base class of CEL problems. Not part of the public error tree: the policy layer translates these."""


@dataclass(eq=False)
class CelCompileError(CelError):
    """The expression does not parse or does not type-check.

    ``line`` and ``column`` are 1-based positions inside the expression text (``None`` when the engine does
    not say); ``message`` is the engine's reason without position decoration.
    """

    expression: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = f" at {self.line}:{self.column}" if self.line is not None else ""
        return f"CEL compile error{where}: {self.message}"


@dataclass(eq=False)
class CelEvaluationError(CelError):
    """Evaluation failed at run time (no such key, type mismatch, division by zero, ...)."""

    expression: str
    message: str

    def __str__(self) -> str:
        return f"CEL evaluation error: {self.message}"


_QUOTED = re.compile(r"""(["'])((?:(?!\1)[^\\]|\\.)*)\1""")
# Where an engine's message stops being its own words: a quote, a bracket, a colon, an equals sign, or a
# number standing alone (``int64`` is a word, `` -92...`` a value).
_DATA_START = re.compile(r"""["'`{}\[\]():=<>]|(?<![A-Za-z_])[-+]?\d""")


def redacted(message: str, source: str) -> str:
    """An engine's evaluation error without the values it quotes.

    Engines put the data they failed on into their messages (``Key not found in map : "SECRET-42"``,
    ``Index error: index=5 size=1``, a regular expression taken from the data, the repr of a whole map with
    quotes nested in quotes). A withheld output must not reach a denial reason, a span or a log through them.
    So only the engine's own words before anything that may be data are kept, and a quoted name only where it
    is written in the expression ``source`` itself (a field or key the spec names, which says what was missing
    without saying anything the spec does not). The operand *types* of "No matching overloads found" hold no
    value and are kept.
    """

    def written(quoted: str) -> bool:
        return bool(quoted) and re.search(rf"(?<![\w-]){re.escape(quoted)}(?![\w-])", source) is not None

    text = message.strip()
    if text.startswith("No matching overloads found"):
        return _unquoted_prefix(_QUOTED.sub(lambda m: m.group(0) if written(m.group(2)) else "…", text))
    cut = _DATA_START.search(text)
    head = (text if cut is None else text[: cut.start()]).strip() or "evaluation error"
    names = list(dict.fromkeys(m.group(0) for m in _QUOTED.finditer(text) if written(m.group(2))))
    return f"{head}: {', '.join(names)}" if names else head


def _unquoted_prefix(text: str) -> str:
    """``text`` up to its first quote that does not open a complete quoted name (a value cut short)."""
    end = 0
    for match in _QUOTED.finditer(text):
        if re.search(r"[\"']", text[end : match.start()]):
            break
        end = match.end()
    stray = re.search(r"[\"']", text[end:])
    return text if stray is None else text[: end + stray.start()]


@runtime_checkable
class CelProgram(Protocol):
    """A compiled expression. Thread-safe: one program is evaluated concurrently by many engagements."""

    @property
    def source(self) -> str:
        """The expression text as written in the spec."""

    @property
    def variables(self) -> frozenset[str]:
        """Declared top-level variables the expression actually references (bind only these)."""

    @property
    def reads(self) -> Mapping[str, Reads]:
        """For each name in :attr:`variables`, the part of its value the expression reads, taken from the
        syntax tree (never from the text). Binding only those parts gives the same answer as binding the
        whole value; a backend that cannot tell says ``None`` (the whole value) for every variable."""

    def explain(self, variables: Mapping[str, Any], *, values: bool) -> str | None:
        """Why the expression did not hold for ``variables``: which clause of a top-level ``a && b && c``
        failed, and with ``values`` the two sides it compared. ``None`` when there is nothing to add. Called
        only on a denial, so it may compile and evaluate more."""

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """Evaluate and return a plain Python value; raise :class:`CelEvaluationError` on failure.

        ``variables`` needs to hold only the names in :attr:`variables`; extra names are ignored.
        """


@runtime_checkable
class CelBackend(Protocol):
    """A CEL engine."""

    @property
    def name(self) -> str:
        """Stable backend name, e.g. ``"cel-expr-python"`` or ``"cel-python"``."""

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> CelProgram:
        """Parse and check ``expression`` against the declared variables; raise :class:`CelCompileError`."""


_QUICK: set[type] = set()
_P = TypeVar("_P", bound=type)


def offers_quick(cls: _P) -> _P:
    """Class decorator for a program type of agentguard's own backends whose ``quick`` property is a
    plain-Python closure of the expression that answers ``True`` only where ``evaluate`` would (and otherwise
    anything, or raises): :func:`quick_closure` trusts it."""
    _QUICK.add(cls)
    return cls


def quick_closure(program: CelProgram) -> Callable[[Mapping[str, Any]], Any] | None:
    """``program``'s quick closure (see :func:`offers_quick`), or ``None``.

    Only agentguard's own program types are asked, whatever attributes another backend's programs have: a
    ``True`` taken from the closure skips :meth:`CelProgram.evaluate`, so only closures held to evaluate's
    answers (by agentguard's own tests) may give it.
    """
    if type(program) not in _QUICK:
        return None
    quick: Callable[[Mapping[str, Any]], Any] | None = program.quick  # type: ignore[attr-defined]
    return quick
