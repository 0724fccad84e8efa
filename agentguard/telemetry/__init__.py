"""OpenTelemetry traces and metrics of every step an agent takes and every decision agentguard makes.

Every Guard records, through ``opentelemetry-api`` only, one ``invoke_agent {agent}`` span per engagement
turn, one ``execute_tool {tool}`` span per tool or sub-agent call (current while the tool runs, so its own
spans nest inside), one ``apply_guardrail {target}`` span per other step (messages, retrieval, memory, A2A,
MCP), an ``agentguard.decision`` event per decision, and the metrics ``agentguard.decisions``,
``agentguard.check.duration``, ``agentguard.guardian.duration`` and ``agentguard.guardian.undecided``. The
guardian client adds a CLIENT span per request and sends the W3C ``traceparent``; the reference guardian
continues the trace. Reference: ``docs/telemetry.md``.

Nothing is exported until an OpenTelemetry SDK is configured; until then a step costs well under a
microsecond more. The host's SDK is used as it is, through the API's public names; a global provider set
after a Guard was made is picked up at its next turn. A process of agentguard's own (the CLI, the demo) can
set one up with :func:`configure` (``pip install 'agentguard[otel]'``)::

    from agentguard import Guard
    from agentguard.telemetry import GuardTelemetry, configure

    configure(console=True)                                   # or otlp_endpoint="http://localhost:4318"
    guard = Guard.from_file("examples/support-agent/agent.yaml")          # telemetry is on by default

    # Tool arguments and results, and message text, are recorded only when asked for (or when
    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true); a withheld output never is:
    guard = Guard.from_file("examples/support-agent/agent.yaml", capture_content=True)

    # Providers of one's own (tests), or one configured observer:
    guard = Guard.from_file("agent.yaml", telemetry=GuardTelemetry(tracer_provider=provider))
    guard = Guard.from_file("agent.yaml", telemetry=False)                # no telemetry at all

``import agentguard`` imports the OpenTelemetry API, never the SDK.
"""

from agentguard.telemetry._configure import Configured, configure
from agentguard.telemetry._observer import CAPTURE_CONTENT_ENV, GuardTelemetry

__all__ = ["CAPTURE_CONTENT_ENV", "Configured", "GuardTelemetry", "configure"]
