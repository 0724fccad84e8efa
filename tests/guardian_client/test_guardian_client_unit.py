"""The guardian client against httpx.MockTransport: every branch of the exchange, sync and async."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable
from typing import Any, Literal

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentguard.guardian import (
    GuardianClient,
    GuardianOutcome,
    GuardianRetry,
    GuardianUnavailable,
    GuardianVerdict,
)
from agentguard.guardian._flow import Send, Settings, Sleep, decision_flow, encode_step
from tests.guardian_client.guardian_client_support import Recorder, answer, envelope, raw, status, step

URL = "http://guardian.test/aos"
OnFailure = Literal["deny", "allow"]
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(params=["sync", "async"])
def ask(request: pytest.FixtureRequest) -> Callable[..., GuardianVerdict]:
    """``ask(handler, aos_request=None, **client_options)``: one decision through decide or adecide."""
    flavour = request.param

    def run(
        handler: Handler, aos_request: dict[str, object] | None = None, **options: Any
    ) -> GuardianVerdict:
        aos_request = aos_request or step()
        transport = httpx.MockTransport(handler)
        if flavour == "sync":
            with GuardianClient(URL, transport=transport, **options) as client:
                return client.decide(aos_request)

        async def main() -> GuardianVerdict:
            async with GuardianClient(URL, transport=transport, **options) as client:
                return await client.adecide(aos_request)

        return asyncio.run(main())

    return run


# -- decisions -------------------------------------------------------------------------------------------


def test_allow(ask: Callable[..., GuardianVerdict]) -> None:
    verdict = ask(answer({"decision": "allow", "message": "fine"}))
    assert verdict.outcome is GuardianOutcome.ALLOW
    assert (verdict.message, verdict.failure, verdict.proceeded, verdict.attempts) == ("fine", None, True, 1)
    assert verdict.modified_request is None
    assert verdict.latency_ms >= 0


def test_deny_carries_the_guardians_explanation(ask: Callable[..., GuardianVerdict]) -> None:
    verdict = ask(
        answer(
            {
                "decision": "deny",
                "message": "external recipient",
                "reasoning": "to: is outside corp",
                "reasonCode": ["external", "pii"],
                "data": {"rule": "no-external-email"},
            }
        )
    )
    assert verdict.outcome is GuardianOutcome.DENY
    assert verdict.proceeded is False
    assert verdict.failure is None
    assert verdict.message == "external recipient"
    assert verdict.reasoning == "to: is outside corp"
    assert verdict.reason_codes == ("external", "pii")
    assert verdict.data == {"rule": "no-external-email"}


def test_a_decision_without_message_is_accepted(ask: Callable[..., GuardianVerdict]) -> None:
    verdict = ask(answer({"decision": "allow"}))
    assert (verdict.outcome, verdict.message, verdict.reason_codes) == (GuardianOutcome.ALLOW, None, ())


def test_modify_returns_the_complete_replacement_request(ask: Callable[..., GuardianVerdict]) -> None:
    replacement = step()
    replacement["params"] = {"toolCallRequest": {"executionId": "x-1", "toolId": "send-email", "inputs": [1]}}
    verdict = ask(answer({"decision": "modify", "message": "redacted", "modifiedRequest": replacement}))
    assert verdict.outcome is GuardianOutcome.MODIFY
    assert verdict.modified_request == replacement
    assert verdict.proceeded is True


def test_allow_ignores_a_stray_modified_request(ask: Callable[..., GuardianVerdict]) -> None:
    verdict = ask(answer({"decision": "allow", "modifiedRequest": step()}))
    assert verdict.outcome is GuardianOutcome.ALLOW
    assert verdict.modified_request is None


UNAPPLIABLE = {
    "missing": None,
    "not an object": "please redact",
    "wrong jsonrpc": {"jsonrpc": "1.0", "id": "step-1", "method": "steps/toolCallRequest", "params": {}},
    "other id": {"jsonrpc": "2.0", "id": "step-2", "method": "steps/toolCallRequest", "params": {}},
    "id of another type": {"jsonrpc": "2.0", "id": 1, "method": "steps/toolCallRequest", "params": {}},
    "other method": {"jsonrpc": "2.0", "id": "step-1", "method": "steps/memoryStore", "params": {}},
    "params not an object": {
        "jsonrpc": "2.0",
        "id": "step-1",
        "method": "steps/toolCallRequest",
        "params": [],
    },
    "no params": {"jsonrpc": "2.0", "id": "step-1", "method": "steps/toolCallRequest"},
}


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize("modified", UNAPPLIABLE.values(), ids=UNAPPLIABLE.keys())
def test_unappliable_modify_is_a_failure(
    ask: Callable[..., GuardianVerdict], modified: object, on_failure: str
) -> None:
    result: dict[str, object] = {"decision": "modify", "message": "changed"}
    if modified is not None:
        result["modifiedRequest"] = modified
    verdict = ask(answer(result), step("step-1"), on_failure=on_failure)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure is not None
    assert verdict.failure.startswith("unappliable modify: ")
    assert verdict.proceeded is (on_failure == "allow")
    assert verdict.modified_request is None


def test_jsonrpc_error_is_a_failure_and_is_not_retried(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(
        lambda request: httpx.Response(
            200,
            json={"jsonrpc": "2.0", "id": "step-1", "error": {"code": -32603, "message": "Internal error"}},
        )
    )
    retry = GuardianRetry(
        attempts=3, delay_ms=0, retry_on=frozenset({"timeout", "transport", "http-5xx", "http-429"})
    )
    verdict = ask(recorder, step("step-1"), retry=retry)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure == "jsonrpc -32603: 'Internal error'"
    assert verdict.proceeded is False
    assert len(recorder.requests) == 1


def test_jsonrpc_error_with_null_id_reports_the_error(ask: Callable[..., GuardianVerdict]) -> None:
    error = {"code": -32700, "message": "Parse error"}
    verdict = ask(envelope(jsonrpc="2.0", id=None, error=error))
    assert verdict.failure == "jsonrpc -32700: 'Parse error'"


MALFORMED: dict[str, tuple[Handler, str]] = {
    "not JSON": (raw(b"<html>oops</html>"), "malformed response: body is not JSON"),
    "empty 204": (raw(b"", 204), "malformed response: body is not JSON"),
    "JSON array": (raw(b"[1, 2]"), "malformed response: body is a batch of 2 responses to one request"),
    "JSON string": (raw(b'"allow"'), "malformed response: body is not a JSON object"),
    "no jsonrpc": (
        envelope(id="step-1", result={"decision": "allow"}),
        "malformed response: jsonrpc must be",
    ),
    "jsonrpc 1.0": (
        envelope(jsonrpc="1.0", id="step-1", result={"decision": "allow"}),
        "malformed response: jsonrpc must be",
    ),
    "neither result nor error": (
        envelope(jsonrpc="2.0", id="step-1"),
        "malformed response: a response needs",
    ),
    "both result and error": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "allow"}, error={"code": 1, "message": "x"}),
        "malformed response: a response needs",
    ),
    "result not an object": (
        envelope(jsonrpc="2.0", id="step-1", result="allow"),
        "malformed response: result",
    ),
    "missing decision": (
        envelope(jsonrpc="2.0", id="step-1", result={"message": "hm"}),
        "malformed response: result has no 'decision'",
    ),
    "unknown decision": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "maybe"}),
        "malformed response: decision must be",
    ),
    "decision not a string": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": ["allow"]}),
        "malformed response: decision must be",
    ),
    "message not a string": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "allow", "message": 3}),
        "malformed response: message",
    ),
    "reasoning not a string": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "deny", "reasoning": {}}),
        "malformed response: reasoning",
    ),
    "reasonCode not a list": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "deny", "reasonCode": "x"}),
        "malformed response: reasonCode",
    ),
    "reasonCode with a number": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "deny", "reasonCode": ["x", 1]}),
        "malformed response: reasonCode",
    ),
    "data not an object": (
        envelope(jsonrpc="2.0", id="step-1", result={"decision": "allow", "data": [1]}),
        "malformed response: data",
    ),
    "error without code": (
        envelope(jsonrpc="2.0", id="step-1", error={"message": "x"}),
        "malformed response: error must be",
    ),
    "error not an object": (
        envelope(jsonrpc="2.0", id="step-1", error="boom"),
        "malformed response: error must be",
    ),
    "undecodable content encoding": (
        lambda request: httpx.Response(200, content=b"not gzip", headers={"Content-Encoding": "gzip"}),
        "malformed response: DecodingError",
    ),
}


# Malformed replies whose decision is "deny": a denied step never proceeds, whatever on_failure says.
SAYS_DENY = {"reasoning not a string", "reasonCode not a list", "reasonCode with a number"}


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize(
    ("handler", "cause", "says_deny"),
    [(handler, cause, name in SAYS_DENY) for name, (handler, cause) in MALFORMED.items()],
    ids=MALFORMED.keys(),
)
def test_malformed_reply_is_a_failure(
    ask: Callable[..., GuardianVerdict], handler: Handler, cause: str, says_deny: bool, on_failure: str
) -> None:
    verdict = ask(handler, step("step-1"), on_failure=on_failure, retry=GuardianRetry(attempts=2, delay_ms=0))
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith(cause), verdict.failure
    assert verdict.proceeded is (on_failure == "allow" and not says_deny)
    assert verdict.attempts == 1  # a malformed reply is an answer: never retried


@pytest.mark.parametrize(
    ("request_id", "reply_id"),
    [("step-1", "step-2"), ("1", 1), (1, "1"), (1, True), (1, 1.5), ("step-1", None)],
)
def test_id_mismatch(ask: Callable[..., GuardianVerdict], request_id: object, reply_id: object) -> None:
    verdict = ask(envelope(jsonrpc="2.0", id=reply_id, result={"decision": "allow"}), step(request_id))
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert verdict.failure is not None
    assert verdict.failure.startswith("id mismatch")


def test_a_missing_id_is_a_mismatch(ask: Callable[..., GuardianVerdict]) -> None:
    verdict = ask(envelope(jsonrpc="2.0", result={"decision": "allow"}))
    assert verdict.failure is not None
    assert verdict.failure.startswith("id mismatch")


def test_integer_ids_round_trip(ask: Callable[..., GuardianVerdict]) -> None:
    assert ask(answer({"decision": "allow"}), step(42)).outcome is GuardianOutcome.ALLOW


# -- transport failures and retries -----------------------------------------------------------------------


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
@pytest.mark.parametrize(
    ("handler", "cause"),
    [
        (status(503), "http 503"),
        (status(404), "http 404"),
        (status(401), "http 401"),
        (Recorder(httpx.ReadTimeout("slow")), "timeout"),
        (Recorder(httpx.ConnectTimeout("slow")), "timeout"),
        (
            Recorder(httpx.ConnectError("[Errno 111] Connection refused")),
            "transport: ConnectError: '[Errno 111]",
        ),
        (Recorder(httpx.RemoteProtocolError("peer closed")), "transport: RemoteProtocolError: 'peer closed'"),
    ],
    ids=["503", "404", "401", "read-timeout", "connect-timeout", "refused", "protocol"],
)
def test_transport_and_http_failures(
    ask: Callable[..., GuardianVerdict], handler: Handler, cause: str, on_failure: str
) -> None:
    verdict = ask(handler, on_failure=on_failure)
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert (verdict.failure or "").startswith(cause), verdict.failure
    assert verdict.proceeded is (on_failure == "allow")
    assert verdict.attempts == 1


def test_http_500_then_success_is_retried(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(status(500), answer({"decision": "allow"}))
    verdict = ask(recorder, retry=GuardianRetry(attempts=2, delay_ms=0))
    assert verdict.outcome is GuardianOutcome.ALLOW
    assert verdict.attempts == 2
    assert len(recorder.requests) == 2
    assert recorder.bodies[0] == recorder.bodies[1] == step()


def test_retries_are_bounded(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(status(503))
    verdict = ask(recorder, retry=GuardianRetry(attempts=3, delay_ms=0))
    assert (verdict.failure, verdict.attempts, len(recorder.requests)) == ("http 503", 4, 4)


def test_no_retry_without_a_policy(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(status(503), answer({"decision": "allow"}))
    verdict = ask(recorder)
    assert (verdict.failure, len(recorder.requests)) == ("http 503", 1)


@pytest.mark.parametrize(
    ("reply", "retry_on", "requests"),
    [
        (status(503), {"timeout"}, 1),
        (status(503), {"http-5xx"}, 2),
        (httpx.ConnectError("refused"), {"http-5xx"}, 1),
        (httpx.ConnectError("refused"), {"transport"}, 2),
        (httpx.ReadTimeout("slow"), {"timeout"}, 2),
        (httpx.ReadTimeout("slow"), {"transport"}, 1),
        (status(429), {"timeout", "transport", "http-5xx"}, 1),
        (status(429), {"http-429"}, 2),
        (status(404), {"timeout", "transport", "http-5xx", "http-429"}, 1),
    ],
)
def test_retry_on_filters_what_is_retried(
    ask: Callable[..., GuardianVerdict], reply: Handler | Exception, retry_on: set[str], requests: int
) -> None:
    recorder = Recorder(reply)
    verdict = ask(recorder, retry=GuardianRetry(attempts=1, delay_ms=0, retry_on=frozenset(retry_on)))
    assert verdict.outcome is GuardianOutcome.NO_DECISION
    assert len(recorder.requests) == requests == verdict.attempts


def _sleeps_until_exhausted(retry: GuardianRetry) -> list[float]:
    """Drive the sans-I/O flow with a guardian that always answers 503; return the back-off sleeps."""
    settings = Settings(url=URL, headers=httpx.Headers(), timeout=1.0, retry=retry, on_failure="deny")
    flow = decision_flow(settings, encode_step(step()), ping_first=False)
    sleeps: list[float] = []
    reply: httpx.Response | None = None
    while True:
        try:
            effect = flow.send(reply)
        except StopIteration as stop:
            verdict: GuardianVerdict = stop.value
            assert verdict.attempts == retry.attempts + 1
            return sleeps
        if isinstance(effect, Sleep):
            sleeps.append(effect.seconds)
            reply = None
        else:
            assert isinstance(effect, Send)
            reply = httpx.Response(503, request=effect.request)


@pytest.mark.parametrize(
    ("backoff", "expected_ms"),
    [
        ("none", [100, 100, 100, 100, 100]),
        ("linear", [100, 200, 300, 400, 450]),
        ("exponential", [100, 200, 400, 450, 450]),
    ],
)
def test_backoff_schedule_is_exact(backoff: str, expected_ms: list[int]) -> None:
    retry = GuardianRetry(attempts=5, delay_ms=100, backoff=backoff, max_delay_ms=450)  # type: ignore[arg-type]
    assert [retry.delay(n) for n in range(1, 6)] == expected_ms
    assert _sleeps_until_exhausted(retry) == [ms / 1000 for ms in expected_ms]


def test_os_protocol_delay_table() -> None:
    # The table in the OS Protocol's GuardianRetry page: attempts 1..4.
    for backoff, factors in {
        "none": [1, 1, 1, 1],
        "linear": [1, 2, 3, 4],
        "exponential": [1, 2, 4, 8],
    }.items():
        retry = GuardianRetry(attempts=4, delay_ms=250, backoff=backoff, max_delay_ms=10_000)  # type: ignore[arg-type]
        assert [retry.delay(n) for n in range(1, 5)] == [250 * f for f in factors]


def test_max_delay_caps_even_a_constant_delay() -> None:
    assert GuardianRetry(delay_ms=3000, backoff="none", max_delay_ms=2000).delay(1) == 2000


@given(
    delay=st.integers(0, 10_000),
    cap=st.integers(0, 60_000),
    backoff=st.sampled_from(["none", "linear", "exponential"]),
    n=st.integers(1, 200),
)
def test_delays_are_capped_and_never_shrink(delay: int, cap: int, backoff: str, n: int) -> None:
    retry = GuardianRetry(attempts=n, delay_ms=delay, backoff=backoff, max_delay_ms=cap)  # type: ignore[arg-type]
    current, following = retry.delay(n), retry.delay(n + 1)
    assert 0 <= current <= following <= cap


@pytest.mark.parametrize(
    "options",
    [
        {"attempts": -1},
        {"delay_ms": -1},
        {"max_delay_ms": -5},
        {"backoff": "fibonacci"},
        {"retry_on": frozenset({"jsonrpc"})},
        {"retry_on": frozenset({"malformed"})},
    ],
)
def test_retry_refuses_nonsense(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Retry"):
        GuardianRetry(**options)


def test_retry_stores_retry_on_immutably() -> None:
    retry = GuardianRetry(retry_on={"timeout"})  # type: ignore[arg-type]
    assert retry.retry_on == frozenset({"timeout"})
    assert isinstance(retry.retry_on, frozenset)
    with pytest.raises(ValueError, match="1-based"):
        retry.delay(0)


# -- the request on the wire --------------------------------------------------------------------------------


def test_request_on_the_wire(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    aos_request = step("step-9")
    ask(recorder, aos_request, token="s3cret", headers={"X-Tenant": "corp"}, timeout=2.5)
    (sent,) = recorder.requests
    assert sent.method == "POST"
    assert str(sent.url) == URL
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "application/json"
    assert sent.headers["authorization"] == "Bearer s3cret"
    assert sent.headers["x-tenant"] == "corp"
    assert json.loads(sent.content) == aos_request
    assert sent.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}


def test_content_type_is_always_json(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    ask(recorder, headers={"Content-Type": "text/plain"})
    assert recorder.requests[0].headers["content-type"] == "application/json"


def test_lone_surrogates_are_sent_escaped(ask: Callable[..., GuardianVerdict]) -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    aos_request = step()
    aos_request["params"] = {"text": "broken \ud800 output", "name": "Zoë"}
    assert ask(recorder, aos_request).outcome is GuardianOutcome.ALLOW
    assert json.loads(recorder.requests[0].content) == aos_request


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("ftp://guardian.test/aos", {}),
        ("guardian.test/aos", {}),
        ("http://[::1", {}),
        (URL, {"mode": "audit"}),
        (URL, {"on_failure": "maybe"}),
        (URL, {"timeout": 0}),
        (URL, {"queue_size": 0}),
        (URL, {"token": "t", "headers": {"Authorization": "Basic xyz"}}),
    ],
)
def test_construction_refuses_nonsense(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|invalid|either"):
        GuardianClient(url, **options)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (["not", "a", "dict"], TypeError),
        ({"jsonrpc": "2.0", "method": "steps/message"}, ValueError),
        ({"jsonrpc": "2.0", "id": True, "method": "steps/message"}, ValueError),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "steps/message"}, ValueError),
        ({"jsonrpc": "2.0", "id": 1}, ValueError),
        ({"jsonrpc": "2.0", "id": 1, "method": "steps/message", "params": {"x": math.nan}}, ValueError),
        ({"jsonrpc": "2.0", "id": 1, "method": "steps/message", "params": {"x": object()}}, TypeError),
    ],
)
def test_a_request_that_is_not_one_is_a_programming_error(bad: Any, error: type[Exception]) -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    with GuardianClient(URL, transport=recorder.transport()) as client:
        with pytest.raises(error):
            client.decide(bad)
        with pytest.raises(error):
            asyncio.run(client.adecide(bad))
        assert client.stats.sent == 0
    assert recorder.requests == []


def test_submit_checks_the_request_at_the_caller() -> None:
    with GuardianClient(URL, mode="observe", transport=Recorder(answer({})).transport()) as client:
        with pytest.raises(TypeError):
            client.submit("steps/message")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="'id'"):
            client.submit({"method": "steps/message"})


# -- ping -------------------------------------------------------------------------------------------------

PING_RESULT = {"status": "connected", "version": "9.9", "timestamp": "2025-07-01T12:00:00Z"}


def _pinger(result: object = PING_RESULT) -> Recorder:
    return Recorder(
        lambda request: httpx.Response(
            200, json={"jsonrpc": "2.0", "id": json.loads(request.content)["id"], "result": result}
        )
    )


def test_ping_returns_the_ping_result() -> None:
    recorder = _pinger()
    with GuardianClient(URL, transport=recorder.transport()) as client:
        assert client.ping(1234) == PING_RESULT
    (body,) = recorder.bodies
    assert body["method"] == "ping"
    assert body["jsonrpc"] == "2.0"
    assert isinstance(body["id"], str)
    assert body["params"]["timeout"] == 1234  # type: ignore[index]
    assert body["params"]["timestamp"].endswith("Z")  # type: ignore[index]
    assert recorder.requests[0].extensions["timeout"]["read"] == 1.234


async def test_aping_returns_the_ping_result() -> None:
    async with GuardianClient(URL, transport=_pinger().transport()) as client:
        assert await client.aping() == PING_RESULT


@pytest.mark.parametrize(
    ("handler", "cause"),
    [
        (_pinger({**PING_RESULT, "status": "error"}), "guardian reports status 'error'"),
        (_pinger({"status": "connected"}), "malformed response: ping result needs a string 'version'"),
        (_pinger({**PING_RESULT, "status": "sleepy"}), "malformed response: ping status"),
        (Recorder(httpx.ConnectError("refused")), "transport: ConnectError: 'refused'"),
        (Recorder(status(503)), "http 503"),
        (
            envelope(jsonrpc="2.0", id=None, error={"code": -32601, "message": "no ping"}),
            "jsonrpc -32601: 'no ping'",
        ),
    ],
)
def test_ping_failures_raise_guardian_unavailable(handler: Handler, cause: str) -> None:
    with GuardianClient(URL, transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(GuardianUnavailable) as raised:
            client.ping()
        assert raised.value.cause.startswith(cause)
        with pytest.raises(GuardianUnavailable):
            asyncio.run(client.aping())


def _ping_then_steps(ping: Handler) -> Recorder:
    allow = answer({"decision": "allow"})

    def handler(request: httpx.Request) -> httpx.Response:
        return ping(request) if json.loads(request.content)["method"] == "ping" else allow(request)

    return Recorder(handler)


def test_ping_on_start_pings_before_the_first_step_only() -> None:
    recorder = _ping_then_steps(_pinger())
    with GuardianClient(URL, ping_on_start=True, transport=recorder.transport()) as client:
        assert recorder.requests == []  # not at construction
        assert client.decide(step("a")).outcome is GuardianOutcome.ALLOW
        assert client.decide(step("b")).outcome is GuardianOutcome.ALLOW
    assert [body["method"] for body in recorder.bodies] == [
        "ping",
        "steps/toolCallRequest",
        "steps/toolCallRequest",
    ]


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_a_failed_start_ping_decides_the_first_step_by_policy(on_failure: OnFailure) -> None:
    recorder = _ping_then_steps(status(503))

    async def main() -> tuple[GuardianVerdict, GuardianVerdict]:
        async with GuardianClient(
            URL, ping_on_start=True, on_failure=on_failure, transport=recorder.transport()
        ) as client:
            return await client.adecide(step("a")), await client.adecide(step("b"))

    first, second = asyncio.run(main())
    assert first.outcome is GuardianOutcome.NO_DECISION
    assert (first.failure, first.attempts, first.proceeded) == ("ping: http 503", 0, on_failure == "allow")
    assert second.outcome is GuardianOutcome.ALLOW
    assert [body["id"] for body in recorder.bodies][1:] == ["b"]  # step "a" was never sent


# -- stats, logging, lifecycle ---------------------------------------------------------------------------


def test_stats_count_every_step(caplog: pytest.LogCaptureFixture) -> None:
    decisions = iter(["allow", "deny", None, None])

    def handler(request: httpx.Request) -> httpx.Response:
        decision = next(decisions)
        if decision is None:
            return httpx.Response(502)
        return answer({"decision": decision})(request)

    with (
        GuardianClient(URL, transport=httpx.MockTransport(handler)) as client,
        caplog.at_level(logging.WARNING),
    ):
        for n in range(4):
            client.decide(step(n))
        stats = client.stats
    assert (stats.sent, stats.delivered, stats.failed, stats.dropped, stats.queue_depth) == (4, 2, 2, 0, 0)
    assert stats.last_failure == "http 502"
    failures = [r for r in caplog.records if "no decision" in r.getMessage()]
    assert len(failures) == 1  # rate-limited: the second failure within the interval is suppressed
    assert "http 502" in failures[0].getMessage()


@pytest.mark.parametrize("on_failure", ["deny", "allow"])
def test_a_closed_client_decides_nothing(on_failure: OnFailure) -> None:
    recorder = Recorder(answer({"decision": "allow"}))
    events: list[tuple[str, dict[str, object]]] = []
    client = GuardianClient(
        URL, on_failure=on_failure, transport=recorder.transport(), on_event=lambda *e: events.append(e)
    )
    client.close()
    client.close()  # harmless
    verdict = client.decide(step())
    assert (verdict.outcome, verdict.failure) == (GuardianOutcome.NO_DECISION, "client closed")
    assert verdict.proceeded is (on_failure == "allow")
    client.submit(step("late"))
    assert events == [
        ("dropped", {"id": "late", "method": "steps/toolCallRequest", "reason": "client closed"})
    ]
    with pytest.raises(GuardianUnavailable, match="client closed"):
        client.ping()
    assert client.stats.dropped == 1
    assert recorder.requests == []


def test_properties() -> None:
    with GuardianClient(URL, mode="observe", on_failure="allow") as client:
        assert (client.url, client.mode, client.on_failure) == (URL, "observe", "allow")


def test_verdicts_are_frozen() -> None:
    verdict = GuardianVerdict(outcome=GuardianOutcome.ALLOW)
    with pytest.raises(AttributeError):
        verdict.outcome = GuardianOutcome.DENY  # type: ignore[misc]


@pytest.mark.parametrize("name", ["Retry", "backoff_delay_ms"])
def test_the_old_retry_names_still_work_with_a_warning(name: str) -> None:
    import agentguard.guardian

    with pytest.warns(DeprecationWarning, match="GuardianRetry"):
        old = getattr(agentguard.guardian, name)
    if name == "Retry":
        assert old is GuardianRetry
    else:
        assert old(GuardianRetry(delay_ms=100, backoff="linear"), 3) == 300
