"""The JSON Schema subset agentguard checks tool arguments, tool results and agent payloads against.

Why built in, and not :mod:`jsonschema` when it happens to be installed: a guard's decision must not depend
on which packages the host has, and this runs on every guarded call, so it must be small and predictable.
Descriptors declare plain schemas (Agent Spec properties, ACP input/output), and the subset below covers
them. Keywords outside it are reported when the descriptor is loaded -- as a warning for validation
keywords that are then not checked, as an error for a malformed value -- never silently skipped.

Checked: ``type`` (one or a list; ``integer`` accepts ``1.0``, booleans are not numbers), ``enum``,
``const``, ``properties``, ``required``, ``additionalProperties`` (boolean or schema), ``minProperties``,
``maxProperties``, ``items`` (schema or list), ``prefixItems``, ``minItems``, ``maxItems``,
``uniqueItems``, ``minLength``, ``maxLength``, ``pattern``, ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``, ``allOf``, ``anyOf``, ``oneOf``, ``not`` and
local ``$ref`` (``#/$defs/...``). ``format`` is an annotation, as JSON Schema 2020-12 says by default.

A value that fails yields messages such as ``order_id: expected a string, got the number 5``.

What a message quotes of the value was written by whoever wrote the value -- for a tool's arguments, often
the model -- and the message becomes a recorded reason (decisions, telemetry, with content capture off) as
well as the caller's error. So a member name of the value is quoted as ``repr`` does (control characters and
lone surrogates escaped) and cut to 40 characters, like a string value; a number to 40 characters; a path to
its last 200. A result's check (the output phase) quotes none of it: a result that fails is withheld, and its
member names and values are that result.
"""

from __future__ import annotations

import abc
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentguard.errors import Phase, Rule
from agentguard.policy import CheckResult, RuleContext
from agentguard.spec import describe_value

__all__ = [
    "ArgumentsSchema",
    "JSONSchema",
    "OutputsSchema",
    "Schema",
    "SchemaRule",
    "schema_problems",
]

JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})

# Annotations and containers of definitions: nothing to check.
_ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "format", "$schema", "$id", "$anchor", "$comment",
        "$defs", "definitions", "readOnly", "writeOnly", "deprecated", "contentMediaType", "contentEncoding",
        "nullable",
    }
)  # fmt: skip
# Validation keywords of JSON Schema this subset does not implement.
_UNCHECKED = frozenset(
    {
        "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
        "if", "then", "else", "contains", "minContains", "maxContains", "unevaluatedProperties",
        "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef",
    }
)  # fmt: skip
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("additionalProperties", "not", "items")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_MAX_REF_DEPTH = 64
_MAX_MESSAGES = 3
_MAX_QUOTED = 40
_MAX_PATH = 200
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_$-]{1,40}")


def _describe(value: object) -> str:
    """``value`` as a message shows it (a string cut to 40 characters, a number too)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {_cut(repr(value))}"
    return describe_value(value, json_terms=True)


def _kind(value: object) -> str:
    """What ``value`` is, without any of it: how the check of a withheld result names a value."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return describe_value(value, json_terms=True)  # null, an object, an array: no content


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_QUOTED else text[: _MAX_QUOTED - 3] + "..."


def _quoted(name: str) -> str:
    """A member name of the value, quoted as ``repr`` does (escaped: a NUL, a newline or a lone surrogate
    would reach a log or fail an OTLP export) and cut to 40 characters: a model may invent one of megabytes."""
    return repr(_cut(name))


def _member(name: str) -> str:
    """A member name of the value as a path step: as it is when plain (``order_id``), else :func:`_quoted`."""
    return name if _PLAIN_NAME.fullmatch(name) else _quoted(name)


def _is_type(name: str, value: object) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list | tuple)
    if name == "object":
        return isinstance(value, Mapping)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return name == "number" or isinstance(value, int) or value.is_integer()


def _equal(a: object, b: object) -> bool:
    """JSON equality: ``1 == 1.0``, but ``true != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _where(path: str) -> str:
    """Where a message is about; the last 200 characters of a deep path (each of its steps is bounded, not
    their number)."""
    if len(path) > _MAX_PATH:
        return "..." + path[3 - _MAX_PATH :]
    return path or "value"


def _child(path: str, key: str | int) -> str:
    """The path of a member or item of the value at ``path``; ``key`` is a path step already (:func:`_member`)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class _Validator:
    """Validates values against one root schema (the document ``$ref`` pointers resolve in).

    ``values``: whether messages may quote the value (its strings, numbers and member names, bounded); false
    for a result, which is withheld when it fails.
    """

    def __init__(self, root: Mapping[str, Any], values: bool = True) -> None:
        self.root = root
        self.values = values
        self._describe = _describe if values else _kind

    def member(self, name: str) -> str:
        """A member name the schema does not declare, as a path step (the value's writer chose it)."""
        return _member(name) if self.values else "(a member)"

    def errors(self, schema: object, value: object, path: str, depth: int = 0) -> Iterator[str]:
        if schema is False:
            yield f"{_where(path)}: no value is allowed here"
            return
        if not isinstance(schema, Mapping):
            return
        if "$ref" in schema:
            if depth >= _MAX_REF_DEPTH:
                yield f"{_where(path)}: the schema's $ref chain is too deep"
                return
            yield from self.errors(self.resolve(schema["$ref"]), value, path, depth + 1)
        yield from self._type(schema, value, path)
        if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
            options = ", ".join(json.dumps(o) for o in schema["enum"][:8])
            yield f"{_where(path)}: {self._describe(value)} is not one of {options}"
        if "const" in schema and not _equal(value, schema["const"]):
            yield f"{_where(path)}: must be {json.dumps(schema['const'])}, got {self._describe(value)}"
        if isinstance(value, str):
            yield from self._string(schema, value, path)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield from self._number(schema, value, path)
        elif isinstance(value, Mapping):
            yield from self._object(schema, value, path, depth)
        elif isinstance(value, list | tuple):
            yield from self._array(schema, value, path, depth)
        yield from self._combinators(schema, value, path, depth)

    def resolve(self, ref: str) -> object:
        node: object = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, Mapping) else None
        return node if node is not None else False

    def _type(self, schema: Mapping[str, Any], value: object, path: str) -> Iterator[str]:
        declared = schema.get("type")
        if declared is None:
            return
        names = [declared] if isinstance(declared, str) else list(declared)
        if schema.get("nullable") is True:
            names.append("null")
        if not any(_is_type(name, value) for name in names):
            expected = " or ".join(names)
            article = "an" if expected[0] in "aeiou" else "a"
            yield f"{_where(path)}: expected {article} {expected}, got {self._describe(value)}"

    def _string(self, schema: Mapping[str, Any], value: str, path: str) -> Iterator[str]:
        if "minLength" in schema and len(value) < schema["minLength"]:
            yield f"{_where(path)}: shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield f"{_where(path)}: longer than {schema['maxLength']} characters"
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            yield f"{_where(path)}: {self._describe(value)} does not match the pattern {schema['pattern']!r}"

    def _number(self, schema: Mapping[str, Any], value: float, path: str) -> Iterator[str]:
        checks: tuple[tuple[str, Callable[[float], bool], str], ...] = (
            ("minimum", lambda bound: value >= bound, "less than"),
            ("maximum", lambda bound: value <= bound, "greater than"),
            ("exclusiveMinimum", lambda bound: value > bound, "not greater than"),
            ("exclusiveMaximum", lambda bound: value < bound, "not less than"),
        )
        for keyword, holds, failure in checks:
            if keyword in schema and not holds(schema[keyword]):
                yield f"{_where(path)}: {self._describe(value)} is {failure} {schema[keyword]!r}"
        if "multipleOf" in schema:
            quotient = value / schema["multipleOf"]
            if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
                yield f"{_where(path)}: {self._describe(value)} is not a multiple of {schema['multipleOf']!r}"

    def _object(
        self, schema: Mapping[str, Any], value: Mapping[str, Any], path: str, depth: int
    ) -> Iterator[str]:
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                yield f"{_where(path)}: the required member {name!r} is missing"
        additional = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                yield from self.errors(properties[key], item, _child(path, key), depth)
            elif additional is False:
                named = f" {_quoted(key)}" if self.values else ""
                yield f"{_where(path)}: unexpected member{named}"
            else:
                yield from self.errors(additional, item, _child(path, self.member(key)), depth)
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            yield f"{_where(path)}: fewer than {schema['minProperties']} members"
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            yield f"{_where(path)}: more than {schema['maxProperties']} members"

    def _array(self, schema: Mapping[str, Any], value: Sequence[Any], path: str, depth: int) -> Iterator[str]:
        items = schema.get("items", True)
        positional: Sequence[Any] = schema.get("prefixItems", items if isinstance(items, list) else ())
        rest = True if isinstance(items, list) else items
        for index, item in enumerate(value):
            subschema = positional[index] if index < len(positional) else rest
            yield from self.errors(subschema, item, _child(path, index), depth)
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield f"{_where(path)}: fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{_where(path)}: more than {schema['maxItems']} items"
        if schema.get("uniqueItems") is True:
            for index, item in enumerate(value):
                if any(_equal(item, earlier) for earlier in value[:index]):
                    yield f"{_where(path)}: item {index} repeats an earlier item"
                    break

    def _combinators(self, schema: Mapping[str, Any], value: object, path: str, depth: int) -> Iterator[str]:
        for subschema in schema.get("allOf", ()):
            yield from self.errors(subschema, value, path, depth)
        if "anyOf" in schema and not any(self._valid(s, value, depth) for s in schema["anyOf"]):
            yield f"{_where(path)}: {self._describe(value)} matches none of the allowed schemas (anyOf)"
        if "oneOf" in schema:
            matching = sum(1 for s in schema["oneOf"] if self._valid(s, value, depth))
            if matching != 1:
                yield f"{_where(path)}: {self._describe(value)} matches {matching} of the oneOf schemas, not exactly 1"
        if "not" in schema and self._valid(schema["not"], value, depth):
            yield f"{_where(path)}: {self._describe(value)} matches a schema it must not match (not)"

    def _valid(self, schema: object, value: object, depth: int) -> bool:
        return next(self.errors(schema, value, "", depth), None) is None


# --------------------------------------------------------------------------------- checking schemas


SchemaProblem = tuple[tuple[str | int, ...], str, Literal["error", "warning"]]


def schema_problems(schema: object) -> Iterator[SchemaProblem]:
    """Why ``schema`` cannot be checked as written: malformed keywords (errors), unchecked ones (warnings).

    Paths are relative to ``schema``. A schema that yields no error never makes the validator raise.
    """
    return _problems(schema, (), schema)


def _problems(schema: object, path: tuple[str | int, ...], root: object) -> Iterator[SchemaProblem]:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        yield path, f"a schema must be an object or a boolean, not {_describe(schema)}", "error"
        return
    for key, value in schema.items():
        where = (*path, key)
        if key in _ANNOTATIONS:
            if key in ("$defs", "definitions") and isinstance(value, Mapping):
                for name, subschema in value.items():
                    yield from _problems(subschema, (*where, name), root)
        elif key in _UNCHECKED:
            yield where, f"the JSON Schema keyword {key!r} is not checked by agentguard", "warning"
        elif key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or any(n not in JSON_TYPES for n in names):
                yield (
                    where,
                    f"type must be one of {', '.join(sorted(JSON_TYPES))} (or a list of them)",
                    "error",
                )
        elif key == "$ref":
            if not isinstance(value, str) or not (value == "#" or value.startswith("#/")):
                yield where, "only local references ($ref: '#/...') are supported", "error"
            elif isinstance(root, Mapping) and _Validator(root).resolve(value) is False:
                yield where, f"$ref {value!r} points at nothing in this schema", "error"
        elif key in ("enum", "required"):
            if not isinstance(value, list) or (
                key == "required" and not all(isinstance(v, str) for v in value)
            ):
                yield where, f"{key} must be a list{' of member names' if key == 'required' else ''}", "error"
        elif key == "pattern":
            yield from _pattern_problems(value, where)
        elif key in _COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                yield where, f"{key} must be a non-negative integer", "error"
        elif key in _BOUNDS:
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (key == "multipleOf" and value <= 0)
            ):
                yield where, f"{key} must be a{' positive' if key == 'multipleOf' else ''} number", "error"
        elif key == "properties":
            if not isinstance(value, Mapping):
                yield where, "properties must be an object of schemas", "error"
            else:
                for name, subschema in value.items():
                    yield from _problems(subschema, (*where, name), root)
        elif key in _SCHEMA_LISTS or (key == "items" and isinstance(value, list)):
            if not isinstance(value, list):
                yield where, f"{key} must be a list of schemas", "error"
            else:
                for index, subschema in enumerate(value):
                    yield from _problems(subschema, (*where, index), root)
        elif key in _SCHEMA_VALUES:
            yield from _problems(value, where, root)
        elif key == "uniqueItems" and not isinstance(value, bool):
            yield where, "uniqueItems must be true or false", "error"


def _pattern_problems(value: object, where: tuple[str | int, ...]) -> Iterator[SchemaProblem]:
    if not isinstance(value, str):
        yield where, "pattern must be a string", "error"
        return
    try:
        re.compile(value)
    except re.error as exc:
        yield where, f"pattern is not a valid regular expression: {exc}", "error"


# ------------------------------------------------------------------------------------ the schemas


class Schema(abc.ABC):
    """Something a JSON value can be checked against; :meth:`check` never raises."""

    @abc.abstractmethod
    def errors(self, value: object, *, values: bool = True) -> list[str]:
        """Every reason ``value`` does not match, each prefixed with where in the value it is.

        ``values``: whether a reason may quote the value (bounded and escaped); false for a withheld result.
        """

    @abc.abstractmethod
    def json_schema(self) -> dict[str, Any]:
        """The equivalent JSON Schema (for ACP manifests and documentation)."""

    def check(self, value: object, what: str, *, values: bool = True) -> CheckResult:
        """A :class:`CheckResult` naming ``what`` was checked and, on failure, the first few reasons
        (``values``: see :meth:`errors`)."""
        errors = self.errors(value, values=values)
        if not errors:
            return CheckResult(True, f"schema check of {what} passed")
        shown = "; ".join(errors[:_MAX_MESSAGES])
        more = f" (and {len(errors) - _MAX_MESSAGES} more)" if len(errors) > _MAX_MESSAGES else ""
        return CheckResult(False, f"schema check of {what} failed: {shown}{more}", {"errors": errors})


@dataclass(frozen=True)
class JSONSchema(Schema):
    """One JSON Schema document (an ACP ``input``/``output``/``config`` schema, an interrupt payload)."""

    schema: Mapping[str, Any]

    def errors(self, value: object, *, values: bool = True) -> list[str]:
        return list(_Validator(self.schema, values).errors(self.schema, value, ""))

    def json_schema(self) -> dict[str, Any]:
        return dict(self.schema)


@dataclass(frozen=True)
class ArgumentsSchema(Schema):
    """Named values, each with its own JSON Schema: Agent Spec ``inputs`` (and multiple ``outputs``).

    ``required`` are the names without a ``default``. ``additional``: whether undeclared names are allowed
    -- not for arguments (the declared inputs are the tool's whole signature), yes for a result dictionary
    (Agent Spec runtimes extract the declared outputs and ignore the rest).
    """

    properties: Mapping[str, Mapping[str, Any]]
    required: frozenset[str] = field(default_factory=frozenset)
    additional: bool = False

    def errors(self, value: object, *, values: bool = True) -> list[str]:
        if not isinstance(value, Mapping):
            got = _describe(value) if values else _kind(value)
            return [f"value: expected an object of named values, got {got}"]
        errors = [f"{name}: required, but missing" for name in sorted(self.required - value.keys())]
        for key, item in value.items():
            schema = self.properties.get(key)
            if schema is None:
                if not self.additional:
                    name = _member(key) if values else "a name"
                    errors.append(
                        f"{name}: not a declared name (declared: {', '.join(self.properties) or 'none'})"
                    )
                continue
            errors.extend(_Validator(schema, values).errors(schema, item, key))
        return errors

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {name: dict(schema) for name, schema in self.properties.items()},
            "required": sorted(self.required),
            "additionalProperties": self.additional,
        }


@dataclass(frozen=True)
class OutputsSchema(Schema):
    """A tool's single declared output: the result itself, or a dictionary holding it under its name."""

    name: str
    schema: Mapping[str, Any]

    def errors(self, value: object, *, values: bool = True) -> list[str]:
        validator = _Validator(self.schema, values)
        errors = list(validator.errors(self.schema, value, ""))
        if errors and isinstance(value, Mapping) and value.keys() == {self.name}:
            return list(validator.errors(self.schema, value[self.name], self.name))
        return errors

    def json_schema(self) -> dict[str, Any]:
        return dict(self.schema)


@dataclass(frozen=True)
class SchemaRule:
    """A guard rule (``kind=Rule.SCHEMA``) checking one capability's arguments or result against a schema.

    Named ``<capability>:arguments`` or ``<capability>:result``, so that its severity key and its OS Protocol
    ``ruleName`` read ``schema:refund:result``.

    Registered by :meth:`agentguard.formats.Descriptor.apply` with ``guard.rules.add``; it runs where the
    capability's restriction of the same phase runs, and a failure raises
    :class:`~agentguard.RuleViolation` with the reasons (``kind`` is ``Rule.SCHEMA``).
    """

    capability: str
    phase: Phase
    schema: Schema
    origin: str

    @property
    def name(self) -> str:
        return f"{self.capability}:{'arguments' if self.phase is Phase.INPUT else 'result'}"

    @property
    def kind(self) -> Rule:
        return Rule.SCHEMA

    def __call__(self, context: RuleContext) -> CheckResult:
        """The check of the call's arguments, or of its result: that reason quotes nothing of the result, which
        is withheld when it fails (a quoted value would reach the caller, often the model, all the same)."""
        if self.phase is Phase.INPUT:
            return self.schema.check(context.inputs, f"the arguments of {self.capability!r} ({self.origin})")
        what = f"the result of {self.capability!r} ({self.origin})"
        return self.schema.check(context.outputs, what, values=False)
