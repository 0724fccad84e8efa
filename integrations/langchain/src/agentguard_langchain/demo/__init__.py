"""The agentguard demo: a LangChain support agent, guarded, with every step on a timeline.

Run it with ``agentguard-langchain-demo`` (or ``python examples/langchain_support_agent/agent.py``). No API key, no
network: the chat model replies from a script, so each rule of the spec (``support-agent.yaml`` beside this
file) can be seen firing in a real ``create_agent`` graph, and a reference AOS guardian
(``guardian-rules.yaml``) runs in-process on 127.0.0.1:

1. allowed tool calls; a denied restriction the model recovers from (it may only email corp.com); a lookup
   the guardian denies; an email whose card number the guardian redacts (``modify``);
2. a refund that needs the supervisor's review: the graph pauses with ``interrupt()``, a scripted reviewer
   answers, the run resumes with ``Command(resume=...)`` -- the refund runs once;
3. an answer the output guardrail stops before it reaches the user;
4. a loop of identical lookups stopped by ``lifespan.short_circuit``.

The spec says ``retain_memory: false``, so every turn is a fresh engagement, with its own timeline and its
own audit report. Traces go to a file (OpenTelemetry console exporter), reports to a directory; the demo
names the reports of its own run, however many earlier runs left there. A guardian's modification is shown
as before -> after; with ``--no-content`` (content capture off, as in production by default) only the names
of the changed arguments are shown, and neither the trace nor the timeline carries tool arguments' values.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

from agentguard import Guard, Phase, PolicyViolation, Rule
from agentguard.checks import AuditObserver
from agentguard.timeline import format_timeline
from agentguard_langchain._host import Command, tool
from agentguard_langchain._middleware import AgentGuardMiddleware
from agentguard_langchain.testing import ScriptedChatModel, answer, calls

__all__ = ["HERE", "SCRIPT", "TURNS", "build_agent", "build_guard", "main", "run"]

HERE = Path(__file__).resolve().parent
SPEC = HERE / "support-agent.yaml"
RULES = HERE / "guardian-rules.yaml"
THREAD = {"configurable": {"thread_id": "support-demo"}}
CUSTOMER = {"user_id": "u-42", "user_email": "ann@example.com"}


@tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "shipped"}


@tool
def send_email(to: str, body: str) -> dict[str, str]:
    """Email someone about an order."""
    return {"status": "sent"}


@tool
def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund (part of) an order."""
    return {"order_id": order_id, "refunded": amount}


TURNS = [
    "Where is order A-1? Email the news to bob@corp.com and to eve@evil.test. Also check X-9.",
    "Please refund 30 on A-1.",
    "What do you think of my question?",
    "Keep checking A-2 until it ships.",
]

SCRIPT = [
    # turn 1: look the order up, email the team (the guardian redacts a card number), try an outside
    # address (the spec denies it), look up another tenant's order (the guardian denies it), recover
    calls(("lookup_order", {"order_id": "A-1"}), text="Let me look that up."),
    calls(("send_email", {"to": "bob@corp.com", "body": "A-1 shipped, card 4111111111111111 charged"})),
    calls(("send_email", {"to": "eve@evil.test", "body": "A-1 has shipped"})),
    calls(("lookup_order", {"order_id": "X-9"})),
    answer("Order A-1 has shipped. I told the support team; I can only email corp.com addresses."),
    # turn 2: a refund the supervisor reviews
    calls(("refund", {"order_id": "A-1", "amount": 30})),
    answer("I refunded 30 on order A-1."),
    # turn 3: an answer the output guardrail stops
    answer("That is a stupid question."),
    # turn 4: a loop
    calls(("lookup_order", {"order_id": "A-2"})),
    calls(("lookup_order", {"order_id": "A-2"})),
    calls(("lookup_order", {"order_id": "A-2"})),
    answer("never reached"),
]


def build_guard(**options: Any) -> Guard:
    """The support agent's guard with its two guardrail tools registered."""
    guard = Guard.from_file(SPEC, **options)

    @guard.tool(name="pii-check")
    def pii_check(text: str) -> dict[str, bool]:
        """Input guardrail: refuse text that looks like it carries a card number."""
        return {"ok": not any(word.isdigit() and len(word) >= 12 for word in text.split())}

    @guard.tool(name="toxicity-check")
    def toxicity_check(text: str) -> dict[str, object]:
        """Output guardrail: a stand-in for a real classifier."""
        return {"ok": True, "score": 0.9 if "stupid" in text.lower() else 0.05}

    return guard


def build_agent(guard: Guard) -> tuple[Any, AgentGuardMiddleware]:
    """A real ``create_agent`` graph on the scripted model, with the middleware and a checkpointer."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    middleware = AgentGuardMiddleware(guard)
    agent = create_agent(
        ScriptedChatModel(script=list(SCRIPT)),
        tools=[lookup_order, send_email, refund],
        system_prompt=guard.spec.intent,
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    return agent, middleware


def scripted_supervisor(payload: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Stands in for a person answering the review in a UI: approves refunds up to 50."""
    action = payload["action_requests"][0]
    approve = action["args"].get("amount", 0) <= 50
    out.write(
        f"  review    {payload['agentguard']['reviewer']} asked: {action['name']} {json.dumps(action['args'])}\n"
    )
    out.write(f"            -> {'approve' if approve else 'reject'}\n")
    decision = {"type": "approve"} if approve else {"type": "reject", "message": "over 50"}
    return {"decisions": [{**decision, "approved_by": "sam@corp.com"}]}


def turn(agent: Any, middleware: AgentGuardMiddleware, number: int, text: str, out: TextIO) -> None:
    out.write(f"\n== turn {number}: user: {text}\n")
    payload: Any = {"messages": [{"role": "user", "content": text}]}
    try:
        while True:
            result = agent.invoke(payload, THREAD, context=CUSTOMER)
            pending = result.get("__interrupt__")
            if not pending:
                break
            payload = Command(resume=scripted_supervisor(pending[0].value, out))
        out.write(f"  agent:    {result['messages'][-1].content}\n")
    except PolicyViolation as error:
        if error.rule is Rule.GUARDRAIL and error.phase is Phase.OUTPUT:
            out.write(f"  WITHHELD  the agent's answer never reached the user; the check: {error}\n")
        else:
            out.write(f"  STOPPED   {error}\n")
    engagement = middleware.engagement_for("support-demo")
    if engagement is not None:
        out.write(f"  timeline ({engagement.status.value}):\n")
        for line in format_timeline(engagement).splitlines():
            out.write(f"    {line}\n")


@contextmanager
def _guardian() -> Iterator[Any]:
    """The reference guardian on a free 127.0.0.1 port, and a client for it (enforce mode)."""
    from agentguard.guardian import GuardianClient
    from agentguard.guardian.server import create_app, load_rules, serve_in_thread

    with (
        serve_in_thread(create_app(load_rules(RULES))) as server,
        GuardianClient(server.url, timeout=5.0) as client,
    ):
        yield client


def run(out_dir: Path | None, *, guardian: bool = True, content: bool = True, out: TextIO) -> dict[str, Path]:
    """Run the four turns; returns where the audit reports and the trace went (when written)."""
    written: dict[str, Path] = {}
    with ExitStack() as stack:
        options: dict[str, Any] = {"capture_content": content}
        if guardian:
            options["guardian"] = stack.enter_context(_guardian())
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            written["audit"] = out_dir / "audit"
            options["observers"] = [AuditObserver(written["audit"], objectives="the agentguard demo")]
            written["trace"] = out_dir / "trace.txt"
            _configure_tracing(stack, stack.enter_context(written["trace"].open("w")))
        guard = build_guard(**options)
        agent, middleware = build_agent(guard)
        where = f" and the reference guardian at {guard.guardian.url}" if guard.guardian is not None else ""
        out.write(f"agent {guard.name!r} guarded by {SPEC.name}{where}\n")
        out.write(f"capabilities: {sorted(guard.spec.capabilities)}\n")
        out.write(
            f"content capture: {'on' if content else 'off'} (tool arguments and texts in timeline and trace)\n"
        )
        for number, text in enumerate(TURNS, 1):
            turn(agent, middleware, number, text, out)
        middleware.close()
    return written


def _configure_tracing(stack: ExitStack, file: TextIO) -> None:
    """Spans to ``file`` as they end (agentguard.telemetry.configure); flushed and shut down before the file
    closes. If the SDK is missing or the process already set OpenTelemetry up, the file says so."""
    from agentguard import ConfigurationError
    from agentguard.telemetry import configure

    try:
        configured = configure(console=file, service_name="agentguard-demo")
    except ConfigurationError as error:
        file.write(json.dumps({"note": f"trace not configured: {error}"}) + "\n")
        return
    stack.callback(configured.shutdown)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    import sys

    parser = argparse.ArgumentParser(
        prog="agentguard-langchain-demo", description=__doc__.split("\n\n", 1)[0]
    )
    parser.add_argument("--out", default="agentguard-demo", help="where audit reports and the trace go")
    parser.add_argument("--no-guardian", action="store_true", help="run without the in-process guardian")
    parser.add_argument("--no-files", action="store_true", help="write no audit reports and no trace")
    parser.add_argument(
        "--no-content",
        action="store_true",
        help="content capture off: show which arguments changed, not values",
    )
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    out_dir = None if args.no_files else Path(args.out)
    earlier = set((out_dir / "audit").glob("*.md")) if out_dir is not None else set()
    written = run(out_dir, guardian=not args.no_guardian, content=not args.no_content, out=stream)
    if written:
        audit = written["audit"]
        reports = sorted(set(audit.glob("*.md")) - earlier) if audit.exists() else []
        stream.write(
            f"\naudit reports of this run: {len(reports)} in {audit}/ (agentguard audit ls {audit})\n"
        )
        for report in reports:
            stream.write(f"  {report.name}\n")
        stream.write(
            f"trace:         {written['trace']} (every OpenTelemetry span as JSON, console exporter)\n"
        )
    return 0
