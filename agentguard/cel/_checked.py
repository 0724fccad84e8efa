"""Reading a ``cel.expr.CheckedExpr`` (what ``cel-expr-python`` serializes) without depending on protobuf.

The engine does not expose its AST, but ``Expression.serialize()`` is a ``google.protobuf.Any`` holding the
checked expression. This module reads the few fields agentguard needs straight from the protobuf wire format:
which variables and functions an expression uses (to bind only those), which parts of each variable it
reads (:func:`reads_of`), and the tree itself (for the fast path of :mod:`agentguard.cel._fast`).

Both forms the engine serializes are read: a ``CheckedExpr`` (the normal case) and a ``ParsedExpr`` (an
expression compiled without the type checker, see :mod:`agentguard.cel._expr`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from agentguard.cel._base import Reads

__all__ = [
    "CheckedExpr",
    "Clause",
    "Message",
    "add_read",
    "children",
    "clauses",
    "dynamic_patterns",
    "message",
    "reads_of",
    "text",
]

# Field numbers from google/cel-spec proto/cel/expr/checked.proto and syntax.proto.
# Any:          type_url = 1, value = 2
# CheckedExpr:  reference_map = 2 (map<int64, Reference>), expr = 4
# ParsedExpr:   expr = 2
# Reference:    name = 1, overload_id = 3, value = 4
# Expr:         id = 2, const_expr = 3, ident_expr = 4, select_expr = 5, call_expr = 6, list_expr = 7,
#               struct_expr = 8, comprehension_expr = 9
# Constant:     null_value = 1, bool_value = 2, int64_value = 3, uint64_value = 4, double_value = 5,
#               string_value = 6, bytes_value = 7, duration_value = 8, timestamp_value = 9
# Ident: name = 1.  Select: operand = 1, field = 2, test_only = 3.  Call: target = 1, function = 2,
# args = 3.  CreateList: elements = 1.  CreateStruct: entries = 2; Entry: map_key = 3, value = 4.
# Comprehension: iter_var = 1, iter_range = 2, accu_var = 3, accu_init = 4, loop_condition = 5,
#                loop_step = 6, result = 7, iter_var2 = 8.

Message = dict[int, list[Any]]
"""A decoded protobuf message: field number -> its values (``int`` for varints, ``bytes`` otherwise)."""


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


def message(buf: bytes) -> Message:
    decoded: Message = {}
    for number, value in _fields(buf):
        decoded.setdefault(number, []).append(value)
    return decoded


def text(decoded: Message, number: int) -> str:
    return bytes(decoded[number][0]).decode() if number in decoded else ""


class CheckedExpr:
    """A serialized checked expression, decoded: its root ``Expr``, the checker's resolved variable names, and
    the variables and functions it uses.

    The checker's reference map says which identifiers (and which ``a.b.c`` selections it resolved to a
    qualified variable name) are variables, but it also lists comprehension variables and cannot tell a
    comprehension variable from a declared variable of the same name. So the AST is walked with the set of
    comprehension variables in scope, and the reference map is consulted only for names not bound there.
    """

    __slots__ = ("checked", "expr", "functions", "overloads", "positions", "references", "variables")

    def __init__(self, serialized: bytes) -> None:
        wrapper = message(serialized)
        decoded = message(wrapper[2][0])
        self.checked = not text(wrapper, 1).endswith(".ParsedExpr")
        """Whether the type checker passed the expression (else it was parsed only)."""
        self.references: dict[int, str] = {}
        """Node id -> the variable name the checker resolved it to."""
        self.overloads: dict[int, frozenset[str]] = {}
        """Call node id -> the overloads the checker found it may call (``add_int64``, ``add_string``, ...)."""
        # SourceInfo (CheckedExpr field 5, ParsedExpr field 3): positions = 4 (map<int64, int32>).
        source_info = decoded.get(3 if not self.checked else 5, [])
        self.positions: dict[int, int] = {}
        """Node id -> the offset (in code points) of the node's token in the source."""
        for entry in message(source_info[0]).get(4, []) if source_info else []:
            fields = message(entry)
            self.positions[fields.get(1, [0])[0]] = fields.get(2, [0])[0]
        if not self.checked:
            self.expr: bytes | None = decoded[2][0] if 2 in decoded else None
        else:
            for entry in decoded.get(2, []):
                fields = message(entry)
                reference = message(fields[2][0]) if 2 in fields else {}
                node_id = fields.get(1, [0])[0]
                # A reference with overload ids is a function, one with a value is an enum constant.
                if 3 in reference:
                    self.overloads[node_id] = frozenset(bytes(item).decode() for item in reference[3])
                elif 1 in reference and 4 not in reference:
                    self.references[node_id] = text(reference, 1)
            self.expr = decoded[4][0] if 4 in decoded else None
        self.variables: set[str] = set()
        self.functions: set[str] = set()
        if self.expr is not None:
            _walk(self.expr, frozenset(), self.references, self.variables, self.functions)


def _walk(
    buf: bytes, scope: frozenset[str], references: dict[int, str], variables: set[str], functions: set[str]
) -> None:
    expr = message(buf)
    node_id = expr.get(2, [0])[0]
    if 4 in expr:  # identifier
        name = text(message(expr[4][0]), 1)
        if name not in scope:
            variables.add(references.get(node_id, name))
        return
    if 5 in expr and node_id in references:  # a selection the checker resolved to a qualified name
        variables.add(references[node_id])
        return
    if 6 in expr:
        functions.add(text(message(expr[6][0]), 2))
    for child, inner in children(expr, scope):
        _walk(child, inner, references, variables, functions)


_COMPARISONS = {"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "@in": "in"}


@dataclass(frozen=True, slots=True)
class Clause:
    """One clause of a top-level ``a && b && c``, as written; for a comparison, its two sides too."""

    text: str
    left: str | None = None
    operator: str | None = None
    right: str | None = None


def clauses(tree: CheckedExpr, source: str) -> tuple[Clause, ...]:
    """The clauses of the expression's top-level conjunction (one clause when it is not one), cut out of the
    source at the positions the parser recorded. For explaining a denial only: each text is compiled again
    before it is used, and a text that does not compile is simply not explained."""
    if tree.expr is None or not tree.positions:
        return ()
    operators: list[int] = []
    leaves: list[Message] = []

    def flatten(expr: Message) -> None:
        call = message(expr[6][0]) if 6 in expr else None
        if call is not None and text(call, 2) == "_&&_" and 1 not in call:
            operators.append(tree.positions.get(expr.get(2, [0])[0], -1))
            for arg in call.get(3, []):
                flatten(message(arg))
        else:
            leaves.append(expr)

    flatten(message(tree.expr))
    out: list[Clause] = []
    for leaf in leaves:
        spots = _spots(leaf, tree.positions)
        if not spots:
            return ()
        start, last = min(spots), max(spots)
        end = min((p for p in operators if p > last), default=len(source))
        clause_text = _balanced(source[start:end])
        call = message(leaf[6][0]) if 6 in leaf else None
        symbol = _COMPARISONS.get(text(call, 2)) if call is not None else None
        at = tree.positions.get(leaf.get(2, [0])[0], -1)
        if symbol is not None and start < at < end and source.startswith(symbol, at):
            left, right = _balanced(source[start:at]), _balanced(source[at + len(symbol) : end])
            out.append(Clause(clause_text, left, symbol, right))
        else:
            out.append(Clause(clause_text))
    return tuple(out)


def _spots(expr: Message, positions: dict[int, int]) -> list[int]:
    spots: list[int] = []
    pending = [expr]
    while pending:
        node = pending.pop()
        spot = positions.get(node.get(2, [0])[0])
        if spot is not None and spot >= 0:
            spots.append(spot)
        pending.extend(message(child) for child, _ in children(node, frozenset()))
    return spots


def _balanced(fragment: str) -> str:
    """``fragment`` without the surrounding parentheses and whitespace a cut left unmatched."""
    fragment = fragment.strip()
    while fragment.endswith(")") and fragment.count(")") > fragment.count("("):
        fragment = fragment[:-1].rstrip()
    while fragment.startswith("(") and fragment.count("(") > fragment.count(")"):
        fragment = fragment[1:].lstrip()
    return fragment


def dynamic_patterns(tree: CheckedExpr) -> bool:
    """Whether a ``matches()`` call takes its pattern from anything but a string literal."""
    pending = [tree.expr] if tree.expr is not None else []
    while pending:
        expr = message(pending.pop())
        if 6 in expr:
            call = message(expr[6][0])
            if text(call, 2) == "matches":
                pattern = message((call.get(1, []) + call.get(3, []))[-1])
                if 3 not in pattern:  # not a constant
                    return True
        pending.extend(child for child, _ in children(expr, frozenset()))
    return False


def reads_of(tree: CheckedExpr, declared: frozenset[str]) -> dict[str, Reads]:
    """What ``tree`` reads of each declared variable: the members it selects by a constant name, nested.

    Built from the syntax tree, so comments, string literals, macros, method calls and shadowing
    comprehension variables cannot hide a read. A variable (or a member of one) that is used in any way other
    than selecting a member by a constant name -- ``history.exists(...)``, ``size(recent)``, ``x in recent``,
    ``recent[name]`` with a computed name, a comparison -- is read whole (``None``). Binding only what this
    says is read gives the same answer as binding everything, which the differential tests check.
    """
    found: dict[str, Reads] = {}
    if tree.expr is not None:
        _reads(tree.expr, frozenset(), tree.references, declared, found)
    return found


def _path(expr: Message, scope: frozenset[str], references: dict[int, str]) -> tuple[str, list[str]] | None:
    """``(variable, [member, ...])`` when ``expr`` is nothing but constant selections from a variable."""
    node_id = expr.get(2, [0])[0]
    if 4 in expr:  # identifier
        name = text(message(expr[4][0]), 1)
        return None if name in scope else (references.get(node_id, name), [])
    if 5 in expr:  # a.f, and has(a.f): presence of f is read from the same member
        if node_id in references:
            return references[node_id], []
        select = message(expr[5][0])
        inner = _path(message(select[1][0]), scope, references) if 1 in select else None
        return None if inner is None else (inner[0], [*inner[1], text(select, 2)])
    if 6 in expr:  # a["f"]
        call = message(expr[6][0])
        args = call.get(3, [])
        if text(call, 2) != "_[_]" or 1 in call or len(args) != 2:
            return None
        key = message(args[1])
        if 3 not in key or 6 not in (constant := message(key[3][0])):
            return None
        inner = _path(message(args[0]), scope, references)
        return None if inner is None else (inner[0], [*inner[1], bytes(constant[6][0]).decode()])
    return None


def _reads(
    buf: bytes,
    scope: frozenset[str],
    references: dict[int, str],
    declared: frozenset[str],
    found: dict[str, Reads],
) -> None:
    expr = message(buf)
    path = _path(expr, scope, references)
    if path is not None:
        variable, members = path
        if variable in declared:
            add_read(found, variable, members)
        return
    for child, inner in children(expr, scope):
        _reads(child, inner, references, declared, found)


def add_read(found: dict[str, Reads], variable: str, members: list[str]) -> None:
    """Merge one read into the tree of reads: ``None`` (read whole) absorbs every narrower read."""
    node, key = found, variable
    for member in members:
        below = node.setdefault(key, {})
        if below is None:
            return
        node, key = cast(dict[str, Reads], below), member
    node[key] = None


def children(expr: Message, scope: frozenset[str]) -> Iterator[tuple[bytes, frozenset[str]]]:
    """Each sub-expression of ``expr``, with the comprehension variables in scope there."""
    if 5 in expr:
        for operand in message(expr[5][0]).get(1, []):
            yield operand, scope
    elif 6 in expr:
        call = message(expr[6][0])
        for child in call.get(1, []) + call.get(3, []):
            yield child, scope
    elif 7 in expr:
        for child in message(expr[7][0]).get(1, []):
            yield child, scope
    elif 8 in expr:
        for entry in message(expr[8][0]).get(2, []):
            fields = message(entry)
            for child in fields.get(3, []) + fields.get(4, []):
                yield child, scope
    elif 9 in expr:
        loop = message(expr[9][0])
        accumulator = scope | {text(loop, 3)}
        iteration = accumulator | {text(loop, 1), text(loop, 8)}
        for number, inner in ((2, scope), (4, scope), (5, iteration), (6, iteration), (7, accumulator)):
            for child in loop.get(number, []):
                yield child, inner
