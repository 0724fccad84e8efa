"""The built-in JSON Schema subset: it agrees with jsonschema on what it checks, and says why values fail."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from agentguard import Phase
from agentguard.formats import ArgumentsSchema, JSONSchema, OutputsSchema, SchemaRule
from agentguard.formats._schema import schema_problems

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^A-[0-9]+$"},
        "amount": {"type": "number", "minimum": 0, "exclusiveMaximum": 1000, "multipleOf": 0.01},
        "count": {"type": "integer", "maximum": 10},
        "tags": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "maxItems": 3,
            "uniqueItems": True,
        },
        "status": {"enum": ["open", "shipped"]},
        "note": {"type": ["string", "null"], "maxLength": 5},
        "kind": {"const": "order"},
        "ref": {"$ref": "#/$defs/ref"},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "exactly": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 5}]},
        "never": {"not": {"type": "string"}},
        "both": {"allOf": [{"type": "integer"}, {"minimum": 3}]},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["id"],
    "additionalProperties": False,
    "minProperties": 1,
    "$defs": {"ref": {"type": "object", "properties": {"v": {"type": "boolean"}}, "required": ["v"]}},
}

VALUES: list[Any] = [
    {"id": "A-1"},
    {"id": "B-1"},
    {"id": 7},
    {},
    {"id": "A-1", "extra": True},
    {"id": "A-1", "amount": 12.34},
    {"id": "A-1", "amount": 12.345},
    {"id": "A-1", "amount": -1},
    {"id": "A-1", "amount": 1000},
    {"id": "A-1", "amount": True},
    {"id": "A-1", "count": 3.0},
    {"id": "A-1", "count": 3.5},
    {"id": "A-1", "count": 11},
    {"id": "A-1", "tags": ["a", "b"]},
    {"id": "A-1", "tags": ["a", "a"]},
    {"id": "A-1", "tags": ["a", ""]},
    {"id": "A-1", "tags": ["a", "b", "c", "d"]},
    {"id": "A-1", "status": "open"},
    {"id": "A-1", "status": "lost"},
    {"id": "A-1", "note": None},
    {"id": "A-1", "note": "too long"},
    {"id": "A-1", "kind": "order"},
    {"id": "A-1", "kind": "refund"},
    {"id": "A-1", "ref": {"v": True}},
    {"id": "A-1", "ref": {"v": 1}},
    {"id": "A-1", "ref": {}},
    {"id": "A-1", "either": "x"},
    {"id": "A-1", "either": 1.5},
    {"id": "A-1", "exactly": 7},
    {"id": "A-1", "exactly": 3},
    {"id": "A-1", "exactly": 6.5},
    {"id": "A-1", "never": 1},
    {"id": "A-1", "never": "s"},
    {"id": "A-1", "both": 4},
    {"id": "A-1", "both": 2},
    {"id": "A-1", "pair": ["a", 1, "extra"]},
    {"id": "A-1", "pair": [1, "a"]},
    ["not", "an", "object"],
    None,
]


@pytest.mark.parametrize("value", VALUES)
def test_agrees_with_jsonschema(value: Any) -> None:
    expected = jsonschema.Draft202012Validator(ORDER).is_valid(value)
    assert (JSONSchema(ORDER).errors(value) == []) is expected


def test_messages_say_where_and_why() -> None:
    errors = JSONSchema(ORDER).errors({"id": 7, "tags": ["a", "a"], "ref": {"v": 1}, "x": 1})
    assert errors == [
        "id: expected a string, got the number 7",
        "tags: item 1 repeats an earlier item",
        "ref.v: expected a boolean, got the number 1",
        "value: unexpected member 'x'",
    ]


def test_booleans_are_not_numbers_and_one_equals_one_point_zero() -> None:
    assert JSONSchema({"type": "integer"}).errors(True) == [
        "value: expected an integer, got the boolean true"
    ]
    assert JSONSchema({"enum": [1]}).errors(1.0) == []
    assert JSONSchema({"enum": [1]}).errors(True) != []


def test_arguments_schema_requires_what_has_no_default_and_refuses_the_undeclared() -> None:
    schema = ArgumentsSchema(
        {"a": {"type": "string"}, "b": {"type": "integer", "default": 1}}, frozenset({"a"})
    )
    assert schema.errors({"a": "x"}) == []
    assert schema.errors({"b": 2}) == ["a: required, but missing"]
    assert schema.errors({"a": "x", "c": 1}) == ["c: not a declared name (declared: a, b)"]
    assert schema.errors("x") == ["value: expected an object of named values, got the string 'x'"]
    assert schema.json_schema()["required"] == ["a"]


def test_each_property_resolves_its_own_refs() -> None:
    prop = {"title": "p", "$ref": "#/$defs/d", "$defs": {"d": {"type": "integer"}}}
    schema = ArgumentsSchema({"p": prop}, frozenset({"p"}))
    assert schema.errors({"p": 1}) == []
    assert schema.errors({"p": "x"}) == ["p: expected an integer, got the string 'x'"]


def test_a_single_output_is_the_result_or_the_result_under_its_name() -> None:
    schema = OutputsSchema("forecast", {"type": "string"})
    assert schema.errors("sunny") == []
    assert schema.errors({"forecast": "sunny"}) == []
    assert schema.errors({"forecast": 3}) == ["forecast: expected a string, got the number 3"]


def test_check_reports_the_first_reasons_and_keeps_them_all() -> None:
    schema = JSONSchema({"type": "object", "required": ["a", "b", "c", "d"]})
    result = schema.check({}, "the input")
    assert not result.passed
    assert result.message.startswith("schema check of the input failed: value: the required member 'a'")
    assert result.message.endswith("(and 1 more)")
    assert len(result.metadata["errors"]) == 4


def test_schema_problems_errors_and_warnings() -> None:
    problems = list(
        schema_problems(
            {
                "type": "strng",
                "pattern": "(",
                "properties": {"a": {"$ref": "#/$defs/missing"}, "b": {"$ref": "http://x"}},
                "patternProperties": {"^x": {}},
                "minItems": -1,
                "anyOf": "no",
            }
        )
    )
    levels = {path: level for path, _, level in problems}
    assert levels == {
        ("type",): "error",
        ("pattern",): "error",
        ("properties", "a", "$ref"): "error",
        ("properties", "b", "$ref"): "error",
        ("patternProperties",): "warning",
        ("minItems",): "error",
        ("anyOf",): "error",
    }


def test_a_schema_without_errors_never_makes_the_validator_raise() -> None:
    for value in VALUES:
        JSONSchema(ORDER).errors(value)
    assert list(schema_problems(ORDER)) == []


def test_schema_rule_names_and_phases() -> None:
    rule = SchemaRule("refund", Phase.OUTPUT, JSONSchema({}), "declared in x")
    assert rule.name == "refund:result"
    assert SchemaRule("refund", Phase.INPUT, JSONSchema({}), "x").name == "refund:arguments"
