"""OpenAgentSpec agent documents: the models, the loader, and the name and ``oagent://`` reference rules.

Load a spec file once at start-up; every problem in it -- YAML syntax, unknown or missing fields, invalid
names, CEL expressions that do not compile -- is reported together, each with file, field, line and column,
so a broken policy never reaches a running agent::

    from agentguard.errors import SpecError
    from agentguard.spec import load_spec_text

    text = '''
    kind: openagentspec:v1/agent
    name: support-agent
    description: The agent answers customer questions about orders.
    intent: You help customers with their orders.
    owner: support-team@corp.com
    capabilities:
      lookup-order:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
    '''
    compiled = load_spec_text(text)
    program = compiled.input_assertions["send-email"]
    program.evaluate({"recent": {"send-email": {"inputs": {"to": "bob@corp.com"}}}})    # -> True

    try:
        load_spec_text(text.replace("send-email:", "Send_Email:", 1), source="agent.yaml")
    except SpecError as error:
        for problem in error.problems:
            print(problem)   # agent.yaml:9:3: capabilities.Send_Email: key 'Send_Email' is not a valid ...

Files are read with :func:`load_spec`; :func:`parse_spec` and :func:`compile_spec` are the two halves of
loading, for callers that build or inspect a spec before compiling it.

:func:`lint_spec` finds what a loaded spec's assertions will certainly (errors) or likely (warnings) get
wrong at run time: a capability name with a typo, ``user.mail``, a reviewer a built guard lacks.

:func:`read_yaml` is the YAML front end of the loader, for every other YAML document agentguard reads
(descriptors, guardian rules): safe, with a position for every field (:func:`locate`), duplicate keys and
runaway aliases reported as problems named like the loader's (:func:`dotted`, :func:`field_problem`), and
a model's validation errors worded like the loader's (:func:`validation_reason`: "did you mean" included).
:class:`LoadLimits` bounds what reading one document may cost (size, nodes, alias expansion, CEL source);
:func:`read_text_file` reads a file only when it is within them. :func:`lone_surrogate` says why a string
is not valid Unicode, for readers of other syntaxes (JSON) to refuse what ``read_yaml`` refuses.
"""

from ._lint import SpecFindings, lint_spec
from ._loader import (
    ENGAGEMENT_DECLARATIONS,
    GUARDRAIL_DECLARATIONS,
    CompiledSpec,
    compile_spec,
    load_spec,
    load_spec_text,
    parse_spec,
    validation_reason,
)
from ._models import KIND, AgentSpec, Capability, Guardrail, Guardrails, Lifespan, Restriction
from ._names import (
    AGENT_SCHEME,
    MAX_NAME_LENGTH,
    Reference,
    ReferenceKind,
    is_valid_name,
    parse_reference,
    resolve,
    validate_name,
)
from ._yaml import (
    DEFAULT_LIMITS,
    FieldPath,
    Finding,
    Labels,
    LoadLimits,
    Positions,
    YamlDocument,
    describe_value,
    dotted,
    field_problem,
    in_file_order,
    locate,
    lone_surrogate,
    read_text_file,
    read_yaml,
)

__all__ = [
    "AGENT_SCHEME",
    "DEFAULT_LIMITS",
    "ENGAGEMENT_DECLARATIONS",
    "GUARDRAIL_DECLARATIONS",
    "KIND",
    "MAX_NAME_LENGTH",
    "AgentSpec",
    "Capability",
    "CompiledSpec",
    "FieldPath",
    "Finding",
    "Guardrail",
    "Guardrails",
    "Labels",
    "Lifespan",
    "LoadLimits",
    "Positions",
    "Reference",
    "ReferenceKind",
    "Restriction",
    "SpecFindings",
    "YamlDocument",
    "compile_spec",
    "describe_value",
    "dotted",
    "field_problem",
    "in_file_order",
    "is_valid_name",
    "lint_spec",
    "load_spec",
    "load_spec_text",
    "locate",
    "lone_surrogate",
    "parse_reference",
    "parse_spec",
    "read_text_file",
    "read_yaml",
    "resolve",
    "validate_name",
    "validation_reason",
]
