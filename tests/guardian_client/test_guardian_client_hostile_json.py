"""A guardian (or a proxy posing as one) that answers in JSON a standards parser would not read as we do.

Every reply here comes from a raw loopback socket (:class:`HostileServer` with ``answer=``), byte for byte,
under the request's own ``id``. The client may act on a reply only if it is one unambiguous JSON-RPC
document: a key given twice, a number JSON has no such thing as (``NaN``, ``Infinity``, ``1e400``), a body
that is not UTF-8 or a compressed body is no decision, and ``on_failure`` decides -- recorded as such.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard import Guard, GuardianDenied, Outcome, Rule
from agentguard.guardian import GuardianClient, GuardianOutcome
from tests.conftest import spec_text
from tests.guardian_client.guardian_client_support import decide, step
from tests.guardian_client.hostile_http import HostileServer, compression_bomb, http_response


def _reply(result_text: str) -> Any:
    """An ``answer`` that sends ``result_text`` (raw JSON text) as the ``result`` under the request's id."""

    def answer(request: dict[str, object]) -> bytes:
        body = f'{{"jsonrpc":"2.0","id":{json.dumps(request.get("id"))},"result":{result_text}}}'
        return http_response(body.encode())

    return answer


def _envelope(envelope_text: str) -> Any:
    """An ``answer`` that sends ``envelope_text`` with ``$ID`` replaced by the request's id."""

    def answer(request: dict[str, object]) -> bytes:
        return http_response(envelope_text.replace("$ID", json.dumps(request.get("id"))).encode())

    return answer


def _modify_with_inputs(inputs_text: str) -> Any:
    """A ``modify`` of a ``steps/toolCallRequest`` whose inputs are ``inputs_text``; any other step: allow."""

    def answer(request: dict[str, object]) -> bytes:
        if request.get("method") != "steps/toolCallRequest":
            return _reply('{"decision":"allow"}')(request)
        params = json.loads(json.dumps(request["params"]))
        params["toolCallRequest"]["inputs"] = "$INPUTS"
        modified = dict(request, params=params)
        modified_text = json.dumps(modified).replace('"$INPUTS"', inputs_text)
        result = f'{{"decision":"modify","message":"changed","modifiedRequest":{modified_text}}}'
        return _reply(result)(request)

    return answer


# -- a key given twice ---------------------------------------------------------------------------------------

TWICE = {
    "decision deny then allow": _reply('{"decision":"deny","decision":"allow"}'),
    "result deny then allow": _envelope(
        '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"deny"},"result":{"decision":"allow"}}'
    ),
    "id another then ours": _envelope(
        '{"jsonrpc":"2.0","id":"someone-else","id":$ID,"result":{"decision":"allow"}}'
    ),
    "jsonrpc twice": _envelope('{"jsonrpc":"1.0","jsonrpc":"2.0","id":$ID,"result":{"decision":"allow"}}'),
    "a key twice deep in data": _reply('{"decision":"allow","data":{"a":{"b":1,"b":2}}}'),
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("answer", TWICE.values(), ids=TWICE.keys())
def test_a_reply_with_a_key_given_twice_is_no_decision(answer: Any, flavour: str) -> None:
    """RFC 8259 leaves a repeated name's meaning to the parser: Python keeps the last, others the first or
    refuse. A guardian that builds its JSON from text (``"message": "<user text>"``) can be made to send
    ``"decision":"deny" ... ,"decision":"allow"``; the client must not read that as allow."""
    with HostileServer(answer=answer) as server:
        verdict = decide(flavour, server.url, step())
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith('malformed response: "key '), verdict.failure
    assert "given twice" in (verdict.failure or "")
    assert verdict.proceeded is False


# -- numbers JSON does not have ------------------------------------------------------------------------------

NOT_JSON_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("number", NOT_JSON_NUMBERS)
def test_a_reply_with_a_number_json_has_not_is_no_decision(number: str, flavour: str) -> None:
    with HostileServer(answer=_reply(f'{{"decision":"allow","data":{{"score":{number}}}}}')) as server:
        verdict = decide(flavour, server.url, step(), on_failure="deny")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("malformed response: "), verdict.failure
    assert verdict.proceeded is False


ENCODINGS = {
    "UTF-16": '{"jsonrpc":"2.0","id":"step-1","result":{"decision":"allow"}}'.encode("utf-16"),
    "an encoded surrogate": b'{"jsonrpc":"2.0","id":"step-1","result":{"decision":"allow","message":"\xed\xa0\x80"}}',
    "Latin-1": '{"jsonrpc":"2.0","id":"step-1","result":{"decision":"allow","message":"caf\xe9"}}'.encode(
        "latin-1"
    ),
}


@pytest.mark.parametrize("body", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_a_reply_that_is_not_utf8_is_no_decision(body: bytes) -> None:
    """RFC 8259 §8.1: JSON between systems is UTF-8; Python's json.loads on bytes also guesses UTF-16/32 and
    lets encoded surrogates through, which a standards parser refuses."""
    with HostileServer(lambda method, path: [http_response(body)]) as server:
        verdict = decide("sync", server.url, step())
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("malformed response: body is not UTF-8"), verdict.failure


# -- through the Guard: the call never runs, and the failure is recorded under the policy ------------------

SPEC = spec_text(
    """
    capabilities:
      pay:
        input_restriction:
          assertion: '!(recent["pay"].inputs.amount > 100)'
    """
)


def _pay_guard(url: str, on_failure: str) -> tuple[Guard, list[object]]:
    client = GuardianClient(url, timeout=5.0, on_failure=on_failure)  # type: ignore[arg-type]
    guard = Guard.from_yaml(SPEC, guardian=client)
    ran: list[object] = []

    @guard.tool
    def pay(amount: float) -> str:
        ran.append(amount)
        return "paid"

    return guard, ran


GUARD_CASES = {
    "deny then allow": _reply('{"decision":"deny","message":"no","decision":"allow"}'),
    "modify to NaN": _modify_with_inputs('[{"name":"amount","value":NaN}]'),
    "modify to a key twice": _modify_with_inputs('[{"name":"amount","value":5,"value":5000}]'),
}


def _denied_call(answer: Any, on_failure: str) -> str:
    """Make a ``pay`` call the guardian answers with ``answer``: it is denied and never runs, its one guardian
    decision a recorded deny. That decision's reason."""
    with HostileServer(answer=answer) as server:
        guard, ran = _pay_guard(server.url, on_failure)
        denied = pytest.raises(GuardianDenied, match="denied without guardian decision: malformed response")
        with guard.engagement() as engagement, denied:
            guard.call("pay", {"amount": 5})
    assert ran == []
    decisions = [d for d in engagement.steps[-1].decisions if d.rule is Rule.GUARDIAN]
    assert [d.outcome for d in decisions] == [Outcome.DENY]
    return decisions[0].reason


@pytest.mark.parametrize("answer", GUARD_CASES.values(), ids=GUARD_CASES.keys())
def test_the_guard_never_runs_a_call_on_an_ambiguous_reply(answer: Any) -> None:
    assert "malformed response" in _denied_call(answer, "deny")


AMBIGUOUS_ALLOW = {
    "modify to NaN": GUARD_CASES["modify to NaN"],
    "modify to a key twice": GUARD_CASES["modify to a key twice"],
    "allow with a reasonCode string": _reply('{"decision":"allow","reasonCode":"ok"}'),
}


@pytest.mark.parametrize("answer", AMBIGUOUS_ALLOW.values(), ids=AMBIGUOUS_ALLOW.keys())
def test_on_failure_allow_runs_the_call_as_asked_and_records_no_decision(answer: Any) -> None:
    with HostileServer(answer=answer) as server:
        guard, ran = _pay_guard(server.url, "allow")
        with guard.engagement() as engagement:
            assert guard.call("pay", {"amount": 5}) == "paid"
    assert ran == [5]  # the caller's inputs: no modification was applied
    decisions = [d for d in engagement.steps[0].decisions if d.rule is Rule.GUARDIAN]
    assert decisions[0].outcome is Outcome.NO_DECISION
    assert decisions[0].reason.startswith("proceeded without guardian decision: malformed response")


SAYS_DENY = {
    "deny with a reasonCode string": _reply('{"decision":"deny","message":"no","reasonCode":"limit"}'),
    "deny with a reasoning object": _reply('{"decision":"deny","reasoning":{"why":"limit"}}'),
    "deny with data that is a list": _reply('{"decision":"deny","data":["limit"]}'),
    "deny then allow": GUARD_CASES["deny then allow"],
    "allow then deny": _reply('{"decision":"allow","decision":"deny"}'),
    "result deny then result allow": _envelope(
        '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"deny"},"result":{"decision":"allow"}}'
    ),
    "DENY in capitals": _reply('{"decision":"DENY"}'),
    "deny with a space": _reply('{"decision":" deny"}'),
    "deny with NaN in data": _reply('{"decision":"deny","data":{"score":NaN}}'),
    "deny and an error": _envelope(
        '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"deny"},"error":{"code":-32603,"message":"x"}}'
    ),
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("answer", SAYS_DENY.values(), ids=SAYS_DENY.keys())
def test_a_malformed_reply_that_says_deny_never_proceeds(answer: Any, flavour: str) -> None:
    """``on_failure="allow"`` is for a guardian that gave no decision. One that answered deny gave one, even
    if another member of its reply is malformed or the reply can also be read as allow."""
    with HostileServer(answer=answer) as server:
        verdict = decide(flavour, server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    assert (verdict.failure or "").startswith("malformed response: "), verdict.failure
    assert (verdict.failure or "").endswith("(the reply says deny: not proceeding)"), verdict.failure


@pytest.mark.parametrize("answer", SAYS_DENY.values(), ids=SAYS_DENY.keys())
def test_the_guard_never_runs_a_call_the_guardian_denied_in_a_malformed_reply(answer: Any) -> None:
    assert _denied_call(answer, "allow").endswith("(the reply says deny: not proceeding)")


# -- a property: the client allows only what every standards reading allows --------------------------------

_VALUES = {
    "decision": [
        '"allow"',
        '"deny"',
        '"\\u0061llow"',  # the escape of "a": "allow" to every parser
        '"ALLOW"',
        '" allow"',
        '"allow "',
        '"Allow"',
        '"allow\\u0000"',
        '"false"',
        "true",
        "false",
        "null",
        "1",
        '["allow"]',
        '{"decision":"allow"}',
    ],
    "Decision": ['"allow"'],
    "message": ['"m"', '""'],
    "reasonCode": ['["a"]', "[]"],
    "data": ['{"k":1}', '{"k":1,"k":2}', "{}"],
    "extra": ['"x"', "[1,2]", '{"decision":"allow"}'],
}

_MEMBER = st.sampled_from(sorted(_VALUES)).flatmap(
    lambda key: st.tuples(st.just(key), st.sampled_from(_VALUES[key]))
)


def _strict(text: str) -> Any:
    """What a strict standards reading gives: the value, or ``None`` if any object repeats a key."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            raise KeyError("twice")
        return dict(items)

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except KeyError:
        return None


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[HostileServer, dict[str, str]]]:
    current = {"result": '{"decision":"deny"}'}
    with HostileServer(answer=lambda request: _reply(current["result"])(request)) as server:
        yield server, current


def _any_reading_denies(members: list[tuple[str, str]]) -> bool:
    """Whether any parser's reading of the result has a decision that means deny (casing, spaces, a list)."""
    values = [json.loads(value) for key, value in members if key == "decision"]
    return any(
        isinstance(item, str) and item.strip().casefold() == "deny"
        for value in values
        for item in (value if isinstance(value, list) else [value])
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(_MEMBER, max_size=5), on_failure=st.sampled_from(["deny", "allow"]))
def test_only_an_unambiguous_allow_or_deny_is_a_decision(
    scripted: tuple[HostileServer, dict[str, str]], members: list[tuple[str, str]], on_failure: str
) -> None:
    server, current = scripted
    result_text = "{" + ",".join(f"{json.dumps(key)}:{value}" for key, value in members) + "}"
    current["result"] = result_text
    with GuardianClient(server.url, timeout=5.0, on_failure=on_failure) as client:  # type: ignore[arg-type]
        verdict = client.decide(step())
    strict = _strict(result_text)
    decision = strict.get("decision") if isinstance(strict, dict) else None
    expected = {"allow": GuardianOutcome.ALLOW, "deny": GuardianOutcome.DENY}.get(
        decision if isinstance(decision, str) else "", GuardianOutcome.NO_DECISION
    )
    assert verdict.outcome is expected, (result_text, verdict.failure)
    undecided_proceeds = on_failure == "allow" and not _any_reading_denies(members)
    assert verdict.proceeded is (
        expected is GuardianOutcome.ALLOW or (expected is GuardianOutcome.NO_DECISION and undecided_proceeds)
    ), (result_text, verdict.failure)


# -- compressed replies: the size cap bounds memory too -------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_a_compressed_reply_cannot_outgrow_the_reply_cap_in_memory(encoding: str, flavour: str) -> None:
    """A 256 MiB body compresses to 8 KiB (zstd) or 256 KiB (gzip); httpx inflates each chunk it reads at
    once, so ``max_reply_bytes`` alone would be checked only after the whole chunk sat in memory."""
    response = http_response(compression_bomb(encoding), encoding=encoding)
    with HostileServer(lambda method, path: [response]) as server:
        tracemalloc.start()
        try:
            verdict = decide(flavour, server.url, step(), max_reply_bytes=1 << 20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    assert peak < 32 << 20, f"{peak / (1 << 20):.0f} MiB held for a reply capped at 1 MiB"


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_client_asks_for_an_uncompressed_reply(flavour: str) -> None:
    with HostileServer(answer=_reply('{"decision":"allow"}')) as server:
        assert decide(flavour, server.url, step()).outcome is GuardianOutcome.ALLOW
    assert server.headers[0].get("accept-encoding") == "identity"


def test_an_identity_encoding_is_read() -> None:
    body = b'{"jsonrpc":"2.0","id":"step-1","result":{"decision":"allow"}}'
    response = http_response(body, encoding="identity")
    with HostileServer(lambda method, path: [response]) as server:
        assert decide("sync", server.url, step()).outcome is GuardianOutcome.ALLOW


# -- a proxy named in the environment ----------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_proxy_named_in_the_environment_cannot_answer_for_the_guardian(
    flavour: str, dead_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocking client never read ``HTTP_PROXY`` (its transport is agentguard's own); the asyncio client
    did, so a process environment pointing at another host handed every async step -- and the guardian's
    bearer token -- to it, and its ``allow`` was taken for the guardian's."""
    with HostileServer(answer=_reply('{"decision":"allow"}')) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        verdict = decide(flavour, dead_url, step(), token="s3cret")
    assert proxy.requests == []
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith("transport: ConnectError"), verdict.failure
