"""What the reference guardian's log shows of text a client wrote: bounded, escaped, one line.

An id, an unknown method, a member name a rule copied into an invalid modified request: each is as long as
the body allows and may hold a newline (a forged log line), a NUL or a lone surrogate. The dispatcher is
driven directly (it does no I/O); every record it and the rules write is checked.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard.aos import AOSRequest, AOSSuccessResult, JSONObject
from agentguard.guardian.server import GuardianRules, parse_rules
from agentguard.guardian.server._dispatch import Dispatcher
from tests.guardian_server.support import REQUESTS

MARK = "EVIL-"
LONGEST = 1_000  # a log line's message: fixed words and a few values shown cut

# Any code point, sometimes a long run of newlines, NULs and lone surrogates.
hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.integers(1, 100_000).map(lambda n: "\n\x00\ud800" * n),
)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [record.getMessage() for record in caplog.records if record.name.startswith("agentguard")]
    assert messages, "nothing was logged"
    for message in messages:
        assert len(message) <= LONGEST, len(message)
        assert message.isprintable(), message  # no newline, NUL or lone surrogate: one line, valid UTF-8
    return messages


def _request(**changes: Any) -> bytes:
    request = copy.deepcopy(REQUESTS["steps/toolCallRequest"])
    request.update(changes)
    return json.dumps(request).encode()  # ensure_ascii: a lone surrogate travels as its \u escape


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=hostile_text, request_id=hostile_text)
def test_an_unknown_method_is_logged_bounded(
    caplog: pytest.LogCaptureFixture, method: str, request_id: str
) -> None:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, "agentguard.guardian.server"):
        answer = Dispatcher(parse_rules(""), "1").handle(_request(method=MARK + method, id=request_id))
    assert answer is not None
    assert b'"code":-32601' in answer
    (line,) = _lines(caplog)
    assert line.startswith("refused request (-32601): ")
    assert "Method not found: EVIL-" in line


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request_id=hostile_text)
def test_a_request_id_is_logged_bounded(caplog: pytest.LogCaptureFixture, request_id: str) -> None:
    """When the rules fail (an internal error) and in the debug line of every decision."""

    class Failing(GuardianRules):
        def decide(self, request: AOSRequest, wire: JSONObject | None = None) -> AOSSuccessResult:
            raise RuntimeError("the rules broke")

    caplog.clear()
    with caplog.at_level(logging.DEBUG, "agentguard.guardian.server"):
        Dispatcher(Failing(), "1").handle(_request(id=MARK + request_id))
        Dispatcher(parse_rules(""), "1").handle(_request(id=MARK + request_id))
    failed, decided = _lines(caplog)
    assert failed.startswith("internal error while answering steps/toolCallRequest ")
    assert MARK in failed
    assert decided.startswith("steps/toolCallRequest ")
    assert MARK in decided


def test_a_client_member_name_in_an_invalid_modification_is_logged_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rule that writes a request's value as a member name of something invalid: the error names that
    member by its path, and the rules' warning quotes the error."""
    rules = parse_rules(
        """
rules:
  - name: tag-agent
    methods: [steps/toolCallRequest]
    decision: modify
    message: tagged
    set:
      params.context.agent.metadata: '{params.toolCallRequest.toolId: b"not JSON"}'
"""
    )
    request = copy.deepcopy(REQUESTS["steps/toolCallRequest"])
    request["params"]["toolCallRequest"]["toolId"] = MARK + "\nFORGED LINE " + "x" * 500_000
    with caplog.at_level(logging.WARNING, "agentguard.guardian.server"):
        answer = Dispatcher(rules, "1").handle(json.dumps(request).encode())
    assert answer is not None
    assert b"modify-failed" in answer
    (warning,) = _lines(caplog)
    assert "'the modified request is invalid: Invalid params" in warning
    assert "input was not a valid JSON value'" in warning
