"""The journal's events, fuzzed: whatever a tool returns survives the trip through a store exactly, and
whatever a store hands back (a bug, someone else's data) never crashes a worker's record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import StoreUnavailable, User
from agentguard.record import EngagementState, decode_event, encode_event
from agentguard.record._journal import Appended, Snapshot, tag

keys = st.text(max_size=6)  # NUL and lone surrogates included
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=10)
    | st.datetimes(timezones=st.just(UTC))
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4)
)


@given(values)
@settings(max_examples=300)
def test_every_recorded_value_round_trips_exactly(value: Any) -> None:
    text = encode_event(["c", "token", value, "completed", None])
    text.encode("utf-8")  # what a store is given is always valid UTF-8 (lone surrogates escaped)
    assert decode_event(text) == ["c", "token", value, "completed", None]


@given(values)
@settings(max_examples=300)
def test_the_direct_encoding_is_the_tagged_one(value: Any) -> None:
    event = ["c", "token", value, "completed", None]
    assert encode_event(event) == json.dumps(tag(event), separators=(",", ":"), allow_nan=False)


def test_a_value_cannot_pass_itself_off_as_a_datetime() -> None:
    forged = {"\x00t": "2020-01-01T00:00:00+00:00"}
    assert decode_event(encode_event(["a", forged])) == ["a", forged]
    assert decode_event(encode_event(["a", datetime(2020, 1, 1, tzinfo=UTC)]))[1] == datetime(
        2020, 1, 1, tzinfo=UTC
    )


@given(st.text(max_size=50))
def test_decoding_anything_is_an_event_or_a_value_error(text: str) -> None:
    try:
        event = decode_event(text)
    except ValueError:
        return
    assert isinstance(event, list)
    assert isinstance(event[0], str)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5)
        # A key that starts with NUL is how the journal tags a datetime or bytes: foreign data that forges one
        # is refused, not read (test_an_event_forging_a_tagged_value_is_refused_by_name).
        | st.dictionaries(st.text(max_size=4).filter(lambda k: not k.startswith("\x00")), inner, max_size=3)
    ),
)
events = st.lists(
    st.sampled_from(["b", "a", "r", "c", "s", "p", "u", "x", "?"]).flatmap(
        lambda kind: st.lists(json_values, max_size=7).map(lambda rest: [kind, *rest])
    ),
    max_size=12,
)


@given(events)
@settings(max_examples=300)
def test_any_events_a_store_hands_back_leave_a_usable_record(sequence: list[list[Any]]) -> None:
    state = EngagementState.shared(
        "e",
        Snapshot(meta={}, version=len(sequence), total=0, events=[json.dumps(e) for e in sequence]),
        journal=None,  # type: ignore[arg-type]  # never used: nothing is appended here
    )
    view = state.view()
    assert view["history"]["_total"] == state.total
    state.would_short_circuit("lookup", 3, 10)
    call = state.begin_call("lookup", {"q": 1})
    assert state.view()["recent"]["lookup"]["inputs"] == {"q": 1}
    assert call.token is None or isinstance(call.token, str)


@pytest.mark.parametrize(
    ("paused", "asked"),
    [
        (["p", "tok", "x", {"rows": []}, {"table": "orders"}], {"table": "orders"}),
        (["p", "tok", "x", {"rows": []}], None),  # written before the host's inputs were kept
        (["p", "tok", "x", {"rows": []}, ["table"]], None),  # inputs that are no object
    ],
)
def test_a_paused_call_keeps_the_host_inputs_its_event_gives(paused: list[Any], asked: Any) -> None:
    """The inputs a resumption must match (None: none matches, as for an event without them)."""
    began = ["b", "tok", "export", "tool", "x", {"table": "orders"}, 0]
    state = EngagementState.shared(
        "e",
        Snapshot(meta={}, version=2, total=0, events=[json.dumps(began), json.dumps(paused)]),
        journal=None,  # type: ignore[arg-type]  # never used: nothing is appended here
    )
    assert state.awaiting_review["x"][4] == asked


@pytest.mark.parametrize(
    "event",
    [
        ["a", {"\x00t": ""}],  # found by hypothesis: a value tagged as a time that is not one
        ["b", "tok", "lookup", "tool", None, {"\x00b": "not base64!"}, 0],
    ],
)
def test_an_event_forging_a_tagged_value_is_refused_by_name(event: list[Any]) -> None:
    snapshot = Snapshot(meta={}, version=1, total=0, events=[json.dumps(event)])
    with pytest.raises(
        StoreUnavailable, match="engagement 'e' is malformed: it holds an event agentguard did"
    ):
        EngagementState.shared("e", snapshot, journal=None)  # type: ignore[arg-type]


def test_an_event_that_is_not_json_is_refused_by_name() -> None:
    snapshot = Snapshot(meta={}, version=1, total=0, events=["{{{"])
    with pytest.raises(StoreUnavailable, match="engagement 'e' is malformed"):
        EngagementState.shared("e", snapshot, journal=None)  # type: ignore[arg-type]


def test_a_store_answer_that_is_not_a_journal_raises_value_error() -> None:
    state = EngagementState()
    with pytest.raises(ValueError, match="Expecting value"):
        state.settle(0, Appended(ok=True, version=1, total=0, missed=["not json"]))


GOOD_META = {
    "user": tag({"id": "u1", "email": "a@corp.com", "name": None, "organization": None, "metadata": {}}),
    "started_at": "2026-01-02T03:04:05+00:00",
    "metadata": tag({"ticket": "T-1"}),
}
meta_fields = st.fixed_dictionaries(
    {},
    optional={
        "user": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {"id": json_values},
                optional={k: json_values for k in ("email", "name", "organization", "metadata")},
            ),
        ),
        "started_at": st.one_of(
            json_values, st.sampled_from(["2026-01-02T03:04:05+00:00", "2026-01-02T03:04:05", "soon"])
        ),
        "metadata": json_values,
    },
)


@given(meta_fields)
@settings(max_examples=300)
def test_any_meta_a_store_hands_back_is_read_as_written_or_refused_by_name(meta: dict[str, Any]) -> None:
    try:
        state = EngagementState.shared("e-42", Snapshot(meta=meta, version=0, total=0), journal=None)  # type: ignore[arg-type]
    except StoreUnavailable as exc:
        message = str(exc)
        assert "'e-42' is malformed" in message
        assert any(field in message for field in ("user", "started_at", "metadata"))
        return
    # Read: every field is what EngagementState.meta() writes, or its default when it is missing.
    user = state.user
    assert user is None or (type(user.id) is str and isinstance(user.metadata, dict))
    assert user is not None or meta.get("user") is None
    assert state.started_at.tzinfo is not None
    assert isinstance(state.metadata, dict)
    assert state.begin_call("lookup", {"q": 1}).name == "lookup"


def test_the_meta_an_engagement_writes_is_read_back_as_it_was() -> None:
    written = EngagementState(user=User("u1", "a@corp.com", metadata={"tier": 2}), metadata={"ticket": "T-1"})
    read = EngagementState.shared("e", Snapshot(meta=written.meta(), version=0, total=0), journal=None)  # type: ignore[arg-type]
    assert (read.user, read.started_at, read.metadata) == (written.user, written.started_at, written.metadata)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("started_at", "soon", "started_at is 'soon', not an ISO 8601 time with its offset"),
        ("started_at", "2026-01-02T03:04:05", "started_at is '2026-01-02T03:04:05'"),  # no offset
        ("started_at", 1767322800, "started_at is 1767322800"),
        ("user", {"email": "a@corp.com"}, "user is {'email': 'a@corp.com'}, not an object with a text id"),
        ("user", {"id": 7}, "user is {'id': 7}"),
        ("user", ["u1"], "user is ['u1']"),
        ("user", {"id": "u1", "email": ["a@corp.com"]}, "user.email is ['a@corp.com'], not text or null"),
        ("user", {"id": "u1", "metadata": [["k", "v"]]}, "user.metadata is [['k', 'v']], not an object"),
        ("metadata", ["ticket"], "metadata is ['ticket'], not an object or null"),
        ("metadata", {"\x00t": "not a time"}, "a value tagged as a time or bytes that is not one"),
        ("started_at", "x" * 10_000, "started_at is 'xxxxxxxx"),
    ],
)
def test_a_malformed_meta_field_is_named_not_guessed(field: str, value: Any, named: str) -> None:
    meta = {**GOOD_META, field: value}
    with pytest.raises(StoreUnavailable, match="engagement 'e' is malformed") as caught:
        EngagementState.shared("e", Snapshot(meta=meta, version=0, total=0), journal=None)  # type: ignore[arg-type]
    assert named in str(caught.value)
    assert len(str(caught.value)) < 300  # a megabyte of someone else's data is not repeated back


def _appended(state: EngagementState, version: int, total: int) -> None:
    """The store took the whole outbox, on top of ``total`` (what ``history._total`` was before it)."""
    batch = state.batch()
    assert batch is not None
    state.settle(len(batch[0]), Appended(ok=True, version=version, total=total + batch[1]))


@pytest.mark.parametrize("landed", [False, True])
def test_a_call_refused_when_its_append_timed_out_counts_once_whatever_moved_the_log(landed: bool) -> None:
    """A call's ``b`` append times out and the call is refused (taken back: an ``r`` goes out with the ``b``
    when the store is back). If the log moved meanwhile, the next exclusive append is refused and the unsent
    ``b`` voided: the ``r`` must then take nothing off ``history._total`` -- unless the timed-out ``b`` landed
    after all (it is among the missed events), when the ``r`` takes it back off. The refused call is not
    taken back, or counted as an attempt, a second time. (Found by a flaky redis test: 1 instead of 2.)"""
    state = EngagementState.shared("e", Snapshot(meta={}, version=0, total=0, events=[]), journal=object())  # type: ignore[arg-type]
    first = state.begin_call("lookup", {"q": "1"})
    _appended(state, version=1, total=0)
    state.complete_call(first, {"q": "1"})  # its "c" waits for the next append
    ping = state.begin_call("ping", {"q": "2"})  # its append times out ...
    state.rollback_call(ping, reason="the engagement store failed")  # ... and the call is refused
    attempts = state.attempts(10)
    again = state.begin_call("lookup", {"q": "3"})
    # Another append (the first call's "c", posted earlier, landing late) moved the log to version 2; with it,
    # perhaps, the ping's timed-out "b" itself.
    late = [encode_event(["c", first.token, {"q": "1"}, "completed", None])]
    if landed:
        late.append(encode_event(["b", ping.token, "ping", "tool", None, {"q": "2"}, 0]))
    stored_total = 1 + int(landed)
    assert not state.settle(4, Appended(ok=False, version=1 + len(late), total=stored_total, missed=late))
    assert again.status == "recheck"  # the pipeline checks it again, and begins it anew
    assert ping.status == "denied"  # refused already: not "recheck"
    assert state.attempts(10) == attempts  # the refused attempt is still counted, once
    again = state.begin_call("lookup", {"q": "3"})
    batch = state.batch()
    assert batch is not None
    state.settle(len(batch[0]), Appended(ok=True, version=9, total=stored_total + batch[1]))
    assert state.total == 2
    assert state.view()["history"]["_list"] == ["lookup", "lookup"]
