"""A spec written to mislead (or carelessly) is refused with file, field and reason -- never loaded into a
policy more permissive than it reads, and never a crash other than :class:`SpecError`.

Each case is checked end to end where it matters: the spec is loaded with ``Guard.from_yaml`` and the call
its author meant to forbid must not run.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import Guard, PolicyViolation, User
from agentguard.errors import SpecError, SpecProblem
from agentguard.spec import AgentSpec, load_spec_text, parse_spec
from tests.conftest import spec_text

FORBIDDEN = "recent['send-email'].inputs.to.endsWith('@corp.com')"
"""The restriction the author meant: mail goes to corp.com only. The calls below mail elsewhere."""


def _sends_outside(guard: Guard) -> bool:
    """Whether a guarded ``send-email`` call to an outside address runs under ``guard``."""

    @guard.tool(name="send-email")
    def send_email(to: str) -> str:
        return "sent"

    with guard.engagement(user=User(id="u1")):
        try:
            send_email(to="eve@evil.com")
        except PolicyViolation:
            return False
    return True


def _refusal(text: str) -> list[tuple[int | None, str, str]]:
    """(line, field, reason) of every problem ``Guard.from_yaml`` refuses ``text`` for; each names the file."""
    with pytest.raises(SpecError) as caught:
        Guard.from_yaml(text, source="agent.yaml", telemetry=False)
    assert all(problem.source == "agent.yaml" for problem in caught.value.problems)
    return [(problem.line, problem.field, problem.reason) for problem in caught.value.problems]


# ------------------------------------------------------------------------------------- merge keys


def test_a_second_merge_key_is_a_duplicate_key_not_a_silent_loser() -> None:
    """``<<`` twice in one mapping: YAML keys are unique, and the earlier source used to win silently, so
    a reader expecting the later (restricting) one to win got an unrestricted capability."""
    text = spec_text(
        f"""\
        capabilities:
          open: &open
            collect_results: true
            input_restriction: {{assertion: "true"}}
          closed: &closed
            input_restriction: {{assertion: "{FORBIDDEN}"}}
          send-email:
            <<: *open
            <<: *closed
        """
    )
    assert _refusal(text) == [
        (14, "capabilities.send-email.<<", "duplicate key '<<' (first defined on line 13)")
    ]


def test_one_merge_key_with_a_list_of_sources_still_loads() -> None:
    """The YAML way of merging several mappings (earlier sources win) is not a duplicate."""
    text = spec_text(
        f"""\
        capabilities:
          closed: &closed
            input_restriction: {{assertion: "{FORBIDDEN}"}}
          mailer: &mailer
            user_identity: false
          send-email:
            <<: [*closed, *mailer]
        """
    )
    assert not _sends_outside(Guard.from_yaml(text, telemetry=False))


# ----------------------------------------------------------------------------------- explicit tags


@pytest.mark.parametrize("tag", ["!!null", "!<tag:yaml.org,2002:null>"])
def test_a_null_tag_cannot_erase_a_written_assertion(tag: str) -> None:
    """``assertion: !!null '...'`` showed an assertion and loaded none: the call it forbids ran."""
    text = spec_text(
        f"""\
        capabilities:
          send-email:
            input_restriction:
              assertion: {tag} "{FORBIDDEN}"
        """
    )
    [(line, field, reason)] = _refusal(text)
    assert (line, field) == (9, "capabilities.send-email.input_restriction.assertion")
    assert reason.startswith("the tag 'tag:yaml.org,2002:null' would discard the value ")


@pytest.mark.parametrize("spelling", ["", "~", "null", "Null", "NULL"])
def test_a_null_tag_on_a_null_spelling_is_null(spelling: str) -> None:
    text = spec_text(f"capabilities:\n  send-email:\n    input_restriction: !!null {spelling}\n")
    assert parse_spec(text).capabilities["send-email"].input_restriction is None


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!bool maybe", "bool"),
        ("!!timestamp yesterday", "timestamp"),
        ("!!int ''", "int"),
        ("!!float ''", "float"),
    ],
)
def test_a_tagged_value_its_constructor_cannot_build_is_a_problem(value: str, tag: str) -> None:
    """PyYAML's constructors raise KeyError, AttributeError or IndexError for these, which escaped the
    loader as a crash instead of a problem naming the field."""
    text = spec_text(f"capabilities:\n  send-email:\n    collect_results: {value}\n")
    [(line, field, reason)] = _refusal(text)
    assert (line, field) == (8, "capabilities.send-email.collect_results")
    assert reason.startswith(f"invalid value {value.split(' ', 1)[1].strip(chr(39))!r}")
    assert f"tag:yaml.org,2002:{tag}" in reason


_SAFE_TAGS = ["null", "bool", "int", "float", "binary", "timestamp", "str"]


@settings(max_examples=200)
@given(tag=st.sampled_from(_SAFE_TAGS), text=st.text(alphabet=st.characters(codec="utf-8"), max_size=12))
def test_any_text_under_any_safe_tag_loads_or_is_a_spec_error(tag: str, text: str) -> None:
    """Whatever a tag makes of a value, reading it never raises anything but SpecError."""
    quoted = '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
    document = spec_text(f"capabilities:\n  send-email:\n    collect_results: !!{tag} {quoted}\n")
    problems: tuple[SpecProblem, ...] = ()
    try:
        spec = parse_spec(document)
    except SpecError as error:
        problems = error.problems
    else:
        assert tag == "bool"
        assert spec.capabilities["send-email"].collect_results is (text.lower() in ("true", "yes", "on"))
    assert all(problem.field.startswith("capabilities.send-email") for problem in problems)


# ----------------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(
    ("body", "line", "field"),
    [
        (
            'capabilities:\n  send-email:\n    input_restriction:\n      assertion: "\\ud800"\n',
            9,
            "assertion",
        ),
        (
            "capabilities:\n  send-email:\n    input_restriction:\n      assertion: \"x == '\\udfff'\"\n",
            9,
            "assertion",
        ),
        (
            'capabilities:\n  send-email:\n    input_restriction:\n      require_review: "a\\ud83d"\n',
            9,
            "require_review",
        ),
    ],
)
def test_a_lone_surrogate_is_a_problem_not_a_crash(body: str, line: int, field: str) -> None:
    """A ``\\uD800`` escape is no Unicode character; the C++ CEL engine raised TypeError on it at load."""
    [(found_line, found_field, reason)] = _refusal(spec_text(body))
    assert (found_line, found_field) == (line, f"capabilities.send-email.input_restriction.{field}")
    assert "lone surrogate" in reason


def test_a_lone_surrogate_in_a_key_is_a_problem() -> None:
    text = spec_text('capabilities: {}\nexposes:\n  "t\\udc00": recent._name\n')
    [(line, field, reason)] = _refusal(text)
    assert line == 8
    assert field.startswith("exposes.")
    assert "lone surrogate" in reason


def test_a_spec_built_in_code_with_a_lone_surrogate_is_refused() -> None:
    document = {
        "kind": "openagentspec:v1/agent",
        "name": "a",
        "description": "d",
        "intent": "i",
        "owner": "o",
        "capabilities": {"send-email": {"input_restriction": {"assertion": "\ud800"}}},
    }
    with pytest.raises(ValueError, match="lone surrogate"):
        AgentSpec.model_validate(document)


@settings(max_examples=100)
@given(
    st.text(alphabet=st.characters(categories=["Cs", "Ll", "Nd", "Zs"]), min_size=1, max_size=8).filter(
        lambda text: any("\ud800" <= char <= "\udfff" for char in text)
    )
)
def test_any_string_with_a_surrogate_is_refused(text: str) -> None:
    escaped = "".join(f"\\u{ord(char):04x}" for char in text)
    document = spec_text(f'capabilities:\n  send-email:\n    static_identity: "{escaped}"\n')
    with pytest.raises(SpecError, match="lone surrogate"):
        load_spec_text(document)


# ------------------------------------------------------------------------ one agent name, two rules


def _agent_call_runs(guard: Guard) -> bool:
    """Whether a guarded call of the agent ``billing`` (as ``attach_remote_agents`` registers it) runs."""

    @guard.agent(name="billing")
    def billing(amount: int) -> str:
        return "paid"

    with guard.engagement(user=User(id="u1")):
        try:
            billing(amount=1000)
        except PolicyViolation:
            return False
    return True


RESTRICTED_REMOTE = """\
capabilities:
  oagent://agents.corp.com/billing:
    input_restriction:
      assertion: recent["billing"].inputs.amount < 10
"""


def test_a_restricted_remote_agent_alone_is_enforced() -> None:
    """The baseline: the restriction holds when no other capability shares the agent's name."""
    assert not _agent_call_runs(Guard.from_yaml(spec_text(RESTRICTED_REMOTE), telemetry=False))


@pytest.mark.parametrize(
    "other",
    [
        "billing",
        "oagent://billing",
        "oagent://agents.other.com/billing",
        "oagent://AGENTS.corp.com/x/billing",
    ],
)
def test_a_remote_agent_shares_its_name_with_no_other_capability(other: str) -> None:
    """A remote agent is called and recorded by its agent name, so another capability of that name took
    over its calls (or dropped it): the restricted remote call ran under the other, unrestricted rule."""
    text = spec_text(RESTRICTED_REMOTE + f"  {other}: {{}}\n")
    [(line, field, reason)] = _refusal(text)
    assert (line, field) == (6, "capabilities")
    assert reason == (
        f"'oagent://agents.corp.com/billing' and {other!r} both name the agent 'billing'; a remote agent is "
        'called and recorded by its name (recent["billing"]), so no other capability may use that name'
    )


def test_a_tool_and_a_local_agent_of_one_name_are_still_two_capabilities() -> None:
    """The spec's own rule: a bare name means the tool, ``oagent://name`` exclusively the agent."""
    text = spec_text("capabilities:\n  billing: {}\n  oagent://billing: {}\n")
    assert set(load_spec_text(text).spec.capabilities) == {"billing", "oagent://billing"}


def test_remote_agents_of_different_names_load() -> None:
    text = spec_text(
        "capabilities:\n  oagent://a.corp.com/billing: {}\n  oagent://a.corp.com/refunds: {}\n  lookup: {}\n"
    )
    assert len(load_spec_text(text).references) == 3
