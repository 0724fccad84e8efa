"""Read an agent document, report every problem in it at once, and compile its CEL expressions.

Three steps, each usable alone:

* :func:`parse_spec` -- YAML text to a validated :class:`AgentSpec`. YAML is read by :func:`read_yaml`:
  safely (only plain data: mappings, lists, strings, numbers, booleans, null, timestamps), duplicate keys
  are errors rather than silently overwritten, and every problem -- syntax, schema, names -- is reported
  with its file position.
* :func:`compile_spec` -- an :class:`AgentSpec` to a :class:`CompiledSpec` whose CEL programs are compiled
  once, so a broken expression fails at load time (ARCHITECTURE decision 4) instead of on a live tool call.
* :func:`load_spec` / :func:`load_spec_text` -- both of the above, with the problems of both steps reported
  together where the document is readable enough for that.

A file path and YAML text are deliberately separate functions: guessing whether a ``str`` is a path or a
document is how a typo in a path turns into a confusing YAML error.
"""

from __future__ import annotations

import difflib
import os
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from agentguard.cel import CelBackend, CelCompileError, CelProgram, VarType, get_backend
from agentguard.errors import SpecError, SpecProblem

from ._lint import dashed_name_hint
from ._models import AgentSpec
from ._names import Reference, parse_reference
from ._yaml import (
    DEFAULT_LIMITS,
    FieldPath,
    Labels,
    LoadLimits,
    Position,
    Positions,
    describe_value,
    dotted,
    field_problem,
    in_file_order,
    locate,
    read_text_file,
    read_yaml,
)

__all__ = [
    "ENGAGEMENT_DECLARATIONS",
    "GUARDRAIL_DECLARATIONS",
    "CompiledSpec",
    "compile_spec",
    "load_spec",
    "load_spec_text",
    "parse_spec",
    "validation_reason",
]

ENGAGEMENT_DECLARATIONS: Mapping[str, VarType] = types.MappingProxyType(
    {
        "started_at": VarType.TIMESTAMP,
        "user": VarType.DYN,
        "recent": VarType.DYN,
        "history": VarType.DYN,
    }
)
"""Variables a restriction assertion or an ``exposes`` selection sees: the Engagement's top-level fields."""

GUARDRAIL_DECLARATIONS: Mapping[str, VarType] = types.MappingProxyType({"output": VarType.DYN})
"""Variables a guardrail assertion sees: the guardrail tool's output."""

_PROBLEM_IF_EMPTY = "the document is empty; expected a mapping with kind, name, description, ..."


# --------------------------------------------------------------------------------------------- parsing


@dataclass
class _Parsed:
    """What parsing produced: the spec if valid, else the raw data and every problem found."""

    spec: AgentSpec | None
    data: object
    positions: Positions
    problems: list[SpecProblem]


def _parse(text: str, source: str, limits: LoadLimits) -> _Parsed:
    doc = read_yaml(text, source, empty=_PROBLEM_IF_EMPTY, limits=limits)
    if not doc.readable:
        return _Parsed(None, None, {}, doc.problems)
    problems = doc.problems
    try:
        spec = AgentSpec.model_validate(doc.data)
    except ValidationError as exc:
        for error in exc.errors():
            if not doc.covers(error["loc"]):
                problems.append(_validation_problem(source, error, doc.positions, doc.labels))
        return _Parsed(None, doc.data, doc.positions, in_file_order(problems))
    if problems:
        return _Parsed(None, doc.data, doc.positions, in_file_order(problems))
    spec._positions = doc.positions
    spec._source = source
    return _Parsed(spec, doc.data, doc.positions, [])


def _validation_problem(
    source: str, error: ErrorDetails, positions: Positions, labels: Labels
) -> SpecProblem:
    loc, reason = validation_reason(error, AgentSpec)
    return field_problem(source, loc, reason, locate(positions, loc), labels)


def validation_reason(error: ErrorDetails, model: type[BaseModel]) -> tuple[FieldPath, str]:
    """The field a pydantic error of validating ``model`` is about, and why, said the way spec problems
    say it: ``unknown field 'whn' (did you mean 'when'?)``, ``expected a string, got the number 3``.

    Every YAML document agentguard validates with a model (specs, guardian rules) reports its errors so.
    """
    loc: FieldPath = tuple(error["loc"])
    value = error["input"]
    kind = error["type"]
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
        reason = (
            f"key {value!r} is not a valid reference: {error['ctx']['error']}"
            if kind == "value_error"
            else f"keys must be strings, not {describe_value(value)}"
        )
    elif kind == "invalid_key":
        reason = f"keys must be strings, not {describe_value(value)}"
    elif kind == "missing":
        reason = "required field is missing"
    elif kind == "extra_forbidden":
        reason = f"unknown field {loc[-1]!r}"
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1]), n=1)
        if close:
            reason += f" (did you mean {close[0]!r}?)"
    elif kind == "value_error":
        reason = str(error["ctx"]["error"])
    elif kind in ("literal_error", "enum"):
        reason = f"must be {error['ctx']['expected']}, not {value!r}"
    elif kind == "greater_than_equal":
        reason = f"must be at least {error['ctx']['ge']}, not {value!r}"
    elif kind in _EXPECTED:
        reason = f"expected {_EXPECTED[kind]}, got {describe_value(value)}"
        if kind == "string_type" and not isinstance(value, list | dict):
            reason += " (quote the value to make it a string)"
    else:
        reason = error["msg"]
    return loc, reason


_EXPECTED = {
    "string_type": "a string",
    "bool_type": "true or false",
    "int_type": "an integer",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _fields_at(model: type[BaseModel], path: FieldPath) -> list[str]:
    """Field names of the model found at ``path`` in a document of ``model`` (for "did you mean" hints)."""
    annotation: object = model
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model_field = annotation.model_fields.get(str(part))
            if model_field is None:
                return []
            annotation = model_field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        elif get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: object) -> object:
    """Strip ``Annotated[...]`` and ``X | None`` down to ``X``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def parse_spec(text: str, source: str = "<string>", *, limits: LoadLimits = DEFAULT_LIMITS) -> AgentSpec:
    """Parse and validate an agent document; raise :class:`SpecError` listing every problem found.

    ``source`` names the document in problem reports (a file name, a URL). CEL expressions are not
    compiled here -- see :func:`compile_spec` -- but the returned spec remembers where each field was, so
    that compile errors can point at the right line. A document past ``limits`` is refused unread.
    """
    parsed = _parse(text, source, limits)
    if parsed.spec is None:
        raise SpecError(parsed.problems)
    return parsed.spec


# ------------------------------------------------------------------------------------------ compiling


@dataclass(frozen=True)
class CompiledSpec:
    """An agent spec with every CEL expression compiled, ready for the policy layer.

    All mappings are read-only and keyed by capability key as written in the spec (``send-email``,
    ``oagent://billing``); assertion mappings hold only the capabilities that set an assertion.
    """

    spec: AgentSpec
    source: str
    backend_name: str
    references: Mapping[str, Reference]
    input_assertions: Mapping[str, CelProgram] = field(default_factory=lambda: types.MappingProxyType({}))
    output_assertions: Mapping[str, CelProgram] = field(default_factory=lambda: types.MappingProxyType({}))
    guardrail_input: CelProgram | None = None
    guardrail_output: CelProgram | None = None
    exposes: Mapping[str, CelProgram] = field(default_factory=lambda: types.MappingProxyType({}))


@dataclass(frozen=True)
class _CelSite:
    path: tuple[str, ...]
    expression: str
    declarations: Mapping[str, VarType]


def _cel_sites(data: object) -> Iterator[_CelSite]:
    """Every CEL expression in an agent document given as plain data, valid or not.

    Working on plain data (not the model) lets a document that fails validation still have its CEL
    checked, so one run reports both kinds of problem.
    """
    if not isinstance(data, dict):
        return
    capabilities = data.get("capabilities")
    if isinstance(capabilities, dict):
        for key, capability in capabilities.items():
            if not isinstance(key, str) or not isinstance(capability, dict):
                continue
            for which in ("input_restriction", "output_restriction"):
                restriction = capability.get(which)
                if isinstance(restriction, dict) and isinstance(restriction.get("assertion"), str):
                    where = ("capabilities", key, which, "assertion")
                    yield _CelSite(where, restriction["assertion"], ENGAGEMENT_DECLARATIONS)
    guardrails = data.get("guardrails")
    if isinstance(guardrails, dict):
        for which in ("input", "output"):
            guardrail = guardrails.get(which)
            if isinstance(guardrail, dict) and isinstance(guardrail.get("assertion"), str):
                yield _CelSite(
                    ("guardrails", which, "assertion"), guardrail["assertion"], GUARDRAIL_DECLARATIONS
                )
    exposes = data.get("exposes")
    if isinstance(exposes, dict):
        for key, selection in exposes.items():
            if isinstance(key, str) and isinstance(selection, str):
                yield _CelSite(("exposes", key), selection, ENGAGEMENT_DECLARATIONS)


def _compile_sites(
    sites: Iterator[_CelSite],
    backend: CelBackend,
    source: str,
    positions: Mapping[FieldPath, Position],
    limits: LoadLimits,
) -> tuple[dict[tuple[str, ...], CelProgram], list[SpecProblem]]:
    """Compile each site; each distinct (expression, declarations) once, within ``limits.max_cel_chars``.

    YAML aliases can repeat one long expression at thousands of sites: compiling it at each took two
    minutes for a 140 KB file. The sites then share one program (programs are immutable and thread-safe).
    """
    programs: dict[tuple[str, ...], CelProgram] = {}
    problems: list[SpecProblem] = []
    compiled: dict[tuple[str, frozenset[tuple[str, VarType]]], CelProgram | CelCompileError] = {}
    budget = limits.max_cel_chars
    for site in sites:
        key = (site.expression, frozenset(site.declarations.items()))
        outcome = compiled.get(key)
        if outcome is None:
            budget -= len(site.expression)
            if budget < 0:
                line, column = positions.get(site.path, (None, None))
                reason = (
                    f"the spec's distinct CEL expressions are longer than {limits.max_cel_chars} characters "
                    "in all (LoadLimits.max_cel_chars); not compiled"
                )
                problems.append(SpecProblem(source, dotted(site.path), reason, line, column))
                break
            try:
                outcome = backend.compile(site.expression, site.declarations)
            except CelCompileError as exc:
                outcome = exc
            compiled[key] = outcome
        if isinstance(outcome, CelCompileError):
            line, column = positions.get(site.path, (None, None))
            problems.append(
                SpecProblem(
                    source=source,
                    field=dotted(site.path),
                    reason=f"invalid CEL expression: {outcome.message}{dashed_name_hint(outcome)}",
                    line=line,
                    column=column,
                    expression_line=outcome.line,
                    expression_column=outcome.column,
                )
            )
        else:
            programs[site.path] = outcome
    return programs, problems


def compile_spec(
    spec: AgentSpec, backend: CelBackend, source: str | None = None, *, limits: LoadLimits = DEFAULT_LIMITS
) -> CompiledSpec:
    """Compile every CEL expression of ``spec``; raise :class:`SpecError` listing every failure.

    Restriction assertions and ``exposes`` selections are compiled against the Engagement variables
    (:data:`ENGAGEMENT_DECLARATIONS`), guardrail assertions against ``output``
    (:data:`GUARDRAIL_DECLARATIONS`). ``source`` defaults to the name the spec was parsed under (or
    ``"<string>"`` for a spec built in code); problems carry the line of the field when the spec came from
    :func:`parse_spec`. Each distinct expression is compiled once, and all of them together may be at most
    ``limits.max_cel_chars`` long.
    """
    source = source if source is not None else spec._source or "<string>"
    sites = _cel_sites(spec.model_dump())
    programs, problems = _compile_sites(sites, backend, source, spec._positions, limits)
    if problems:
        raise SpecError(in_file_order(problems))

    def restriction_programs(which: str) -> Mapping[str, CelProgram]:
        found = {key: programs.get(("capabilities", key, which, "assertion")) for key in spec.capabilities}
        return types.MappingProxyType({key: program for key, program in found.items() if program is not None})

    exposes = {key: programs[("exposes", key)] for key in spec.exposes or {}}
    return CompiledSpec(
        spec=spec,
        source=source,
        backend_name=backend.name,
        references=types.MappingProxyType({key: parse_reference(key) for key in spec.capabilities}),
        input_assertions=restriction_programs("input_restriction"),
        output_assertions=restriction_programs("output_restriction"),
        guardrail_input=programs.get(("guardrails", "input", "assertion")),
        guardrail_output=programs.get(("guardrails", "output", "assertion")),
        exposes=types.MappingProxyType(exposes),
    )


# -------------------------------------------------------------------------------------------- loading


def load_spec_text(
    text: str,
    *,
    backend: CelBackend | None = None,
    source: str = "<string>",
    limits: LoadLimits = DEFAULT_LIMITS,
) -> CompiledSpec:
    """Parse, validate and compile an agent document given as YAML text.

    ``backend`` defaults to :func:`agentguard.cel.get_backend`'s choice. When the document fails
    validation, its CEL expressions are still compiled where they can be found, and all problems are
    raised together in one :class:`SpecError`. ``limits`` bound the work (:class:`LoadLimits`): a document
    past one is refused with a problem naming the limit.
    """
    backend = backend if backend is not None else get_backend()
    parsed = _parse(text, source, limits)
    if parsed.spec is not None:
        return compile_spec(parsed.spec, backend, source, limits=limits)
    sites = _cel_sites(parsed.data)
    _, cel_problems = _compile_sites(sites, backend, source, parsed.positions, limits)
    raise SpecError(in_file_order(parsed.problems + cel_problems))


def load_spec(
    path: str | os.PathLike[str], *, backend: CelBackend | None = None, limits: LoadLimits = DEFAULT_LIMITS
) -> CompiledSpec:
    """Load an agent document from a file: parse, validate and compile it (see :func:`load_spec_text`).

    Problems name the file as given. A file that cannot be read, or is larger than ``limits.max_bytes``
    (checked before reading), is a :class:`SpecError` with one problem.
    """
    text = read_text_file(path, limits)
    return load_spec_text(text, backend=backend, source=os.fspath(path), limits=limits)
