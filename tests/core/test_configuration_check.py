"""A guard missing what its spec needs refuses to start an engagement, naming every missing piece at once."""

from __future__ import annotations

import pytest

from agentguard import ConfigurationError, Guard, GuardrailViolation
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      lookup:
      refund:
        input_restriction:
          require_review: supervisor
      report:
        output_restriction:
          require_review: auditor
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok == true
      output:
        tool_name: toxicity-check
        assertion: output.ok == true
    """
)


def _ok(text: str) -> dict[str, bool]:
    return {"ok": True}


def _complete() -> Guard:
    guard = Guard.from_yaml(SPEC, reviewers={"supervisor": lambda r: True, "auditor": lambda r: True})
    guard.register("pii-check", _ok)
    guard.register("toxicity-check", _ok)
    return guard


def test_every_missing_piece_is_listed_when_the_engagement_starts() -> None:
    guard = Guard.from_yaml(SPEC)
    with pytest.raises(ConfigurationError) as info:
        guard.engagement()
    assert str(info.value) == (
        "guard 'test-agent' cannot start an engagement; its spec needs what was not registered:\n"
        "  - guardrail tool 'pii-check' (guardrails.input.tool_name): register it with "
        "@guard.tool(name='pii-check') or guard.register('pii-check', fn)\n"
        "  - guardrail tool 'toxicity-check' (guardrails.output.tool_name): register it with "
        "@guard.tool(name='toxicity-check') or guard.register('toxicity-check', fn)\n"
        "  - reviewer 'auditor' (named by require_review or a review gate): pass reviewers={'auditor': ...} "
        "or call guard.add_reviewer('auditor', ...)\n"
        "  - reviewer 'supervisor' (named by require_review or a review gate): pass "
        "reviewers={'supervisor': ...} or call guard.add_reviewer('supervisor', ...)"
    )


def test_a_complete_guard_starts_and_its_guardrails_run() -> None:
    guard = _complete()
    assert guard.missing_configuration() == ()
    with guard.engagement() as eng:
        assert eng.check_input("hello") == "hello"


def test_registering_what_was_missing_lets_the_engagement_start() -> None:
    guard = Guard.from_yaml(SPEC, reviewers={"supervisor": lambda r: True})
    guard.register("pii-check", _ok)
    assert len(guard.missing_configuration()) == 2  # toxicity-check and auditor
    guard.register("toxicity-check", _ok)
    assert [piece.split(" (")[0] for piece in guard.missing_configuration()] == ["reviewer 'auditor'"]

    @guard.reviewer("auditor")
    def auditor(request: object) -> bool:
        return True

    with guard.engagement() as eng:
        assert eng.check_output("fine") == "fine"


def test_a_review_gate_added_later_is_checked_too() -> None:
    guard = _complete()
    with guard.engagement():
        pass
    guard.add_review_gate("lookup", "ops")
    with pytest.raises(ConfigurationError, match="reviewer 'ops'"):
        guard.engagement()


def test_the_check_is_computed_once_until_something_is_registered() -> None:
    guard = Guard.from_yaml(SPEC)
    first = guard.missing_configuration()
    assert guard.missing_configuration() is first
    guard.register("lookup", lambda: "found")  # changes nothing that is missing, but recomputes
    assert guard.missing_configuration() == first
    assert guard.missing_configuration() is not first


def test_an_automatic_engagement_is_refused_the_same_way() -> None:
    guard = Guard.from_yaml(SPEC, auto_engagement=True)
    lookup = guard.tool(name="lookup")(lambda: "found")
    with pytest.raises(ConfigurationError, match="guardrail tool 'pii-check'"):
        lookup()


def test_a_guardrail_tool_that_fails_is_still_a_policy_failure() -> None:
    """Only what is missing is a configuration error; a registered guardrail that errors fails closed at run time."""

    def down(text: str) -> dict[str, bool]:
        raise RuntimeError("service down")

    guard = Guard.from_yaml(SPEC, reviewers={"supervisor": lambda r: True, "auditor": lambda r: True})
    guard.register("pii-check", down)
    guard.register("toxicity-check", _ok)
    with (
        guard.engagement() as eng,
        pytest.raises(GuardrailViolation, match=r"'pii-check' failed: RuntimeError$"),
    ):
        eng.check_input("x")


def test_a_credential_set_the_deployment_does_not_provide_stops_the_engagement() -> None:
    text = spec_text(
        """
        capabilities:
          send-email:
            user_identity: false
            static_identity: support-mailer
          archive:
            user_identity: false
            static_identity: archive-bot
        """
    )
    with pytest.raises(ConfigurationError) as caught:
        Guard.from_yaml(text, credential_sets={"support-mailer"}).engagement()
    assert "credential set 'archive-bot' (capabilities.archive.static_identity)" in str(caught.value)
    assert str(caught.value).count("credential set '") == 1  # support-mailer is provided
    with Guard.from_yaml(text, credential_sets={"support-mailer", "archive-bot"}).engagement():
        pass
    with Guard.from_yaml(
        text
    ).engagement():  # no credential_sets: not checked (the identity itself is passed)
        pass
