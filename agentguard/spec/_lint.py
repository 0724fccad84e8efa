"""What a valid spec's assertions and ``exposes`` selections will certainly (or likely) get wrong at run time.

A spec can load -- every expression compiles -- and still fail on every call: ``recent["web-serch"]`` names a
capability the spec does not have (a typo: the key is never there, the assertion always errors), ``user.mail``
reads a field the ``user`` variable does not have, ``recent["refund"].input`` misspells ``inputs``. CEL cannot
know: the Engagement variables are declared ``dyn``. :func:`lint_spec` knows the Engagement's shape::

    user         id, email
    recent       _name, and one entry per invoked name: inputs, outputs
    history      _list, _total, and one list of entries per invoked name

and checks it against what each compiled expression reads (:attr:`agentguard.cel.CelProgram.reads`, taken from
the syntax tree: a comment or a string literal is never mistaken for a read). A backend that cannot tell what
an expression reads (cel-python reports every variable read whole) leaves nothing to check.

Findings are *errors* when the step will certainly fail and *warnings* when it likely will: a name that is
neither a capability nor a near-miss of one may be an unlisted tool a guard lets through with
``unknown_capability="allow"``; a guardrail tool is in ``recent`` only when the agent also calls it itself.
Reviewers and guardrail tools a built :class:`~agentguard.Guard` lacks are passed in as its
``missing_configuration()`` and are errors: such a guard refuses to start an engagement.

Example::

    from agentguard.spec import lint_spec, load_spec_text

    found = lint_spec(load_spec_text(text, source="agent.yaml"))
    for problem in found.errors:
        print(problem)   # agent.yaml:9:7: capabilities.send-email.input_restriction.assertion: user.mail: ...
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentguard.cel import CelCompileError, CelProgram, Reads
from agentguard.errors import SpecProblem

from ._yaml import dotted, in_file_order

if TYPE_CHECKING:
    from ._loader import CompiledSpec

__all__ = ["SpecFindings", "dashed_name_hint", "lint_spec"]

_USER_FIELDS = ("id", "email")
_ENTRY_FIELDS = ("inputs", "outputs")
_RECENT_RESERVED = ("_name",)
_HISTORY_RESERVED = ("_list", "_total")
_SCALARS: Mapping[tuple[str, ...], str] = {
    ("user", "id"): "a string",
    ("user", "email"): "a string",
    ("recent", "_name"): "a string (the last invoked name)",
    ("history", "_list"): "a list of names",
    ("history", "_total"): "a number",
}
"""Members of the Engagement view that hold a plain value: selecting a field of one always fails."""


@dataclass(frozen=True)
class SpecFindings:
    """What :func:`lint_spec` found: ``errors`` will certainly fail at run time, ``warnings`` likely will.

    Both in file order, each a :class:`~agentguard.errors.SpecProblem` with file, line, column and field.
    """

    errors: tuple[SpecProblem, ...] = ()
    warnings: tuple[SpecProblem, ...] = ()


@dataclass
class _Collector:
    source: str
    positions: Mapping[tuple[object, ...], tuple[int, int]]
    errors: list[SpecProblem] = field(default_factory=list)
    warnings: list[SpecProblem] = field(default_factory=list)

    def add(self, path: tuple[object, ...], reason: str, *, certain: bool) -> None:
        line, column = self.positions.get(path, (None, None))
        problem = SpecProblem(self.source, dotted(path), reason, line, column)
        (self.errors if certain else self.warnings).append(problem)


def lint_spec(
    compiled: CompiledSpec, *, missing: Sequence[str] = (), unknown_capability: str | None = None
) -> SpecFindings:
    """Check what ``compiled``'s restriction assertions and ``exposes`` selections read against the
    Engagement's shape and the spec's capabilities; never raises.

    ``missing`` is what a built guard lacks (:meth:`agentguard.Guard.missing_configuration`): each piece is
    an error placed at the ``require_review`` or ``tool_name`` fields naming it (or at the document when a
    review gate, not the spec, names it). ``unknown_capability`` is a built guard's setting: under
    ``"deny"`` a name that is not a capability is certain to be missing, an error rather than a warning.
    """
    spec = compiled.spec
    found = _Collector(compiled.source, spec._positions)
    names = _Names(
        deny_unknown=unknown_capability == "deny",
        recorded={reference.name: key for key, reference in compiled.references.items()},
        keys=frozenset(compiled.references),
        guardrail_tools=frozenset(
            rule.tool_name for rule in (spec.guardrails.input, spec.guardrails.output) if rule is not None
        )
        if spec.guardrails is not None
        else frozenset(),
    )
    for path, program in _engagement_programs(compiled):
        for certain, reason in _check_reads(program, names):
            found.add(path, reason, certain=certain)
    named = list(_named_fields(compiled))
    for piece in missing:
        paths = [path for path, value in named if repr(value) in piece]
        for path in paths or [()]:
            found.add(path, f"not registered with the guard: {piece}", certain=True)
    return SpecFindings(tuple(in_file_order(found.errors)), tuple(in_file_order(found.warnings)))


def _engagement_programs(compiled: CompiledSpec) -> Iterator[tuple[tuple[object, ...], CelProgram]]:
    """Every expression over the Engagement, with the path of its field."""
    for which, programs in (
        ("input_restriction", compiled.input_assertions),
        ("output_restriction", compiled.output_assertions),
    ):
        for key, program in programs.items():
            yield ("capabilities", key, which, "assertion"), program
    for key, program in compiled.exposes.items():
        yield ("exposes", key), program


def _named_fields(compiled: CompiledSpec) -> Iterator[tuple[tuple[object, ...], str]]:
    """The fields naming a reviewer or a guardrail tool a guard must be given, with the name."""
    spec = compiled.spec
    for key, capability in spec.capabilities.items():
        for which in ("input_restriction", "output_restriction"):
            restriction = getattr(capability, which)
            if restriction is not None and restriction.require_review:
                yield ("capabilities", key, which, "require_review"), restriction.require_review
    if spec.guardrails is not None:
        for phase, rule in (("input", spec.guardrails.input), ("output", spec.guardrails.output)):
            if rule is not None:
                yield ("guardrails", phase, "tool_name"), rule.tool_name


@dataclass(frozen=True)
class _Names:
    deny_unknown: bool
    """The guard refuses calls to names that are not capabilities (known only for a built guard)."""
    recorded: Mapping[str, str]
    """The name a call is recorded under in ``recent`` / ``history`` -> its capability key."""
    keys: frozenset[str]
    guardrail_tools: frozenset[str]


def _check_reads(program: CelProgram, names: _Names) -> Iterator[tuple[bool, str]]:
    """``(certain, reason)`` for each read of ``program`` the Engagement cannot satisfy."""
    reads = program.reads
    yield from _fields(("user",), reads.get("user"), _USER_FIELDS, "its fields are")
    for variable, reserved in (("recent", _RECENT_RESERVED), ("history", _HISTORY_RESERVED)):
        members = reads.get(variable)
        for member, below in (members or {}).items():
            where = (variable, member)
            if member.startswith("_"):
                yield from _fields((variable,), {member: below}, reserved, "its reserved members are")
                continue
            yield from _name(variable, member, names)
            if variable == "recent":
                yield from _fields(where, below, _ENTRY_FIELDS, "an entry's fields are")
            elif below is not None:
                selected = ", ".join(f"'{part}'" for part in below)
                yield (
                    True,
                    (
                        f"{_shown(where)} is a list of calls, which has no field {selected}: take one call "
                        f"({_shown(where)}[0].inputs), or test them all ({_shown(where)}.exists(c, ...))"
                    ),
                )


def _fields(
    where: tuple[str, ...], reads: Reads, allowed: Sequence[str], listing: str
) -> Iterator[tuple[bool, str]]:
    """Errors for the members ``reads`` selects of the value at ``where`` that are not in ``allowed``."""
    for member, below in (reads or {}).items():
        if member not in allowed:
            close = _close(member, allowed)
            yield (
                True,
                (
                    f"{_shown((*where, member))}: {_shown(where)} has no field {member!r}{close}; "
                    f"{listing} {', '.join(allowed)}"
                ),
            )
            continue
        kind = _SCALARS.get((*where, member))
        if kind is not None and below:
            yield (
                True,
                f"{_shown((*where, member, *below))}: {_shown((*where, member))} is {kind}, with no fields",
            )


def _name(variable: str, name: str, names: _Names) -> Iterator[tuple[bool, str]]:
    """A finding when ``recent[name]`` / ``history[name]`` is a name no call is recorded under."""
    shown = _shown((variable, name))
    if name in names.recorded:
        return
    if name in names.keys:  # oagent://billing-agent is called, and recorded, by its agent name
        recorded = next(n for n, key in names.recorded.items() if key == name)
        yield (
            True,
            f"{shown}: calls of {name!r} are recorded by agent name: write {_shown((variable, recorded))}",
        )
    elif name in names.guardrail_tools:
        yield (
            False,
            (
                f"{shown}: {name!r} is a guardrail tool, not a capability: the guard's own guardrail calls are not "
                "recorded, so it is there only when the agent calls it itself"
            ),
        )
    else:
        close = _close(name, list(names.recorded))
        if close:  # a typo of a capability: the name that is recorded is the other one
            yield True, f"{shown}: {name!r} is not a capability of this spec{close}"
        elif names.deny_unknown:
            yield True, f"{shown}: {name!r} is not a capability of this spec, and the guard refuses any other"
        else:
            yield (
                False,
                (
                    f"{shown}: {name!r} is not a capability of this spec: a call to it is refused unless the "
                    "guard is built with unknown_capability='allow' or 'observe'"
                ),
            )


def _close(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _shown(path: Sequence[str]) -> str:
    """``recent["send-email"].inputs``: names of calls in brackets, fields dotted, as an assertion writes them."""
    head, *rest = path
    text = head
    for index, part in enumerate(rest):
        is_name = index == 0 and head in ("recent", "history") and not part.startswith("_")
        text += f'["{part}"]' if is_name or not part.isidentifier() else f".{part}"
    return text


_DASHED = re.compile(r"\b(recent|history)\s*\.\s*([A-Za-z_]\w*(?:\s*-\s*[A-Za-z_]\w*)+)")
_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")


def dashed_name_hint(error: CelCompileError) -> str:
    """A hint for a dashed name written as a field (``recent.book-flight.inputs``), else ``""``.

    CEL reads ``recent.book-flight.inputs`` as ``recent.book - flight.inputs`` and reports the undeclared
    ``flight.inputs``. The expression does not compile, so there is no syntax tree: the hint is given when a
    name the error reports undeclared continues a ``recent.<a>-<b>`` run in the source text.
    """
    undeclared = {name.split(".")[0] for name in _UNDECLARED.findall(error.message)}
    hints = []
    for match in _DASHED.finditer(error.expression):
        parts = [part.strip() for part in match.group(2).split("-")]
        if undeclared.intersection(parts[1:]):
            name = "-".join(parts)
            hints.append(f'{match.group(1)}["{name}"] (a dash in a field name reads as a minus)')
    return f"; write {', '.join(hints)}" if hints else ""
