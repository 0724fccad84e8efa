"""The journal's events, fuzzed: whatever a tool returns survives the trip through a store exactly, and
whatever a store hands back (a bug, someone else's data) never crashes a worker's record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
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


def test_a_store_answer_that_is_not_a_journal_raises_value_error() -> None:
    state = EngagementState()
    with pytest.raises(ValueError, match="Expecting value"):
        state.settle(0, Appended(ok=True, version=1, total=0, missed=["not json"]))
