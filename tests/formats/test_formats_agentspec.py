"""Agent Spec configurations: every tool kind, references and secrets, versions, and the checks they imply."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from agentguard import Approval, Guard, ReviewDenied, ReviewRequest, Rule, RuleViolation, SpecError, aos
from agentguard.formats import Descriptor, load_descriptor, parse_descriptor
from agentguard.formats.agentspec import AUTONOMOUS_DENY, load_referenced_components
from tests.formats.conftest import SUPPORT_SECRETS, fixture


def support() -> Descriptor:
    return load_descriptor(fixture("support.agentspec.yaml"), secrets=SUPPORT_SECRETS)


def tools_by_id(descriptor: Descriptor) -> dict[str, Any]:
    return {tool["id"]: tool for tool in descriptor.tools}


AGENT = """\
component_type: Agent
id: a
name: a
system_prompt: You help.
llm_config: {component_type: VllmConfig, id: llm, name: llm, model_id: m, url: http://llm}
agentspec_version: 25.4.2
"""


def agent(extra: str = "", *, version: str = "25.4.2", **options: Any) -> Descriptor:
    text = AGENT.replace("25.4.2", version) + textwrap.dedent(extra)
    return parse_descriptor(text, source="a.yaml", **options)


def problems_of(extra: str, **options: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        agent(extra, **options)
    return [str(problem) for problem in info.value.problems]


# ------------------------------------------------------------------------------------- the descriptor


def test_agent_fields_become_the_aos_agent() -> None:
    info = support().agent_info
    assert info is not None
    assert (info.name, info.id, info.version) == ("support", "support-agent", "1.4.0")
    assert info.description == "Answers customer questions about orders."
    assert info.instructions == "You help customers with their orders."
    assert info.model == {
        "name": "support-llm",
        "id": "corp/llama-3.3-70b",
        "provider": {"name": "openai-compatible"},
        "defaultParams": {"temperature": 0.2},
        "metadata": {"componentType": "OpenAiCompatibleConfig", "url": "https://llm.corp.example/v1"},
    }
    assert list(info.mcp_servers) == [
        {
            "name": "crm-mcp",
            "version": "unspecified",
            "transport": "StreamableHTTPTransport",
            "url": "https://mcp.corp.example/crm",
        }
    ]


def test_every_tool_kind_is_described_under_its_capability_name() -> None:
    tools = tools_by_id(support())
    assert list(tools) == ["lookup-order", "ask-customer", "refund", "web-search", "crm-get", "crm-delete"]
    kinds = {name: tool["metadata"]["agentspec"]["componentType"] for name, tool in tools.items()}
    assert kinds == {
        "lookup-order": "ServerTool",
        "ask-customer": "ClientTool",
        "refund": "RemoteTool",
        "web-search": "BuiltinTool",
        "crm-get": "MCPTool",
        "crm-delete": "MCPToolSpec",
    }
    lookup = tools["lookup-order"]
    assert lookup["name"] == "lookup_order"
    assert lookup["description"] == "Look an order up by its id."
    assert lookup["arguments"] == [
        {"name": "order_id", "required": True, "type": "string"},
        {"name": "include_items", "required": False, "type": "boolean"},
    ]
    assert lookup["outputs"] == [{"name": "order", "type": "object"}]
    assert tools["refund"]["metadata"]["agentspec"]["url"] == "https://payments.corp.example/refunds"
    assert tools["web-search"]["metadata"]["agentspec"]["toolType"] == "web_search"
    assert tools["crm-delete"]["metadata"]["agentspec"]["mcpServer"] == "crm-mcp"
    for tool in tools.values():
        aos.ToolDefinition.model_validate(tool)


def test_requires_confirmation_becomes_a_review_gate() -> None:
    descriptor = support()
    # crm_list has no signature in the file (a plain tool_filter name): gated by the toolbox if at all
    assert descriptor.review_gates == {"ask-customer": "user", "refund": "user", "crm-delete": "user"}
    assert descriptor.reviewers == {}


def test_a_toolbox_wide_confirmation_covers_every_listed_tool() -> None:
    descriptor = load_descriptor(fixture("autonomous.agentspec.json"))
    # close_ticket's own `requires_confirmation: false` cannot switch the toolbox's off
    assert set(descriptor.review_gates) == {"archive-ticket", "list-tickets", "close-ticket"}


def test_schema_rules_for_declared_arguments_and_results() -> None:
    names = {rule.name for rule in support().schema_rules}
    assert names == {
        "lookup-order:arguments",
        "lookup-order:result",
        "ask-customer:arguments",
        "refund:arguments",
        "refund:result",
        "web-search:arguments",
        "web-search:result",
        "crm-get:arguments",
        "crm-delete:arguments",
    }
    assert all(rule.kind is Rule.SCHEMA for rule in support().schema_rules)


def test_sensitive_values_never_reach_the_descriptor() -> None:
    text = repr(support())
    assert "sk-test" not in text
    assert "Bearer test" not in text


def test_agent_inputs_and_outputs_are_checked() -> None:
    descriptor = load_descriptor(fixture("autonomous.agentspec.json"))
    assert descriptor.check_input({"days": 7}).passed
    assert descriptor.check_input({}).passed  # `days` has a default
    result = descriptor.check_input({"days": "seven"})
    assert not result.passed
    assert "days: expected an integer, got the string 'seven'" in result.message
    assert not descriptor.check_output({"archived": "all"}).passed


# --------------------------------------------------------------------------- references and secrets


def test_shared_components_resolve_through_referenced_components() -> None:
    info = support().agent_info
    assert info is not None
    assert len(info.mcp_servers) == 1  # the MCPTool and the toolbox share one transport


def test_missing_secrets_are_warnings_agentguard_never_needs_them() -> None:
    descriptor = load_descriptor(fixture("support.agentspec.yaml"))
    reasons = [(w.field, w.line) for w in descriptor.warnings]
    assert reasons == [("llm_config.api_key", 16), ("tools.2.sensitive_headers", 60)]
    assert "support-llm.api_key" in descriptor.warnings[0].reason


def test_inlined_secret_is_a_warning() -> None:
    text = AGENT.replace("url: http://llm}", "url: http://llm, api_key: sk-live}")
    descriptor = parse_descriptor(text, source="a.yaml")
    (warning,) = descriptor.warnings
    assert warning.field == "llm_config.api_key"
    assert "export it as a $component_ref" in warning.reason


def test_broken_reference_is_an_error_with_file_field_and_line() -> None:
    with pytest.raises(SpecError) as info:
        load_descriptor(fixture("broken-reference.agentspec.yaml"))
    (problem,) = info.value.problems
    assert (problem.field, problem.line) == ("tools.0.client_transport", 15)
    assert "$component_ref 'crm-transprot' refers to nothing" in problem.reason


def test_disaggregated_components_come_from_a_second_file() -> None:
    components = load_referenced_components(fixture("components.agentspec.yaml"))
    descriptor = load_descriptor(fixture("disaggregated.agentspec.yaml"), secrets=components)
    assert [tool["name"] for tool in descriptor.tools] == ["powerful_tool"]
    assert descriptor.agent_info is not None
    assert descriptor.agent_info.model is not None
    assert descriptor.agent_info.model["metadata"]["url"] == "https://llm.corp.example/v1"
    with pytest.raises(SpecError, match="'powerful_tool_id' refers to nothing"):
        load_descriptor(fixture("disaggregated.agentspec.yaml"))


def test_secrets_win_over_referenced_components() -> None:
    descriptor = load_descriptor(
        fixture("support.agentspec.yaml"),
        secrets={
            **SUPPORT_SECRETS,
            "crm-transport": {"component_type": "SSETransport", "name": "other", "url": "u"},
        },
    )
    assert descriptor.agent_info is not None
    assert descriptor.agent_info.mcp_servers[0]["name"] == "other"


def test_reference_problems() -> None:
    assert any(
        "circular reference: x -> y -> x" in p
        for p in problems_of(
            """\
            tools: [{$component_ref: x}]
            $referenced_components:
              x: {$component_ref: y}
              y: {$component_ref: x}
            """
        )
    )
    assert any(
        "a reference is an object with one member" in p
        for p in problems_of("tools: [{$component_ref: x, name: y}]\n")
    )


def test_duplicate_component_ids_are_refused() -> None:
    problems = problems_of(
        """\
        tools:
          - {component_type: ClientTool, id: t, name: one}
          - {component_type: ClientTool, id: t, name: two}
        """
    )
    assert any("tools.1.id: the id 't' is also used at line 8" in p for p in problems)


def test_a_file_of_only_referenced_components_is_not_an_agent() -> None:
    with pytest.raises(SpecError, match="holds only \\$referenced_components"):
        load_descriptor(fixture("components.agentspec.yaml"))


# ----------------------------------------------------------------------------------------- versions


def test_version_gated_field_is_an_error() -> None:
    with pytest.raises(SpecError) as info:
        load_descriptor(fixture("version-gated.agentspec.yaml"))
    (problem,) = info.value.problems
    assert str(problem).endswith(
        "tools.0.requires_confirmation: requires_confirmation needs agentspec_version 25.4.2 or later "
        "(the file says 25.4.1)"
    )


@pytest.mark.parametrize(
    ("extra", "version", "field"),
    [
        ("human_in_the_loop: false\n", "25.4.1", "human_in_the_loop"),
        ("toolboxes: [{component_type: MCPToolBox, name: b, client_transport: "
         "{component_type: SSETransport, name: s, url: u}}]\n", "25.4.1", "toolboxes"),
        ("toolboxes: [{component_type: MCPToolBox, name: b, requires_confirmation: true, tool_filter: [x], "
         "client_transport: {component_type: SSETransport, name: s, url: u}}]\n", "25.4.2", "requires_confirmation"),
        ("transforms: [{component_type: X}]\n", "25.4.2", "transforms"),
    ],
)  # fmt: skip
def test_more_version_gates(extra: str, version: str, field: str) -> None:
    assert any(f"{field} needs agentspec_version" in p for p in problems_of(extra, version=version))


def test_unused_gated_fields_are_fine_in_old_files() -> None:
    descriptor = agent(
        "tools: [{component_type: ServerTool, name: t, requires_confirmation: false}]\n", version="25.4.1"
    )
    assert descriptor.review_gates == {}


def test_specialized_agent_needs_25_4_2() -> None:
    text = fixture("specialized.agentspec.yaml").read_text().replace("25.4.2", "25.4.1")
    with pytest.raises(SpecError, match=r"SpecializedAgent needs agentspec_version 25\.4\.2"):
        parse_descriptor(text)


def test_missing_version_reads_as_the_latest_with_a_warning() -> None:
    descriptor = parse_descriptor(AGENT.replace("agentspec_version: 25.4.2\n", ""))
    assert descriptor.agent_info is not None
    assert descriptor.agent_info.metadata["agentspec"]["version"] == "26.3.1"
    assert "agentspec_version is missing" in descriptor.warnings[0].reason


def test_versions_newer_than_known_are_read_older_unknown_refused() -> None:
    assert "newer than the versions" in agent(version="27.1.0").warnings[0].reason
    assert any("unknown Agent Spec version '25.1.0'" in p for p in problems_of("", version="25.1.0"))
    assert any("must be a version YEAR.QUARTER.PATCH" in p for p in problems_of("", version="latest"))
    assert "pre-release" in agent(version="25.4.0").warnings[0].reason


# ---------------------------------------------------------------------------------- strictness


def test_a_misspelled_policy_field_is_an_error() -> None:
    with pytest.raises(SpecError) as info:
        load_descriptor(fixture("misspelled-field.agentspec.yaml"))
    (problem,) = info.value.problems
    assert problem.line == 15
    assert (
        problem.reason
        == "unknown field 'requires_confirmaton' of ServerTool (did you mean 'requires_confirmation'?)"
    )


def test_unknown_tool_types_are_read_as_tools_with_a_warning() -> None:
    descriptor = agent(
        "tools: [{component_type: PluginTool, name: plug, requires_confirmation: true, inputs: []}]\n"
    )
    assert descriptor.review_gates == {"plug": "user"}
    assert "PluginTool is not an Agent Spec tool type" in descriptor.warnings[0].reason


def test_tool_name_collisions_are_errors() -> None:
    problems = problems_of(
        """\
        tools: [{component_type: ClientTool, name: crm_get}]
        toolboxes:
          - component_type: MCPToolBox
            name: crm
            client_transport: {component_type: SSETransport, name: s, url: u}
            tool_filter: [crm_get]
        """
    )
    assert any("a second tool is called 'crm-get' (the first is at line 7)" in p for p in problems)


def test_tool_names_that_cannot_be_capabilities_need_a_mapping() -> None:
    extra = "tools: [{component_type: ClientTool, name: GetWeather, inputs: []}]\n"
    assert any("map it with names={'GetWeather': '<capability>'}" in p for p in problems_of(extra))
    descriptor = agent(extra, names={"GetWeather": "get-weather"})
    assert [tool["id"] for tool in descriptor.tools] == ["get-weather"]


def test_toolbox_confirmation_without_a_filter_is_a_warning() -> None:
    descriptor = agent(
        """\
        toolboxes:
          - component_type: MCPToolBox
            name: crm
            requires_confirmation: true
            client_transport: {component_type: SSETransport, name: s, url: u}
        """,
        version="26.1.2",
    )
    assert descriptor.review_gates == {}
    assert "agentguard can only gate tools it knows by name" in descriptor.warnings[0].reason


def test_property_schemas_are_checked_at_load() -> None:
    problems = problems_of(
        "tools: [{component_type: ClientTool, name: t, inputs: [{title: a, type: strng}]}]\n"
    )
    assert any("tools.0.inputs.0.type: type must be one of" in p for p in problems)
    descriptor = agent(
        "tools: [{component_type: ClientTool, name: t, inputs: [{title: a, type: object, propertyNames: {}}]}]\n"
    )
    assert "'propertyNames' is not checked by agentguard" in descriptor.warnings[0].reason


# ---------------------------------------------------------------------------- specialised agents


def test_specialized_agent_merges_instructions_and_tools() -> None:
    descriptor = load_descriptor(fixture("specialized.agentspec.yaml"))
    info = descriptor.agent_info
    assert info is not None
    assert (info.name, info.id) == ("refunds expert", "refunds-expert")
    assert info.instructions == "You help customers.\n\nOnly handle refund requests; escalate anything else."
    assert info.model is not None
    assert info.model["provider"] == {"name": "ollama"}
    assert [tool["id"] for tool in descriptor.tools] == ["lookup-order", "refund-policy"]
    assert descriptor.review_gates == {"lookup-order": "user"}


def test_specialization_can_take_the_human_out_of_the_loop() -> None:
    text = (
        fixture("specialized.agentspec.yaml")
        .read_text()
        .replace("  name: refunds\n", "  name: refunds\n  human_in_the_loop: false\n")
    )
    assert parse_descriptor(text).review_gates == {"lookup-order": AUTONOMOUS_DENY}


# ------------------------------------------------------------------------------ through a real Guard


def test_schema_violating_arguments_are_rejected_through_the_guard(guard: Guard) -> None:
    support().apply(guard)
    guard.add_reviewer("user", lambda request: False)  # the confirmation gate apply adds; not asked here
    calls: list[str] = []

    @guard.tool
    def lookup_order(order_id: str, include_items: bool = False) -> dict[str, Any]:
        calls.append(order_id)
        return {"status": "shipped"}

    with guard.engagement():
        assert lookup_order("A-1") == {"status": "shipped"}
        with pytest.raises(RuleViolation) as info:
            lookup_order("B-7")
    error = info.value
    assert error.rule is Rule.SCHEMA
    assert error.rule_name == "lookup-order:arguments"
    assert str(error) == (
        "[schema input] lookup-order: schema check of the arguments of 'lookup-order' (declared in "
        f"{fixture('support.agentspec.yaml')}) failed: order_id: the string 'B-7' does not match the "
        "pattern '^A-[0-9]+$'"
    )
    assert calls == ["A-1"]  # the rejected call never ran


def test_schema_violating_results_are_withheld(guard: Guard) -> None:
    support().apply(guard)
    guard.add_reviewer("user", lambda request: False)  # the confirmation gate apply adds; not asked here

    @guard.tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        return {"status": "lost"}

    with guard.engagement() as eng, pytest.raises(RuleViolation) as info:
        lookup_order("A-1")
    assert info.value.rule_name == "lookup-order:result"
    # The withheld result is not quoted: the reason reaches the caller (often the model) and the record.
    assert 'status: a string is not one of "open", "shipped", "cancelled"' in str(info.value)
    assert "lost" not in str(info.value)
    assert eng.view()["history"]["lookup-order"][0]["outputs"] is None


def test_review_gate_asks_the_user_reviewer(guard: Guard) -> None:
    support().apply(guard)
    asked: list[str] = []

    def user(request: ReviewRequest) -> bool:
        asked.append(request.capability)
        return False

    guard.add_reviewer("user", user)

    @guard.tool
    def refund(order_id: str, amount: str) -> dict[str, str]:
        return {"refund_id": "r-1", "status": "done"}

    with guard.engagement(), pytest.raises(ReviewDenied):
        refund("A-1", "20")
    assert asked == ["refund"]


def test_without_a_human_confirmations_are_denied_or_go_to_the_autonomous_reviewer(guard: Guard) -> None:
    descriptor = load_descriptor(fixture("autonomous.agentspec.json"), names={"archive_ticket": "refund"})
    descriptor.apply(guard)
    with guard.engagement(), pytest.raises(ReviewDenied, match="no autonomous reviewer is configured"):
        guard.call("refund", {"ticket_id": 3}, lambda ticket_id: True)

    other = Guard.from_file(fixture("agent.yaml"))
    load_descriptor(
        fixture("autonomous.agentspec.json"),
        names={"archive_ticket": "refund"},
        autonomous_reviewer="policy-bot",
    ).apply(other)
    other.add_reviewer("policy-bot", lambda request: Approval(True, "archiving is routine"))
    with other.engagement():
        assert other.call("refund", {"ticket_id": 3}, lambda ticket_id: True) is True


def test_apply_sets_the_aos_agent_descriptor(guard: Guard) -> None:
    guard.agent_descriptor()  # cached before apply: apply must invalidate it
    support().apply(guard)
    descriptor = guard.agent_descriptor()
    aos.Agent.model_validate(descriptor)
    assert descriptor["name"] == "support"
    assert descriptor["instructions"] == "You help customers with their orders."
    assert descriptor["model"]["id"] == "corp/llama-3.3-70b"
    assert descriptor["mcpServers"][0]["url"] == "https://mcp.corp.example/crm"


def test_apply_is_idempotent_and_reports_what_the_spec_does_not_allow() -> None:
    guard = Guard.from_yaml(
        "kind: openagentspec:v1/agent\nname: small\ndescription: d\nintent: i\nowner: o\n"
        "capabilities:\n  lookup-order:\n"
    )
    descriptor = support()
    problems = descriptor.apply(guard)
    assert descriptor.apply(guard) == problems
    assert [p.field for p in problems] == [
        "tools.ask-customer",
        "tools.refund",
        "tools.web-search",
        "tools.crm-get",
        "tools.crm-delete",
    ]
    assert len([rule for rule in guard.rules if rule.name.startswith("lookup-order:")]) == 2


def test_schema_checks_can_run_in_shadow_mode() -> None:
    guard = Guard.from_file(fixture("agent.yaml"), severity={"schema:lookup-order:result": "warning"})
    support().apply(guard)
    guard.add_reviewer("user", lambda request: False)  # the confirmation gate apply adds; not asked here

    @guard.tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        return {"status": "lost"}

    with guard.engagement() as eng:
        assert lookup_order("A-1") == {"status": "lost"}  # recorded, not blocked
        with pytest.raises(RuleViolation):
            lookup_order("B-1")  # the arguments check still blocks
    warned = [d for d in eng.decisions if d.rule is Rule.SCHEMA and d.reason.startswith("would deny")]
    assert len(warned) == 1


def test_guard_from_file_with_a_descriptor_uses_its_declared_tools() -> None:
    guard = Guard.from_file(fixture("agent.yaml"), descriptor=support())

    @guard.tool(name="lookup-order")
    def lookup(order_id: str, verbose: bool = False) -> dict[str, str]:
        """What the Python signature says (the descriptor's declaration wins)."""
        return {}

    tools = {t["id"]: t for t in guard.agent_descriptor()["tools"]}
    declared = {t["id"]: t for t in support().tools}
    assert tools["lookup-order"] == declared["lookup-order"]
    assert guard.agent_descriptor()["name"] == "support"
    assert guard.required_reviewers() >= set(support().review_gates.values())


def test_a_descriptor_renames_the_agent_in_telemetry_too() -> None:
    guard = Guard.from_file(fixture("agent.yaml"), descriptor=support())
    assert guard.telemetry is not None
    assert guard.telemetry.agent_name == guard.agent_descriptor()["name"] == "support"
