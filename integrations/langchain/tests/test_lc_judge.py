"""ChatModelJudge: an OS Protocol judge on a (scripted) LangChain chat model, used as a guard check."""

from __future__ import annotations

import pytest
from agentguard_langchain import ChatModelJudge
from agentguard_langchain.testing import ScriptedChatModel, answer

from agentguard import Guard, RuleViolation
from agentguard.checks import JudgeConfig, add_judge

SPEC = """
kind: openagentspec:v1/agent
name: judged
description: The agent is judged.
intent: You are judged.
owner: tests@corp.com
capabilities:
  search:
"""

CONFIG = JudgeConfig(criteria="The result contains no personal data.", threshold=0.8)


@pytest.mark.parametrize(
    ("reply", "score", "passed"),
    [
        ('{"score": 0.9, "reasoning": "clean"}', 0.9, True),
        ('Sure! {"score": 0.2, "reasoning": "has an email"} Hope that helps.', 0.2, False),
        ("I think it is fine", 0.0, False),
        ('{"score": 7, "reasoning": "huge"}', 0.0, False),
        # A key twice: json.loads kept the last score, which the judged content may have talked the model into.
        ('{"score": 0.1, "reasoning": "has an email", "score": 1}', 0.0, False),
        ('{"score": true, "reasoning": "yes"}', 0.0, False),  # float(True) is 1.0
        ('{"score": "1", "reasoning": "as text"}', 0.0, False),
        ('{"score": "\uff11", "reasoning": "a fullwidth one"}', 0.0, False),
        ('{"score": NaN, "reasoning": "no number"}', 0.0, False),
        ('["score", 1]', 0.0, False),
    ],
)
def test_the_judge_reads_the_models_verdict_and_fails_closed(reply: str, score: float, passed: bool) -> None:
    result = ChatModelJudge(ScriptedChatModel(script=[answer(reply)])).evaluate("some text", CONFIG)
    assert (result.score, result.passed) == (score, passed)


def test_a_failing_judgment_withholds_a_tool_result() -> None:
    model = ScriptedChatModel(
        script=[answer('{"score": 1, "reasoning": "ok"}'), answer('{"score": 0.1, "reasoning": "an email"}')]
    )
    guard = Guard.from_yaml(SPEC)
    add_judge(guard, ChatModelJudge(model), CONFIG, name="no-pii", capabilities={"search"})

    @guard.tool
    def search(q: str) -> str:
        return f"result for {q}"

    with guard.engagement() as eng:
        assert search("weather") == "result for weather"
        with pytest.raises(RuleViolation, match="an email"):
            search("ann")
        assert eng.view()["recent"]["search"]["outputs"] is None
