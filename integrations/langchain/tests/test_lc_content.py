"""What the checks see of a tool's text (``decode_output``): the JSON object or array the text is, exactly when
it is one that every parser reads alike; otherwise the text, as the model reads it. Fuzzed: no text makes it
raise (a raise would fail the tool call unchecked)."""

from __future__ import annotations

import json
from typing import Any

from agentguard_langchain._content import decode_output
from hypothesis import given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=st.lists(JSON, max_size=3) | st.dictionaries(st.text(max_size=5), JSON, max_size=3))
def test_a_json_object_or_array_is_decoded(value: Any) -> None:
    assert decode_output(json.dumps(value)) == value
    assert decode_output(" \n" + json.dumps(value, indent=2) + "\t") == value


@settings(max_examples=500, deadline=None)
@given(text=st.text())
def test_no_text_makes_it_raise_and_what_is_not_decoded_is_the_text(text: str) -> None:
    decoded = decode_output(text)
    assert decoded is text or type(decoded) in (dict, list)


@given(depth=st.integers(0, 3), key=st.text(max_size=5))
def test_a_key_twice_at_any_depth_leaves_the_text(depth: int, key: str) -> None:
    inner = "{" + f"{json.dumps(key)}: 1, {json.dumps(key)}: 2" + "}"
    text = "[" * depth + inner + "]" * depth
    assert decode_output(text) is text


def test_an_array_nested_deeper_than_the_parser_recurses_is_text() -> None:
    text = "[" * 100_000 + '"SECRET"' + "]" * 100_000
    assert decode_output(text) is text
