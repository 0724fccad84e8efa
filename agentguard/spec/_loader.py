"""Read an agent document, report every problem in it at once, and compile its CEL expressions.

Three steps, each usable alone:

* :func:`parse_spec` -- YAML text to a validated :class:`AgentSpec`. YAML is read safely (only plain data:
  mappings, lists, strings, numbers, booleans, null, timestamps), duplicate keys are errors rather than
  silently overwritten, and every problem -- syntax, schema, names -- is reported with its file position.
* :func:`compile_spec` -- an :class:`AgentSpec` to a :class:`CompiledSpec` whose CEL programs are compiled
  once, so a broken expression fails at load time (ARCHITECTURE decision 4) instead of on a live tool call.
* :func:`load_spec` / :func:`load_spec_text` -- both of the above, with the problems of both steps reported
  together where the document is readable enough for that.

A file path and YAML text are deliberately separate functions: guessing whether a ``str`` is a path or a
document is how a typo in a path turns into a confusing YAML error.
"""

from __future__ import annotations

import datetime
import difflib
import os
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agentguard.cel import CelBackend, CelCompileError, CelProgram, VarType, get_backend
from agentguard.errors import SpecError, SpecProblem

from ._models import AgentSpec
from ._names import Reference, parse_reference

__all__ = [
    "ENGAGEMENT_DECLARATIONS",
    "GUARDRAIL_DECLARATIONS",
    "CompiledSpec",
    "compile_spec",
    "load_spec",
    "load_spec_text",
    "parse_spec",
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

_FieldPath = tuple[object, ...]
_Positions = dict[_FieldPath, tuple[int, int]]
# How a non-string key was written (`yes`, `12`), keyed by its path: pydantic reports True as 1.
_Labels = Mapping[_FieldPath, str]
_NO_LABELS: _Labels = types.MappingProxyType({})

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"

# Aliases let a few lines of YAML expand into billions of nodes ("billion laughs"); a real agent document
# has at most a few thousand. Past this, parsing stops instead of exhausting memory.
_MAX_NODES = 100_000


# --------------------------------------------------------------------------------------------- parsing


@dataclass
class _Parsed:
    """What parsing produced: the spec if valid, else the raw data and every problem found."""

    spec: AgentSpec | None
    data: object
    positions: _Positions
    problems: list[SpecProblem]


class _TooLarge(Exception):
    """The document has more than :data:`_MAX_NODES` nodes once aliases are expanded."""


# Stands in for a value that could not be built; its problem is already recorded.
_INVALID = object()


class _Builder:
    """Turns a composed YAML node tree into plain Python data, recording where each field came from.

    Building from nodes (rather than calling ``yaml.safe_load``) is what gives every field its line and
    column, and lets duplicate keys be reported instead of the later one silently winning.
    """

    def __init__(self, loader: yaml.SafeLoader, source: str) -> None:
        self._loader = loader
        self._source = source
        self._nodes = 0
        self._active: set[int] = set()
        self.positions: _Positions = {}
        self.labels: dict[_FieldPath, str] = {}
        self.problems: list[SpecProblem] = []
        self.failed: list[_FieldPath] = []

    def build(self, node: Node, path: _FieldPath) -> object:
        self._nodes += 1
        if self._nodes > _MAX_NODES:
            raise _TooLarge
        if id(node) in self._active:
            reason = "an alias refers to a node that contains it (recursive alias)"
            return self._fail(node, path, reason, self.positions.get(path))
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return self._sequence(node, path)
            return self._scalar(node, path)
        finally:
            self._active.discard(id(node))

    def _fail(
        self, node: Node, path: _FieldPath, reason: str, position: tuple[int, int] | None = None
    ) -> object:
        """Record a problem at ``path``; validation errors at or below it are then not reported again."""
        self.problems.append(_problem(self._source, path, reason, position or _mark(node), self.labels))
        self.failed.append(path)
        return _INVALID

    def _scalar(self, node: Node, path: _FieldPath) -> object:
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            return self._fail(node, path, _yaml_reason(exc))
        except (ValueError, OverflowError) as exc:  # e.g. the timestamp 2024-02-30
            return self._fail(node, path, f"invalid value {node.value!r}: {exc}")

    def _sequence(self, node: SequenceNode, path: _FieldPath) -> object:
        if node.tag != _SEQ_TAG:
            return self._fail(node, path, f"the tag {node.tag!r} is not allowed in a spec file")
        items = []
        for index, child in enumerate(node.value):
            self.positions[(*path, index)] = _mark(child)
            items.append(self.build(child, (*path, index)))
        return items

    def _mapping(self, node: MappingNode, path: _FieldPath) -> object:
        if node.tag != _MAP_TAG:
            return self._fail(node, path, f"the tag {node.tag!r} is not allowed in a spec file")
        result: dict[object, object] = {}
        first_seen: dict[object, int] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            if not isinstance(key_node, ScalarNode):
                self._fail(key_node, path, "a mapping key must be a plain value, not a list or mapping")
                continue
            key = self._scalar(key_node, (*path, key_node.value))
            if key is _INVALID:
                continue
            child = (*path, key)
            if not isinstance(key, str):
                self.labels[child] = key_node.value
            line = key_node.start_mark.line + 1
            if key in first_seen:
                self.problems.append(
                    _problem(
                        self._source,
                        child,
                        f"duplicate key {key!r} (first defined on line {first_seen[key]})",
                        _mark(key_node),
                        self.labels,
                    )
                )
                continue
            first_seen[key] = line
            self.positions[child] = _mark(key_node)
            result[key] = self.build(value_node, child)
        for merged in merges:
            self._merge(merged, path, result)
        return result

    def _merge(self, node: Node, path: _FieldPath, result: dict[object, object]) -> None:
        """Apply a YAML merge key (``<<: *defaults``): keys already present win, earlier sources win."""
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, MappingNode):
                self._fail(source, (*path, "<<"), "a merge key (<<) needs a mapping or a list of mappings")
                continue
            outer = self.positions
            self.positions = {}
            try:
                built = self.build(source, path)
                merged_positions = self.positions
            finally:
                self.positions = outer
            if not isinstance(built, dict):
                continue
            for key, value in built.items():
                if key in result:
                    continue
                result[key] = value
                depth = len(path)
                for where, mark in merged_positions.items():
                    if len(where) > depth and where[depth] == key:
                        self.positions[where] = mark


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    reason = exc.problem or "invalid YAML"
    if exc.context:
        reason = f"{reason} ({exc.context})"
    return reason


def _problem(
    source: str, path: _FieldPath, reason: str, position: tuple[int, int] | None, labels: _Labels = _NO_LABELS
) -> SpecProblem:
    line, column = position if position is not None else (None, None)
    return SpecProblem(source=source, field=_dotted(path, labels), reason=reason, line=line, column=column)


def _dotted(path: Sequence[object], labels: _Labels = _NO_LABELS) -> str:
    return ".".join(labels.get(tuple(path[: index + 1]), str(part)) for index, part in enumerate(path))


def _locate(positions: _Positions, path: _FieldPath) -> tuple[int, int] | None:
    """Position of ``path``, or of its nearest ancestor present in the file (for a missing field)."""
    for length in range(len(path), -1, -1):
        position = positions.get(path[:length])
        if position is not None:
            return position
    return None


def _parse(text: str, source: str) -> _Parsed:
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        if root is None:
            reason = "the document is empty; expected a mapping with kind, name, description, ..."
            return _Parsed(None, None, {}, [SpecProblem(source, "", reason, 1, 1)])
        if not isinstance(root, MappingNode):
            what = "a list" if isinstance(root, SequenceNode) else "a single value"
            reason = f"the document must be a mapping of fields, not {what}"
            return _Parsed(None, None, {}, [_problem(source, (), reason, _mark(root))])
        builder = _Builder(loader, source)
        builder.positions[()] = _mark(root)
        data = builder.build(root, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = (mark.line + 1, mark.column + 1) if mark is not None else None
        return _Parsed(None, None, {}, [_problem(source, (), f"invalid YAML: {_yaml_reason(exc)}", position)])
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        reason = f"invalid YAML: {exc.reason} (U+{exc.character:04X})"
        return _Parsed(None, None, {}, [SpecProblem(source, "", reason, line, column)])
    except _TooLarge:
        reason = f"the document expands to more than {_MAX_NODES} YAML nodes (through aliases?)"
        return _Parsed(None, None, {}, [SpecProblem(source, "", reason, 1, 1)])
    except RecursionError:
        return _Parsed(None, None, {}, [SpecProblem(source, "", "the document is nested too deeply", 1, 1)])
    finally:
        if loader is not None:
            loader.dispose()

    problems = list(builder.problems)
    try:
        spec = AgentSpec.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            if not any(loc[: len(failed)] == failed for failed in builder.failed):
                problems.append(_validation_problem(source, error, builder.positions, builder.labels))
        return _Parsed(None, data, builder.positions, _in_file_order(problems))
    if problems:
        return _Parsed(None, data, builder.positions, _in_file_order(problems))
    spec._positions = builder.positions
    spec._source = source
    return _Parsed(spec, data, builder.positions, [])


def _in_file_order(problems: list[SpecProblem]) -> list[SpecProblem]:
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def _validation_problem(
    source: str, error: ErrorDetails, positions: _Positions, labels: _Labels
) -> SpecProblem:
    loc: _FieldPath = tuple(error["loc"])
    value = error["input"]
    kind = error["type"]
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
        reason = (
            f"key {value!r} is not a valid reference: {error['ctx']['error']}"
            if kind == "value_error"
            else f"keys must be strings, not {_describe(value)}"
        )
    elif kind == "invalid_key":
        reason = f"keys must be strings, not {_describe(value)}"
    elif kind == "missing":
        reason = "required field is missing"
    elif kind == "extra_forbidden":
        reason = f"unknown field {loc[-1]!r}"
        close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1]), n=1)
        if close:
            reason += f" (did you mean {close[0]!r}?)"
    elif kind == "value_error":
        reason = str(error["ctx"]["error"])
    elif kind == "literal_error":
        reason = f"must be {error['ctx']['expected']}, not {value!r}"
    elif kind == "greater_than_equal":
        reason = f"must be at least {error['ctx']['ge']}, not {value!r}"
    elif kind in _EXPECTED:
        reason = f"expected {_EXPECTED[kind]}, got {_describe(value)}"
        if kind == "string_type" and not isinstance(value, list | dict):
            reason += " (quote the value to make it a string)"
    else:
        reason = error["msg"]
    return _problem(source, loc, reason, _locate(positions, loc), labels)


_EXPECTED = {
    "string_type": "a string",
    "bool_type": "true or false",
    "int_type": "an integer",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__}"


def _fields_at(path: _FieldPath) -> list[str]:
    """Field names of the model found at ``path`` in an agent document (for "did you mean" hints)."""
    annotation: object = AgentSpec
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model_field = annotation.model_fields.get(str(part))
            if model_field is None:
                return []
            annotation = model_field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
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


def parse_spec(text: str, source: str = "<string>") -> AgentSpec:
    """Parse and validate an agent document; raise :class:`SpecError` listing every problem found.

    ``source`` names the document in problem reports (a file name, a URL). CEL expressions are not
    compiled here -- see :func:`compile_spec` -- but the returned spec remembers where each field was, so
    that compile errors can point at the right line.
    """
    parsed = _parse(text, source)
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
    positions: Mapping[_FieldPath, tuple[int, int]],
) -> tuple[dict[tuple[str, ...], CelProgram], list[SpecProblem]]:
    programs: dict[tuple[str, ...], CelProgram] = {}
    problems: list[SpecProblem] = []
    for site in sites:
        try:
            programs[site.path] = backend.compile(site.expression, site.declarations)
        except CelCompileError as exc:
            line, column = positions.get(site.path, (None, None))
            problems.append(
                SpecProblem(
                    source=source,
                    field=_dotted(site.path),
                    reason=f"invalid CEL expression: {exc.message}",
                    line=line,
                    column=column,
                    expression_line=exc.line,
                    expression_column=exc.column,
                )
            )
    return programs, problems


def compile_spec(spec: AgentSpec, backend: CelBackend, source: str | None = None) -> CompiledSpec:
    """Compile every CEL expression of ``spec``; raise :class:`SpecError` listing every failure.

    Restriction assertions and ``exposes`` selections are compiled against the Engagement variables
    (:data:`ENGAGEMENT_DECLARATIONS`), guardrail assertions against ``output``
    (:data:`GUARDRAIL_DECLARATIONS`). ``source`` defaults to the name the spec was parsed under (or
    ``"<string>"`` for a spec built in code); problems carry the line of the field when the spec came from
    :func:`parse_spec`.
    """
    source = source if source is not None else spec._source or "<string>"
    programs, problems = _compile_sites(_cel_sites(spec.model_dump()), backend, source, spec._positions)
    if problems:
        raise SpecError(_in_file_order(problems))

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


def load_spec_text(text: str, *, backend: CelBackend | None = None, source: str = "<string>") -> CompiledSpec:
    """Parse, validate and compile an agent document given as YAML text.

    ``backend`` defaults to :func:`agentguard.cel.get_backend`'s choice. When the document fails
    validation, its CEL expressions are still compiled where they can be found, and all problems are
    raised together in one :class:`SpecError`.
    """
    backend = backend if backend is not None else get_backend()
    parsed = _parse(text, source)
    if parsed.spec is not None:
        return compile_spec(parsed.spec, backend, source)
    _, cel_problems = _compile_sites(_cel_sites(parsed.data), backend, source, parsed.positions)
    raise SpecError(_in_file_order(parsed.problems + cel_problems))


def load_spec(path: str | os.PathLike[str], *, backend: CelBackend | None = None) -> CompiledSpec:
    """Load an agent document from a file: parse, validate and compile it (see :func:`load_spec_text`).

    Problems name the file as given. A file that cannot be read is a :class:`SpecError` with one problem.
    """
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = f"cannot read the file: {(exc.strerror if isinstance(exc, OSError) else None) or exc}"
        if "\n" in source:
            reason += " (this looks like YAML text: use load_spec_text for that)"
        raise SpecError([SpecProblem(source=source, field="", reason=reason)]) from exc
    return load_spec_text(text, backend=backend, source=source)
