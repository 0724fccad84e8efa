"""An OS Protocol judge backed by any LangChain chat model.

::

    from langchain_openai import ChatOpenAI
    from agentguard.checks import JudgeConfig, add_judge
    from agentguard_langchain import ChatModelJudge

    add_judge(guard, ChatModelJudge(ChatOpenAI(model="gpt-4o-mini")),
              JudgeConfig(criteria="The answer contains no personal data.", threshold=0.8), name="no-pii")

The model is asked for a JSON object ``{"score": <0..1>, "reasoning": "..."}``; an answer that is not one
(or a score outside 0-1) is a failed judgment, never a pass: checks fail closed.
"""

from __future__ import annotations

import json
import re

from agentguard.aos import strict_json
from agentguard.checks import JudgeConfig, JudgeResult
from agentguard_langchain._host import BaseChatModel, HumanMessage, SystemMessage

__all__ = ["ChatModelJudge"]

PROMPT = (
    "You are a strict evaluator. Score how well the content meets the criteria, from 0 (not at all) to 1 "
    "(fully). Answer with one JSON object and nothing else: "
    '{{"score": <number between 0 and 1>, "reasoning": "<one or two sentences>"}}.\n\nCriteria: {criteria}'
)

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class ChatModelJudge:
    """Judge content with a chat model (sync ``invoke``; async hosts run rules in the same place)."""

    def __init__(self, model: BaseChatModel, *, prompt: str = PROMPT) -> None:
        self._model = model
        self._prompt = prompt

    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        messages = [SystemMessage(self._prompt.format(criteria=config.criteria)), HumanMessage(text)]
        reply = self._model.invoke(messages)
        raw = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        try:
            match = _OBJECT.search(raw)
            # Read as every standards parser reads it: with a key twice ({"score": 0.1, "score": 1}), json.loads
            # keeps the last, which the judged content may have talked the model into writing.
            verdict = strict_json(match.group(0) if match else raw)
            if not isinstance(verdict, dict):
                raise TypeError(f"the answer is a JSON {type(verdict).__name__}, not an object")
            score = verdict["score"]
            if isinstance(score, bool) or not isinstance(score, int | float):  # not true, nor "1"
                raise TypeError(f"the score is a {type(score).__name__}, not a number")
            reasoning = str(verdict.get("reasoning", ""))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return JudgeResult.from_score(
                0.0, f"the judge's answer could not be read ({exc}): {raw[:200]}", config
            )
        if not 0.0 <= score <= 1.0:
            return JudgeResult.from_score(0.0, f"the judge scored {score}, outside 0..1: {reasoning}", config)
        return JudgeResult.from_score(score, reasoning, config)
