"""The descriptor reader never fails in an unexpected way: a Descriptor or one SpecError, nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard.errors import SpecError
from agentguard.formats import parse_descriptor
from tests.formats.conftest import fixture

FIXTURES = [
    fixture(name).read_text()
    for name in (
        "support.agentspec.yaml",
        "mailcomposer.manifest.json",
        "support-os.md",
        "specialized.agentspec.yaml",
    )
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _reads_or_refuses(text: str) -> None:
    problems: tuple[object, ...] = ("read",)
    try:
        parse_descriptor(text, source="fuzz")
    except SpecError as error:
        problems = error.problems
    assert problems, "a SpecError names its problems"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    _reads_or_refuses(text)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.sampled_from(["agentspec", "manifest"]), st.dictionaries(st.text(max_size=20), json_values, max_size=6)
)
def test_documents_with_arbitrary_members(kind: str, members: dict[str, Any]) -> None:
    base: dict[str, Any] = (
        {"component_type": "Agent", "agentspec_version": "25.4.1"} if kind == "agentspec" else {"specs": {}}
    )
    _reads_or_refuses(json.dumps({**base, **members}))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(FIXTURES), st.integers(min_value=0, max_value=10_000), st.text(max_size=8))
def test_mutations_of_valid_files(text: str, position: int, insert: str) -> None:
    cut = position % (len(text) + 1)
    _reads_or_refuses(text[:cut] + insert + text[cut + len(insert) :])
