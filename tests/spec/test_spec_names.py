"""Names (RFC 1123 as the spec spells it out), the three reference forms and the tool-before-agent rule."""

from __future__ import annotations

import re

import pytest

from agentguard.spec import MAX_NAME_LENGTH, Reference, is_valid_name, parse_reference, resolve, validate_name


@pytest.mark.parametrize(
    "name",
    ["a", "0", "send-email", "a.b", "web-search.v2", "1password", "a" * MAX_NAME_LENGTH, "a-" * 126 + "b"],
)
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)
    assert validate_name(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "must not be empty"),
        ("a" * (MAX_NAME_LENGTH + 1), "at most 253 characters (has 254)"),
        ("Send-Email", "not 'S' (names are lowercase)"),
        ("send_email", "not '_'"),
        ("send email", "not ' '"),
        ("café", "not 'é'"),
        ("a/b", "not '/'"),
        ("-send", "must start with a lowercase letter or digit, not '-'"),
        (".send", "must start with a lowercase letter or digit, not '.'"),
        ("send-", "must end with a lowercase letter or digit, not '-'"),
        ("send.", "must end with a lowercase letter or digit, not '.'"),
    ],
)
def test_invalid_names(name: str, reason: str) -> None:
    assert not is_valid_name(name)
    found = validate_name(name)
    assert found is not None
    assert reason in found


def test_253_is_the_limit() -> None:
    assert len("a" * 253) == MAX_NAME_LENGTH == 253
    assert is_valid_name("a" * 253)
    assert not is_valid_name("a" * 254)


def test_bare_reference() -> None:
    ref = parse_reference("send-email")
    assert ref == Reference(kind="bare", name="send-email", raw="send-email")
    assert ref.host is None
    assert ref.path is None
    assert ref.url is None
    assert str(ref) == "send-email"


def test_agent_reference() -> None:
    ref = parse_reference("oagent://billing-agent")
    assert (ref.kind, ref.name, ref.host, ref.path, ref.url) == ("agent", "billing-agent", None, None, None)
    assert str(ref) == "oagent://billing-agent"


def test_agent_reference_name_with_dots_is_not_a_host() -> None:
    ref = parse_reference("oagent://billing.agents")
    assert (ref.kind, ref.name) == ("agent", "billing.agents")


@pytest.mark.parametrize(
    ("text", "host", "path", "name", "url"),
    [
        (
            "oagent://agents.example.com/billing",
            "agents.example.com",
            "",
            "billing",
            "https://agents.example.com/billing",
        ),
        (
            "oagent://agents.example.com/team/billing",
            "agents.example.com",
            "team",
            "billing",
            "https://agents.example.com/team/billing",
        ),
        (
            "oagent://Host.Example.com:8443/a/b/c-agent",
            "Host.Example.com:8443",
            "a/b",
            "c-agent",
            "https://Host.Example.com:8443/a/b/c-agent",
        ),
        ("oagent://localhost/x", "localhost", "", "x", "https://localhost/x"),
    ],
)
def test_remote_reference(text: str, host: str, path: str, name: str, url: str) -> None:
    ref = parse_reference(text)
    assert (ref.kind, ref.host, ref.path, ref.name, ref.raw) == ("remote", host, path, name, text)
    assert ref.url == url


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "must not be empty"),
        ("Send-Email", "names are lowercase"),
        ("https://example.com/agent", "unsupported reference scheme 'https'"),
        ("oagent://", "must not be empty"),
        ("oagent://Billing", "name 'Billing' in reference 'oagent://Billing'"),
        ("oagent://example.com/", "name '' in reference"),
        ("oagent://example.com//billing", "empty path segment"),
        ("oagent://example.com/a b/billing", "invalid path segment 'a b'"),
        ("oagent://bad_host/billing", "invalid host 'bad_host'"),
        ("oagent:///billing", "invalid host ''"),
        ("oagent://example.com/team/Billing", "name 'Billing'"),
    ],
)
def test_invalid_references(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_reference(text)


def test_bare_name_prefers_the_tool() -> None:
    ref = parse_reference("search")
    assert resolve(ref, tools={"search"}, agents={"search"}) == "tool"
    assert resolve(ref, tools={"search"}, agents=set()) == "tool"


def test_bare_name_falls_back_to_the_agent() -> None:
    assert resolve(parse_reference("search"), tools={"other"}, agents={"search"}) == "agent"


def test_agent_form_is_exclusively_an_agent() -> None:
    ref = parse_reference("oagent://search")
    assert resolve(ref, tools={"search"}, agents={"search"}) == "agent"
    assert resolve(ref, tools={"search"}, agents=set()) is None


def test_unknown_reference_resolves_to_nothing() -> None:
    assert resolve(parse_reference("nothing"), tools={"a"}, agents={"b"}) is None


def test_remote_reference_resolves_as_remote() -> None:
    assert (
        resolve(parse_reference("oagent://example.com/search"), tools={"search"}, agents={"search"})
        == "remote"
    )
