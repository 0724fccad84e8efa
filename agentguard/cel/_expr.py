"""The default backend: Google's ``cel-expr-python`` (the C++ cel-cpp engine behind a pybind11 module).

Why this engine: it type-checks at compile time (a typo in a spec fails at load, not on every call) and it
evaluates a small assertion in a few µs, most of it spent converting the bound variables. Facts about it
that shape this module, measured on 0.1.3:

* An evaluation failure is not raised; it comes back as a value whose type is ``ERROR`` and whose
  ``plain_value()`` is the message, a ``str``. Asking ``type()`` costs ~0.45 µs, three times the
  ``plain_value()`` call, so the type is only asked when the plain value is a ``str``.
* An ``Activation`` that is reused keeps every evaluation's allocations in its arena (memory grows without
  bound). ``Expression.eval(data=...)`` builds a fresh activation and arena per call, and is also the fastest
  way in, so that is the only way this module evaluates.
* Python ``datetime`` values are accepted only by variables declared ``TIMESTAMP`` (a naive one is taken as
  UTC); a ``datetime`` nested inside a ``DYN`` value is an evaluation error. Timestamps come back as
  ``datetime`` in UTC, durations as ``timedelta`` (both to the microsecond).
* Inputs are converted eagerly and wholesale: binding a large ``history`` costs in proportion to its size,
  which is why a program binds only the variables it references.
* The engine does not expose its AST, but ``Expression.serialize()`` is a ``google.protobuf.Any`` holding
  the ``cel.expr.CheckedExpr``. :mod:`agentguard.cel._checked` reads the few fields it needs straight from
  the protobuf wire format, so that ``protobuf`` need not be a dependency.
* The checker rejects a comprehension over a string-keyed index of a ``dyn`` value
  (``history["lookup-order"].exists(h, ...)``: "expression of type 'dyn' cannot be the range of a
  comprehension"), although ``dyn`` is a valid range and the runtime evaluates it. When that is the only
  problem the checker found (it goes on checking past it, so other problems are still reported), the
  expression is compiled without the checker; a type error it would have caught becomes an evaluation
  error, that is a failed assertion.
* Strings cross into C++ as NUL-terminated text in places: ``"ls\x00; rm -rf /"`` is matched by
  ``matches()`` as ``"ls"``, and bytes are cut the same way. A lone surrogate cannot be converted at all.
  Values the engine cannot represent faithfully never reach it (:func:`unrepresentable`): the expression is
  evaluated by the pure-Python ``cel-python`` backend instead when it is installed, and otherwise fails
  with a reason that says why.
* RE2 writes an invalid pattern to stderr ("Error parsing '<pattern>'"). A pattern written in the spec is
  the spec's; a pattern taken from the data would put the data in the process's log, so an expression whose
  ``matches()`` takes its pattern from anything but a literal is evaluated on ``cel-python`` too.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from agentguard.cel._base import (
    CelCompileError,
    CelEvaluationError,
    CelProgram,
    Reads,
    VarType,
    offers_quick,
    redacted,
)
from agentguard.cel._budget import CostProfile, measure
from agentguard.cel._checked import CheckedExpr, Clause, clauses, dynamic_patterns, reads_of
from agentguard.cel._fast import Closure, Unsure, compile_fast

__all__ = ["ExprBackend", "Scanned"]

_CEL_TYPES: dict[VarType, cel.Type] = {
    VarType.DYN: cel.Type.DYN,
    VarType.TIMESTAMP: cel.Type.TIMESTAMP,
    VarType.STRING: cel.Type.STRING,
    VarType.INT: cel.Type.INT,
    VarType.BOOL: cel.Type.BOOL,
}

_ERROR = cel.Type.ERROR

# The two-variable macros (``m.exists(key, value, ...)``, ``transformList``, ...) are part of the CEL
# specification's core conformance tests and handy over tool-call maps, but an extension in cel-cpp.
# ``transformMap`` type-checks in 0.1.3 but its runtime helper is not registered, so every evaluation would
# fail; it is rejected at compile time instead.
_MAP_INSERT = "cel.@mapInsert"
_CONFIG = cel.NewEnvConfigFromYaml("extensions:\n  - name: two-var-comprehensions\n")

# One diagnostic of the engine: "ERROR: <input>:LINE:COLUMN: reason", followed by a snippet with a caret.
_DIAGNOSTIC = re.compile(r"^ERROR: [^:\n]*:(-?\d+):(-?\d+): (.*)$", re.MULTILINE)
# The checker's false rejection of a dyn comprehension range (see the module docstring).
_DYN_RANGE = "expression of type 'dyn' cannot be the range of a comprehension (must be list, map, or dynamic)"
# absl status decoration around the whole text: "INVALID_ARGUMENT: ... [INVALID_ARGUMENT]".
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z_]+\]$")

# CEL names of type values (``type(1)`` is ``int``); the engine spells them as its own enum names.
_TYPE_NAMES = {
    "BOOL": "bool",
    "BYTES": "bytes",
    "DOUBLE": "double",
    "DURATION": "google.protobuf.Duration",
    "DYN": "dyn",
    "INT": "int",
    "LIST": "list",
    "MAP": "map",
    "NULL": "null_type",
    "STRING": "string",
    "TIMESTAMP": "google.protobuf.Timestamp",
    "TYPE": "type",
    "UINT": "uint",
}


class ExprBackend:
    """:class:`~agentguard.cel.CelBackend` on ``cel-expr-python``.

    A checker environment costs ~40 µs to build and a spec compiles many expressions against the same
    declarations, so environments are cached per distinct set of declarations.

    ``fast_path`` (default on): each expression is also compiled, where it can be, into Python functions
    that answer the common cases without the engine and hands it everything else
    (:mod:`agentguard.cel._fast`). Turned off only to compare the two.
    """

    name = "cel-expr-python"

    def __init__(self, *, fast_path: bool = True) -> None:
        self._envs: dict[frozenset[tuple[str, VarType]], cel.Env] = {}
        self._lock = threading.Lock()
        self._fast_path = fast_path

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> ExprProgram:
        env = self._env(declarations)
        try:
            checked = env.compile(expression)
        except RuntimeError as exc:
            error = _compile_error(expression, str(exc))
            reasons = {reason for _, _, reason in _DIAGNOSTIC.findall(_STATUS_PREFIX.sub("", str(exc)))}
            if reasons != {_DYN_RANGE}:
                raise error from None
            checked = env.compile(expression, disable_check=True)
        tree = CheckedExpr(checked.serialize())
        if _MAP_INSERT in tree.functions:
            raise CelCompileError(
                expression,
                f"transformMap() is not supported by this cel-expr-python ({_MAP_INSERT} is missing)",
            )
        names = frozenset(tree.variables & declarations.keys())
        return ExprProgram(
            expression,
            checked,
            names,
            compile_fast(tree, expression, declarations) if self._fast_path else None,
            reads=reads_of(tree, names),
            declarations=dict(declarations),
            quiet="a regular expression is taken from the data" if dynamic_patterns(tree) else None,
            clauses=lambda: self._explainers(expression, tree, declarations),
        )

    def _explainers(
        self, source: str, tree: CheckedExpr, declarations: Mapping[str, VarType]
    ) -> tuple[_Explainer, ...]:
        """Each clause compiled on its own (and its two sides, for a comparison), for explaining a denial."""

        def program(text: str | None) -> ExprProgram | None:
            if not text:
                return None
            try:
                return self.compile(text, declarations)
            except CelCompileError:
                return None

        out = []
        for clause in clauses(tree, source):
            whole = program(clause.text)
            if whole is None:
                return ()
            out.append(_Explainer(clause, whole, program(clause.left), program(clause.right)))
        return tuple(out)

    def _env(self, declarations: Mapping[str, VarType]) -> cel.Env:
        key = frozenset(declarations.items())
        with self._lock:
            env = self._envs.get(key)
            if env is None:
                variables = {name: _CEL_TYPES[var_type] for name, var_type in declarations.items()}
                env = cel.NewEnv(config=_CONFIG, variables=variables)
                self._envs[key] = env
            return env


@offers_quick
class ExprProgram:
    """A checked ``cel-expr-python`` expression.

    Thread-safe: the compiled expression is immutable and every evaluation gets its own activation.
    """

    __slots__ = (
        "_clauses",
        "_cost",
        "_declarations",
        "_expression",
        "_faithful",
        "_fast",
        "_names",
        "_narrow",
        "_quiet",
        "_reads",
        "_source",
    )

    def __init__(
        self,
        source: str,
        expression: cel.Expression,
        names: frozenset[str],
        fast: Closure | None = None,
        *,
        reads: Mapping[str, Reads] | None = None,
        declarations: Mapping[str, VarType] | None = None,
        quiet: str | None = None,
        clauses: Callable[[], tuple[_Explainer, ...]] | None = None,
    ) -> None:
        self._source = source
        self._expression = expression
        self._names = names
        self._fast = fast
        self._reads: Mapping[str, Reads] = reads if reads is not None else dict.fromkeys(names)
        self._narrow = any(read is not None for read in self._reads.values())
        self._declarations = declarations
        # Why every evaluation goes to cel-python (a data-derived regular expression), or None.
        self._quiet = quiet
        # What an evaluation could cost on given data: refused before the engine runs when over budget.
        self._cost = CostProfile(expression.serialize())
        # The clauses, compiled on the first denial to explain (None: not yet; the factory until then).
        self._clauses: tuple[_Explainer, ...] | Callable[[], tuple[_Explainer, ...]] = clauses or tuple
        # The same expression on the pure-Python engine, for values this engine cannot represent (built on
        # first need).
        self._faithful: CelProgram | None = None

    @property
    def source(self) -> str:
        return self._source

    @property
    def variables(self) -> frozenset[str]:
        return self._names

    @property
    def reads(self) -> Mapping[str, Reads]:
        return self._reads

    @property
    def quick(self) -> Closure | None:
        """The expression compiled to plain Python (:mod:`agentguard.cel._fast`), or ``None``: it answers as
        :meth:`evaluate` would, or raises (:class:`~agentguard.cel._fast.Unsure` when the engine must decide),
        with no copy and no engine. A caller may take its ``True`` and must take anything else, an exception
        included, to :meth:`evaluate` (see :func:`~agentguard.cel.quick_closure`)."""
        return self._fast

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        scanned = variables if type(variables) is Scanned else None
        if scanned is not None:
            variables = scanned._bound
        if self._fast is not None:
            try:
                return self._fast(variables)
            except Unsure:
                pass  # the engine decides, from scratch
        # Callers that bind exactly what the expression reads (agentguard's own) pay no copy.
        data = (
            variables
            if variables.keys() <= self._names
            else {n: variables[n] for n in self._names if n in variables}
        )
        problem = self._quiet or (unrepresentable(data) if scanned is None else scanned.problem(data))
        if problem is not None:
            return self._faithfully(data, problem)
        if not self._cost.trivial:
            self._cost.check(self._source, measure(data.values()) if scanned is None else scanned.sizes(data))
        if self._narrow:  # the engine converts what it is given whole: give it only what the tree reads
            data = {name: _narrowed(value, self._reads.get(name)) for name, value in data.items()}
        try:
            value = self._expression.eval(data=data)
        except RuntimeError as exc:  # a few failures are raised, e.g. a map literal with a duplicate key
            raise CelEvaluationError(
                self._source, redacted(_STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(exc))), self._source)
            ) from None
        result = value.plain_value()
        if type(result) is bool:  # the common case: an assertion's answer
            return result
        if type(result) is str and value.type() == _ERROR:
            raise CelEvaluationError(self._source, redacted(_STATUS_PREFIX.sub("", result), self._source))
        return _plain(result)

    def explain(self, variables: Mapping[str, Any], *, values: bool) -> str | None:
        if callable(self._clauses):
            self._clauses = self._clauses()
        explainers = self._clauses
        if len(explainers) == 1:  # the whole expression: only the values it compared add anything
            return explainers[0].compared(variables) if values else None
        for number, explainer in enumerate(explainers, 1):
            why = explainer.failure(variables, values=values)
            if why is not None:
                return f"clause {number} of {len(explainers)}, {explainer.clause.text}{why}"
        return None

    def _faithfully(self, data: Mapping[str, Any], problem: str) -> Any:
        """Evaluate on the pure-Python engine, which represents every string; fail if it is not installed."""
        program = self._faithful
        if program is None:
            from agentguard.cel import get_backend  # the package imports this module: import at need

            why = f"{problem}, which the cel-expr-python engine cannot evaluate faithfully"
            try:
                backend = get_backend("cel-python")
            except ImportError:
                raise CelEvaluationError(
                    self._source, f"{why}; install agentguard[celpy] to evaluate such values"
                ) from None
            try:
                program = backend.compile(
                    self._source, self._declarations or dict.fromkeys(self._names, VarType.DYN)
                )
            except CelCompileError as exc:
                raise CelEvaluationError(
                    self._source, f"{why}, and cel-python cannot compile it: {exc.message}"
                ) from None
            self._faithful = program
        return program.evaluate(data)

    def __repr__(self) -> str:
        return f"ExprProgram({self._source!r})"


@dataclass(frozen=True, slots=True)
class _Explainer:
    """A clause of an assertion compiled on its own, to tell which one failed and what it compared."""

    clause: Clause
    whole: ExprProgram
    left: ExprProgram | None
    right: ExprProgram | None

    def failure(self, variables: Mapping[str, Any], *, values: bool) -> str | None:
        """How this clause fails for ``variables`` (" is false (250 <= 100)"), or ``None`` if it holds."""
        try:
            value = self.whole.evaluate(variables)
        except CelEvaluationError as exc:
            return f": {exc.message}"
        if value is True:
            return None
        if value is not False:
            return f" yielded {type(value).__name__}, not a boolean"
        compared = self.compared(variables) if values else None
        return f" is false ({compared})" if compared else " is false"

    def compared(self, variables: Mapping[str, Any]) -> str | None:
        """``250 <= 100``: the two sides of a comparison clause, evaluated; ``None`` for other clauses."""
        if self.left is None or self.right is None:
            return None
        return f"{_shown(self.left, variables)} {self.clause.operator} {_shown(self.right, variables)}"


def _shown(program: ExprProgram, variables: Mapping[str, Any]) -> str:
    try:
        value = program.evaluate(variables)
    except CelEvaluationError:
        return "error"
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


class Scanned(Mapping[str, Any]):
    """Variables checked once for what the engine cannot represent, to evaluate many programs on.

    An :class:`ExprProgram` walks every value it binds before each evaluation, for a NUL or a lone
    surrogate (:func:`unrepresentable`), and again to size it for the evaluation budget. A caller that
    evaluates several programs on the same values (the reference guardian: every rule on one request) wraps
    them once instead: each value is then walked the first time a program binds it, and what was found is
    kept for the next programs. A value still reaches the engine only after its check. The values are not
    copied, only the mapping of names: they must not change while the wrapper is in use (a string put in
    after its check would not be checked). Any other backend sees a plain read-only mapping::

        variables = Scanned({"method": method, "params": params})
        denied = [rule for rule in rules if rule.evaluate(variables)]

    ``representable`` names the values the caller has already shown, by other means, to hold no NUL and no
    lone surrogate; they are not walked for them. The one such means in agentguard: the reference guardian's
    requests decoded from JSON text without a ``\\u`` escape, the only way JSON carries either character.
    """

    __slots__ = ("_bound", "_problems", "_sizes")

    def __init__(self, variables: Mapping[str, Any], *, representable: Iterable[str] = ()) -> None:
        self._bound: Mapping[str, Any] = dict(variables)
        # By name, on first need. Two threads may both walk a value: the same answer, stored twice.
        self._problems: dict[str, str | None] = dict.fromkeys(representable)
        self._sizes: dict[str, tuple[int, int]] = {}

    def __getitem__(self, name: str) -> Any:
        return self._bound[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._bound)

    def __len__(self) -> int:
        return len(self._bound)

    def problem(self, names: Iterable[str]) -> str | None:
        """What :func:`unrepresentable` finds in the values of ``names``, or ``None``."""
        for name in names:
            if name not in self._problems:
                self._problems[name] = unrepresentable(self._bound[name])
            found = self._problems[name]
            if found is not None:
                return found
        return None

    def sizes(self, names: Iterable[str]) -> tuple[int, int]:
        """:func:`~agentguard.cel._budget.measure` of the values of ``names``."""
        longest = largest = 0
        for name in names:
            sizes = self._sizes.get(name)
            if sizes is None:
                sizes = self._sizes[name] = measure((self._bound[name],))
            longest, largest = max(longest, sizes[0]), max(largest, sizes[1])
        return longest, largest


def _narrowed(value: Any, reads: Reads) -> Any:
    """``value`` with only the members ``reads`` selects, nested (the whole value where it reads it whole).

    The same answer as the whole value: a member the tree never names cannot change it, and a member it names
    is kept exactly when present (so ``has()`` and missing-key errors are unchanged).
    """
    if reads is None or type(value) is not dict:
        return value
    return {key: _narrowed(value[key], below) for key, below in reads.items() if key in value}


def unrepresentable(value: Any) -> str | None:
    """Why the engine cannot represent ``value`` faithfully (a NUL character in a string or bytes, a lone
    surrogate), or ``None``. Walks the whole value, iteratively: nesting depth costs no recursion."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str:
            if "\x00" in item:
                return "a bound value holds a NUL character"
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return "a bound value holds a lone surrogate (text that is not valid Unicode)"
        elif kind is dict:
            pending.extend(item.keys())
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif (kind is bytes or kind is bytearray) and b"\x00" in item:
            return "a bound value holds a NUL byte"
    return None


def _plain(value: Any) -> Any:
    """Turn what ``plain_value()`` returns into agentguard's plain values.

    The engine's plain values are nearly right already: only ``bytes`` (returned as ``bytearray``) and
    type values (returned as engine ``Type`` objects; agentguard gives their CEL name as a ``str``) differ.
    """
    kind = type(value)
    if kind is list:
        return [_plain(item) for item in value]
    if kind is dict:
        return {_plain(key): _plain(item) for key, item in value.items()}
    if kind is bytearray:
        return bytes(value)
    if kind is cel.Type:
        name = value.name()
        return _TYPE_NAMES.get(name.partition("<")[0], name)
    return value


def _compile_error(expression: str, text: str) -> CelCompileError:
    """Build a :class:`CelCompileError` from the engine's status text.

    The engine reports every problem it found as ``ERROR: <input>:LINE:COLUMN: reason`` plus a source
    snippet, with 1-based positions counted in characters. The first problem gives the position; the
    reasons of all of them, without snippets, make the message. Problems without a position (line -1,
    such as the parser's follow-up "<<nil>> parsetree") only add noise when positioned ones exist.
    """
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", text.strip()))
    diagnostics = [(int(line), int(column), reason) for line, column, reason in _DIAGNOSTIC.findall(text)]
    positioned = [diagnostic for diagnostic in diagnostics if diagnostic[0] > 0]
    if positioned:
        line, column, _ = positioned[0]
        return CelCompileError(expression, "; ".join(d[2] for d in positioned), line, max(column, 1))
    if diagnostics:
        return CelCompileError(expression, "; ".join(d[2] for d in diagnostics))
    return CelCompileError(expression, text)
