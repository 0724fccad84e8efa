"""The guardian checks a request's values for the C++ engine once, for all its rules, or not at all when the
body has no ``\\u`` escape (the only way JSON carries a NUL or a lone surrogate), and still never lets a
value the engine would misread (a NUL cuts a string short there) decide a rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentguard.cel
from agentguard.aos import strict_json
from agentguard.cel import _expr
from agentguard.guardian.server import parse_rules
from agentguard.guardian.server._dispatch import Dispatcher, _escapes_nothing
from tests.cel.walks import counted_walks
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


def _decision(command: str, *, ensure_ascii: bool = True) -> str:
    request = request_for("steps/toolCallRequest")
    request["params"]["toolCallRequest"]["inputs"] = [{"name": "cmd", "value": command}]
    text = json.dumps(request, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    body = Dispatcher(parse_rules(RULES), "test").handle(text)
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
    assert _decision("ls\x00; rm -rf /", ensure_ascii=False) == "deny"  # JSON escapes a NUL all the same


def test_a_request_is_walked_once_for_all_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    walked = counted_walks(monkeypatch)
    assert _decision("ls caf\u00e9") == "deny"  # both rules evaluated by the engine, the first denies
    assert len(walked) == 1  # the body escapes the é: params walked once
    walked.clear()
    assert _decision("ls caf\u00e9", ensure_ascii=False) == "deny"  # no escape: nothing to walk for
    assert _decision("ls") == "allow"
    assert walked == []


JSON_TEXT = st.text(st.characters(codec=None, categories=None), max_size=12)


@settings(max_examples=500, deadline=None)
@given(
    body=st.one_of(
        JSON_TEXT.map(lambda text: json.dumps({"k": [text]}, ensure_ascii=False)),
        st.tuples(JSON_TEXT, JSON_TEXT).map(lambda pair: f'{{"{pair[0]}": "{pair[1]}"}}'),  # raw
    ).map(lambda text: text.encode("utf-8", "surrogatepass"))
    | st.binary(max_size=24).map(lambda raw: b'["' + raw + b'"]')
)
def test_json_without_a_u_escape_decodes_to_nothing_the_engine_misreads(body: bytes) -> None:
    try:
        payload = strict_json(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return  # a parse error: nothing is decided
    if _escapes_nothing(body):
        assert _expr.unrepresentable(payload) is None
