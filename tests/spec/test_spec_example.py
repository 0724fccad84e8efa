"""The shipped example spec loads, and its policies mean what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentguard.cel import CelBackend, available_backends, get_backend
from agentguard.spec import Capability, Lifespan, Restriction, load_spec


def test_example_loads(example_path: Path, backend: CelBackend) -> None:
    compiled = load_spec(example_path, backend=backend)
    spec = compiled.spec
    assert spec.name == "support-agent"
    assert list(spec.capabilities) == ["lookup-order", "send-email", "refund", "web-search"]
    assert spec.capabilities["lookup-order"] == Capability()
    assert spec.capabilities["send-email"].collect_results is False
    assert spec.capabilities["refund"].input_restriction == Restriction(
        require_review="supervisor", assertion='recent["refund"].inputs.amount <= 100'
    )
    assert spec.guardrails is not None
    assert spec.guardrails.input is not None
    assert spec.guardrails.output is not None
    assert (spec.guardrails.input.tool_name, spec.guardrails.output.tool_name) == (
        "pii-check",
        "toxicity-check",
    )
    assert spec.lifespan == Lifespan(retain_memory=False, short_circuit=3)
    assert all(ref.kind == "bare" for ref in compiled.references.values())
    assert sorted(compiled.input_assertions) == ["refund", "send-email"]
    assert sorted(compiled.output_assertions) == ["web-search"]
    assert sorted(compiled.exposes) == ["last_tool", "tool_calls"]


@pytest.mark.parametrize("engine", available_backends())
def test_example_policies_evaluate(example_path: Path, engine: str) -> None:
    compiled = load_spec(example_path, backend=get_backend(engine))

    def email(to: str) -> object:
        return compiled.input_assertions["send-email"].evaluate(
            {"recent": {"send-email": {"inputs": {"to": to}}}}
        )

    def refund(amount: float) -> object:
        return compiled.input_assertions["refund"].evaluate(
            {"recent": {"refund": {"inputs": {"amount": amount}}}}
        )

    assert email("bob@corp.com") is True
    assert email("bob@corp.com.evil.example") is False
    assert refund(100) is True
    assert refund(100.5) is False
    results = {"recent": {"web-search": {"outputs": {"results": list(range(11))}}}}
    assert compiled.output_assertions["web-search"].evaluate(results) is False
    assert compiled.guardrail_input is not None
    assert compiled.guardrail_output is not None
    assert compiled.guardrail_input.evaluate({"output": {"ok": True}}) is True
    assert compiled.guardrail_output.evaluate({"output": {"ok": True, "score": 0.9}}) is False
    engagement = {"recent": {"_name": "refund"}, "history": {"_total": 4}}
    assert compiled.exposes["tool_calls"].evaluate(engagement) == 4
    assert compiled.exposes["last_tool"].evaluate(engagement) == "refund"
