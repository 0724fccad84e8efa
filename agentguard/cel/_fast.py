"""A fast path in front of the engine: common assertions compiled to Python functions.

Why: most spec assertions are a few field reads and one comparison
(``recent["send-email"].inputs.to.endsWith("@corp.com")``, ``history._total < 50``). The engine evaluates
one in about 2 µs when its code is hot. It costs 30-70 µs where agentguard usually runs, in a host's worker
thread between two steps of a framework that has evicted the engine's code and data from the CPU caches
(LangGraph runs each tool call in a fresh thread). A function over the same reads runs in the interpreter
the host keeps hot, and it reads only the parts of a variable it uses: the engine converts each bound
variable whole. That matters most for a comprehension over a tool's history
(``history["lookup"].exists(e, e.inputs.amount > 500)``): the engine converts every entry on every
evaluation (~1.8 µs an entry) and stops any evaluation after 10,000 iterations, so at 10,000 calls such an
assertion could only fail. Here it reads each entry where it lies, about a tenth of a µs an entry.

How it stays exact: a function only answers when the answer is beyond doubt. The expression must use only the
constructs below. Every operand must be a plain JSON value of the one type the operation is defined on:
``str`` (ASCII, where the engine's UTF-8 conversion cannot differ), ``int`` within int64, ``float``, ``bool``
or ``None``, and ``dict`` / ``list`` for selection and indexing. Anything else (a missing key, a type
mismatch, a mixed-type comparison, an overflow, an error) raises :class:`Unsure`, and the engine evaluates
the expression from scratch, producing the canonical value or error. The differential tests check the
functions against the engine on the CEL conformance cases and on generated expressions and data.

Supported: literals (null, bool, int, double, string), variables (one declared ``string``, ``int`` or
``bool`` only when its value has that type: the engine fails the read of any other), ``a.f`` and
``has(a.f)`` on maps, ``a[k]`` (map with string key, list with int index), ``== != < <= > >=``,
``&& || !``, ``?:``, ``in`` (string key of a map, string in a list of strings), ``+`` and ``-`` on ints,
``+`` on strings, unary ``-`` on ints, ``size``, ``startsWith``, ``endsWith``, ``contains`` on strings
(``size`` also on lists and maps), and the comprehension macros ``all``, ``exists``, ``exists_one``,
``filter``, ``map`` (two and three arguments) over a list (a list literal too), and ``all``, ``exists``,
``exists_one`` over the keys of a map with string keys. Not supported, left to the engine: list literals
elsewhere, the two-variable comprehensions and ``cel.bind``, uint, bytes, timestamps and durations
(variables declared ``timestamp`` too), regular expressions, conversions, other functions. An operand of
``&&`` or ``||`` built from those is left unsure: another operand with the deciding value still answers
(CEL's ``&&`` is false when any operand is false, errors included), and otherwise the engine evaluates the
whole. An expression with a map literal is the engine's whole: the engine does not make a duplicate key an
error that ``&&`` / ``||`` pass over, as CEL says, but fails the evaluation (``{m.a: 1, m.b: 2}.size() == 2
|| true`` fails when ``m.a == m.b``).

Comprehensions follow CEL's error rules: ``exists`` is true when any element's predicate is true, whatever
the others give (errors included), ``all`` false when any is false; so an element the function is unsure of
is passed over, and decides nothing: if no element decides, the answer is unsure. ``exists_one``, ``filter``
and ``map`` propagate every error, so one unsure element makes the whole unsure. The list ``filter`` and
``map`` make is a value like any other (``size``, ``in``, ``[i]``, or another comprehension's range); as the
result of the whole expression it is left to the engine. Over a map, only the order-free macros answer: the
engine's key order is its own.

Bounded: the work of one evaluation is held to the :class:`~agentguard.cel.EvalBudget`, as on the engines.
Every iteration of every comprehension counts against ``max_iterations``, nesting included: a
:class:`~agentguard.cel._budget.Meter` grants them in batches and checks ``max_seconds`` at each, every few
milliseconds. A limit hit is a failed evaluation with the reason, as on ``cel-python``. And nothing in a
comprehension's body allocates more than a constant per iteration, so the iteration count bounds the memory
too. The rule: in a body, ``+`` adds integers only (an operand of another type is unsure before anything is
made), and a ``+`` the type checker knows to be a concatenation (of strings, bytes or lists) keeps the
comprehension out of the fast path altogether, to the engine and its estimate before it runs; the only lists
a body makes are a list literal of fixed length as a range and the results of ``filter`` and ``map``, one
element per counted iteration.

How it is fast: the expression is compiled to the source of a few Python functions (one for the expression,
one for each comprehension and each ``&&`` / ``||``), executed once at compile time. A comprehension's
variable is a local of its loop and each check is inline, so an element costs no function call where the
predicate is a comparison of a field with a literal. Nothing from the expression enters that source but
literals written with :func:`repr` and names this module makes up.

One difference is deliberate: the engine converts each bound variable whole, and refuses one that holds a
value it cannot convert (an integer beyond 64 bits, a string that is not valid Unicode, a Python value that is
no CEL value: a tuple, a set, a ``datetime`` inside a ``dyn`` value, a map key that is null, a double or
bytes) even where the expression does not read that value (``size(m)`` reads how many entries ``m`` has, not
what they hold). A function reads only what the expression reads, so it answers there, as CEL's semantics
say it should. Likewise for the engine's own stop after 10,000 comprehension iterations: a comprehension the
fast path runs answers within the budget, and one in an operand of ``&&`` / ``||`` it passes over, beside an
operand with the deciding value, is not run at all (the engine, evaluating from the left, fails when it meets
that operand first).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from operator import length_hint
from typing import Any, cast

from agentguard.cel._base import VarType
from agentguard.cel._budget import Exceeded, Meter, eval_budget
from agentguard.cel._checked import CheckedExpr, Message, message, text

__all__ = ["Closure", "Unsure", "compile_fast"]


class Unsure(Exception):
    """The fast path cannot answer with certainty: the engine must evaluate the expression."""


Closure = Callable[[Mapping[str, Any]], Any]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# What an operand of ``&&`` / ``||`` or an element of ``exists`` / ``all`` may raise and still be passed over:
# an unsure value, read from a missing key or index, or of a type Python refused.
_ABSORBED = (Unsure, KeyError, IndexError, TypeError)


class _Unsupported(Exception):
    """The expression uses a construct the fast path does not compile."""


class _EngineOnly(Exception):
    """The expression is the engine's alone, not even an operand of ``&&`` / ``||`` to pass over: it builds a
    map, and the engine does not make a duplicate key (``{m.a: 1, m.b: 2}`` with ``m.a == m.b``) an error
    value that ``&&`` / ``||`` pass over, as CEL says; it stops the whole evaluation with an error."""


# --- Checks on values, called by the generated functions -----------------------------------------------------


def _unsure() -> Any:
    raise Unsure


def _int(value: Any) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _str(value: Any) -> str:
    if type(value) is not str or not value.isascii():
        raise Unsure
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _scalar(value: Any) -> Any:
    """A value the engine would hand back unchanged (the result of a whole expression)."""
    kind = type(value)
    if kind not in _SCALARS or (kind is str and not value.isascii()):
        raise Unsure
    if kind is int and not _INT64_MIN <= value <= _INT64_MAX:
        raise Unsure
    return value


def _same_scalars(a: Any, b: Any) -> None:
    """Both operands are one scalar type on which Python's operator is CEL's."""
    kind = type(a)
    if kind is not type(b) or kind not in _SCALARS:
        raise Unsure
    if kind is str:
        if not (a.isascii() and b.isascii()):
            raise Unsure
    elif kind is int and not (_INT64_MIN <= a <= _INT64_MAX and _INT64_MIN <= b <= _INT64_MAX):
        raise Unsure


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise Unsure
    return value


def _index(container: Any, key: Any) -> Any:
    kind = type(container)
    if kind is dict and type(key) is str:
        return container[key]
    if kind is list and type(key) is int and 0 <= key < len(container):
        return container[key]
    raise Unsure


def _in(item: Any, container: Any) -> bool:
    kind = type(container)
    if kind is dict and type(item) is str:
        return item in container
    if kind is list and type(item) is str and item.isascii():
        for element in container:
            if type(element) is not str or not element.isascii():
                raise Unsure
        return item in container
    raise Unsure


def _equal(a: Any, b: Any) -> bool:
    _same_scalars(a, b)
    return bool(a == b)


def _not_equal(a: Any, b: Any) -> bool:
    return not _equal(a, b)


def _ordered(a: Any, b: Any) -> None:
    """Both operands are one ordered scalar type, and not NaN (left to the engine)."""
    _same_scalars(a, b)
    if a is None or a != a or b != b:
        raise Unsure


def _less(a: Any, b: Any) -> bool:
    _ordered(a, b)
    return bool(a < b)


def _less_equal(a: Any, b: Any) -> bool:
    _ordered(a, b)
    return bool(a <= b)


def _greater(a: Any, b: Any) -> bool:
    return _less(b, a)


def _greater_equal(a: Any, b: Any) -> bool:
    return _less_equal(b, a)


def _add(a: Any, b: Any) -> Any:
    if type(a) is str:
        return _str(a) + _str(b)
    return _add_ints(a, b)


def _add_ints(a: Any, b: Any) -> int:
    """``+`` in a comprehension's body: integers only, so an iteration makes nothing that grows."""
    return _int(_int(a) + _int(b))


def _subtract(a: Any, b: Any) -> int:
    return _int(_int(a) - _int(b))


def _negate(a: Any) -> int:
    return _int(-_int(a))


def _size(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return len(_str(value))
    if kind is list or kind is dict:
        return len(value)
    raise Unsure


def _starts_with(text: Any, part: Any) -> bool:
    return _str(text).startswith(_str(part))


def _ends_with(text: Any, part: Any) -> bool:
    return _str(text).endswith(_str(part))


def _contains(text: Any, part: Any) -> bool:
    return _str(part) in _str(text)


_KEY_TYPES = frozenset({str})


def _range(value: Any, ordered: bool) -> list[Any]:
    """The elements a comprehension iterates: a list's, or a map's keys when the order does not matter (the
    engine's order is its own) and all of them are strings (as the engine converts them)."""
    kind = type(value)
    if kind is list:
        return cast(list[Any], value)
    if kind is dict and not ordered:
        keys = list(value)
        if set(map(type, keys)) <= _KEY_TYPES:
            return keys
    raise Unsure


_EXHAUSTED: Iterator[Any] = iter(())


class _Batches:
    """A comprehension's elements in batches granted by the evaluation's meter; leaving the ``with`` block
    gives back what the loop was granted and did not run, so the count is exact whenever it stops.

    A batch is a slice: the loop runs over a copy of the elements it was granted, and the list it reads from
    may change meanwhile (a live history) without changing what the loop was granted.
    """

    __slots__ = ("_batch", "_done", "_items", "_meter")

    def __init__(self, items: list[Any], meter: Meter) -> None:
        self._items = items
        self._meter = meter
        self._done = 0
        self._batch = _EXHAUSTED

    def __enter__(self) -> _Batches:
        return self

    def __exit__(self, *exc: object) -> None:
        self._meter.refund(length_hint(self._batch))

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> Iterator[Any]:
        done, items = self._done, self._items
        wanted = len(items) - done
        if wanted <= 0:
            raise StopIteration
        granted = self._meter.grant(wanted)
        self._done = done + granted
        self._batch = iter(items[done : done + granted])
        return self._batch


_NAMESPACE: dict[str, Any] = {
    "_ABSORBED": _ABSORBED,
    "Unsure": Unsure,
    "_Batches": _Batches,
    **{
        function.__name__: function
        for function in (
            _unsure,
            _bool,
            _index,
            _in,
            _equal,
            _not_equal,
            _less,
            _less_equal,
            _greater,
            _greater_equal,
            _add,
            _add_ints,
            _subtract,
            _negate,
            _size,
            _starts_with,
            _ends_with,
            _contains,
            _range,
        )
    },
}
"""What the generated source may call: these and the double literals of its expression, nothing else."""


# --- Compiling ---------------------------------------------------------------------------------------------


def compile_fast(tree: CheckedExpr, source: str, declarations: Mapping[str, VarType]) -> Closure | None:
    """A function for a checked expression (``source`` is its text, for a failure's message; ``declarations``
    the variables' declared types), or ``None`` if it uses anything the fast path does not compile."""
    if tree.expr is None:
        return None
    generator = _Generator(tree, declarations)
    try:
        body = generator.function(tree.expr)
    except (_Unsupported, _EngineOnly, RecursionError, SyntaxError):
        return None  # SyntaxError: nested deeper than Python parses

    if not generator.loops:

        def run(variables: Mapping[str, Any]) -> Any:
            try:
                return _scalar(body(variables, None))
            except (KeyError, IndexError, TypeError, RecursionError):
                raise Unsure from None

        return run

    def metered(variables: Mapping[str, Any]) -> Any:
        meter = Meter(eval_budget())
        try:
            return _scalar(body(variables, meter))
        except (KeyError, IndexError, TypeError, RecursionError):
            raise Unsure from None
        except Exceeded:
            raise meter.failure(source) from None

    return metered


# The comprehension macros, as the parser expands them, by what the loop does with each element (``{var}``
# the element, ``{predicate}`` and ``{transform}`` the macro's expressions) and what it returns.
_DECIDE = """\
    unsure = False
    with _Batches(items, M) as batches:
        for batch in batches:
            for {var} in batch:
                try:
                    t = {predicate}
                except _ABSORBED:
                    unsure = True
                    continue
                if t is {decisive}:
                    return {decisive}
                if t is not {other}:
                    unsure = True
    if unsure:
        raise Unsure
    return {other}
"""
_LOOPS = {
    "all": _DECIDE.replace("{decisive}", "False").replace("{other}", "True"),
    "exists": _DECIDE.replace("{decisive}", "True").replace("{other}", "False"),
    "exists_one": """\
    count = 0
    with _Batches(items, M) as batches:
        for batch in batches:
            for {var} in batch:
                t = {predicate}
                if t is True:
                    count += 1
                elif t is not False:
                    raise Unsure
    return count == 1
""",
    "map": """\
    out = []
    with _Batches(items, M) as batches:
        for batch in batches:
            for {var} in batch:
                out.append({transform})
    return out
""",
    "filtered map": """\
    out = []
    with _Batches(items, M) as batches:
        for batch in batches:
            for {var} in batch:
                t = {predicate}
                if t is True:
                    out.append({transform})
                elif t is not False:
                    raise Unsure
    return out
""",
}
_ORDER_FREE = frozenset({"all", "exists", "exists_one"})

_LOGIC = frozenset({"_&&_", "_||_"})

# Comparisons: (Python operator, helper checking the operand types). Against a literal of a type in _GUARDS,
# the operand's type check is inline (``{0}`` the operand's name, ``{1}`` the code computing it, see
# _Generator._held); else the helper. An int is also checked to be within int64: inline for == and !=, and
# for an ordering by one bound only, the one its outcome leaves open (see _Generator._ordered).
_COMPARISONS = {
    "_==_": ("==", "_equal"),
    "_!=_": ("!=", "_not_equal"),
    "_<_": ("<", "_less"),
    "_<=_": ("<=", "_less_equal"),
    "_>_": (">", "_greater"),
    "_>=_": (">=", "_greater_equal"),
}
_GUARDS = {
    int: f"type({{1}}) is int and {_INT64_MIN} <= {{0}} <= {_INT64_MAX}",
    str: "type({1}) is str and {0}.isascii()",
    bool: "type({1}) is bool",
}
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
# A variable declared with one of these types is read only when its value passes the check (formatted as
# _GUARDS are); the engine fails the read of a value of another type. Both bounds for an int: unlike a
# comparison's operand, the value read may go anywhere (``n`` alone, ``-n``, ``[n]...``).
_DECLARED = {VarType.STRING: "type({1}) is str", VarType.INT: _GUARDS[int], VarType.BOOL: _GUARDS[bool]}
# The builtins the generated code tests types with, made parameters of each function it defines (defaulting to
# themselves): a local is read faster than a builtin, in checks made once per element.
_FAST_NAMES = "type=type, dict=dict, int=int, str=str, bool=bool"
_BINARY = {"_[_]": "_index", "@in": "_in", "_-_": "_subtract"}
_METHODS = {"startsWith": "_starts_with", "endsWith": "_ends_with", "contains": "_contains"}


class _Generator:
    """Writes the Python source of an expression: each ``expression`` call returns the code of one node, a
    Python expression over ``V`` (the bound variables), ``M`` (the meter, or ``None`` when the expression has
    no comprehension) and the locals of the comprehension variables in scope; each ``&&`` / ``||`` and each
    comprehension becomes a function of its own (they need statements), called with those."""

    def __init__(self, tree: CheckedExpr, declarations: Mapping[str, VarType]) -> None:
        self._references = tree.references
        self._declarations = declarations
        self._overloads = tree.overloads
        self._namespace = dict(_NAMESPACE)
        self._functions: list[str] = []
        self._literals: dict[str, Any] = {}  # code -> value, of each literal
        self._count = 0
        self.loops = False
        """Whether the expression has a comprehension (and so needs a meter)."""

    def function(self, root: bytes) -> Callable[[Mapping[str, Any], Meter | None], Any]:
        """The compiled expression, a function of the variables and the meter."""
        code = self.expression(root, {}, loop=False)
        self._functions.append(f"def run(V, M, {_FAST_NAMES}):\n    return {code}\n")
        exec(compile("\n".join(self._functions), "<cel fast path>", "exec"), self._namespace)
        run: Callable[[Mapping[str, Any], Meter | None], Any] = self._namespace["run"]
        return run

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def expression(self, buf: bytes, scope: Mapping[str, str | None], loop: bool) -> str:
        """The code of one node. ``scope``: each comprehension variable's local (``None``: an accumulator,
        which the macros' own code reads, never the expression); ``loop``: inside a comprehension's body."""
        expr = message(buf)
        node_id = expr.get(2, [0])[0]
        if 3 in expr:
            return self._literal(message(expr[3][0]))
        if 4 in expr:
            name = text(message(expr[4][0]), 1)
            if name in scope:
                local = scope[name]
                if local is None:
                    raise _Unsupported
                return local
            return self._variable(self._references.get(node_id, name))
        if 5 in expr:
            if node_id in self._references:  # a.b.c resolved to a qualified variable name
                return self._variable(self._references[node_id])
            select = message(expr[5][0])
            operand, field = self.expression(select[1][0], scope, loop), text(select, 2)
            temp, value = self._held(operand)
            found = f"{field!r} in {temp}" if select.get(3, [0])[0] else f"{temp}[{field!r}]"
            return f"({found} if type({value}) is dict else _unsure())"
        if 6 in expr:
            return self._call(node_id, message(expr[6][0]), scope, loop)
        if 9 in expr:
            return self._comprehension(message(expr[9][0]), scope, loop)
        if 8 in expr:
            raise _EngineOnly
        raise _Unsupported  # list literals

    def _variable(self, name: str) -> str:
        """The code reading a bound variable. One declared ``string``, ``int`` or ``bool`` is read only when its
        value has that type (the engine fails the read of any other: ``size(s)`` of a list bound to a string
        ``s`` is an error, not the list's size); a ``timestamp`` is left to the engine, as nothing here reads
        one."""
        code = f"V[{name!r}]"
        declared = self._declarations.get(name, VarType.DYN)
        if declared is VarType.DYN:
            return code
        if declared not in _DECLARED:
            raise _Unsupported
        temp = self._name("t")
        return f"({temp} if {_DECLARED[declared].format(temp, f'{temp} := {code}')} else _unsure())"

    def _held(self, code: str) -> tuple[str, str]:
        """A name for the value of ``code`` and the code that computes it into that name, for an expression
        that tests the value's type before it uses it: a comprehension variable is already one."""
        if code.isidentifier():
            return code, code
        temp = self._name("t")
        return temp, f"{temp} := {code}"

    def _literal(self, constant: Message) -> str:
        value: Any
        if 1 in constant:
            value = None
        elif 2 in constant:
            value = bool(constant[2][0])
        elif 3 in constant:
            value = constant[3][0]
            if value >= 2**63:
                value -= 2**64
        elif 5 in constant:
            value = struct.unpack("<d", constant[5][0])[0]
            name = self._name("k")  # repr() of inf or nan is no Python literal
            self._namespace[name] = value
            return name
        elif 6 in constant:
            value = bytes(constant[6][0]).decode()
            if not value.isascii():
                raise _Unsupported
        else:  # uint, bytes, duration, timestamp
            raise _Unsupported
        code = repr(value)
        self._literals[code] = value
        return code

    def _call(self, node_id: int, call: Message, scope: Mapping[str, str | None], loop: bool) -> str:
        function = text(call, 2)
        receiver = 1 in call
        if function in _LOGIC and not receiver:
            return self._logic(function == "_||_", call.get(3, []), scope, loop)
        if function == "_+_" and loop and "add_int64" not in self._overloads.get(node_id, {"add_int64"}):
            raise _Unsupported  # a concatenation in a loop: for the engine, and its estimate
        operands = [self.expression(operand, scope, loop) for operand in call.get(1, []) + call.get(3, [])]
        count = len(operands)
        if function == "!_" and count == 1:
            temp, value = self._held(operands[0])
            return f"(not {temp} if type({value}) is bool else _unsure())"
        if function == "-_" and count == 1:
            return f"_negate({operands[0]})"
        if function == "_?_:_" and count == 3:
            condition, then, otherwise = operands
            temp = self._name("t")
            return f"({then} if ({temp} := {condition}) is True else {otherwise} if {temp} is False else _unsure())"
        if function == "size" and count == 1:
            return f"_size({operands[0]})"
        if function in _METHODS and receiver and count == 2:
            return f"{_METHODS[function]}({operands[0]}, {operands[1]})"
        if count != 2 or receiver:
            raise _Unsupported
        left, right = operands
        if function in _COMPARISONS:
            return self._comparison(function, left, right)
        if function == "_+_":
            return f"{'_add_ints' if loop else '_add'}({left}, {right})"
        if function in _BINARY:
            return f"{_BINARY[function]}({left}, {right})"
        raise _Unsupported

    def _comparison(self, function: str, left: str, right: str) -> str:
        """A comparison, with the operand's type checked inline when the other is a literal (the usual
        ``e.inputs.amount > 500``): no helper is called where the answer is plain."""
        symbol, helper = _COMPARISONS[function]
        if type(self._literals.get(right)) in _GUARDS:
            literal, (temp, value) = right, self._held(left)
            compared, fallback, facing = f"{temp} {symbol} {right}", f"{helper}({temp}, {right})", symbol
        elif type(self._literals.get(left)) in _GUARDS:
            literal, (temp, value) = left, self._held(right)
            compared, fallback = f"{left} {symbol} {temp}", f"{helper}({left}, {temp})"
            facing = _MIRRORED.get(symbol, symbol)  # as if written ``temp facing literal``
        else:
            return f"{helper}({left}, {right})"
        kind = type(self._literals[literal])
        if kind is int and facing in _MIRRORED:
            return f"({self._ordered(temp, facing, literal)} if type({value}) is int else {fallback})"
        return f"({compared} if {_GUARDS[kind].format(temp, value)} else {fallback})"

    @staticmethod
    def _ordered(temp: str, symbol: str, literal: str) -> str:
        """``temp symbol literal`` for an int ``temp``, unsure beyond int64. The outcome tells on which side of
        the literal (itself within int64) ``temp`` lies, so only that side's bound is compared: a third
        fewer comparisons in the hottest check of a comprehension over numbers."""
        above, below = f"{temp} <= {_INT64_MAX}", f"{temp} >= {_INT64_MIN}"
        holds, fails = (above, below) if symbol in (">", ">=") else (below, above)
        return (
            f"((True if {holds} else _unsure()) if {temp} {symbol} {literal} "
            f"else (False if {fails} else _unsure()))"
        )

    def _logic(self, decisive: bool, args: list[bytes], scope: Mapping[str, str | None], loop: bool) -> str:
        """CEL's ``&&`` (``decisive`` false) and ``||`` (true): an operand with the decisive value decides,
        whatever the others are, errors included; otherwise every operand must be a known bool. An operand the
        fast path cannot compile (a regular expression, say) is unsure, not unsupported: another operand with
        the deciding value still answers (``toolId == "refund" && inputs.x.matches(...)`` is false whenever
        the tool is another one, as in CEL, whatever the rest would give)."""
        if len(args) < 2:
            raise _Unsupported
        lines = ["    unsure = False"]
        compiled = False
        for arg in args:
            try:
                code = self.expression(arg, scope, loop)
            except _Unsupported:
                lines.append("    unsure = True")
                continue
            compiled = True
            lines += [
                "    try:",
                f"        t = {code}",
                f"        if t is {decisive}:",
                f"            return {decisive}",
                f"        if t is not {not decisive}:",
                "            unsure = True",
                "    except _ABSORBED:",
                "        unsure = True",
            ]
        if not compiled:
            raise _Unsupported
        lines += ["    if unsure:", "        raise Unsure", f"    return {not decisive}"]
        return self._define("L", scope, "\n".join(lines) + "\n")

    def _comprehension(self, loop_expr: Message, scope: Mapping[str, str | None], loop: bool) -> str:
        kind, predicate, transform = _macro(loop_expr)
        items = self._range(loop_expr[2][0], scope, loop)
        local = self._name("i")
        inner = {**scope, text(loop_expr, 3): None, text(loop_expr, 1): local}
        body = _LOOPS[kind].format(
            var=local,
            predicate=self.expression(predicate, inner, loop=True) if predicate is not None else "",
            transform=self.expression(transform, inner, loop=True) if transform is not None else "",
        )
        self.loops = True
        return self._define("C", scope, f"    items = _range({items}, {kind not in _ORDER_FREE})\n{body}")

    def _range(self, buf: bytes, scope: Mapping[str, str | None], loop: bool) -> str:
        """A comprehension's range: an expression, or a list literal (``[1, 2, 3].all(...)``), its size fixed
        by the expression; list literals elsewhere are left to the engine (``==`` on lists, say)."""
        expr = message(buf)
        if 7 not in expr:
            return self.expression(buf, scope, loop)
        listed = message(expr[7][0])
        if 2 in listed:  # optional elements
            raise _Unsupported
        return f"[{', '.join(self.expression(element, scope, loop) for element in listed.get(1, []))}]"

    def _define(self, prefix: str, scope: Mapping[str, str | None], body: str) -> str:
        """Add a function with ``body``; return the code that calls it from where ``scope`` holds."""
        name = self._name(prefix)
        parameters = ", ".join(["V", "M", *(local for local in scope.values() if local is not None)])
        self._functions.append(f"def {name}({parameters}, {_FAST_NAMES}):\n{body}")
        return f"{name}({parameters})"


def _macro(loop: Message) -> tuple[str, bytes | None, bytes | None]:
    """Which macro the parser expanded into this comprehension, with its predicate and transform.

    The expansions are matched whole (cel-cpp's, as serialized); any other comprehension (``cel.bind``, the
    two-variable macros, a future expansion) is unsupported rather than guessed at.
    """
    accumulator = text(loop, 3)
    if text(loop, 8) or text(loop, 1) in ("", accumulator) or not all(n in loop for n in range(2, 8)):
        raise _Unsupported
    init, condition, step, result = (message(loop[n][0]) for n in (4, 5, 6, 7))
    true, false, zero, one = {2: [1]}, {2: [0]}, {3: [0]}, {3: [1]}
    if _is(result, accumulator) and _literal(init) == true:
        (guard,) = _args(condition, "@not_strictly_false", 1)
        accumulated, predicate = _args(step, "_&&_", 2)
        if _is(message(guard), accumulator) and _is(message(accumulated), accumulator):
            return "all", predicate, None
    if _is(result, accumulator) and _literal(init) == false:
        (guard,) = _args(condition, "@not_strictly_false", 1)
        (negated,) = _args(message(guard), "!_", 1)
        accumulated, predicate = _args(step, "_||_", 2)
        if _is(message(negated), accumulator) and _is(message(accumulated), accumulator):
            return "exists", predicate, None
    if _literal(condition) != true:
        raise _Unsupported
    if _literal(init) == zero:
        accumulated, compared = _args(result, "_==_", 2)
        predicate, counted, unchanged = _args(step, "_?_:_", 3)
        accumulated_too, increment = _args(message(counted), "_+_", 2)
        if (
            _is(message(accumulated), accumulator)
            and _literal(message(compared)) == one
            and _is(message(accumulated_too), accumulator)
            and _literal(message(increment)) == one
            and _is(message(unchanged), accumulator)
        ):
            return "exists_one", predicate, None
        raise _Unsupported
    if 7 not in init or message(init[7][0]) or not _is(result, accumulator):
        raise _Unsupported
    if text(message(step[6][0]) if 6 in step else {}, 2) == "_+_":
        return "map", None, _appended(step, accumulator)
    predicate, appended, unchanged = _args(step, "_?_:_", 3)
    if not _is(message(unchanged), accumulator):
        raise _Unsupported
    return "filtered map", predicate, _appended(message(appended), accumulator)


def _args(expr: Message, function: str, count: int) -> list[bytes]:
    """The operands of ``expr``, a call of the global ``function`` with ``count`` of them; else unsupported."""
    call = message(expr[6][0]) if 6 in expr else {}
    operands: list[bytes] = call.get(3, [])
    if text(call, 2) != function or 1 in call or len(operands) != count:
        raise _Unsupported
    return operands


def _is(expr: Message, name: str) -> bool:
    """Whether the node is the identifier ``name``."""
    return 4 in expr and text(message(expr[4][0]), 1) == name


def _literal(expr: Message) -> Message | None:
    return message(expr[3][0]) if 3 in expr else None


def _appended(step: Message, accumulator: str) -> bytes:
    """What ``accumulator + [element]`` appends; else unsupported."""
    accumulated, appended = _args(step, "_+_", 2)
    listed = message(appended)
    elements: list[bytes] = message(listed[7][0]).get(1, []) if 7 in listed else []
    if not _is(message(accumulated), accumulator) or len(elements) != 1 or 2 in message(listed[7][0]):
        raise _Unsupported  # (field 2 of a list literal: optional elements)
    return elements[0]
