"""The Engagement record and its CEL view (OpenAgentSpec "Engagement" section, decisions 1-3 and 5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentguard.cel import get_backend
from agentguard.record import EngagementState, User, ViewPlan, find_short_circuit, to_plain
from agentguard.spec import ENGAGEMENT_DECLARATIONS


def _plan(expression: str) -> ViewPlan:
    return ViewPlan.of(get_backend().compile(expression, ENGAGEMENT_DECLARATIONS))


def test_view_has_every_field_of_the_engagement_section() -> None:
    state = EngagementState(user=User(id="u1", email="ann@corp.com"))
    a = state.begin_call("send-email", {"to": "bob@corp.com"})
    state.complete_call(a, {"status": "sent"})
    b = state.begin_call("web-search", {"q": "x"})
    state.complete_call(b, ["r1"])
    c = state.begin_call("send-email", {"to": "carl@corp.com"})
    state.complete_call(c, {"status": "queued"})
    view = state.view()
    assert isinstance(view["started_at"], datetime)
    assert view["started_at"].tzinfo is not None
    assert view["user"] == {"id": "u1", "email": "ann@corp.com"}
    assert view["recent"]["_name"] == "send-email"
    assert view["recent"]["send-email"] == {
        "inputs": {"to": "carl@corp.com"},
        "outputs": {"status": "queued"},
    }
    assert view["recent"]["web-search"]["outputs"] == ["r1"]
    assert view["history"]["_list"] == ["send-email", "web-search", "send-email"]
    assert view["history"]["_total"] == 3
    assert [e["inputs"]["to"] for e in view["history"]["send-email"]] == ["bob@corp.com", "carl@corp.com"]
    assert view["history"]["send-email"][0]["outputs"] == {"status": "sent"}


def test_user_email_is_null_when_unknown_and_user_null_without_user() -> None:
    assert EngagementState(user=User(id="u2")).view()["user"] == {"id": "u2", "email": None}
    assert EngagementState().view()["user"] == {"id": None, "email": None}


def test_pending_call_is_most_recent_and_rollback_restores_previous() -> None:
    state = EngagementState()
    first = state.begin_call("t", {"n": 1})
    state.complete_call(first, "one")
    pending = state.begin_call("t", {"n": 2})
    view = state.view()
    assert view["recent"]["_name"] == "t"
    assert view["recent"]["t"]["inputs"] == {"n": 2}
    assert view["history"]["t"][-1]["inputs"] == {"n": 2}
    state.rollback_call(pending, reason="denied")
    view = state.view()
    assert view["recent"]["t"] == {"inputs": {"n": 1}, "outputs": "one"}
    assert view["history"]["_list"] == ["t"]
    assert pending.status == "denied"


def test_rollback_of_first_call_removes_name_entirely() -> None:
    state = EngagementState()
    pending = state.begin_call("t", {})
    state.rollback_call(pending, reason="denied")
    view = state.view()
    assert view["recent"] == {}
    assert view["history"] == {"_list": [], "_total": 0}


def test_rollback_of_a_call_overtaken_by_a_parallel_call() -> None:
    state = EngagementState()
    slow = state.begin_call("a", {"i": 1})
    fast = state.begin_call("b", {"i": 2})
    state.complete_call(fast, "ok")
    state.rollback_call(slow, reason="denied")
    view = state.view()
    assert view["history"]["_list"] == ["b"]
    assert view["recent"]["_name"] == "b"
    assert "a" not in view["recent"]
    # the loop detector's sequence was rebuilt: it sees "b", so another "b" repeats it twice
    assert state.would_short_circuit("b", 2, 100) == 1
    assert state.would_short_circuit("a", 2, 100) is None


def test_withheld_call_stays_in_history_with_null_outputs() -> None:
    state = EngagementState()
    call = state.begin_call("t", {"x": 1})
    state.complete_call(call, {"secret": 1})
    state.withhold_call(call, reason="output restriction failed")
    view = state.view()
    assert view["history"]["_list"] == ["t"]
    assert view["recent"]["t"]["outputs"] is None
    assert call.status == "withheld"


def test_collect_results_false_stores_null() -> None:
    state = EngagementState()
    call = state.begin_call("t", {})
    state.complete_call(call, {"big": "x" * 10}, collect=False)
    assert state.view()["recent"]["t"]["outputs"] is None


def test_view_is_a_snapshot() -> None:
    state = EngagementState()
    snapshot = state.view()
    state.begin_call("t", {})
    assert snapshot["history"]["_total"] == 0


@pytest.mark.parametrize(
    ("expression", "keys"),
    [
        ("history._total < 5", {"_total"}),
        ('size(history["send-email"]) < 2 && history._total > 0', {"send-email", "_total"}),
        ("history.lookup.size() > 0", {"lookup"}),
        ('"history" == "history"', set()),
    ],
)
def test_view_plan_binds_only_the_history_keys_used(expression: str, keys: set[str]) -> None:
    plan = _plan(expression)
    assert plan.history_keys == frozenset(keys)


def test_view_plan_falls_back_to_whole_history_for_computed_keys() -> None:
    assert _plan("history[recent._name].size() > 0").history_keys is None
    assert _plan("size(history) > 0").history_keys is None


def test_bindings_prune_history() -> None:
    state = EngagementState(user=User(id="u"))
    for i in range(50):
        state.complete_call(state.begin_call("t", {"i": i}), i)
    plan = _plan("history._total < 100 && user.id == 'u'")
    bound = state.bindings(plan)
    assert bound == {"history": {"_total": 50}, "user": {"id": "u", "email": None}}


def test_to_plain_converts_models_dataclasses_and_containers() -> None:
    from dataclasses import dataclass

    from pydantic import BaseModel

    class M(BaseModel):
        a: int

    @dataclass
    class D:
        b: str

    now = datetime.now(UTC)
    assert to_plain({"m": M(a=1), "d": D("x"), "t": (1, 2), "s": {3}, "n": None, "w": now}) == {
        "m": {"a": 1},
        "d": {"b": "x"},
        "t": [1, 2],
        "s": [3],
        "n": None,
        "w": now,
    }
    assert to_plain(object.__new__(object)).startswith("<object")


@pytest.mark.parametrize(
    ("sequence", "k", "stops_at"),
    [
        ("aaa", 3, 3),  # spec example 1: Tool 1 x3 stopped at the third
        ("ababab", 3, 6),  # spec example 2: stopped at the sixth call
        ("abcabcabc", 3, 9),
        ("aab", 3, None),
        ("abab", 2, 4),  # k=2: the block "ab" repeated twice completes at the 4th call
        ("abba", 2, 3),  # k=2: "bb" at the 3rd call
        ("abcab", 2, None),
        ("x", 1, 1),
    ],
)
def test_short_circuit_detector(sequence: str, k: int, stops_at: int | None) -> None:
    state = EngagementState(loop_window=k * 100)
    stopped = None
    for index, name in enumerate(sequence, start=1):
        by_state = state.would_short_circuit(name, k, 100)
        assert by_state == find_short_circuit([*state.names, name], k, 100)
        if by_state is not None:
            stopped = index
            break
        state.complete_call(state.begin_call(name, {}), None)
    assert stopped == stops_at


def test_short_circuit_ignores_blocks_longer_than_max_block() -> None:
    seq = list("abcd") * 3
    assert find_short_circuit(seq, 3, 4) == 4
    assert find_short_circuit(seq, 3, 3) is None
    assert find_short_circuit(list("xyz") + seq, 3, 4) == 4


def test_short_circuit_never_fires_on_a_cube_free_sequence() -> None:
    # Thue-Morse over two names never repeats a block three times in a row.
    state = EngagementState(loop_window=300)
    for i in range(2000):
        name = "b" if bin(i).count("1") % 2 else "a"
        assert state.would_short_circuit(name, 3, 100) is None
        state.complete_call(state.begin_call(name, {}), None)
    # ...but it does contain squares
    assert state.would_short_circuit("a" if bin(2000).count("1") % 2 == 0 else "b", 2, 100) is not None


def _brute_force(sequence: list[str], k: int, max_block: int) -> int | None:
    for block in range(1, min(max_block, len(sequence) // k) + 1):
        tail = sequence[len(sequence) - k * block :]
        if all(tail[i] == tail[i % block] for i in range(len(tail))):
            return block
    return None


@given(
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=40),
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=12),
)
def test_short_circuit_matches_its_definition(sequence: list[str], k: int, max_block: int) -> None:
    assert find_short_circuit(sequence, k, max_block) == _brute_force(sequence, k, max_block)
    state = EngagementState(loop_window=k * max_block)
    for name in sequence[:-1]:
        state.complete_call(state.begin_call(name, {}), None)
    if sequence:
        assert state.would_short_circuit(sequence[-1], k, max_block) == _brute_force(sequence, k, max_block)


def test_one_part_of_one_recent_entry_is_bound_alone() -> None:
    # The common shape of an assertion, which the binding writes out (ViewPlan.recent_one).
    plan = _plan('recent["send-email"].inputs.to == "a" && user.id == "u"')
    assert plan.recent_one == ("send-email", "inputs")
    state = EngagementState(user=User(id="u"))
    assert state.bindings(plan) == {"recent": {}, "user": {"id": "u", "email": None}}
    state.complete_call(state.begin_call("send-email", {"to": "a"}), {"secret": "s"})
    state.complete_call(state.begin_call("other", {}), None)
    assert state.bindings(plan) == {
        "recent": {"send-email": {"inputs": {"to": "a"}}},
        "user": {"id": "u", "email": None},
    }
    named = _plan('recent["_name"].inputs == "x"')  # the last call's name: no entry to take a part of
    assert named.recent_one == ("_name", "inputs")
    assert state.bindings(named) == {"recent": {"_name": "other"}}
    assert _plan('recent["send-email"].inputs.to == recent["send-email"].outputs').recent_one is None
    assert _plan('recent["a"].inputs.x == recent["b"].inputs.x').recent_one is None


def test_view_plan_prunes_recent_by_literal_name() -> None:
    plan = _plan('recent["send-email"].inputs.to != "" && recent._name == "x"')
    assert plan.recent_keys == frozenset({"send-email", "_name"})
    assert _plan("recent[recent._name].inputs.size() > 0").recent_keys is None
    state = EngagementState()
    state.complete_call(state.begin_call("send-email", {"to": "a"}), None)
    state.complete_call(state.begin_call("other", {}), None)
    assert state.bindings(plan) == {"recent": {"send-email": {"inputs": {"to": "a"}}, "_name": "other"}}
    whole = _plan('recent["send-email"] != null && recent["send-email"].outputs == null')
    assert whole.recent_fields == {"send-email": None}
    assert state.bindings(whole) == {"recent": {"send-email": {"inputs": {"to": "a"}, "outputs": None}}}
    both = _plan('recent["send-email"].inputs.to == recent["send-email"].outputs')
    assert both.recent_fields == {"send-email": frozenset({"inputs", "outputs"})}
