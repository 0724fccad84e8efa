"""``lint_spec``: what a loaded spec's assertions and ``exposes`` selections will certainly or likely get wrong."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentguard import Guard
from agentguard.cel import CelBackend, get_backend
from agentguard.errors import SpecError
from agentguard.spec import SpecFindings, lint_spec, load_spec_text

HEAD = """\
kind: openagentspec:v1/agent
name: travel-agent
description: The agent books trips.
intent: You book trips.
owner: travel-team
"""


def spec_text(assertion: str, *, exposes: str | None = None, review: str | None = None) -> str:
    """A spec with capabilities web-search, book-flight and oagent://billing, a pii-check guardrail tool,
    and ``assertion`` on book-flight's input."""
    text = HEAD + textwrap.dedent(
        f"""\
        capabilities:
          web-search:
          book-flight:
            input_restriction:
              assertion: '{assertion}'
          oagent://billing:
        guardrails:
          input:
            tool_name: pii-check
            assertion: output.ok
        """
    )
    if review is not None:
        text = text.replace(
            "    input_restriction:\n", f"    input_restriction:\n      require_review: {review}\n"
        )
    if exposes is not None:
        text += f"exposes:\n  picked: '{exposes}'\n"
    return text


def lint(assertion: str, **kwargs: str) -> SpecFindings:
    return lint_spec(load_spec_text(spec_text(assertion, **kwargs), source="agent.yaml"))


ASSERTION = "capabilities.book-flight.input_restriction.assertion"


@pytest.mark.parametrize(
    ("assertion", "reason"),
    [
        (
            'recent["web-serch"].inputs.q == "x"',
            "recent[\"web-serch\"]: 'web-serch' is not a capability of this spec (did you mean 'web-search'?)",
        ),
        (
            'user.mail == "a@corp.com"',
            "user.mail: user has no field 'mail' (did you mean 'email'?); its fields are id, email",
        ),
        (
            'recent["book-flight"].input.to == "x"',
            "recent[\"book-flight\"].input: recent[\"book-flight\"] has no field 'input' (did you mean 'inputs'?)"
            "; an entry's fields are inputs, outputs",
        ),
        (
            'recent._nme == "x"',
            "recent._nme: recent has no field '_nme' (did you mean '_name'?); its reserved members are _name",
        ),
        ("history._count > 1", "history._count: history has no field '_count'"),
        ("history._total.n > 1", "history._total.n: history._total is a number, with no fields"),
        ('user.id.x == "a"', "user.id.x: user.id is a string, with no fields"),
        (
            'history["book-flight"].inputs.to == "x"',
            "history[\"book-flight\"] is a list of calls, which has no field 'inputs': take one call "
            '(history["book-flight"][0].inputs), or test them all (history["book-flight"].exists(c, ...))',
        ),
        (
            'recent["oagent://billing"].outputs.ok',
            "recent[\"oagent://billing\"]: calls of 'oagent://billing' are recorded by agent name: "
            'write recent["billing"]',
        ),
    ],
)
def test_certain_failures_are_errors(assertion: str, reason: str) -> None:
    found = lint(assertion)
    assert [(p.field, p.line, p.column) for p in found.errors] == [(ASSERTION, 10, 7)]
    assert found.errors[0].reason.startswith(reason)
    assert found.errors[0].source == "agent.yaml"
    assert found.warnings == ()


@pytest.mark.parametrize(
    ("assertion", "reason"),
    [
        (
            'recent["hotels"].inputs.to == "x"',
            "recent[\"hotels\"]: 'hotels' is not a capability of this spec: a call to it is refused unless "
            "the guard is built with unknown_capability='allow' or 'observe'",
        ),
        (
            'recent["pii-check"].outputs.ok',
            "recent[\"pii-check\"]: 'pii-check' is a guardrail tool, not a capability",
        ),
    ],
)
def test_likely_failures_are_warnings(assertion: str, reason: str) -> None:
    found = lint(assertion)
    assert found.errors == ()
    assert [p.field for p in found.warnings] == [ASSERTION]
    assert found.warnings[0].reason.startswith(reason)


def test_exposes_selections_are_checked() -> None:
    found = lint('recent["book-flight"].inputs.to == "x"', exposes="user.mail")
    assert [(p.field, p.line) for p in found.errors] == [("exposes.picked", 17)]
    assert found.errors[0].reason.startswith("user.mail: user has no field 'mail'")


def test_declared_names_and_fields_pass() -> None:
    found = lint(
        'recent["book-flight"].inputs.to == user.email && recent._name == "book-flight" && '
        'history["web-search"].size() < 3 && history._total < 10 && user.id != "" && '
        'recent["billing"].outputs.ok && history["book-flight"][0].inputs.to == "x"',
        exposes="history._list",
    )
    assert found == SpecFindings()


def test_computed_keys_are_not_checked() -> None:
    # recent[recent._name] reads recent whole: nothing is known about the name, so nothing is reported.
    assert lint("recent[recent._name].inputs.x == 1 && size(history) > 0") == SpecFindings()


def test_a_dashed_name_written_as_a_field_gets_the_bracket_hint() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text("recent.book-flight.inputs.to == 1"), source="agent.yaml")
    (problem,) = caught.value.problems
    assert problem.field == ASSERTION
    assert "undeclared reference to 'flight.inputs.to'" in problem.reason
    assert problem.reason.endswith('; write recent["book-flight"] (a dash in a field name reads as a minus)')


def test_a_name_with_two_dashes_in_exposes() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text("true", exposes="size(history.send-bulk-email) > 0"), source="agent.yaml")
    assert caught.value.problems[0].reason.endswith(
        '; write history["send-bulk-email"] (a dash in a field name reads as a minus)'
    )


def test_the_hint_needs_a_dashed_run_before_the_undeclared_name() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text("recent.book - flights.x == 1"), source="agent.yaml")
    assert "undeclared reference to 'flights.x'" in caught.value.problems[0].reason
    assert "write" in caught.value.problems[0].reason  # recent.book - flights is the dashed run
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec_text("flights.x == 1"), source="agent.yaml")
    assert "write" not in caught.value.problems[0].reason


def test_missing_reviewer_of_a_built_guard_is_an_error_at_its_field() -> None:
    compiled = load_spec_text(spec_text("true", review="nobody"), source="agent.yaml")
    guard = Guard(compiled)
    found = lint_spec(compiled, missing=guard.missing_configuration())
    fields = [(p.field, p.line) for p in found.errors]
    assert ("capabilities.book-flight.input_restriction.require_review", 10) in fields
    assert ("guardrails.input.tool_name", 15) in fields  # pii-check is not registered either
    reviewer = next(p for p in found.errors if p.field.endswith("require_review"))
    assert reviewer.reason.startswith("not registered with the guard: reviewer 'nobody'")


def test_a_missing_piece_no_field_names_is_placed_at_the_document() -> None:
    compiled = load_spec_text(spec_text("true"), source="agent.yaml")
    found = lint_spec(compiled, missing=["reviewer 'gate-keeper' (named by a review gate)"])
    assert [(p.field, p.line) for p in found.errors] == [("", 1)]


def test_without_a_guard_a_reviewer_is_not_checked() -> None:
    assert lint("true", review="nobody") == SpecFindings()


def test_the_cel_python_backend_reads_the_tree_too() -> None:
    backend: CelBackend = get_backend("cel-python")
    compiled = load_spec_text(spec_text('user.mail == "x"'), backend=backend)
    (error,) = lint_spec(compiled).errors
    assert error.reason.startswith("user.mail: user has no field 'mail' (did you mean 'email'?)")


# -- a spec that reads only what it declares never gets an error ---------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){0,2}", fullmatch=True)
_fields = st.from_regex(r"f_[a-z0-9_]{0,6}", fullmatch=True)


@st.composite
def _valid_specs(draw: st.DrawFn) -> str:
    names = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
    name, field = st.sampled_from(names), _fields

    def clause() -> str:
        kind = draw(st.integers(0, 8))
        n, f = draw(name), draw(field)
        return [
            f'recent["{n}"].inputs.{f} == 1',
            f'recent["{n}"].outputs.{f} == "x"',
            f'has(recent["{n}"].inputs.{f})',
            f'history["{n}"].size() > 0',
            f'history["{n}"][0].outputs.{f} == true',
            "history._total < 100 && size(history._list) >= 0",
            f'recent._name == "{n}"',
            'user.email.endsWith("@corp.com") || user.id == "u1"',
            f'history["{n}"].exists(c, c.inputs.{f} == 1)',
        ][kind]

    capabilities = "".join(  # quoted: YAML reads a bare `no`, `on` or `y` as a boolean key, which is refused
        f"  \"{n}\":\n    input_restriction:\n      assertion: '{' && '.join(clause() for _ in range(3))}'\n"
        for n in names
    )
    return HEAD + "capabilities:\n" + capabilities + f"exposes:\n  pick: '{clause()}'\n"


@settings(max_examples=60, deadline=None)
@given(_valid_specs())
@example(  # a capability named like a YAML 1.1 boolean (found in CI when the key was not quoted)
    HEAD
    + 'capabilities:\n  "no":\n    input_restriction:\n      assertion: \'recent["no"].inputs.f_ == 1\'\n'
    + "exposes:\n  pick: 'recent[\"no\"].inputs.f_ == 1'\n"
)
def test_declared_names_and_fields_never_give_an_error(text: str) -> None:
    found = lint_spec(load_spec_text(text))
    assert found.errors == ()
    assert found.warnings == ()
