"""Agent Spec (Open Agent Specification) agents as agentguard descriptors.

An Agent Spec configuration (JSON or YAML) describes an ``Agent`` -- or a ``SpecializedAgent`` refining
one -- with its LLM, tools and toolboxes. agentguard reads the parts that matter to a guard::

    from agentguard.formats import load_descriptor

    descriptor = load_descriptor("support.agentspec.yaml", secrets={"llm.api_key": os.environ["KEY"]})
    descriptor.agent_info.instructions        # the agent's system_prompt
    descriptor.review_gates                   # {"refund": "user"}: requires_confirmation tools
    descriptor.apply(guard)                   # AOS descriptor, review gates, schema checks

What becomes what:

* ``name``, ``id``, ``description``, ``system_prompt``, ``llm_config`` → the AOS ``Agent`` descriptor (a
  ``SpecializedAgent`` appends its ``additional_instructions`` and ``additional_tools``);
* every tool (``ServerTool``, ``ClientTool``, ``RemoteTool``, ``MCPTool``, ``BuiltinTool``) and every tool
  named by an ``MCPToolBox``'s ``tool_filter`` → an AOS ``ToolDefinition`` whose ``id`` is the capability
  name the guard calls: the tool name with ``_`` turned into ``-`` (as ``@guard.tool`` names functions),
  or the name given in ``names={...}``;
* ``requires_confirmation`` on a tool, on a toolbox (all the tools it lists) or on an ``MCPToolSpec`` →
  a review gate asking the ``reviewer`` (default ``"user"``) before each call. A toolbox-wide
  confirmation cannot be switched off by one of its entries. With ``human_in_the_loop: false`` nobody
  waits for a person: the gate asks ``autonomous_reviewer`` when one is configured, and is denied otherwise;
* the JSON schemas of tool ``inputs`` and ``outputs`` → schema checks of each call's arguments and result
  (``kind=Rule.SCHEMA``): a property without a ``default`` is required, an undeclared argument is refused,
  result members beyond the declared outputs are ignored (runtimes extract the declared ones);
* MCP client transports → the AOS descriptor's ``mcpServers``.

References: ``{"$component_ref": id}`` resolves to an entry of ``$referenced_components`` or to a value
given at load time with ``secrets={id: value}`` (which wins, as in pyagentspec's ``components_registry``).
A reference to nothing is an error -- except at a sensitive field (``api_key``, ``sensitive_headers``,
mTLS files), whose value agentguard never needs and never copies: there it is a warning. A sensitive
value written into the file is a warning too (exported configurations must not contain them).

Versions: fields introduced after the file's ``agentspec_version`` are errors when used (a
``requires_confirmation: true`` in a 25.4.1 file, a toolbox-wide confirmation before 26.1.2), as pyagentspec
rules. A missing version is read as the latest known, with a warning.

Tolerance: unknown LLM configurations and transports (plugins) are read for the few fields agentguard
uses; an unknown tool type is read as a generic tool, with a warning. Unknown fields of the components that
carry policy (agents, tools, toolboxes, tool specs) are errors -- a mistyped ``requires_confirmaton``
must not silently drop a confirmation. ``strict=True`` additionally runs pyagentspec's deserializer
(``pip install 'agentguard[agentspec]'``), which checks every component in full.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentguard.errors import ConfigurationError, Phase
from agentguard.pipeline import AgentInfo
from agentguard.policy import Approval, ReviewRequest
from agentguard.spec import validate_name

from ._descriptor import Descriptor, LoadOptions
from ._document import SECRETS, Document, FieldPath, read_document, read_file
from ._schema import ArgumentsSchema, OutputsSchema, Schema, SchemaRule, schema_problems

__all__ = [
    "AUTONOMOUS_DENY",
    "KNOWN_VERSIONS",
    "SENSITIVE_FIELDS",
    "from_document",
    "load_referenced_components",
]

KNOWN_VERSIONS: tuple[str, ...] = ("25.4.1", "25.4.2", "26.1.0", "26.1.2", "26.3.1")
"""The ``agentspec_version`` values this reader knows, oldest first."""
_LATEST = KNOWN_VERSIONS[-1]
_PRERELEASE = frozenset({"25.3.0", "25.3.1", "25.4.0"})  # read as 25.4.1, as pyagentspec does

SENSITIVE_FIELDS = frozenset(
    {"api_key", "sensitive_headers", "key_file", "cert_file", "ca_file", "auth_file_location"}
)
"""Fields Agent Spec calls sensitive: never exported, supplied at load time, never copied by agentguard."""

AUTONOMOUS_DENY = "agentguard:autonomous"
"""The reviewer id of confirmations in an agent without a human in the loop and no autonomous reviewer."""

TOOL_TYPES = frozenset({"ServerTool", "ClientTool", "RemoteTool", "MCPTool", "BuiltinTool"})
_OPENAI_LIKE = frozenset({"OpenAiConfig", "OpenAiCompatibleConfig", "VllmConfig", "OllamaConfig"})
_REMOTE_TRANSPORTS = frozenset(
    {"SSETransport", "SSEmTLSTransport", "StreamableHTTPTransport", "StreamableHTTPmTLSTransport"}
)
_LLM_PROVIDERS = {
    "VllmConfig": "vllm",
    "OllamaConfig": "ollama",
    "OpenAiConfig": "openai",
    "OpenAiCompatibleConfig": "openai-compatible",
    "OciGenAiConfig": "oci",
    "GeminiConfig": "google",
}

_COMMON = frozenset(
    {"component_type", "id", "name", "description", "metadata", "agentspec_version", "air_version"}
)
_IO = _COMMON | {"inputs", "outputs"}
_TOOL = _IO | {"requires_confirmation"}
# The fields of the components that carry policy; anything else there is a mistake, not an extension.
_FIELDS: Mapping[str, frozenset[str]] = {
    "Agent": _IO | {"llm_config", "system_prompt", "tools", "toolboxes", "human_in_the_loop", "transforms"},
    "SpecializedAgent": _IO | {"agent", "agent_specialization_parameters"},
    "AgentSpecializationParameters": _IO
    | {"additional_instructions", "additional_tools", "human_in_the_loop"},
    "ServerTool": _TOOL,
    "ClientTool": _TOOL,
    "RemoteTool": _TOOL
    | {
        "url",
        "http_method",
        "api_spec_uri",
        "data",
        "query_params",
        "headers",
        "sensitive_headers",
        "url_allow_list",
        "retry_policy",
    },
    "MCPTool": _TOOL | {"client_transport", "retry_policy"},
    "BuiltinTool": _TOOL | {"tool_type", "configuration", "executor_name", "tool_version"},
    "MCPToolBox": _COMMON | {"requires_confirmation", "client_transport", "tool_filter", "retry_policy"},
    "MCPToolSpec": _TOOL,
}


def _used(value: object) -> bool:
    return value is not None and value != [] and value != {} and value is not False


@dataclass(frozen=True)
class _Gate:
    """A field introduced in Agent Spec ``since``: using it in an older file is an error."""

    types: frozenset[str]
    field: str
    since: str
    used: Callable[[object], bool] = _used


_GATES: tuple[_Gate, ...] = (
    _Gate(frozenset({"Agent"}), "toolboxes", "25.4.2"),
    _Gate(frozenset({"Agent"}), "human_in_the_loop", "25.4.2", lambda value: value is False),
    _Gate(frozenset({"Agent"}), "transforms", "26.1.2"),
    _Gate(TOOL_TYPES | {"MCPToolSpec"}, "requires_confirmation", "25.4.2"),
    _Gate(frozenset({"MCPToolBox"}), "requires_confirmation", "26.1.2"),
    _Gate(frozenset({"RemoteTool"}), "sensitive_headers", "25.4.2"),
    _Gate(frozenset({"RemoteTool"}), "url_allow_list", "26.1.2"),
    _Gate(frozenset({"RemoteTool"}), "retry_policy", "26.1.2"),
    _Gate(frozenset({"MCPTool", "MCPToolBox"}), "retry_policy", "26.3.1"),
    _Gate(_OPENAI_LIKE, "api_key", "25.4.2"),
    _Gate(_OPENAI_LIKE, "api_type", "25.4.2", lambda value: value not in (None, "chat_completions")),
    _Gate(_REMOTE_TRANSPORTS, "sensitive_headers", "25.4.2"),
    _Gate(_REMOTE_TRANSPORTS, "auth", "26.1.2"),
    _Gate(_REMOTE_TRANSPORTS, "retry_policy", "26.1.2"),
)
_COMPONENT_SINCE: Mapping[str, str] = {
    "SpecializedAgent": "25.4.2",
    "AgentSpecializationParameters": "25.4.2",
    "LlmConfig": "26.1.2",
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class _Node:
    """A value of the document and the path it was read from (after following references)."""

    value: object
    path: FieldPath


@dataclass(frozen=True)
class _Component:
    type: str
    data: Mapping[str, Any]
    path: FieldPath

    def node(self, key: str) -> _Node:
        return _Node(self.data.get(key), (*self.path, key))


@dataclass
class _Tool:
    capability: str
    definition: dict[str, Any]
    confirm: bool
    arguments: ArgumentsSchema | None
    result: Schema | None
    path: FieldPath


@dataclass
class _Agent:
    """What the agent itself says; its tools and MCP servers are collected by the reader."""

    component: _Component
    name: str
    id: str
    description: str | None
    instructions: str
    human_in_the_loop: bool
    model: dict[str, Any] | None = None
    inputs: ArgumentsSchema | None = None
    outputs: ArgumentsSchema | None = None


class _Reader:
    """Reads one Agent Spec document; every problem goes to the document, the reader never raises."""

    def __init__(self, doc: Document, options: LoadOptions) -> None:
        self.doc = doc
        self.options = options
        self.referenced: dict[str, _Node] = {}
        self.ids: dict[str, FieldPath] = {}
        self.version = _LATEST
        self.servers: dict[str, dict[str, Any]] = {}
        self.tools: dict[str, _Tool] = {}

    # -- the whole document ----------------------------------------------------------------------

    def read(self) -> _Agent | None:
        data = self.doc.data
        assert isinstance(data, Mapping)
        self.version = self._read_version(data)
        self._collect(data, ())
        if "component_type" not in data:
            self.doc.error(
                ("component_type",),
                "the file holds only $referenced_components: load the main configuration and pass these "
                "with secrets= (load_referenced_components reads them)",
            )
            return None
        top = self.component(
            _Node(data, ()), "the top-level component", frozenset({"Agent", "SpecializedAgent"})
        )
        return self._agent(top) if top is not None else None

    def _read_version(self, data: Mapping[str, Any]) -> str:
        key = (
            "agentspec_version" if "agentspec_version" in data or "air_version" not in data else "air_version"
        )
        version = data.get(key)
        if key == "air_version":
            self.doc.warn((key,), "air_version is the pre-release name of agentspec_version")
        if version is None:
            self.doc.warn((), f"agentspec_version is missing: the file is read as Agent Spec {_LATEST}")
            return _LATEST
        if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
            self.doc.error(
                (key,), f"must be a version YEAR.QUARTER.PATCH such as {_LATEST!r}, not {version!r}"
            )
            return _LATEST
        if version in _PRERELEASE:
            self.doc.warn(
                (key,), f"{version} is a pre-release version: the file is read as Agent Spec 25.4.1"
            )
            return "25.4.1"
        if version not in KNOWN_VERSIONS:
            newest = _version_key(version) > _version_key(_LATEST)
            reason = f"newer than the versions this reader knows ({', '.join(KNOWN_VERSIONS)})"
            if not newest:
                self.doc.error(
                    (key,), f"unknown Agent Spec version {version!r}; known: {', '.join(KNOWN_VERSIONS)}"
                )
                return _LATEST
            self.doc.warn((key,), f"{version} is {reason}: it is read as {_LATEST}")
            return _LATEST
        return version

    def _collect(self, value: object, path: FieldPath) -> None:
        """Index ``$referenced_components`` and component ids anywhere in the document."""
        if isinstance(value, Mapping):
            if isinstance(value.get("component_type"), str) and isinstance(value.get("id"), str):
                first = self.ids.setdefault(value["id"], path)
                if first != path:
                    self.doc.error(
                        (*path, "id"), f"the id {value['id']!r} is also used at {self._where(first)}"
                    )
            referenced = value.get("$referenced_components")
            if referenced is not None and not isinstance(referenced, Mapping):
                self.doc.error(
                    (*path, "$referenced_components"), "must be a mapping of id to component or value"
                )
            elif isinstance(referenced, Mapping):
                for key, item in referenced.items():
                    where = (*path, "$referenced_components", key)
                    if key in self.referenced:
                        self.doc.error(where, f"the referenced component {key!r} is defined twice")
                    else:
                        self.referenced[key] = _Node(item, where)
            for key, item in value.items():
                self._collect(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self._collect(item, (*path, index))

    def _where(self, path: FieldPath) -> str:
        position = self.doc.at(path, "").line
        return f"line {position}" if position is not None else (".".join(map(str, path)) or "the top level")

    # -- references and values -------------------------------------------------------------------

    def resolve(self, node: _Node, *, sensitive: bool = False) -> _Node | None:
        """Follow ``$component_ref`` (to ``secrets`` first, then ``$referenced_components``)."""
        seen: list[str] = []
        while isinstance(node.value, Mapping) and "$component_ref" in node.value:
            ref = node.value["$component_ref"]
            if not isinstance(ref, str) or len(node.value) != 1:
                self.doc.error(node.path, "a reference is an object with one member, $component_ref: <id>")
                return None
            if ref in seen:
                self.doc.error(node.path, f"circular reference: {' -> '.join([*seen, ref])}")
                return None
            seen.append(ref)
            if ref in self.options.secrets:
                node = _Node(self.options.secrets[ref], (SECRETS, ref))
            elif ref in self.referenced:
                node = self.referenced[ref]
            elif sensitive:
                self.doc.warn(
                    node.path,
                    f"the secret {ref!r} is not supplied (secrets={{...}}); agentguard does not need its value",
                )
                return None
            else:
                self.doc.error(
                    node.path,
                    f"$component_ref {ref!r} refers to nothing: it is neither in $referenced_components nor "
                    "supplied with secrets=",
                )
                return None
        return node

    def component(self, node: _Node, what: str, allowed: frozenset[str] | None = None) -> _Component | None:
        """The component at ``node`` (references followed), its fields and version gates checked."""
        found = self.resolve(node)
        if found is None:
            return None
        if not isinstance(found.value, Mapping):
            self.doc.error(
                found.path, f"{what} must be a component (a mapping), not {type(found.value).__name__}"
            )
            return None
        kind = found.value.get("component_type")
        if not isinstance(kind, str):
            self.doc.error((*found.path, "component_type"), f"{what} needs a component_type")
            return None
        if allowed is not None and kind not in allowed:
            self.doc.error(
                (*found.path, "component_type"),
                f"{what} must be one of {', '.join(sorted(allowed))}, not {kind!r}",
            )
            return None
        component = _Component(kind, found.value, found.path)
        self._check_fields(component)
        self._check_gates(component)
        return component

    def _check_fields(self, component: _Component) -> None:
        known = _FIELDS.get(component.type)
        if known is None:
            return
        for key in component.data:
            if key not in known and key != "$referenced_components":
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.doc.error((*component.path, key), f"unknown field {key!r} of {component.type}{hint}")

    def _check_gates(self, component: _Component) -> None:
        version = _version_key(self.version)
        since = _COMPONENT_SINCE.get(component.type)
        if since is not None and version < _version_key(since):
            self.doc.error(
                (*component.path, "component_type"),
                f"{component.type} needs agentspec_version {since} or later (the file says {self.version})",
            )
        for gate in _GATES:
            if (
                component.type in gate.types
                and gate.field in component.data
                and gate.used(component.data[gate.field])
                and version < _version_key(gate.since)
            ):
                self.doc.error(
                    (*component.path, gate.field),
                    f"{gate.field} needs agentspec_version {gate.since} or later (the file says {self.version})",
                )

    def text(self, component: _Component, key: str, *, required: bool = False) -> str | None:
        node = self.resolve(component.node(key))
        if node is None:
            return None
        if node.value is None:
            if required:
                self.doc.error(node.path, f"{component.type} needs {key}")
            return None
        if not isinstance(node.value, str):
            self.doc.error(node.path, f"{key} must be a string, not {type(node.value).__name__}")
            return None
        return node.value

    def flag(self, component: _Component, key: str, default: bool | None) -> bool | None:
        node = self.resolve(component.node(key))
        if node is None or node.value is None:
            return default
        if not isinstance(node.value, bool):
            self.doc.error(node.path, f"{key} must be true or false, not {node.value!r}")
            return default
        return node.value

    def items(self, component: _Component, key: str) -> Iterator[_Node]:
        node = self.resolve(component.node(key))
        if node is None or node.value is None:
            return
        if not isinstance(node.value, list):
            self.doc.error(node.path, f"{key} must be a list")
            return
        for index, item in enumerate(node.value):
            yield _Node(item, (*node.path, index))

    def secret(self, component: _Component, key: str) -> None:
        """Check a sensitive field: supplied or referenced, never written in the file; its value is not kept."""
        raw = component.data.get(key)
        if raw is None or raw == {}:
            return
        if isinstance(raw, Mapping) and "$component_ref" in raw:
            self.resolve(component.node(key), sensitive=True)
        elif component.path[:1] != (SECRETS,):
            self.doc.warn(
                (*component.path, key),
                f"the sensitive field {key} is written in the file; export it as a $component_ref and supply "
                "its value with secrets= (Agent Spec configurations must not contain sensitive data)",
            )

    # -- properties ------------------------------------------------------------------------------

    def properties(self, component: _Component, key: str) -> dict[str, Mapping[str, Any]]:
        """``inputs``/``outputs``: one JSON schema per property, named by its ``title``."""
        found: dict[str, Mapping[str, Any]] = {}
        for item in self.items(component, key):
            node = self.resolve(item)
            if node is None:
                continue
            if not isinstance(node.value, Mapping):
                self.doc.error(node.path, "a property is a JSON schema (a mapping) with a title")
                continue
            title = node.value.get("title")
            if not isinstance(title, str) or not title:
                self.doc.error((*node.path, "title"), "a property needs a title (its name)")
                continue
            if title in found:
                self.doc.error((*node.path, "title"), f"the property {title!r} is declared twice")
                continue
            for where, reason, level in schema_problems(node.value):
                (self.doc.error if level == "error" else self.doc.warn)((*node.path, *where), reason)
            found[title] = node.value
        return found

    # -- the agent -------------------------------------------------------------------------------

    def _agent(self, component: _Component) -> _Agent | None:
        if component.type == "SpecializedAgent":
            return self._specialized(component)
        prompt = self.text(component, "system_prompt", required=True) or ""
        hitl = self.flag(component, "human_in_the_loop", True) is not False
        agent = self._new_agent(component, prompt, hitl)
        self._io(agent, component)
        agent.model = self._llm(component)
        for item in self.items(component, "tools"):
            self._add_tool(self._tool(item))
        for item in self.items(component, "toolboxes"):
            for tool in self._toolbox(item):
                self._add_tool(tool)
        return agent

    def _new_agent(self, component: _Component, instructions: str, human_in_the_loop: bool) -> _Agent:
        name = self.text(component, "name", required=True) or ""
        return _Agent(
            component,
            name,
            self.text(component, "id") or name,
            self.text(component, "description"),
            instructions,
            human_in_the_loop,
        )

    def _specialized(self, component: _Component) -> _Agent | None:
        base_component = self.component(component.node("agent"), "agent", frozenset({"Agent"}))
        params = self.component(
            component.node("agent_specialization_parameters"),
            "agent_specialization_parameters",
            frozenset({"AgentSpecializationParameters"}),
        )
        base = self._agent(base_component) if base_component is not None else None
        if base is None or params is None:
            return None
        extra = self.text(params, "additional_instructions")
        instructions = f"{base.instructions}\n\n{extra}" if extra else base.instructions
        hitl = self.flag(params, "human_in_the_loop", None)
        agent = self._new_agent(component, instructions, base.human_in_the_loop if hitl is None else hitl)
        agent.model = base.model
        agent.inputs, agent.outputs = base.inputs, base.outputs
        self._io(agent, component)
        for item in self.items(params, "additional_tools"):
            self._add_tool(self._tool(item))
        return agent

    def _io(self, agent: _Agent, component: _Component) -> None:
        inputs, outputs = self.properties(component, "inputs"), self.properties(component, "outputs")
        if inputs:
            agent.inputs = ArgumentsSchema(inputs, _required(inputs))
        if outputs:
            agent.outputs = ArgumentsSchema(outputs, _required(outputs), additional=True)

    def _llm(self, agent: _Component) -> dict[str, Any] | None:
        component = self.component(agent.node("llm_config"), "llm_config")
        if component is None:
            if agent.data.get("llm_config") is None:
                self.doc.error((*agent.path, "llm_config"), "an Agent needs an llm_config")
            return None
        model_id = self.text(component, "model_id", required=True)
        name = self.text(component, "name", required=True)
        for key in sorted(SENSITIVE_FIELDS & component.data.keys()):
            self.secret(component, key)
        if model_id is None or name is None:
            return None
        provider = (
            _LLM_PROVIDERS.get(component.type)
            or self.text(component, "provider")
            or self.text(component, "api_provider")
            or "unknown"
        )
        model: dict[str, Any] = {"name": name, "id": model_id, "provider": {"name": provider}}
        parameters = self.resolve(component.node("default_generation_parameters"))
        if parameters is not None and isinstance(parameters.value, Mapping) and parameters.value:
            model["defaultParams"] = dict(parameters.value)
        metadata = {"componentType": component.type}
        for key, label in (("url", "url"), ("api_type", "apiType")):
            value = self.text(component, key)
            if value is not None:
                metadata[label] = value
        model["metadata"] = metadata
        return model

    # -- tools -----------------------------------------------------------------------------------

    def _capability(self, name: str, path: FieldPath) -> str | None:
        capability = self.options.names.get(name, name.replace("_", "-"))
        reason = validate_name(capability)
        if reason is not None:
            self.doc.error(
                path,
                f"the tool {name!r} has no valid capability name ({capability!r} {reason}); map it with "
                f"names={{{name!r}: '<capability>'}}",
            )
            return None
        return capability

    def _tool(self, node: _Node) -> _Tool | None:
        component = self.component(node, "a tool")
        if component is None:
            return None
        if component.type not in TOOL_TYPES:
            self.doc.warn(
                (*component.path, "component_type"),
                f"{component.type} is not an Agent Spec tool type this reader knows; it is read as a tool",
            )
        name = self.text(component, "name", required=True)
        confirm = self.flag(component, "requires_confirmation", False) is True
        metadata: dict[str, Any] = {"componentType": component.type}
        if component.type == "RemoteTool":
            for key, label in (("url", "url"), ("http_method", "httpMethod")):
                metadata[label] = self.text(component, key, required=True)
            self.secret(component, "sensitive_headers")
        elif component.type == "MCPTool":
            metadata["mcpServer"] = self._server(component)
        elif component.type == "BuiltinTool":
            metadata["toolType"] = self.text(component, "tool_type", required=True)
            metadata["toolVersion"] = self.text(component, "tool_version")
        if name is None:
            return None
        return self._make_tool(component, name, self.text(component, "description"), confirm, metadata)

    def _make_tool(
        self,
        component: _Component,
        name: str,
        description: str | None,
        confirm: bool,
        metadata: dict[str, Any],
        *,
        declared: bool = True,
    ) -> _Tool | None:
        capability = self._capability(name, (*component.path, "name"))
        if capability is None:
            return None
        inputs = self.properties(component, "inputs") if declared else {}
        outputs = self.properties(component, "outputs") if declared else {}
        metadata = {key: value for key, value in metadata.items() if value is not None}
        metadata["requiresConfirmation"] = confirm
        if "id" in component.data and isinstance(component.data["id"], str):
            metadata["id"] = component.data["id"]
        definition: dict[str, Any] = {
            "name": name,
            "id": capability,
            "type": "function_call",
            "arguments": [_argument(title, schema) for title, schema in inputs.items()],
            "outputs": [_output(title, schema) for title, schema in outputs.items()] or None,
            "metadata": {"agentspec": metadata},
        }
        if description:
            definition["description"] = description
        result: Schema | None = None
        if len(outputs) == 1:
            ((title, schema),) = outputs.items()
            result = OutputsSchema(title, schema)
        elif outputs:
            result = ArgumentsSchema(outputs, _required(outputs), additional=True)
        arguments = ArgumentsSchema(inputs, _required(inputs)) if declared else None
        return _Tool(capability, definition, confirm, arguments, result, component.path)

    def _add_tool(self, tool: _Tool | None) -> None:
        if tool is None:
            return
        first = self.tools.get(tool.capability)
        if first is not None:
            self.doc.error(
                (*tool.path, "name"),
                f"a second tool is called {tool.capability!r} (the first is at {self._where(first.path)})",
            )
            return
        self.tools[tool.capability] = tool

    def _toolbox(self, node: _Node) -> Iterator[_Tool]:
        component = self.component(node, "a toolbox")
        if component is None:
            return
        if component.type != "MCPToolBox":
            self.doc.warn(
                (*component.path, "component_type"),
                f"{component.type} is not a toolbox this reader knows: its tools are not described",
            )
            return
        confirm_all = self.flag(component, "requires_confirmation", False) is True
        server = self._server(component)
        entries = list(self.items(component, "tool_filter"))
        if component.data.get("tool_filter") is None and confirm_all:
            self.doc.warn(
                (*component.path, "requires_confirmation"),
                "the toolbox requires confirmation for all its tools but lists none (tool_filter is null): "
                "agentguard can only gate tools it knows by name; list them in tool_filter",
            )
        for entry in entries:
            tool = self._filter_entry(entry, confirm_all, server)
            if tool is not None:
                yield tool

    def _filter_entry(self, entry: _Node, confirm_all: bool, server: str | None) -> _Tool | None:
        found = self.resolve(entry)
        if found is None:
            return None
        metadata: dict[str, Any] = {"componentType": "MCPToolSpec", "mcpServer": server}
        if isinstance(found.value, str):
            placeholder = _Component("MCPToolSpec", {"name": found.value}, found.path)
            return self._make_tool(placeholder, found.value, None, confirm_all, metadata, declared=False)
        spec = self.component(found, "a tool_filter entry", frozenset({"MCPToolSpec"}))
        if spec is None:
            return None
        name = self.text(spec, "name", required=True)
        confirm = confirm_all or self.flag(spec, "requires_confirmation", False) is True
        outputs = self.properties(spec, "outputs")
        if outputs and (len(outputs) != 1 or next(iter(outputs.values())).get("type") != "string"):
            self.doc.error(
                (*spec.path, "outputs"), "an MCPToolSpec declares at most one output, of type string"
            )
        if name is None:
            return None
        return self._make_tool(spec, name, self.text(spec, "description"), confirm, metadata)

    def _server(self, component: _Component) -> str | None:
        """Record the MCP server behind ``client_transport``; return its name."""
        transport = self.component(component.node("client_transport"), "client_transport")
        if transport is None:
            if component.data.get("client_transport") is None:
                self.doc.error(
                    (*component.path, "client_transport"), f"{component.type} needs a client_transport"
                )
            return None
        name = self.text(transport, "name", required=True)
        for key in sorted(SENSITIVE_FIELDS & transport.data.keys()):
            self.secret(transport, key)
        if name is None:
            return None
        key = str(transport.data.get("id") or name)
        if key not in self.servers:
            metadata = transport.data.get("metadata")
            version = metadata.get("version") if isinstance(metadata, Mapping) else None
            server: dict[str, Any] = {
                "name": name,
                "version": version if isinstance(version, str) else "unspecified",
                "transport": transport.type,
            }
            for field_name in ("url", "command"):
                value = self.text(transport, field_name)
                if value is not None:
                    server[field_name] = value
            self.servers[key] = server
        return name


def _required(properties: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(title for title, schema in properties.items() if "default" not in schema)


def _aos_type(schema: Mapping[str, Any]) -> str | None:
    """The AOS JSON type name of a property (AOS has no ``integer``; a nullable type counts as its type)."""
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    names = [n for n in names if n != "null"] or names
    if len(names) != 1:
        return None
    return "number" if names[0] == "integer" else str(names[0])


def _argument(title: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    argument: dict[str, Any] = {"name": title, "required": "default" not in schema}
    return _described(argument, schema)


def _output(title: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    return _described({"name": title}, schema)


def _described(member: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    kind = _aos_type(schema)
    if kind is not None:
        member["type"] = kind
    if isinstance(schema.get("description"), str):
        member["description"] = schema["description"]
    return member


def _deny_without_human(request: ReviewRequest) -> Approval:
    return Approval(
        approved=False,
        reason=f"{request.capability!r} requires confirmation, the agent runs without a human in the loop "
        "(human_in_the_loop: false) and no autonomous reviewer is configured",
        approved_by=AUTONOMOUS_DENY,
    )


def from_document(doc: Document, options: LoadOptions) -> Descriptor:
    """The descriptor of an Agent Spec document (its problems raised together as one :class:`SpecError`)."""
    reader = _Reader(doc, options)
    agent = reader.read()
    if agent is None and not doc.problems:
        doc.error((), "no agent could be read from the configuration")
    if agent is not None and not doc.problems and options.strict:
        _strict(doc, options.secrets)
    doc.raise_for_problems()
    assert agent is not None  # every path that yields no agent records a problem, raised just above
    component = agent.component
    metadata = component.data.get("metadata")
    version = metadata.get("version") if isinstance(metadata, Mapping) else None
    tools = tuple(tool.definition for tool in reader.tools.values() if tool.arguments is not None)
    info = AgentInfo(
        name=agent.name,
        id=agent.id,
        tools=tools,
        version=version if isinstance(version, str) else AgentInfo.version,
        description=agent.description,
        instructions=agent.instructions,
        model=agent.model,
        mcp_servers=tuple(reader.servers.values()),
        metadata={
            "agentspec": {
                "version": reader.version,
                "componentType": component.type,
                "humanInTheLoop": agent.human_in_the_loop,
            }
        },
    )
    reviewer = options.reviewer if agent.human_in_the_loop else options.autonomous_reviewer or AUTONOMOUS_DENY
    gates = {tool.capability: reviewer for tool in reader.tools.values() if tool.confirm}
    rules: list[SchemaRule] = []
    for tool in reader.tools.values():
        origin = f"declared in {doc.source}"
        if tool.arguments is not None:
            rules.append(SchemaRule(tool.capability, Phase.INPUT, tool.arguments, origin))
        if tool.result is not None:
            rules.append(SchemaRule(tool.capability, Phase.OUTPUT, tool.result, origin))
    return Descriptor(
        format="agentspec",
        source=doc.source,
        agent_info=info,
        tools=tools,
        review_gates=gates,
        schema_rules=tuple(rules),
        reviewers={AUTONOMOUS_DENY: _deny_without_human} if gates and reviewer == AUTONOMOUS_DENY else {},
        input_schema=agent.inputs,
        output_schema=agent.outputs,
        warnings=doc.sorted_warnings(),
    )


def _strict(doc: Document, secrets: Mapping[str, object]) -> None:
    """Run pyagentspec's deserializer over the document; what it refuses becomes problems."""
    try:
        from pyagentspec.serialization import AgentSpecDeserializer
    except ImportError as exc:
        raise ConfigurationError(
            "strict Agent Spec validation needs pyagentspec: pip install 'agentguard[agentspec]'"
        ) from exc
    deserializer = AgentSpecDeserializer()
    assert isinstance(doc.data, dict)  # an Agent Spec document is a mapping (see detect_format)
    # A disaggregated component belongs to the configuration it completes: read it at that version.
    version = {key: doc.data[key] for key in ("agentspec_version",) if key in doc.data}
    registry = {
        key: deserializer.from_dict({**version, **copy.deepcopy(dict(value))})
        if isinstance(value, Mapping) and "component_type" in value
        else value
        for key, value in secrets.items()
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            deserializer.from_dict(copy.deepcopy(doc.data), components_registry=registry)
        except Exception as exc:  # pyagentspec raises ValueError, KeyError, TypeError, pydantic errors
            doc.error((), f"pyagentspec rejects the configuration: {type(exc).__name__}: {exc}")
    for warning in caught:
        doc.warn((), f"pyagentspec: {warning.message}")


def load_referenced_components(path: str | os.PathLike[str]) -> dict[str, object]:
    """The ``$referenced_components`` of a file of disaggregated components, to pass as ``secrets=``.

    A configuration may keep some components (an LLM config per environment, a shared tool) in a second
    file holding only ``$referenced_components``; its entries complete the main configuration at load time.
    """
    text, source = read_file(path)
    doc = read_document(text, source)
    data = doc.data
    referenced = data.get("$referenced_components") if isinstance(data, Mapping) else None
    if not doc.problems and not isinstance(referenced, Mapping):
        doc.error(("$referenced_components",), "the file has no $referenced_components mapping")
    doc.raise_for_problems()
    assert isinstance(referenced, Mapping)
    return dict(referenced)
