"""A review answered after its engagement ended must not let the call it gated run.

The client cancels an engagement -- or ``run_timeout`` ends it -- while the server's reviewer is still being
asked. The client is told ``cancelled`` (or ``failed``); an approval that arrives afterwards used to run the
tool all the same (``refund`` ran after a ``DELETE`` answered 200), because nothing looked at the engagement
between the review and the call. Each test waits for the sync runner to really return (its concurrency slot
comes back) before it looks at what ran.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentguard import Approval, ReviewRequest
from agentguard.server import create_app, serve_in_thread
from tests.server.support import CALLED, gate, shop_agents, shop_runner, start, wait_for

_names = itertools.count()


def _reviewers(name: str) -> dict[str, Callable[[ReviewRequest], Any]]:
    """A sync and an async reviewer that approve once ``gate(name)`` opens."""

    def approve(request: ReviewRequest) -> Approval:
        gate(name).wait(10)
        return Approval(True, "approved late", "supervisor")

    async def approve_async(request: ReviewRequest) -> Approval:
        await asyncio.to_thread(gate(name).wait, 10)
        return Approval(True, "approved late", "supervisor")

    return {"sync": approve, "async": approve_async}


def _wait_until_the_runner_returned(http: httpx.Client) -> None:
    """With ``max_concurrency=1`` a start is refused (429) until the previous runner has returned."""
    deadline = time.monotonic() + 10
    while (response := http.post("/agents/shop-agent", json={})).status_code == 429:
        assert time.monotonic() < deadline, "the runner did not return"
        time.sleep(0.02)
    assert response.status_code == 303
    wait_for(http, response.headers["location"])


@pytest.mark.parametrize("reviewer", ["sync", "async"])
@pytest.mark.parametrize("ended_by", ["cancel", "run_timeout"])
def test_an_approval_after_the_engagement_ended_does_not_run_the_call(
    tmp_path: Path, reviewer: str, ended_by: str
) -> None:
    name = f"late-review-{next(_names)}"
    app = create_app(
        shop_agents(tmp_path),
        shop_runner,
        max_concurrency=1,
        run_timeout=1.0 if ended_by == "run_timeout" else 300.0,
        reviewers={"supervisor": _reviewers(name)[reviewer]},
    )
    with serve_in_thread(app) as server, httpx.Client(base_url=server.url, timeout=15) as http:
        location = start(http, "shop-agent", {"action": "refund", "amount": 5})
        wait_for(http, location, until="awaiting-review")
        if ended_by == "cancel":
            assert http.delete(location).json()["status"] == "cancelled"
        else:
            assert wait_for(http, location)["error"]["type"] == "Timeout"
        calls = len(CALLED)
        gate(name).set()  # the reviewer approves, too late
        _wait_until_the_runner_returned(http)
        assert CALLED[calls:] == ["lookup-order"]  # the next engagement's lookup; no refund
        assert http.get(location).json()["status"] == ("cancelled" if ended_by == "cancel" else "failed")
