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
  the ``cel.expr.CheckedExpr``. :func:`_references` reads the few fields it needs straight from
  the protobuf wire format, so that ``protobuf`` need not be a dependency.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from cel_expr_python import cel

from agentguard.cel._base import CelCompileError, CelEvaluationError, VarType

__all__ = ["ExprBackend"]

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
    """

    name = "cel-expr-python"

    def __init__(self) -> None:
        self._envs: dict[frozenset[tuple[str, VarType]], cel.Env] = {}
        self._lock = threading.Lock()

    def compile(self, expression: str, declarations: Mapping[str, VarType]) -> ExprProgram:
        env = self._env(declarations)
        try:
            checked = env.compile(expression)
        except RuntimeError as exc:
            raise _compile_error(expression, str(exc)) from None
        variables, functions = _references(checked.serialize())
        if _MAP_INSERT in functions:
            raise CelCompileError(
                expression,
                f"transformMap() is not supported by this cel-expr-python ({_MAP_INSERT} is missing)",
            )
        return ExprProgram(expression, checked, frozenset(variables & declarations.keys()))

    def _env(self, declarations: Mapping[str, VarType]) -> cel.Env:
        key = frozenset(declarations.items())
        with self._lock:
            env = self._envs.get(key)
            if env is None:
                variables = {name: _CEL_TYPES[var_type] for name, var_type in declarations.items()}
                env = cel.NewEnv(config=_CONFIG, variables=variables)
                self._envs[key] = env
            return env


class ExprProgram:
    """A checked ``cel-expr-python`` expression.

    Thread-safe: the compiled expression is immutable and every evaluation gets its own activation.
    """

    __slots__ = ("_expression", "_names", "_source")

    def __init__(self, source: str, expression: cel.Expression, names: frozenset[str]) -> None:
        self._source = source
        self._expression = expression
        self._names = names

    @property
    def source(self) -> str:
        return self._source

    @property
    def variables(self) -> frozenset[str]:
        return self._names

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        # Callers that bind exactly what the expression reads (agentguard's own) pay no copy.
        data = (
            variables
            if variables.keys() <= self._names
            else {n: variables[n] for n in self._names if n in variables}
        )
        try:
            value = self._expression.eval(data=data)
        except RuntimeError as exc:  # a few failures are raised, e.g. a map literal with a duplicate key
            raise CelEvaluationError(
                self._source, _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(exc)))
            ) from None
        result = value.plain_value()
        if type(result) is bool:  # the common case: an assertion's answer
            return result
        if type(result) is str and value.type() == _ERROR:
            raise CelEvaluationError(self._source, _STATUS_PREFIX.sub("", result))
        return _plain(result)

    def __repr__(self) -> str:
        return f"ExprProgram({self._source!r})"


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


# --- Reading the checked expression ---------------------------------------------------------------------
#
# Field numbers from google/cel-spec proto/cel/expr/checked.proto and syntax.proto.
# Any:          type_url = 1, value = 2
# CheckedExpr:  reference_map = 2 (map<int64, Reference>), expr = 4
# Reference:    name = 1, overload_id = 3, value = 4
# Expr:         id = 2, ident_expr = 4, select_expr = 5, call_expr = 6, list_expr = 7, struct_expr = 8,
#               comprehension_expr = 9
# Ident: name = 1.  Select: operand = 1.  Call: target = 1, function = 2, args = 3.  CreateList: elements = 1.
# CreateStruct: entries = 2; Entry: map_key = 3, value = 4.
# Comprehension: iter_var = 1, iter_range = 2, accu_var = 3, accu_init = 4, loop_condition = 5,
#                loop_step = 6, result = 7, iter_var2 = 8.

_Message = dict[int, list[Any]]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """Yield ``(field number, value)``: an ``int`` for varints, ``bytes`` for everything else."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        wire_type = key & 7
        value: int | bytes
        if wire_type == 0:
            value, pos = _varint(buf, pos)
        elif wire_type == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire_type == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire_type == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        yield key >> 3, value


def _message(buf: bytes) -> _Message:
    message: _Message = {}
    for number, value in _fields(buf):
        message.setdefault(number, []).append(value)
    return message


def _text(message: _Message, number: int) -> str:
    return bytes(message[number][0]).decode() if number in message else ""


def _references(serialized: bytes) -> tuple[set[str], set[str]]:
    """Names of the variables a checked expression reads (as the checker resolved them), and of the
    functions it calls.

    The checker's reference map says which identifiers (and which ``a.b.c`` selections it resolved to a
    qualified variable name) are variables, but it also lists comprehension variables and cannot tell a
    comprehension variable from a declared variable of the same name. So the AST is walked with the set of
    comprehension variables in scope, and the reference map is consulted only for names not bound there.
    """
    checked = _message(_message(serialized)[2][0])
    references: dict[int, str] = {}
    for entry in checked.get(2, []):
        fields = _message(entry)
        reference = _message(fields[2][0]) if 2 in fields else {}
        # A reference with overload ids is a function, one with a value is an enum constant.
        if 1 in reference and 3 not in reference and 4 not in reference:
            references[fields.get(1, [0])[0]] = _text(reference, 1)
    variables: set[str] = set()
    functions: set[str] = set()
    if 4 in checked:
        _walk(checked[4][0], frozenset(), references, variables, functions)
    return variables, functions


def _walk(
    buf: bytes, scope: frozenset[str], references: dict[int, str], variables: set[str], functions: set[str]
) -> None:
    expr = _message(buf)
    node_id = expr.get(2, [0])[0]
    if 4 in expr:  # identifier
        name = _text(_message(expr[4][0]), 1)
        if name not in scope:
            variables.add(references.get(node_id, name))
    elif 5 in expr:  # selection: either a resolved qualified name, or a field of its operand
        if node_id in references:
            variables.add(references[node_id])
        else:
            select = _message(expr[5][0])
            for operand in select.get(1, []):
                _walk(operand, scope, references, variables, functions)
    elif 6 in expr:  # call
        call = _message(expr[6][0])
        functions.add(_text(call, 2))
        for child in call.get(1, []) + call.get(3, []):
            _walk(child, scope, references, variables, functions)
    elif 7 in expr:  # list
        for child in _message(expr[7][0]).get(1, []):
            _walk(child, scope, references, variables, functions)
    elif 8 in expr:  # map or message
        for entry in _message(expr[8][0]).get(2, []):
            fields = _message(entry)
            for child in fields.get(3, []) + fields.get(4, []):
                _walk(child, scope, references, variables, functions)
    elif 9 in expr:  # comprehension (what the macros expand to)
        loop = _message(expr[9][0])
        accumulator = scope | {_text(loop, 3)}
        iteration = accumulator | {_text(loop, 1), _text(loop, 8)}
        for number, inner in ((2, scope), (4, scope), (5, iteration), (6, iteration), (7, accumulator)):
            for child in loop.get(number, []):
                _walk(child, inner, references, variables, functions)
