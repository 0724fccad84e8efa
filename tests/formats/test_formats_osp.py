"""OS Protocol app files: agentguard providers configure the guard, everything else is reported."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agentguard import ApprovalConfig, Guard, SpecError
from agentguard.checks import Audit, AuditObserver
from agentguard.formats import Descriptor, load_descriptor, parse_descriptor
from agentguard.guardian import GuardianClient
from tests.formats.conftest import fixture

SECRETS = {"guardian-token": "t0ken"}


def app(providers: str, **options: object) -> Descriptor:
    text = "---\nname: '@corp/os'\nversion: '1.0.0'\nproviders:\n" + textwrap.indent(
        textwrap.dedent(providers), "  "
    )
    return parse_descriptor(text + "---\n# body\n", source="APP.md", **options)  # type: ignore[arg-type]


def problems_of(providers: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        app(providers)
    return [str(problem) for problem in info.value.problems]


def test_agentguard_providers_become_guard_options() -> None:
    descriptor = load_descriptor(fixture("support-os.md"), secrets=SECRETS)
    assert descriptor.format == "osp-app"
    assert descriptor.agent_info is None  # an app describes a distribution, not one agent
    options = descriptor.guard_options()
    assert set(options) == {"severity", "unknown_capability", "guardian", "approval", "approvals"}
    assert options["severity"] == {"restriction": "warning", "restriction:refund": "error"}
    assert options["unknown_capability"] == "deny"
    assert options["approval"] == ApprovalConfig(timeout_ms=60000, auto_approve_on_timeout=False)
    assert options["approvals"] == {
        "supervisor": ApprovalConfig(
            approvers=("alice@corp.example", "bob@corp.example"), required_approvals=2
        )
    }
    client = options["guardian"]
    assert isinstance(client, GuardianClient)
    assert client is not descriptor.guard_options()["guardian"]  # a fresh client per guard
    assert (client.url, client.mode, client.on_failure) == (
        "https://guardian.corp.example/aos",
        "observe",
        "allow",
    )


def test_the_options_build_a_guard(tmp_path: Path) -> None:
    descriptor = load_descriptor(fixture("support-os.md"), secrets=SECRETS)
    guard = Guard.from_file(fixture("agent.yaml"), **descriptor.guard_options())
    assert guard.guardian is not None
    assert descriptor.apply(guard) == ()


def test_audit_provider_writes_a_report_per_engagement(tmp_path: Path) -> None:
    descriptor = app(
        f"checks:\n  audit: {{provider: agentguard/audit, metadata: {{directory: '{tmp_path}'}}}}\n"
    )
    (observer,) = descriptor.observers
    assert isinstance(observer, AuditObserver)
    guard = Guard.from_file(fixture("agent.yaml"))
    descriptor.apply(guard)
    descriptor.apply(guard)  # idempotent: one observer, one report
    with guard.engagement():
        guard.call("lookup-order", {"order_id": "A-1"}, lambda order_id: "ok")
    assert len(list(Audit.scan(tmp_path))) == 1


def test_audit_directory_is_relative_to_the_app_file() -> None:
    (observer,) = load_descriptor(fixture("support-os.md"), secrets=SECRETS).observers
    assert isinstance(observer, AuditObserver)
    assert observer.directory == fixture("audits")
    assert observer.objectives == "Support agents follow policy"


def test_other_providers_are_warnings_with_their_line() -> None:
    descriptor = load_descriptor(fixture("support-os.md"), secrets=SECRETS)
    assert [(w.field, w.line) for w in descriptor.warnings] == [
        ("providers.checks.judge.provider", 17),
        ("providers.system.sandbox.provider", 27),
    ]
    assert (
        descriptor.warnings[0].reason
        == "'@braintrust/judge' is not an agentguard provider: the host binds it"
    )


def test_misconfigured_agentguard_providers_are_errors() -> None:
    with pytest.raises(SpecError) as info:
        load_descriptor(fixture("misconfigured-os.md"))
    source = fixture("misconfigured-os.md")
    assert [str(p) for p in info.value.problems] == [
        f"{source}:6:16: providers.checks.guardian.provider: unknown agentguard provider 'agentguard/guardain' "
        "(did you mean 'agentguard/guardian'?)",
        f"{source}:7:52: providers.checks.rules.metadata.severity: severity of 'restriction' must be error, "
        "warning or info, not 'loud'",
        f"{source}:7:83: providers.checks.rules.metadata.mode: agentguard/rules takes no metadata field 'mode'",
        f"{source}:9:13: providers.system.audit.provider: agentguard/audit configures checks or actions, not system",
    ]


def test_guardian_metadata_problems() -> None:
    problems = problems_of(
        """\
        checks:
          guardian: {provider: agentguard/guardian, metadata: {url: 'ftp://x', mode: loud, timeout_ms: 0,
                     token_secret: missing}}
        """
    )
    assert [p.split(": ", 2)[1:] for p in problems] == [
        ["providers.checks.guardian.metadata.url", "must be an http:// or https:// URL, not 'ftp://x'"],
        ["providers.checks.guardian.metadata.mode", "must be 'enforce' or 'observe', not 'loud'"],
        ["providers.checks.guardian.metadata.timeout_ms", "must be a positive integer, not 0"],
        [
            "providers.checks.guardian.metadata.token_secret",
            "the secret 'missing' is not supplied (secrets={...})",
        ],
    ]


def test_approval_metadata_problems() -> None:
    problems = problems_of(
        """\
        actions:
          approval: {provider: agentguard/approval, metadata: {requiredApprovals: 0, reviewers: {x: {timeoutMS: 1}}}}
        """
    )
    assert any(
        "requiredApprovals" not in p and "required_approvals must be at least 1" in p for p in problems
    )
    assert any("takes no metadata field 'timeoutMS' (did you mean 'timeoutMs'?)" in p for p in problems)


def test_a_provider_bound_twice_is_an_error() -> None:
    problems = problems_of(
        """\
        checks:
          rules: {provider: agentguard/rules}
        actions:
          rules: {provider: agentguard/rules}
        """
    )
    assert any("agentguard/rules is bound twice (also at providers.checks.rules)" in p for p in problems)


def test_disabled_bindings_configure_nothing() -> None:
    descriptor = app(
        "checks:\n  rules: {provider: agentguard/rules, enabled: false, metadata: {unknown_capability: allow}}\n"
    )
    assert descriptor.guard_options() == {}


def test_unknown_domains_and_fields_are_warnings() -> None:
    descriptor = app("runs:\n  retry: {provider: '@corp/retry', priority: 1}\n")
    assert [w.reason for w in descriptor.warnings] == [
        "'runs' is not an OS Protocol domain (system, context, actions, checks)",
        "'@corp/retry' is not an agentguard provider: the host binds it",
        "'priority' is not a field of a provider entry",
    ]


def test_an_app_needs_a_name_and_a_version() -> None:
    with pytest.raises(SpecError) as info:
        parse_descriptor("---\ndescription: nothing\n---\n", source="APP.md")
    assert [p.field for p in info.value.problems] == ["name", "version"]
