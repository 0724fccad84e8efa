"""An ``exposes`` selection that cannot be evaluated says so, instead of a silent ``None``."""

from __future__ import annotations

from agentguard import Guard
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      refund:
      lookup:
    exposes:
      calls: history._total
      refunded: recent["refund"].inputs.amount
      looked_up: recent["lookup"].outputs
    """
)


def test_a_selection_that_cannot_be_evaluated_names_the_error_and_the_expression() -> None:
    guard = Guard.from_yaml(SPEC)
    guard.register("lookup", lambda: None)
    with guard.engagement() as eng:
        guard.call("lookup", {})
        exposed = eng.exposed()
    assert exposed["calls"] == 1
    assert exposed["looked_up"] is None  # a selected null stays null
    refunded = exposed["refunded"]
    assert set(refunded) == {"error", "expression"}
    assert refunded["expression"] == 'recent["refund"].inputs.amount'
    assert "refund" in refunded["error"]


def test_the_selection_is_a_value_once_it_can_be_evaluated() -> None:
    guard = Guard.from_yaml(SPEC)
    guard.register("refund", lambda amount: "ok")
    with guard.engagement() as eng:
        guard.call("refund", {"amount": 30})
        assert eng.exposed()["refunded"] == 30
