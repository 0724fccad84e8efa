"""MemoryStore as a RedisStore would behave: an engagement in use does not expire, and an engagement forgotten
while something still holds it has one life at a time (the holder of the earlier one is refused)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agentguard import Guard, Outcome, PolicyViolation, User
from agentguard.stores import MemoryStore

USER = User(id="u1")
SPEC = (
    "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
    "capabilities:\n  lookup:\n  ping:\nlifespan:\n  short_circuit: 3\n"
)
LOOP = ["lookup", "ping"] * 6  # short_circuit 3 stops the 6th call (index 5)


def _guard(store: MemoryStore, ran: list[str] | None = None) -> Guard:
    guard = Guard.from_yaml(SPEC, store=store, telemetry=False)
    guard.tool(name="lookup")(lambda q: (ran.append(q) if ran is not None else None) or q)
    guard.tool(name="ping")(lambda q: (ran.append(q) if ran is not None else None) or q)
    return guard


def _call(guard: Guard, eng: Any, name: str, q: str) -> Any:
    with eng.activate():
        return guard.call(name, {"q": q})


def test_an_engagement_forgotten_while_held_and_opened_anew_refuses_its_earlier_life() -> None:
    ran: list[str] = []
    guard = _guard(MemoryStore(max_engagements=1), ran)
    first = guard.engagement(USER, engagement_id="a")
    for index in range(4):
        _call(guard, first, LOOP[index], str(index))
    guard.engagement(USER, engagement_id="b")  # "a" is evicted, but this code still holds it
    second = guard.engagement(USER, engagement_id="a")  # forgotten: a fresh record
    assert second.state is not first.state
    ran.clear()
    # The old code let both lives go on, each with a loop count of its own: the loop ran past the 6th call.
    for index in range(4, len(LOOP)):
        with pytest.raises(PolicyViolation):
            _call(guard, first, LOOP[index], str(index))
    assert ran == []
    assert first.steps[-1].outcome is Outcome.DENY
    assert "opened anew" in str(first.state.status_reason)
    _call(guard, second, "lookup", "fresh")  # the new life is the engagement now
    assert ran == ["fresh"]


def test_an_engagement_in_use_does_not_expire_between_opens() -> None:
    # A shared store's time to live runs from the last call as well as the last open; so does this one's.
    guard = _guard(MemoryStore(ttl_seconds=2.0))
    eng = guard.engagement(USER, engagement_id="busy")
    for index in range(3):
        _call(guard, eng, LOOP[index], str(index))
        time.sleep(1.2)  # 3.6 s since it was opened, never more than about 1.2 s since its last call
    _call(guard, eng, LOOP[3], "3")
    again = guard.engagement(USER, engagement_id="busy")
    assert again.state is eng.state
    assert again.view()["history"]["_total"] == 4
