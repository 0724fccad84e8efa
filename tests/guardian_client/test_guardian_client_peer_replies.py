"""What a guardian writes back, as a hostile or broken one writes it: its text, batches, odd types, depth.

Every reply comes from a raw loopback socket (:class:`HostileServer`), byte for byte. Two things are checked:

- whatever the guardian wrote that a failure cause quotes (an error message such as ``Method not found:
  <the step's method>``, a ``decision`` or ``id`` of the wrong kind, a header, a parser's complaint about its
  bytes) is escaped and cut: the cause becomes the step's recorded reason, a log line, a span status and an
  audit report, and one reply put megabytes, line breaks, NULs and lone surrogates into each of them;
- a reply that answers one request with a batch, a ``result`` that is a list, or nesting past the parser's
  depth is no decision -- and never proceeds if it may say deny, whatever ``on_failure`` says.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentguard import Guard, GuardianDenied, Outcome, Rule
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianVerdict
from tests.conftest import spec_text
from tests.guardian_client.guardian_client_support import decide, step
from tests.guardian_client.hostile_http import HostileServer, http_response

LONGEST = 1_000  # characters of a failure cause: fixed words and a few values shown cut
HOSTILE = "Method not found: tasks/send\nFORGED LINE " + "A" * 1_000_000 + "\x00\u202e\ud800"
"""What a guardian may write where text is expected: a megabyte, a forged line, a NUL, a bidi override and a
lone surrogate (JSON carries it as ``\\ud800``)."""

Answer = Callable[[dict[str, object]], bytes]


def _json(build: Callable[[object], object]) -> Answer:
    """An ``answer`` sending ``build(request id)`` as JSON (ASCII: a lone surrogate as its escape)."""
    return lambda request: http_response(json.dumps(build(request.get("id"))).encode())


def _text(template: str) -> Answer:
    """An ``answer`` sending ``template`` with ``$ID`` replaced by the request's id, as it is."""
    return lambda request: http_response(template.replace("$ID", json.dumps(request.get("id"))).encode())


def _result(result: object) -> Answer:
    return _json(lambda request_id: {"jsonrpc": "2.0", "id": request_id, "result": result})


def _modify_naming(**changes: object) -> Answer:
    """A ``modify`` whose ``modifiedRequest`` is the request with ``changes`` made to its top level."""

    def answer(request: dict[str, object]) -> bytes:
        result = {"decision": "modify", "message": "m", "modifiedRequest": {**request, **changes}}
        return _result(result)(request)

    return answer


def _assert_one_bounded_line(text: str) -> None:
    assert len(text) <= LONGEST, len(text)
    assert text.isprintable(), text  # no line break, NUL or lone surrogate: one line, valid UTF-8


def _assert_shown_bounded(verdict: GuardianVerdict, prefix: str) -> None:
    cause = verdict.failure or ""
    assert cause.startswith(prefix), cause[:300]
    _assert_one_bounded_line(cause)


# -- what the guardian wrote, in a failure cause --------------------------------------------------------------

QUOTED = {
    "a JSON-RPC error message": (
        _json(lambda rid: {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": HOSTILE}}),
        "jsonrpc -32601: 'Method not found: tasks/send\\nFORGED LINE AAA",
    ),
    "a decision that is a string": (
        _result({"decision": HOSTILE}),
        "malformed response: decision must be 'allow', 'deny' or 'modify', got 'Method not found",
    ),
    "a decision of lists of long strings": (
        _result({"decision": [[[["x" * 400 + "\n"] * 8] * 8] * 8] * 8}),
        "malformed response: decision must be 'allow', 'deny' or 'modify', got [[[[",
    ),
    "jsonrpc": (
        _json(lambda rid: {"jsonrpc": HOSTILE, "id": rid, "result": {"decision": "allow"}}),
        "malformed response: jsonrpc must be '2.0', got 'Method not found",
    ),
    "the id": (
        _json(lambda rid: {"jsonrpc": "2.0", "id": HOSTILE, "result": {"decision": "allow"}}),
        "id mismatch: sent 'step-1', got 'Method not found",
    ),
    "a key given twice": (
        _text(
            '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"allow","$K":1,"$K":2}}'.replace(
                "$K", "k" * 500_000
            )
        ),
        "malformed response: \"key 'kkkk",
    ),
    "the modifiedRequest's id": (
        _modify_naming(id=HOSTILE),
        "unappliable modify: modifiedRequest.id 'Method not found",
    ),
    "the modifiedRequest's method": (
        _modify_naming(method=HOSTILE),
        "unappliable modify: modifiedRequest.method 'Method not found",
    ),
    "the Content-Type": (
        lambda request: http_response(b"{}", content_type="text/" + "a" * 60_000),
        "malformed response: Content-Type 'text/aaaa",
    ),
    "the status line (the HTTP parser quotes it)": (
        lambda request: b"HTTP/1.1 2" + b"\x01" * 10_000 + b"\r\n\r\n",
        'transport: RemoteProtocolError: "illegal status line',
    ),
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(("answer", "prefix"), QUOTED.values(), ids=QUOTED.keys())
def test_what_the_guardian_wrote_is_quoted_bounded_and_escaped(
    answer: Answer, prefix: str, flavour: str
) -> None:
    with HostileServer(answer=answer) as server:
        verdict = decide(flavour, server.url, step(), on_failure="deny")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    _assert_shown_bounded(verdict, prefix)


def test_a_ping_status_is_quoted_bounded_and_escaped() -> None:
    def answer(request: dict[str, object]) -> bytes:
        pong = {"status": HOSTILE, "version": "1", "timestamp": "2025-07-01T12:00:00Z"}
        return _result(pong)(request)

    with HostileServer(answer=answer) as server:
        verdict = decide("sync", server.url, step(), ping_on_start=True, on_failure="allow")
    assert verdict.proceeded is True  # on_failure="allow": the ping failed, the step was never asked about
    _assert_shown_bounded(
        verdict, "ping: malformed response: ping status must be 'connected' or 'error', got 'M"
    )


def test_an_exception_of_a_custom_transport_is_quoted_bounded_and_escaped() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise KeyError(HOSTILE)

    with GuardianClient("http://127.0.0.1:9/aos", transport=httpx.MockTransport(broken)) as client:
        verdict = client.decide(step())
    _assert_shown_bounded(verdict, "internal error: KeyError: ")


def test_the_guard_records_a_guardians_error_message_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """The recorded reason and the client's warning both quote the cause: one line each, bounded."""
    answer = _json(lambda rid: {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": HOSTILE}})
    with HostileServer(answer=answer) as server:
        guard = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=GuardianClient(server.url))
        ran: list[str] = []

        @guard.tool
        def lookup(q: str) -> str:
            ran.append(q)
            return "found"

        with guard.engagement() as engagement, pytest.raises(GuardianDenied) as denied:
            lookup(q="x")
    assert ran == []
    (decision,) = [d for d in engagement.steps[-1].decisions if d.rule is Rule.GUARDIAN]
    assert decision.outcome is Outcome.DENY
    assert decision.reason.startswith("denied without guardian decision: jsonrpc -32601: 'Method not found: ")
    _assert_one_bounded_line(decision.reason)
    assert len(str(denied.value)) <= 2 * LONGEST
    warnings = [r.getMessage() for r in caplog.records if r.name == "agentguard.guardian"]
    assert warnings
    for warning in warnings:
        _assert_one_bounded_line(warning)


def test_a_relayed_peers_method_is_logged_as_spans_show_it(caplog: pytest.LogCaptureFixture) -> None:
    """A host relaying an A2A peer's message passes the method the peer wrote; the client's warning about
    the step shows it as spans do (``other``), and the id bounded."""
    answer = _json(lambda rid: {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
    with HostileServer(answer=answer) as server:
        decide("sync", server.url, step(request_id=HOSTILE, method=HOSTILE))
    (warning,) = [r.getMessage() for r in caplog.records if "gave no decision" in r.getMessage()]
    assert warning.startswith("guardian gave no decision on other 'Method not found: ")
    _assert_one_bounded_line(warning)


# -- batches: one request sent, many answers back ------------------------------------------------------------


def _envelope(request_id: object, decision: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"decision": decision}}


BATCHES = {
    "our id, allow": lambda rid: [_envelope(rid, "allow")],
    "our id twice, allow": lambda rid: [_envelope(rid, "allow"), _envelope(rid, "allow")],
    "20,000 answers: duplicates and ids never asked": lambda rid: [
        _envelope(rid if index % 3 else f"never-asked-{index}", "allow") for index in range(20_000)
    ],
    "empty": lambda rid: [],
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize("build", BATCHES.values(), ids=BATCHES.keys())
def test_a_batch_answering_one_request_is_no_decision(
    build: Callable[[object], object], on_failure: str, flavour: str
) -> None:
    with HostileServer(answer=_json(build)) as server:
        verdict = decide(flavour, server.url, step(), on_failure=on_failure)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is (on_failure == "allow")
    assert (verdict.failure or "").startswith("malformed response: body is a batch of "), verdict.failure


def test_a_batch_is_bounded_by_the_reply_cap() -> None:
    """Its count has no bound of its own: it is one reply, read up to ``max_reply_bytes`` like any other."""
    build = BATCHES["20,000 answers: duplicates and ids never asked"]
    with HostileServer(answer=_json(build)) as server:
        verdict = decide("sync", server.url, step(), max_reply_bytes=64 * 1024, on_failure="allow")
    assert verdict.failure == "reply too large: more than 65536 bytes"


SAYS_DENY = {
    "a batch with our deny": lambda rid: [_envelope(rid, "deny")],
    "a batch with an allow then our deny": lambda rid: [_envelope(rid, "allow"), _envelope(rid, "DENY")],
    "a batch with another id's deny": lambda rid: [_envelope("someone-else", "deny")],
    "a result that is a list": lambda rid: {"jsonrpc": "2.0", "id": rid, "result": [{"decision": "deny"}]},
    "a batch of results that are lists": lambda rid: [
        {"jsonrpc": "2.0", "id": rid, "result": [{"decision": "allow"}, {"decision": " deny"}]}
    ],
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("build", SAYS_DENY.values(), ids=SAYS_DENY.keys())
def test_a_batch_or_a_list_that_says_deny_never_proceeds(
    build: Callable[[object], object], flavour: str
) -> None:
    """A JSON-RPC library reads a batch by id, and a lenient one takes a list's first object: one that
    finds a deny there must not see the step go ahead because ``on_failure="allow"``."""
    with HostileServer(answer=_json(build)) as server:
        verdict = decide(flavour, server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    assert (verdict.failure or "").endswith("(the reply says deny: not proceeding)"), verdict.failure


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize("decision", ["deny", "allow"])
def test_the_guard_follows_on_failure_for_a_batch_unless_it_says_deny(decision: str, on_failure: str) -> None:
    with HostileServer(
        answer=_json(lambda rid: [_envelope(rid, decision), _envelope(rid, "allow")])
    ) as server:
        client = GuardianClient(server.url, on_failure=on_failure)  # type: ignore[arg-type]
        guard = Guard.from_yaml(spec_text("capabilities:\n  lookup:\n"), guardian=client)
        ran: list[str] = []

        @guard.tool
        def lookup(q: str) -> str:
            ran.append(q)
            return "found"

        proceeds = decision == "allow" and on_failure == "allow"
        with guard.engagement() as engagement:
            if proceeds:
                assert lookup(q="x") == "found"
            else:
                with pytest.raises(GuardianDenied, match="without guardian decision"):
                    lookup(q="x")
    assert ran == (["x"] if proceeds else [])
    first = next(d for d in engagement.steps[0].decisions if d.rule is Rule.GUARDIAN)
    assert first.outcome is (Outcome.NO_DECISION if proceeds else Outcome.DENY)
    assert "malformed response: body is a batch of 2 responses to one request" in first.reason


# -- depth --------------------------------------------------------------------------------------------------


def _nested(depth: int, inner: str) -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("depth", [600, 900, 980, 5_000, 100_000])
def test_a_deny_in_a_deeply_nested_list_never_proceeds(depth: int, flavour: str) -> None:
    """Read or not (past about a thousand levels Python's parser gives up), the reply may say deny."""
    template = '{"jsonrpc":"2.0","id":$ID,"result":{"decision":' + _nested(depth, '"deny"') + "}}"
    with HostileServer(answer=_text(template)) as server:
        verdict = decide(flavour, server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    assert "not proceeding)" in (verdict.failure or ""), verdict.failure
    assert len(verdict.failure or "") <= LONGEST


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("depth", [5_000, 1_000_000])
def test_a_deny_with_data_nested_past_the_parsers_depth_never_proceeds(depth: int, flavour: str) -> None:
    """A guardian that denies and echoes the offending input in ``data``: the input was nested deeply (a
    model writes tool inputs). A parser with a deeper limit reads a plain deny."""
    template = (
        '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"deny","data":{"input":' + _nested(depth, "1") + "}}}"
    )
    with HostileServer(answer=_text(template)) as server:
        verdict = decide(flavour, server.url, step(), on_failure="allow")
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.proceeded is False
    assert (verdict.failure or "").endswith(
        "(the reply nests too deeply to tell whether it says deny: not proceeding)"
    ), verdict.failure


def test_an_allow_with_data_nested_just_within_the_parsers_depth_is_an_allow() -> None:
    template = (
        '{"jsonrpc":"2.0","id":$ID,"result":{"decision":"allow","data":{"input":' + _nested(500, "1") + "}}}"
    )
    with HostileServer(answer=_text(template)) as server:
        verdict = decide("sync", server.url, step(), on_failure="deny")
    assert verdict.outcome is GuardianOutcome.ALLOW


# -- a property: odd types anywhere, and the client still only allows an exact allow -----------------------

_SAFE_INT = 2**53 - 1
_hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=30),
    st.sampled_from(["false", "true", "null", "0", "allow\x00", "\u0430llow", "allow ", "Allow"]),
    st.integers(1, 3_000).map(lambda n: "\n\x00\ud800" * n),
)
_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-_SAFE_INT, _SAFE_INT),
        st.floats(allow_nan=False, allow_infinity=False),
        _hostile_text,
    ),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_hostile_text, children, max_size=4),
    max_leaves=12,
)
_DENY_READINGS = ["deny", "DENY", " deny", "de\u0000ny", "\uff24\uff25\uff2e\uff39"]


def _may_read_as_deny(value: object) -> bool | None:
    """Whether a generated value reads as deny: ``False`` for one that cannot (a string with other letters, a
    scalar), ``None`` for one that may (a list or map may hold a deny reading; case, width and spacing aside)."""
    if isinstance(value, list | dict):
        return None
    if isinstance(value, str):
        letters = "".join(c for c in unicodedata.normalize("NFKC", value).casefold() if c.isalpha())
        return None if letters == "deny" else False
    return False


_decisions = st.one_of(
    st.sampled_from([("allow", False), ("deny", True)]),
    st.tuples(st.sampled_from(_DENY_READINGS), st.integers(0, 3)).map(
        lambda drawn: (json.loads(_nested(drawn[1], json.dumps(drawn[0]))), True)
    ),
    _json_values.map(lambda value: (value, _may_read_as_deny(value))),
)
_MEMBERS = ("message", "reasoning", "reasonCode", "data", "modifiedRequest", "extra")


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[HostileServer, dict[str, str]]]:
    current = {"reply": "{}"}
    with HostileServer(answer=lambda request: http_response(current["reply"].encode())) as server:
        yield server, current


def _well_typed(result: dict[str, object]) -> bool:
    """Whether the members other than ``decision`` are what AOS says they are."""
    codes = result.get("reasonCode")
    return (
        all(
            result.get(name) is None or isinstance(result.get(name), str) for name in ("message", "reasoning")
        )
        and (codes is None or (isinstance(codes, list) and all(isinstance(code, str) for code in codes)))
        and (result.get("data") is None or isinstance(result.get("data"), dict))
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    decision=_decisions,
    members=st.dictionaries(st.sampled_from(_MEMBERS), _json_values, max_size=4),
    batch=st.booleans(),
    on_failure=st.sampled_from(["deny", "allow"]),
)
def test_only_an_exact_decision_is_one_and_a_deny_reading_never_proceeds(
    scripted: tuple[HostileServer, dict[str, str]],
    decision: tuple[object, bool | None],
    members: dict[str, object],
    batch: bool,
    on_failure: str,
) -> None:
    value, says_deny = decision
    assume(value != "modify")
    server, current = scripted
    result = {**members, "decision": value}
    request = step()
    envelope = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    current["reply"] = json.dumps([envelope] if batch else envelope)
    with GuardianClient(server.url, timeout=5.0, on_failure=on_failure) as client:  # type: ignore[arg-type]
        verdict = client.decide(request)
    if not batch and value in ("allow", "deny") and _well_typed(result):
        assert verdict.outcome is GuardianOutcome(value), verdict.failure
        assert verdict.proceeded is (value == "allow")
        return
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    _assert_shown_bounded(verdict, "malformed response: ")
    if says_deny is not None:
        assert verdict.proceeded is (on_failure == "allow" and not says_deny), verdict.failure
    else:
        assert verdict.proceeded is False or on_failure == "allow", verdict.failure
