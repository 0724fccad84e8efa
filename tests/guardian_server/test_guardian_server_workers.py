"""The reference guardian keeps no session state: every decision reads only its request and the rules. So
``--workers N`` (or several hosts) decide exactly as one worker does -- checked here on the same sequence of
requests, each on a new connection so that they spread over the workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.guardian_server.hostile import guardian_process
from tests.guardian_server.support import DECIDED_METHODS, MARKER_RULES, request_for


def _requests() -> list[dict[str, Any]]:
    sequence = []
    for round_ in range(3):
        for index, method in enumerate(DECIDED_METHODS):
            verdict = ("allow", "deny", "modify")[(index + round_) % 3]
            sequence.append(request_for(method, f"{round_}-{index}", **{"x-verdict": verdict}))
    return sequence


def _decisions(rules: Path, *args: str) -> list[Any]:
    answers = []
    with guardian_process(rules, *args) as (url, _):
        for request in _requests():
            with httpx.Client() as client:  # a new connection each: the kernel spreads them over the workers
                reply = client.post(url, json=request).json()
            answers.append(reply.get("result", reply.get("error")))
    return answers


def test_many_workers_decide_as_one(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(MARKER_RULES)
    one = _decisions(rules)
    three = _decisions(rules, "--workers", "3")
    assert len(one) == len(_requests()) > 30
    assert {answer["decision"] for answer in one} == {"allow", "deny", "modify"}
    assert three == one
