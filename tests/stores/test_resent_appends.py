"""An append whose answer was lost after it landed is sent again (alone, as a prefix, with newer events): the
RedisStore counts ``history._total`` once per call and keeps each call's ``b`` and ``r`` once in its log (see
agentguard.record.fresh_events). The scenarios are tests/stores/resent.py's, shared with GraphStore."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings

from agentguard.record import Journal
from agentguard.stores import RedisStore
from tests.stores.resent import SCENARIOS, STEPS, count_assertion_holds_across_workers, replay

_IDS = itertools.count()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_an_append_sent_again_counts_each_call_once(
    redis_url: str, scenario: Callable[[Journal, str], None]
) -> None:
    store = RedisStore(redis_url)
    try:
        scenario(store, "resent")
    finally:
        store.close()


def test_a_count_assertion_holds_across_workers_when_a_take_back_answer_is_lost(redis_url: str) -> None:
    made: list[RedisStore] = []

    def stores() -> tuple[RedisStore, RedisStore]:
        made.extend((RedisStore(redis_url), RedisStore(redis_url)))
        return made[-2], made[-1]

    try:
        count_assertion_holds_across_workers(stores)
    finally:
        for store in made:
            store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_any_sequence_of_lost_and_resent_appends_counts_each_call_once(
    redis_url: str, steps: list[tuple[int, str, bool, int | None]]
) -> None:
    store = RedisStore(redis_url)
    try:
        replay(store, f"random-{next(_IDS)}", steps)
    finally:
        store.close()
