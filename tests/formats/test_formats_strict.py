"""The built-in Agent Spec reader and pyagentspec, the reference SDK, agree on every fixture.

Agreement means: the same files are accepted and refused, and for an accepted file both read the same
agent, instructions, model, tools, tool arguments and confirmation flags. One difference is deliberate and
pinned here: pyagentspec ignores fields it does not know, agentguard refuses them on the components that
carry policy, so that a misspelled ``requires_confirmation`` cannot silently drop a confirmation.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from agentguard import ConfigurationError, SpecError
from agentguard.formats import Descriptor, load_descriptor, parse_descriptor
from agentguard.formats.agentspec import load_referenced_components
from tests.formats.conftest import FIXTURES, SUPPORT_SECRETS, fixture

AGENTSPEC_FIXTURES = sorted(
    p.name for p in FIXTURES.glob("*.agentspec.*") if p.name != "components.agentspec.yaml"
)
REFUSED_ONLY_BY_AGENTGUARD = {"misspelled-field.agentspec.yaml"}


def secrets_for(name: str) -> Mapping[str, object]:
    if name == "support.agentspec.yaml":
        return SUPPORT_SECRETS
    if name == "disaggregated.agentspec.yaml":
        return load_referenced_components(fixture("components.agentspec.yaml"))
    return {}


def ours(name: str) -> dict[str, Any] | None:
    try:
        descriptor = load_descriptor(fixture(name), secrets=secrets_for(name))
    except SpecError:
        return None
    return summary_of_descriptor(descriptor)


def summary_of_descriptor(descriptor: Descriptor) -> dict[str, Any]:
    info = descriptor.agent_info
    assert info is not None
    assert info.model is not None
    confirmations = {tool["id"]: tool["id"] in descriptor.review_gates for tool in descriptor.tools}
    confirmations.update(dict.fromkeys(descriptor.review_gates, True))
    return {
        "name": info.name,
        "id": info.id,
        "description": info.description,
        "instructions": info.instructions,
        "model": info.model["id"],
        "human_in_the_loop": info.metadata["agentspec"]["humanInTheLoop"],
        "confirmations": confirmations,
        "arguments": {tool["id"]: [a["name"] for a in tool["arguments"]] for tool in descriptor.tools},
    }


def theirs(name: str) -> dict[str, Any] | None:
    deserializer = pytest.importorskip(
        "pyagentspec.serialization",
        reason="pyagentspec is not installed (pip install 'agentguard[agentspec]')",
    ).AgentSpecDeserializer()
    path = fixture(name)
    data = yaml.safe_load(path.read_text())  # JSON is YAML here: the fixtures hold no exponent numbers
    registry = {
        key: deserializer.from_dict({"agentspec_version": data["agentspec_version"], **value})
        if isinstance(value, dict) and "component_type" in value
        else value
        for key, value in secrets_for(name).items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            component = deserializer.from_dict(data, components_registry=registry)
        except Exception:
            return None
    return summary_of_component(component)


def _capability(name: str) -> str:
    return name.replace("_", "-")


def summary_of_component(component: Any) -> dict[str, Any]:
    from pyagentspec.mcp.tools import MCPToolSpec
    from pyagentspec.specialized_agent import SpecializedAgent

    if isinstance(component, SpecializedAgent):
        agent, params = component.agent, component.agent_specialization_parameters
        tools = [*agent.tools, *(params.additional_tools or [])]
        extra = params.additional_instructions
        instructions = f"{agent.system_prompt}\n\n{extra}" if extra else agent.system_prompt
        human_in_the_loop = (
            agent.human_in_the_loop if params.human_in_the_loop is None else params.human_in_the_loop
        )
    else:
        agent, tools = component, list(component.tools)
        instructions, human_in_the_loop = component.system_prompt, component.human_in_the_loop
    confirmations = {_capability(tool.name): tool.requires_confirmation for tool in tools}
    arguments = {_capability(tool.name): [p.title for p in tool.inputs or []] for tool in tools}
    for toolbox in agent.toolboxes:
        for entry in getattr(toolbox, "tool_filter", None) or []:  # MCPToolBox is the only toolbox
            if isinstance(entry, MCPToolSpec):
                confirmations[_capability(entry.name)] = (
                    toolbox.requires_confirmation or entry.requires_confirmation
                )
                arguments[_capability(entry.name)] = [p.title for p in entry.inputs or []]
            else:
                confirmations[_capability(entry)] = toolbox.requires_confirmation
    return {
        "name": component.name,
        "id": component.id,
        "description": component.description,
        "instructions": instructions,
        "model": agent.llm_config.model_id,
        "human_in_the_loop": human_in_the_loop,
        # a bare tool_filter name has no signature: agentguard describes it only when it is gated
        "confirmations": {k: v for k, v in confirmations.items() if v or k in arguments},
        "arguments": arguments,
    }


@pytest.mark.parametrize("name", AGENTSPEC_FIXTURES)
def test_builtin_reader_and_pyagentspec_agree(name: str) -> None:
    reference = theirs(name)
    if name in REFUSED_ONLY_BY_AGENTGUARD:
        assert reference is not None
        assert ours(name) is None
        return
    assert ours(name) == reference


def test_every_kind_of_fixture_is_compared() -> None:
    accepted = [n for n in AGENTSPEC_FIXTURES if n not in REFUSED_ONLY_BY_AGENTGUARD and ours(n) is not None]
    refused = [n for n in AGENTSPEC_FIXTURES if ours(n) is None]
    assert len(accepted) >= 4
    assert len(refused) >= 3


@pytest.mark.parametrize("name", AGENTSPEC_FIXTURES)
def test_strict_mode_accepts_what_both_accept(name: str) -> None:
    pytest.importorskip(
        "pyagentspec", reason="pyagentspec is not installed (pip install 'agentguard[agentspec]')"
    )
    if ours(name) is None:
        with pytest.raises(SpecError):
            load_descriptor(fixture(name), secrets=secrets_for(name), strict=True)
    else:
        strict = load_descriptor(fixture(name), secrets=secrets_for(name), strict=True)
        assert summary_of_descriptor(strict) == ours(name)


def test_strict_mode_catches_what_only_pyagentspec_checks() -> None:
    pytest.importorskip(
        "pyagentspec", reason="pyagentspec is not installed (pip install 'agentguard[agentspec]')"
    )
    text = """\
component_type: Agent
id: a
name: a
system_prompt: You help.
llm_config: {component_type: VllmConfig, id: llm, name: llm, model_id: m, url: http://llm}
tools:
  - {component_type: RemoteTool, id: r, name: refund, url: 'https://pay/refund', http_method: POST,
     inputs: [{title: amount, type: integer}]}
agentspec_version: 25.4.2
"""
    assert parse_descriptor(text).tools  # the built-in reader does not check placeholders
    # (pyagentspec 26.3.1 reports this one as "TypeError: ValueError: 'error' required in context": its
    # error for RemoteTool inputs that match no {{placeholder}} fails to build under pydantic 2.13)
    with pytest.raises(SpecError, match="pyagentspec rejects the configuration"):
        parse_descriptor(text, strict=True)


def test_strict_mode_without_pyagentspec_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyagentspec.serialization", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'agentguard\[agentspec\]'"):
        load_descriptor(fixture("specialized.agentspec.yaml"), strict=True)
