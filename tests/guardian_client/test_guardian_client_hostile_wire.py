"""A guardian (or a man in the middle) on a real loopback socket that bends the wire rather than the JSON.

Each attack here once made a step proceed that must not have, or made the client raise instead of ending
in a recorded verdict: an answer not labelled ``application/json`` (AOS §2 requires that label), a header
httpx cannot carry over, a ``deny`` hidden behind invisible characters, and a ``modify`` that names
another tool or another call than the one the guardian was asked about.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard import Guard, GuardianDenied, Outcome, Phase, Rule
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianStats, GuardianVerdict
from tests.conftest import spec_text
from tests.guardian_client.guardian_client_support import decide, step
from tests.guardian_client.hostile_http import HostileServer, http_response

Answer = Callable[[dict[str, object]], bytes]
OnFailure = Literal["deny", "allow"]


def _result(
    result: Mapping[str, object], *, content_type: str = "application/json", head: bytes = b""
) -> Answer:
    """An ``answer`` sending ``result`` under the request's id, labelled ``content_type``, with the extra
    header lines ``head`` (raw bytes, each ending in CRLF) after the status line."""

    def answer(request: dict[str, object]) -> bytes:
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": result}).encode()
        status_line, _, rest = http_response(body, content_type=content_type).partition(b"\r\n")
        return status_line + b"\r\n" + head + rest

    return answer


# -- the Content-Type an AOS answer MUST carry -------------------------------------------------------------

NOT_JSON_LABELS = [
    "text/html",
    "text/plain",
    "application/jsonp",
    "application/json; charset=utf-16",
    "application/x-www-form-urlencoded",
    "",
]


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("content_type", NOT_JSON_LABELS)
def test_an_allow_not_labelled_json_is_no_decision(content_type: str, flavour: str) -> None:
    """AOS §2: a JSON-RPC answer's Content-Type MUST be application/json. A 200 page from a captive portal,
    a proxy or a misrouted service that happens to hold an allow is not the guardian's answer."""
    with HostileServer(answer=_result({"decision": "allow"}, content_type=content_type)) as server:
        verdict = decide(flavour, server.url, step(), on_failure="deny")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("malformed response: Content-Type"), verdict.failure
    assert verdict.proceeded is False


@pytest.mark.parametrize("content_type", NOT_JSON_LABELS)
def test_a_deny_not_labelled_json_never_proceeds(content_type: str) -> None:
    with HostileServer(answer=_result({"decision": "deny"}, content_type=content_type)) as server:
        verdict = decide("sync", server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=UTF-8"])
def test_json_in_utf8_is_read_whatever_its_spelling(content_type: str) -> None:
    with HostileServer(answer=_result({"decision": "allow"}, content_type=content_type)) as server:
        assert decide("sync", server.url, step()).outcome is GuardianOutcome.ALLOW


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    "status", ["403 Forbidden", "400 Bad Request", "500 Internal Server Error", "302 Found"]
)
def test_a_deny_under_an_error_status_never_proceeds(status: str, flavour: str) -> None:
    """A guardian that denies with ``403`` and a JSON-RPC deny in the body did decide: ``on_failure="allow"``
    is for one that gave no decision, so such a step proceeded."""

    def answer(request: dict[str, object]) -> bytes:
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": {"decision": "deny"}})
        return http_response(body.encode(), status=status)

    with HostileServer(answer=answer) as server:
        verdict = decide(flavour, server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure == f"http {status.split()[0]} (the reply says deny: not proceeding)"
    assert verdict.proceeded is False


# -- an answer with a header that is not ASCII, and an exchange that raises ------------------------------


def _counted(
    flavour: str, url: str, on_failure: OnFailure, **options: Any
) -> tuple[GuardianVerdict, GuardianStats]:
    """One decision of a fresh client (``decide`` or ``adecide``) and the client's statistics after it."""
    if flavour == "sync":
        with GuardianClient(url, on_failure=on_failure, **options) as client:
            return client.decide(step()), client.stats

    async def main() -> tuple[GuardianVerdict, GuardianStats]:
        async with GuardianClient(url, on_failure=on_failure, **options) as client:
            return await client.adecide(step()), client.stats

    return asyncio.run(main())


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_a_header_that_is_not_ascii_is_read_with_the_answer(
    decision: str, on_failure: OnFailure, flavour: str
) -> None:
    """``X-Reason: Überweisung`` in UTF-8: the client rebuilt the response from decoded header text, which
    httpx encodes as ASCII only, so decide() raised UnicodeEncodeError (no verdict, nothing in ``stats``), and
    once that was caught, a deny sent with such a header proceeded under ``on_failure="allow"``."""
    head = "X-Reason: Überweisung abgelehnt\r\n".encode()
    with HostileServer(answer=_result({"decision": decision}, head=head)) as server:
        verdict, stats = _counted(flavour, server.url, on_failure)
    assert verdict.outcome is GuardianOutcome(decision), verdict.failure
    assert verdict.proceeded is (decision == "allow")
    assert (stats.sent, stats.failed, stats.delivered) == (1, 0, 1)


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_an_exchange_that_raises_ends_in_a_recorded_verdict(on_failure: OnFailure, flavour: str) -> None:
    """A custom transport with a bug: decide() raised it, with nothing counted and ``on_failure`` left to
    whoever caught the exception; it is a missing decision like any other."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise KeyError("bug in a custom transport")

    transport = httpx.MockTransport(handler)
    verdict, stats = _counted(flavour, "http://127.0.0.1:9/aos", on_failure, transport=transport)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is (on_failure == "allow")
    assert (stats.sent, stats.failed, stats.delivered) == (1, 1, 0)
    assert stats.last_failure == verdict.failure
    assert (verdict.failure or "").startswith("internal error: KeyError"), verdict.failure


# -- a deny behind invisible characters ----------------------------------------------------------------------

INVISIBLE = ["\x00", "\u200b", "\ufeff", "\u2060", "\x7f", "\t", "\u00a0"]


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[HostileServer, dict[str, Any]]]:
    """A guardian answering whatever ``result`` the test puts in the dict, on one socket for every example."""
    current: dict[str, Any] = {"result": {"decision": "deny"}}
    with HostileServer(answer=lambda request: _result(current["result"])(request)) as server:
        yield server, current


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    letters=st.tuples(*(st.sampled_from([c, c.upper(), chr(ord(c.upper()) + 0xFEE0)]) for c in "deny")),
    noise=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(INVISIBLE)), min_size=1, max_size=4),
)
def test_a_deny_spelled_with_invisible_characters_never_proceeds(
    scripted: tuple[HostileServer, dict[str, Any]], letters: tuple[str, ...], noise: list[tuple[int, str]]
) -> None:
    """``"deny\\u0000"`` is ``deny`` to any reader that stops at NUL, ``"de\\u200bny"`` to anyone looking at
    it, its fullwidth spelling after Unicode compatibility folding. The reply is no decision, and it says deny: under
    ``on_failure="allow"`` it proceeded."""
    server, current = scripted
    decision = list(letters)
    for position, character in sorted(noise, reverse=True):
        decision.insert(position, character)
    current["result"] = {"decision": "".join(decision)}
    with GuardianClient(server.url, on_failure="allow") as client:
        verdict = client.decide(step())
    assert verdict.outcome is GuardianOutcome.NO_DECISION, current
    assert verdict.proceeded is False, (current, verdict.failure)


# -- a modify that names another tool or call ---------------------------------------------------------------

JSON_VALUES = st.recursive(  # integers every JSON peer reads alike (decision 33: others are malformed)
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.text(string.printable, max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _modify(change: Callable[[dict[str, Any]], None]) -> Answer:
    """A guardian answering ``modify`` to every step with the request changed by ``change(params)``."""

    def answer(request: dict[str, object]) -> bytes:
        modified = json.loads(json.dumps(request))
        change(modified["params"])
        return _result({"decision": "modify", "message": "m", "modifiedRequest": modified})(request)

    return answer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    member=st.sampled_from(["toolId", "executionId"]),
    value=JSON_VALUES,
    on_failure=st.sampled_from(["deny", "allow"]),
)
def test_a_modify_of_another_tool_call_cannot_be_applied(
    scripted: tuple[HostileServer, dict[str, Any]], member: str, value: object, on_failure: str
) -> None:
    """A modify replaces what a step carries, not which step it is: the Guard applies only the new inputs,
    so a modify to ``toolId: draft-email`` ran ``send-email`` with them and recorded it as the guardian's."""
    server, current = scripted
    original = step()
    modified = json.loads(json.dumps(original))
    modified["params"]["toolCallRequest"][member] = value
    current["result"] = {"decision": "modify", "message": "m", "modifiedRequest": modified}
    with GuardianClient(server.url, on_failure=on_failure) as client:  # type: ignore[arg-type]
        verdict = client.decide(original)
    if value == original["params"]["toolCallRequest"][member]:  # type: ignore[index]
        assert verdict.outcome is GuardianOutcome.MODIFY
        return
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith(
        f"unappliable modify: modifiedRequest changes toolCallRequest.{member}"
    )
    assert verdict.proceeded is (on_failure == "allow")
    assert verdict.modified_request is None


def _result_step(shape: str) -> dict[str, object]:
    """A ``steps/toolCallResult`` in the text's shape or the published schema's (nested) shape."""
    result = {"executionId": "x-1", "result": {"outputs": [{"kind": "text", "text": "ok"}], "isError": False}}
    params = result if shape == "text" else {"toolCallResult": result}
    return {"jsonrpc": "2.0", "id": "step-2", "method": "steps/toolCallResult", "params": params}


@pytest.mark.parametrize("answered_in", ["text", "schema"])
@pytest.mark.parametrize("asked_in", ["text", "schema"])
def test_a_modified_result_must_be_for_the_same_execution(asked_in: str, answered_in: str) -> None:
    """Either shape may answer either shape; only the execution it is about may not change."""
    for execution_id, outcome in (("x-1", GuardianOutcome.MODIFY), ("x-2", GuardianOutcome.NO_DECISION)):
        modified = _result_step(answered_in)
        params: Any = modified["params"]
        (params if answered_in == "text" else params["toolCallResult"])["executionId"] = execution_id
        result = {"decision": "modify", "message": "m", "modifiedRequest": modified}
        with HostileServer(answer=_result(result)) as server:
            verdict = decide("sync", server.url, _result_step(asked_in))
        assert verdict.outcome is outcome, verdict.failure


SPEC = spec_text(
    """
    capabilities:
      send-email:
      draft-email:
    """
)


def _renamed(params: dict[str, Any]) -> None:
    if "toolCallRequest" in params:
        params["toolCallRequest"]["toolId"] = "draft-email"


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_the_guard_never_runs_a_tool_the_guardian_did_not_approve(on_failure: str) -> None:
    with HostileServer(answer=_modify(_renamed)) as server:
        guard = Guard.from_yaml(SPEC, guardian=GuardianClient(server.url, on_failure=on_failure))  # type: ignore[arg-type]
        ran: list[tuple[str, str]] = []
        guard.tool(name="send-email")(lambda to: ran.append(("send-email", to)))
        guard.tool(name="draft-email")(lambda to: ran.append(("draft-email", to)))
        with guard.engagement() as engagement:
            if on_failure == "deny":
                with pytest.raises(GuardianDenied, match=r"modifiedRequest changes toolCallRequest\.toolId"):
                    guard.call("send-email", {"to": "bob@corp.com"})
            else:
                guard.call("send-email", {"to": "bob@corp.com"})
    # Under on_failure="allow" the call runs as the caller asked it, recorded as undecided, never modified.
    assert ran == ([] if on_failure == "deny" else [("send-email", "bob@corp.com")])
    asked = [d for d in engagement.steps[0].decisions if d.rule is Rule.GUARDIAN and d.phase is Phase.INPUT]
    decisions = [d.outcome for d in asked]
    assert decisions == [Outcome.DENY if on_failure == "deny" else Outcome.NO_DECISION]
