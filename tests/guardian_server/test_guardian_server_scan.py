"""The guardian checks a request's values for the C++ engine once, for all its rules, and still never lets
a value the engine would misread (a NUL cuts a string short there) decide a rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

import agentguard.cel
from agentguard.cel import _expr
from agentguard.guardian.server import parse_rules
from agentguard.guardian.server._dispatch import Dispatcher
from tests.guardian_server.support import request_for

RULES = """
rules:
  - name: odd-command
    methods: [steps/toolCallRequest]
    when: '!params.toolCallRequest.inputs.all(i, string(i.value).matches("^[a-z ]*$"))'
    decision: deny
    message: Odd command
  - name: no-rm
    methods: [steps/toolCallRequest]
    when: 'params.toolCallRequest.inputs.exists(i, string(i.value).contains("rm"))'
    decision: deny
    message: No rm
"""


def _decision(command: str) -> str:
    request = request_for("steps/toolCallRequest")
    request["params"]["toolCallRequest"]["inputs"] = [{"name": "cmd", "value": command}]
    body = Dispatcher(parse_rules(RULES), "test").handle(json.dumps(request).encode())
    assert body is not None
    return str(json.loads(body)["result"]["decision"])


@pytest.mark.parametrize("faithful", [True, False], ids=["cel-python", "no cel-python"])
def test_a_nul_in_a_request_is_denied_whichever_engine_is_left(
    faithful: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if faithful:
        pytest.importorskip("celpy")
    else:

        def no_celpy(name: str | None = None) -> Any:
            raise ImportError("cel-python is not installed")

        monkeypatch.setattr(agentguard.cel, "get_backend", no_celpy)
    assert _decision("ls") == "allow"
    # The C++ engine reads "ls\x00; rm -rf /" as "ls": the first rule would let it pass.
    assert _decision("ls\x00; rm -rf /") == "deny"


def test_a_request_is_walked_once_for_all_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[object] = []
    unrepresentable = _expr.unrepresentable

    def counted(value: Any) -> str | None:
        walked.append(value)
        return unrepresentable(value)

    monkeypatch.setattr(_expr, "unrepresentable", counted)
    assert _decision("ls") == "allow"  # both rules evaluated by the engine
    assert len(walked) == 1
