"""Whatever the input, parsing returns an AgentSpec or raises SpecError -- never anything else."""

from __future__ import annotations

import datetime
import re
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentguard.errors import SpecError, SpecProblem
from agentguard.spec import AgentSpec, parse_spec

YAML_BREAKS = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
"""What ends a line in YAML 1.1 (the parser's reader), and so in the line numbers of a spec's problems."""

FIELDS = [
    "kind",
    "name",
    "description",
    "intent",
    "owner",
    "capabilities",
    "guardrails",
    "exposes",
    "lifespan",
    "collect_results",
    "user_identity",
    "static_identity",
    "input_restriction",
    "output_restriction",
    "require_review",
    "assertion",
    "input",
    "output",
    "tool_name",
    "retain_memory",
    "short_circuit",
    "send-email",
    "oagent://billing",
    "oagent://example.com/x/billing",
    "Bad_Key",
    "",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(
        ["openagentspec:v1/agent", "support-agent", "output.ok", "recent._name", "-x", "a" * 254]
    ),
    st.dates(),
    st.datetimes(timezones=st.just(datetime.UTC)),
    st.binary(max_size=8),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=10), st.integers(), st.booleans())
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=6),
    max_leaves=30,
)
VALID: dict[str, Any] = {
    "kind": "openagentspec:v1/agent",
    "name": "support-agent",
    "description": "The agent helps.",
    "intent": "You help.",
    "owner": "team-a",
    "capabilities": {"lookup-order": None},
}


def check(text: str) -> None:
    """Parse ``text``: any exception but SpecError fails the test; every problem must be well-formed."""
    problems: tuple[SpecProblem, ...] = ()
    try:
        spec = parse_spec(text, source="fuzz.yaml")
    except SpecError as error:
        problems = error.problems
    else:
        assert isinstance(spec, AgentSpec)
        return
    assert problems
    # Lines as YAML counts them (and so the problems): "\r\n", "\r", "\n", NEL, LS and PS each end one.
    line_count = len(YAML_BREAKS.findall(text)) + 2
    for problem in problems:
        assert problem.source == "fuzz.yaml"
        assert problem.reason
        assert problem.line is None or 1 <= problem.line <= line_count
        assert problem.column is None or problem.column >= 1


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
@example("\r\x850")  # a CR and a NEL: the "0" is on YAML's third line
def test_arbitrary_text(text: str) -> None:
    check(text)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=":-[]{}&*!|>'\"%@`#,?\n\t abc123<=", max_size=60))
def test_yaml_punctuation(text: str) -> None:
    check(text)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, values, max_size=10))
def test_arbitrary_documents(document: dict[Any, Any]) -> None:
    check(yaml.safe_dump(document, allow_unicode=True))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
def test_mutations_of_a_valid_document(changes: dict[str, Any]) -> None:
    check(yaml.safe_dump({**VALID, **changes}, allow_unicode=True))
