"""A remote ``oagent://`` server -- or whoever answers for it -- that compresses its answers, or writes an
engagement state that standards parsers read differently.

Every answer comes from a raw loopback socket (tests/guardian_client/hostile_http.py), byte for byte. The
caller acts on a state only if it is one unambiguous JSON document: a key given twice, a number JSON has no
such thing as (``NaN``, ``Infinity``, ``1e400``), a body that is not UTF-8, or a status that is not a
string is a :class:`RemoteAgentError` (and the remote engagement is cancelled), never an output. A
compressed answer is refused before it is read, because a small one inflates far past
``max_response_bytes`` in memory before the cap sees it.
"""

from __future__ import annotations

import json
import socket
import tracemalloc
from collections.abc import Iterable, Iterator

import pytest

from agentguard.remote import RemoteAgentError, RemoteLimits
from tests.guardian_client.hostile_http import HostileServer, Script, compression_bomb, http_response
from tests.server.support import call_remote, remote_front_desk, remote_script

LIMITS = RemoteLimits(request_timeout=5, call_timeout=20, poll_wait=1, poll_interval=0.01)


def _methods(server: HostileServer) -> list[str]:
    return [method for method, _ in server.requests]


# -- compressed answers: the size cap bounds memory too ------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
@pytest.mark.parametrize("where", ["definition", "state"])
def test_a_compressed_answer_cannot_outgrow_the_cap_in_memory(
    where: str, encoding: str, flavour: str
) -> None:
    """httpx inflates each chunk it reads at once: an 8 KiB zstd definition held 512 MiB before the 1 MiB
    ``max_response_bytes`` saw it. It is refused unread; a state so answered also cancels the engagement."""
    if where == "definition":
        answer = http_response(compression_bomb(encoding), encoding=encoding, content_type="application/yaml")
        script = remote_script(definition=b"unused")

        def definition_bomb(method: str, path: str) -> Iterable[bytes]:
            return [answer] if method == "GET" else list(script(method, path))

        serve: Script = definition_bomb
    else:
        serve = remote_script([http_response(compression_bomb(encoding), encoding=encoding)])
    with HostileServer(serve) as server:
        guard = remote_front_desk(server.url, RemoteLimits(call_timeout=20, max_response_bytes=1 << 20))
        tracemalloc.start()
        try:
            with pytest.raises(RemoteAgentError) as caught:
                call_remote(guard, flavour)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        methods = _methods(server)
    what = "fetching the definition" if where == "definition" else "reading the engagement"
    assert f"the answer when {what} is compressed ({encoding}): refused unread" in str(caught.value)
    assert peak < 32 << 20, f"{peak / (1 << 20):.0f} MiB held for answers capped at 1 MiB"
    assert methods == (["GET"] if where == "definition" else ["GET", "POST", "GET", "DELETE"])


def test_the_caller_asks_for_uncompressed_answers_and_reads_an_identity_one() -> None:
    state = b'{"status": "completed", "output": {"due": "2026-12-01"}, "exposes": {"n": 1}}'
    script = remote_script([http_response(state, encoding="identity")])
    with HostileServer(script) as server:
        result = call_remote(remote_front_desk(server.url, LIMITS), "sync")
    assert result == {"output": {"due": "2026-12-01"}, "exposes": {"n": 1}}
    assert [headers.get("accept-encoding") for headers in server.headers] == ["identity"] * 3


# -- states that parsers read differently --------------------------------------------------------------------

AMBIGUOUS = {
    "status denied, then completed": (
        b'{"status": "denied", "status": "completed", "output": "ok"}',
        "key 'status' given twice in an object",
    ),
    "output twice": (
        b'{"status": "completed", "output": {"amount": 5000}, "output": {"amount": 5}}',
        "key 'output' given twice in an object",
    ),
    "a key twice in exposes": (
        b'{"status": "completed", "output": 1, "exposes": {"total": 900, "total": 1}}',
        "key 'total' given twice in an object",
    ),
    "NaN": (b'{"status": "completed", "output": {"score": NaN}}', "NaN is not a JSON number"),
    "Infinity": (b'{"status": "completed", "output": {"score": Infinity}}', "Infinity is not a JSON number"),
    "1e400": (b'{"status": "completed", "output": {"score": 1e400}}', "number 1e400 is out of range"),
    "-1e400": (b'{"status": "completed", "exposes": {"score": -1e400}}', "number -1e400 is out of range"),
    "UTF-16": ('{"status": "completed", "output": "ok"}'.encode("utf-16"), "is not UTF-8"),
    "an encoded surrogate": (b'{"status": "completed", "output": "\xed\xa0\x80"}', "is not UTF-8"),
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(("body", "why"), AMBIGUOUS.values(), ids=AMBIGUOUS.keys())
def test_a_state_parsers_read_differently_is_an_error_not_an_output(
    body: bytes, why: str, flavour: str
) -> None:
    """Python's json.loads keeps the last of a repeated key, reads NaN and 1e400 as floats and guesses
    UTF-16; the remote server's own log, a proxy or the caller of this agent may read the same bytes as
    another state. No reading is picked: the call fails, and the remote engagement is cancelled."""
    with HostileServer(remote_script([http_response(body)])) as server:
        with pytest.raises(RemoteAgentError) as caught:
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        methods = _methods(server)
    assert "the engagement state is" in caught.value.reason, caught.value.reason
    assert why in caught.value.reason, caught.value.reason
    assert caught.value.remote_status is None
    assert methods == ["GET", "POST", "GET", "DELETE"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("status", [["completed"], {"completed": True}, True, 1])
def test_a_status_that_is_not_a_string_is_unknown(status: object, flavour: str) -> None:
    """A list or an object as ``status`` used to escape as a TypeError (unhashable), not a RemoteAgentError,
    and left the remote engagement running."""
    body = json.dumps({"status": status, "output": "ok"}).encode()
    with HostileServer(remote_script([http_response(body)])) as server:
        with pytest.raises(RemoteAgentError, match="the engagement state has an unknown status"):
            call_remote(remote_front_desk(server.url, LIMITS), flavour)
        methods = _methods(server)
    assert methods == ["GET", "POST", "GET", "DELETE"]


# -- another host answering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_proxy_named_in_the_environment_cannot_answer_for_the_remote_agent(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever answers decides the output the caller's restrictions check, and hears its bearer token."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    completed = http_response(b'{"status": "completed", "output": "from the proxy"}')
    with HostileServer(remote_script([completed])) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        with pytest.raises(RemoteAgentError, match="cannot reach the server when fetching the definition"):
            call_remote(remote_front_desk(url, LIMITS), flavour)
    assert proxy.requests == []


# -- headers and members the caller cannot use -----------------------------------------------------------------


def _with_etag(etag: bytes) -> Script:
    """:func:`remote_script` whose definition carries ``ETag: etag`` and whose engagement completes."""
    script = remote_script([http_response(b'{"status": "completed", "output": "ok", "exposes": {}}')])

    def serve(method: str, path: str) -> Iterator[bytes]:
        for answer in script(method, path):
            if method == "GET" and path.endswith("/billing-agent"):
                answer = answer.replace(b"\r\n\r\n", b"\r\nETag: " + etag + b"\r\n\r\n", 1)
            yield answer

    return serve


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_etag_that_is_not_ascii_is_not_sent_back(flavour: str) -> None:
    """The ETag is sent back as ``If-None-Match``, and a header is ASCII: one byte past it used to make every
    later call raise ``UnicodeEncodeError`` (not a RemoteAgentError) before any request went out."""
    with HostileServer(_with_etag('"caf\xe9"'.encode("latin-1"))) as server:
        guard = remote_front_desk(server.url, LIMITS)
        answers = [call_remote(guard, flavour) for _ in range(2)]
        requests = server.requests
    assert answers == [{"output": "ok", "exposes": {}}] * 2
    assert [method for method, _ in requests] == ["GET", "POST", "GET"] * 2


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("exposes", [["invoices", 3], "invoices=3", 3, True])
def test_exposes_that_are_not_an_object_are_an_error_not_nothing_exposed(
    exposes: object, flavour: str
) -> None:
    """A completed state's ``exposes`` is what the caller's output restrictions read; one that is not an object
    used to be read as ``{}`` in silence, as if the remote agent exposed nothing."""
    body = json.dumps({"status": "completed", "output": "ok", "exposes": exposes}).encode()
    refused = pytest.raises(RemoteAgentError, match="the engagement state's exposes is not a JSON object")
    with HostileServer(remote_script([http_response(body)])) as server, refused:
        call_remote(remote_front_desk(server.url, LIMITS), flavour)


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("state", [{}, {"exposes": None}])
def test_a_completed_state_without_exposes_exposes_nothing(state: dict[str, object], flavour: str) -> None:
    """A server whose agent has no ``exposes`` section may leave the member out, or send ``null``."""
    body = json.dumps({"status": "completed", "output": "ok", **state}).encode()
    with HostileServer(remote_script([http_response(body)])) as server:
        answer = call_remote(remote_front_desk(server.url, LIMITS), flavour)
    assert answer == {"output": "ok", "exposes": {}}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("where", ["reason", "rule"])
def test_a_remote_engagements_reason_is_one_clipped_line(where: str, flavour: str) -> None:
    """A remote engagement that ended ``failed`` says why in text of its own choosing, up to the answer's size
    limit: it reached the caller's exception message (the model's, often) whole, line breaks included."""
    said = "line one\n" + "x" * 20_000
    error = {"reason": "short", "rule": "restriction", where: said}
    body = json.dumps({"status": "failed", "error": error}).encode()
    ended = pytest.raises(RemoteAgentError, match="ended failed")
    with HostileServer(remote_script([http_response(body)])) as server, ended as failed:
        call_remote(remote_front_desk(server.url, LIMITS), flavour)
    message = str(failed.value)
    assert "\n" not in message
    assert len(message) < 1_000
