"""Quickstart: guard plain Python tools with the support agent's OpenAgentSpec.

Run it with ``python examples/quickstart.py``. It needs no API key and no network: the "agent" here is a
scripted list of tool calls, so every rule of the spec can be seen firing.
"""

from __future__ import annotations

from pathlib import Path

from agentguard import Approval, Guard, PolicyViolation, ReviewRequest, User
from agentguard.timeline import format_timeline

SPEC = Path(__file__).parent / "support-agent" / "agent.yaml"


def supervisor(request: ReviewRequest) -> Approval:
    """A reviewer that approves refunds up to 50 and rejects the rest."""
    amount = request.inputs.get("amount", 0)
    return Approval(approved=amount <= 50, reason=f"refund of {amount}", approved_by="sam@corp.com")


guard = Guard.from_file(SPEC, reviewers={"supervisor": supervisor})


@guard.tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "shipped"}


@guard.tool
def send_email(to: str, body: str) -> dict[str, str]:
    """Email the support team."""
    return {"status": "sent"}


@guard.tool
def refund(order_id: str, amount: float) -> dict[str, object]:
    """Refund (part of) an order."""
    return {"order_id": order_id, "refunded": amount}


@guard.tool(name="pii-check")
def pii_check(text: str) -> dict[str, bool]:
    """Input guardrail: refuse text that looks like it carries a card number."""
    return {"ok": not any(word.isdigit() and len(word) >= 12 for word in text.split())}


@guard.tool(name="toxicity-check")
def toxicity_check(text: str) -> dict[str, object]:
    """Output guardrail: a stand-in for a real classifier."""
    score = 0.9 if "stupid" in text.lower() else 0.05
    return {"ok": True, "score": score}


def attempt(label: str, action: object) -> None:
    try:
        result = action() if callable(action) else action
        print(f"  allowed   {label:<44} -> {result}")
    except PolicyViolation as error:
        print(f"  DENIED    {label:<44} [{error.rule.value}] {error.reason}")


def main() -> None:
    print(f"agent {guard.name!r}: capabilities {guard.policy.capability_keys}\n")
    with guard.engagement(user=User(id="u-42", email="ann@example.com")) as eng:
        attempt("input guardrail on the user's message", lambda: eng.check_input("Where is order A-1?"))
        attempt("lookup_order('A-1')", lambda: lookup_order("A-1"))
        attempt("send_email to bob@corp.com", lambda: send_email(to="bob@corp.com", body="A-1 shipped"))
        attempt("send_email to eve@evil.test", lambda: send_email(to="eve@evil.test", body="data"))
        attempt("refund 30 (supervisor approves)", lambda: refund("A-1", 30))
        attempt("refund 80 (supervisor rejects)", lambda: refund("A-1", 80))
        # a third refund attempt in a row would be a loop (refused attempts count too): look something up first
        attempt("lookup_order('A-1') again", lambda: lookup_order("A-1"))
        attempt("refund 500 (over the limit: never asked)", lambda: refund("A-1", 500))
        attempt(
            "delete_everything (not a capability)", lambda: guard.call("delete-everything", {}, lambda: None)
        )
        attempt("lookup_order('A-2')", lambda: lookup_order("A-2"))
        attempt("lookup_order('A-2') again", lambda: lookup_order("A-2"))
        attempt("lookup_order('A-2') a third time in a row", lambda: lookup_order("A-2"))
        attempt("anything after the loop was stopped", lambda: send_email(to="bob@corp.com", body="hi"))
        print(f"\nexposed: {eng.exposed()}")
        print(f"status:  {eng.status.value} ({eng.state.status_reason})")
        print(f"history: {eng.view()['history']['_list']}")
        print("\ntimeline:")
        print(format_timeline(eng))


if __name__ == "__main__":
    main()
