"""The record layer: taking calls back in any order, shared allow decisions, and the names that moved."""

from __future__ import annotations

import dataclasses
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentguard.observers
import agentguard.record
from agentguard import Guard, User
from agentguard.errors import Phase, Rule
from agentguard.record import Decision, EngagementState, Outcome, StepRecord

SPEC = """
kind: openagentspec:v1/agent
name: record-agent
description: d
intent: i
owner: o@corp.com
capabilities:
  lookup:
    input_restriction:
      assertion: recent["lookup"].inputs.n < 10
"""


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["begin", "rollback", "complete"]), st.integers(0, 2), st.integers(0, 9))
    )
)
def test_calls_taken_back_in_any_order_leave_exactly_the_others(ops: list[tuple[str, int, int]]) -> None:
    """Rollback walks from the end (O(1) for the newest call); whatever call it takes back, and in whatever
    order calls of one name were begun, ``history`` and ``recent`` are those of the calls not taken back."""
    state = EngagementState()
    names = ["a", "b", "c"]
    live: list[tuple[str, object]] = []  # the model: (name, record) in begin order, minus rolled back
    pending: list[object] = []
    for op, which, pick in ops:
        if op == "begin":
            record = state.begin_call(names[which], {"i": len(live)})
            live.append((names[which], record))
            pending.append(record)
        elif pending:
            record = pending.pop(pick % len(pending))
            if op == "rollback":
                state.rollback_call(record, reason="denied")  # type: ignore[arg-type]
                live = [(n, r) for n, r in live if r is not record]
            else:
                state.complete_call(record, {"ok": True})  # type: ignore[arg-type]
    view = state.view()
    assert view["history"]["_list"] == [n for n, _ in live]
    assert view["history"]["_total"] == len(live)
    for name in names:
        entries = [r.entry for n, r in live if n == name]  # type: ignore[attr-defined]
        assert view["history"].get(name, []) == entries
        assert view["recent"].get(name) == (entries[-1] if entries else None)
    assert view["recent"].get("_name") == (live[-1][0] if live else None)


def test_a_call_taken_back_twice_changes_nothing_more() -> None:
    state = EngagementState()
    first = state.begin_call("a", {"i": 1})
    second = state.begin_call("a", {"i": 2})
    state.rollback_call(second, reason="denied")
    state.rollback_call(second, reason="denied")
    assert state.view()["history"]["a"] == [first.entry]


def test_shared_allow_decisions_read_back_with_their_steps_time() -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)

    @guard.tool
    def lookup(n: int) -> dict[str, int]:
        return {"n": n}

    with guard.engagement(user=User(id="u1")) as eng:
        lookup(1)
        lookup(2)
    first, second = eng.steps
    for step in (first, second):
        decisions = step.decisions
        assert [d.rule for d in decisions] == [Rule.CAPABILITY, Rule.RESTRICTION]
        assert all(d.outcome is Outcome.ALLOW and d.at == step.at for d in decisions)
    # each step has decisions of its own once read: stamping one step's does not touch the other's
    assert first.decisions[0] is not second.decisions[0]


def test_observers_get_decisions_timed_when_taken() -> None:
    seen: list[Decision] = []

    class Watcher(agentguard.observers.Observer):
        def decision(self, state: EngagementState, step: StepRecord, decision: Decision) -> None:
            seen.append(decision)

    guard = Guard.from_yaml(SPEC, telemetry=False, observers=[Watcher()])

    @guard.tool
    def lookup(n: int) -> dict[str, int]:
        return {"n": n}

    with guard.engagement(user=User(id="u1")):
        lookup(1)
    assert [d.rule for d in seen] == [Rule.CAPABILITY, Rule.RESTRICTION]
    assert all(d.at > 0 for d in seen)


def test_a_step_mixes_shared_and_own_decisions_in_order() -> None:
    step = StepRecord("steps/toolCallRequest")
    chains: dict[tuple[tuple[Decision, ...], Decision], tuple[Decision, ...]] = {}
    shared = Decision.untimed(Rule.CAPABILITY, Outcome.ALLOW, Phase.INPUT, "capability 'x'", "x")
    own = Decision(Rule.GUARDIAN, Outcome.DENY, Phase.INPUT, "no", "x")
    step.add_shared(shared, chains)
    step.add(own)
    step.add_shared(shared, chains)
    assert [d.rule for d in step.decisions] == [Rule.CAPABILITY, Rule.GUARDIAN, Rule.CAPABILITY]
    assert step.decisions[1] is own
    assert step.outcome is Outcome.DENY


@pytest.mark.parametrize("read", ["observed", "listed"])
def test_a_shared_decision_read_as_its_own_keeps_every_field(read: str) -> None:
    """An observer is given the shared decision timed now, and a step's list holds it stamped with the step's
    time: copies built field by field, so a field added to ``Decision`` and left out of the copy fails here."""
    shared = Decision(
        Rule.RESTRICTION,
        Outcome.ALLOW,
        Phase.OUTPUT,
        "holds",
        "tool-x",
        "outputs.ok",
        at=-1.0,  # untimed: the time of the step it is read from
        data={"k": [1]},
        severity="warning",
    )
    if read == "observed":
        before = time.time()
        copy = shared.timed()
        assert before <= copy.at <= time.time()
    else:
        step = StepRecord("steps/toolCallRequest")
        step.add_shared(shared, {})
        (copy,) = step.decisions
        assert copy.at == step.at
    assert copy is not shared
    for f in dataclasses.fields(Decision):
        if f.name != "at":
            assert getattr(copy, f.name) is getattr(shared, f.name), f.name


def _outcome_as_specified(decisions: list[Decision]) -> Outcome:
    """A step's outcome as ``StepRecord.outcome`` defines it, written the plain way: the first blocking
    decision, else a review still pending (the last review's), else modify, else no-decision, else allow."""
    for d in decisions:
        if d.outcome in (Outcome.DENY, Outcome.REVIEW_REJECTED):
            return d.outcome
    reviews = [d for d in decisions if d.rule is Rule.REVIEW]
    if reviews and reviews[-1].outcome is Outcome.REVIEW_PENDING:
        return Outcome.REVIEW_PENDING
    if any(d.outcome is Outcome.MODIFY for d in decisions):
        return Outcome.MODIFY
    if any(d.outcome is Outcome.NO_DECISION for d in decisions):
        return Outcome.NO_DECISION
    return Outcome.ALLOW


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Rule)), st.sampled_from(list(Outcome))), max_size=8))
def test_a_steps_outcome_is_the_one_its_decisions_give(pairs: list[tuple[Rule, Outcome]]) -> None:
    step = StepRecord("steps/toolCallRequest")
    for rule, outcome in pairs:
        step.add(Decision(rule, outcome, Phase.INPUT, "r", "x"))
    assert step.outcome is _outcome_as_specified(step.decisions)
    assert [d.blocked for d in step.decisions] == [
        o in (Outcome.DENY, Outcome.REVIEW_REJECTED) for _, o in pairs
    ]


def test_the_shared_chains_stop_growing_at_their_limit() -> None:
    chains: dict[tuple[tuple[Decision, ...], Decision], tuple[Decision, ...]] = {}
    for number in range(10):
        step = StepRecord("steps/toolCallRequest")
        shared = Decision.untimed(Rule.SHORT_CIRCUIT, Outcome.ALLOW, Phase.INPUT, "ok", f"tool-{number}")
        step.add_shared(shared, chains, limit=4)
        assert [d.capability for d in step.decisions] == [f"tool-{number}"]
    assert len(chains) == 4


@pytest.mark.parametrize(
    "name", ["EngagementState", "Decision", "StepRecord", "User", "to_plain", "ViewPlan"]
)
def test_the_record_names_moved_with_a_warning(name: str) -> None:
    import agentguard.engagement

    with pytest.warns(DeprecationWarning, match=f"agentguard.record.{name}"):
        moved = getattr(agentguard.engagement, name)
    assert moved is getattr(agentguard.record, name)


def test_the_facade_name_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from agentguard.engagement import Engagement

    assert Engagement is agentguard.Engagement


def test_a_calls_entry_is_a_plain_dict_smaller_than_a_literal() -> None:
    import sys

    state = EngagementState(user=User(id="u1"))
    call = state.begin_call("lookup", {"n": 1})
    entry = call.entry
    assert type(entry) is dict
    assert entry == {"inputs": {"n": 1}, "outputs": None}
    state.complete_call(call, {"ok": True})
    assert list(entry.items()) == [("inputs", {"n": 1}), ("outputs", {"ok": True})]
    assert state.view()["recent"]["lookup"] == entry
    # kept once per call for the engagement's life: a split table (keys shared by every entry), not a literal
    assert sys.getsizeof(entry) < sys.getsizeof({"inputs": {"n": 1}, "outputs": {"ok": True}})


def test_plain_copy_copies_a_json_like_value_and_names_anything_else() -> None:
    from collections import OrderedDict

    from agentguard.record import NOT_PLAIN, plain_copy

    flat = {"ok": True, "n": 1}
    copied = plain_copy(flat)
    assert copied == flat
    assert copied is not flat
    nested = {"items": [{"id": 1}], "next": None}
    deep = plain_copy(nested)
    assert deep == nested
    assert deep["items"] is not nested["items"]
    for value in (None, 0, 1.5, "text", False, [1, "a"]):
        assert plain_copy(value) == value  # None is a JSON value, not the "not JSON-like" answer
    for value in (OrderedDict(a=1), (1, 2), {1: "int key"}, iter([1]), {"a": {1, 2}}):
        assert plain_copy(value) is NOT_PLAIN  # converted by the pipeline, or withheld when consumable once
