"""A third-party journal that answers a gap with ``gap=True`` alone (it cannot read the record in the same step
as the append): the pipeline loads the record itself. RedisStore and GraphStore answer with the record
(``Appended.reloaded``) and never take this path, so it is kept covered here, through a RedisStore whose
answers are made gap-only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agentguard import Guard, PolicyViolation
from agentguard.record import Appended
from agentguard.stores import RedisStore
from tests.stores.workers import USER


class GapOnly(RedisStore):
    """Answers a gap as a store that cannot read the record in the same step: ``gap=True``, nothing else."""

    loads = 0

    def _append_reply(self, engagement_id: str, reply: Any) -> Appended:
        appended = super()._append_reply(engagement_id, reply)
        if appended.reloaded is not None:
            return replace(appended, reloaded=None, missed=(), gap=True)
        return appended

    def load(self, engagement_id: str) -> Any:
        self.loads += 1
        return super().load(engagement_id)


SPEC = (
    "kind: openagentspec:v1/agent\nname: s\ndescription: d\nintent: i\nowner: o@corp.com\n"
    "capabilities:\n  ping:\n    input_restriction:\n      assertion: history._total < 8\n"
)


def test_a_gap_only_journal_is_loaded_after_the_gap_and_counts_every_call(redis_url: str) -> None:
    behind = GapOnly(redis_url, max_events=3)
    guard_a = Guard.from_yaml(SPEC, store=behind, telemetry=False)
    guard_b = Guard.from_yaml(SPEC, store=RedisStore(redis_url, max_events=3), telemetry=False)
    for guard in (guard_a, guard_b):
        guard.tool(name="ping")(lambda q: q)
    eng_a = guard_a.engagement(USER, engagement_id="g")
    eng_b = guard_b.engagement(USER, engagement_id="g")
    for n in range(6):  # more than the store keeps: A is behind a gap
        with eng_b.activate():
            guard_b.call("ping", {"q": n})
    with eng_a.activate():
        guard_a.call("ping", {"q": "a"})
    assert behind.loads == 1
    assert eng_a.view()["history"]["_total"] == 7
    with eng_a.activate(), pytest.raises(PolicyViolation):
        guard_a.call("ping", {"q": "a2"})  # the 9th call: refused on what the load brought
