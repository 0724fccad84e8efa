"""LLM-as-judge in OS Protocol terms (``checks/judge``), and how a judgment becomes a guard check.

A :class:`Judge` scores content against natural-language criteria: ``evaluate(content, JudgeConfig)`` returns
a :class:`JudgeResult` (score 0-1, ``passed = score >= threshold``, reasoning). Any object with that method
is a judge; a model-backed one is a prompt and a parse::

    class ModelJudge:
        def __init__(self, model):
            self.model = model

        def evaluate(self, content, config):
            answer = self.model.invoke(f"Criteria: {config.criteria}\\nScore 0..1 then reasoning:\\n{content}")
            score, _, reasoning = answer.partition("\\n")
            return JudgeResult.from_score(float(score), reasoning, config)

Use a judge as a check on tool results with :func:`add_judge`: it registers a ``guard.rules`` output rule
named ``judge:<name>``, so a failing judgment withholds the result like a failed output restriction, and
``Guard(severity={"rule:judge:<name>": "warning"})`` runs it in shadow mode::

    from agentguard.checks import JudgeConfig, add_judge

    add_judge(guard, judge, JudgeConfig(criteria="No personal data.", threshold=0.8), name="no-pii",
              capabilities={"search"}, route_to_review="supervisor")

With ``route_to_review``, a failed judgment asks that reviewer (registered with the guard as for
``require_review``) and the result passes if it approves. For model answers, which Python rules do not see,
make the judge the spec's output guardrail tool with :func:`judge_tool`.

:class:`GuardianJudge` puts the content to an AOS guardian as an agent ``steps/message`` and reads its
decision as a score.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import Field, JsonValue

from agentguard.aos import utc_timestamp
from agentguard.checks._rules import CheckModel, RuleResult, json_safe
from agentguard.errors import Phase
from agentguard.guardian import GuardianClient, GuardianOutcome, GuardianVerdict
from agentguard.pipeline import AskReviewer, CallUser, Flow
from agentguard.policy._review import Approval, ReviewRequest, coerce_approval
from agentguard.policy._rules import CheckResult, RuleContext
from agentguard.record import new_id

if TYPE_CHECKING:
    from agentguard.guard import Guard

__all__ = [
    "DEFAULT_THRESHOLD",
    "GuardianJudge",
    "Judge",
    "JudgeConfig",
    "JudgeResult",
    "add_judge",
    "judge_tool",
]

DEFAULT_THRESHOLD = 0.5
"""The threshold of a :class:`JudgeConfig` that sets none (the OS Protocol leaves it to the provider)."""

_Score = Annotated[float, Field(ge=0.0, le=1.0)]


class JudgeConfig(CheckModel):
    """OS Protocol ``JudgeConfig``: what a passing result is (``criteria``) and how good it must be."""

    model: str | None = None
    criteria: str
    threshold: _Score | None = None
    metadata: dict[str, JsonValue] | None = None

    @property
    def effective_threshold(self) -> float:
        return DEFAULT_THRESHOLD if self.threshold is None else self.threshold


class JudgeResult(CheckModel):
    """OS Protocol ``JudgeResult``: a score in 0-1, whether it passed, and why."""

    score: _Score
    passed: bool
    reasoning: str
    rule_results: list[RuleResult] | None = None
    metadata: dict[str, JsonValue] | None = None

    @classmethod
    def from_score(
        cls,
        score: float,
        reasoning: str,
        config: JudgeConfig,
        *,
        rule_results: list[RuleResult] | None = None,
        metadata: dict[str, JsonValue] | None = None,
    ) -> JudgeResult:
        """A result whose ``passed`` follows the protocol: ``score >= threshold`` (the config's, or 0.5)."""
        return cls(
            score=score,
            passed=score >= config.effective_threshold,
            reasoning=reasoning,
            rule_results=rule_results,
            metadata=metadata,
        )


class Judge(Protocol):
    """OS Protocol ``Judge``: scores ``content`` against ``config.criteria``.

    An exception, a score outside 0-1, or a ``passed`` that is not ``score >= threshold`` is a failed judgment
    wherever agentguard runs a judge (checks fail closed).
    """

    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult: ...


def _as_text(content: object) -> str:
    return content if isinstance(content, str) else json.dumps(json_safe(content))


class GuardianJudge:
    """A judge that asks an AOS guardian: the content goes out as an agent ``steps/message``.

    The message carries the config under ``message.metadata.judge`` (``criteria``, ``threshold``, ``model``,
    ``metadata``), so guardian rules can match on it; ``session.id`` is ``config.metadata["executionId"]`` when
    set (:func:`add_judge` sets it to the engagement id). The verdict becomes the score: ``allow`` → 1, ``deny``
    and ``modify`` → 0 (the content did not pass unchanged), overridden by a numeric ``data.score`` in 0-1 when
    the guardian sends one (a ``deny`` or ``modify`` whose score would pass contradicts itself and is a failed
    judgment: a score never turns a refusal into a pass); a guardian that could not decide scores 1 if the
    client's ``on_failure`` let it proceed and 0 otherwise, with the cause in the reasoning.

    ``agent`` is the AOS ``Agent`` descriptor sent in the step context (e.g. ``guard.agent_descriptor()``);
    by default a minimal one naming agentguard's judge.
    """

    def __init__(self, client: GuardianClient, *, agent: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.agent: dict[str, Any] = (
            dict(agent)
            if agent is not None
            else {
                "name": "agentguard-judge",
                "id": "agentguard-judge",
                "instructions": "Judge the message against message.metadata.judge.criteria.",
                "version": "0.0.0",
                "provider": {"name": "agentguard", "url": ""},
            }
        )

    def request(self, content: object, config: JudgeConfig) -> dict[str, Any]:
        """The AOS ``steps/message`` request that puts ``content`` to the guardian."""
        step_id = new_id()
        session = (config.metadata or {}).get("executionId")
        context = {
            "agent": self.agent,
            "session": {"id": session if isinstance(session, str) else new_id()},
            "turnId": new_id(),
            "stepId": step_id,
            "timestamp": utc_timestamp(),
        }
        message = {
            "id": step_id,
            "role": "agent",
            "content": [{"kind": "text", "text": _as_text(content)}],
            "metadata": {"judge": config.wire()},
        }
        params = {"context": context, "message": message, "citation": []}
        return {"jsonrpc": "2.0", "id": f"judge-{step_id}", "method": "steps/message", "params": params}

    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
        return self.judgment(self.client.decide(self.request(content, config)), config)

    @staticmethod
    def judgment(verdict: GuardianVerdict, config: JudgeConfig) -> JudgeResult:
        """Read a guardian verdict as a judgment (the mapping is in the class docstring)."""
        outcome = verdict.outcome
        if outcome is GuardianOutcome.NO_DECISION:
            score = 1.0 if verdict.proceeded else 0.0
            policy = "allow" if verdict.proceeded else "deny"
            reasoning = f"no guardian decision ({verdict.failure}); on_failure={policy}"
        else:
            score = 1.0 if outcome is GuardianOutcome.ALLOW else 0.0
            sent = (verdict.data or {}).get("score")
            if sent is not None:
                if isinstance(sent, bool) or not isinstance(sent, int | float) or not 0 <= sent <= 1:
                    raise ValueError(f"guardian sent data.score {sent!r}, not a number in 0..1")
                if outcome is not GuardianOutcome.ALLOW and sent >= config.effective_threshold:
                    raise ValueError(
                        f"guardian answered {outcome.value} with data.score {sent!r}, which would pass: the "
                        "reply contradicts itself"
                    )
                score = float(sent)
            reasoning = verdict.reasoning or verdict.message or f"guardian answered {outcome.value}"
        guardian: dict[str, JsonValue] = {"decision": outcome.value, "latencyMs": verdict.latency_ms}
        if verdict.reason_codes:
            guardian["reasonCodes"] = list(verdict.reason_codes)
        if verdict.failure:
            guardian["failure"] = verdict.failure
        return JudgeResult.from_score(score, reasoning, config, metadata={"guardian": guardian})


def _validated(result: object, who: str, config: JudgeConfig) -> JudgeResult:
    """A judge's answer, validated again: anything but a :class:`JudgeResult` raises (a failed judgment), and so
    does one built without validation (``model_construct``) whose fields break the model: a ``passed`` of
    ``"false"`` is a true value to Python.

    So does one whose ``passed`` is not ``score >= threshold`` for the config the judge was given: a model
    judge that reads ``passed`` from its model's reply (``{"score": 0.05, "passed": true}``, text the judged
    content can talk the model into) would otherwise pass what its own score fails, and a score never turns
    into a pass by way of a second field that says otherwise.
    """
    if not isinstance(result, JudgeResult):
        raise TypeError(f"{who} returned {type(result).__name__}, not a JudgeResult")
    checked = JudgeResult.model_validate({**result.__dict__, **(result.model_extra or {})}, strict=True)
    threshold = config.effective_threshold
    if checked.passed is not (checked.score >= threshold):
        raise ValueError(
            f"{who} answered passed={checked.passed} with score {checked.score!r} against threshold "
            f"{threshold!r}: the judgment contradicts itself"
        )
    return checked


def judge_tool(judge: Judge, config: JudgeConfig) -> Callable[[str], dict[str, Any]]:
    """A guardrail tool that judges a text: returns the ``JudgeResult`` wire dict.

    Model answers and user inputs pass through the spec's guardrails, not through Python rules, so this is
    how a judge checks them: register the tool and name it in the spec, e.g. ``guardrails.output:
    {tool_name: answer-judge, assertion: output.passed}`` (or ``output.score >= 0.9``), with
    ``guard.register("answer-judge", judge_tool(judge, config))``. A failing judgment then fails the
    engagement like any output guardrail (``severity={"guardrail": "warning"}`` only records it).
    """

    def judge_text(text: str) -> dict[str, Any]:
        return _validated(judge.evaluate(text, config), "the judge", config).wire()

    judge_text.__doc__ = f"Judge a text against: {config.criteria}"
    return judge_text


def add_judge(
    guard: Guard,
    judge: Judge,
    config: JudgeConfig,
    *,
    name: str,
    capabilities: Collection[str] | None = None,
    route_to_review: str | None = None,
) -> str:
    """Judge the results of tool calls (of ``capabilities``, or all) as the output rule ``judge:<name>``.

    The rule passes when the judgment passes. Its decision carries the rule name and the judgment in its
    data (``{"rule": "judge:<name>", "judge": <JudgeResult>}``), where audit reports find them.

    ``route_to_review``: a failed judgment asks the reviewer registered under that id (its
    :class:`~agentguard.ApprovalConfig` ``timeout_ms`` and ``auto_approve_on_timeout`` apply) and passes if
    it approves; the approval is kept in the data under ``review``. The question goes through the pipeline's
    reviewer effect, so the driver asks it as it asks a review gate (sync or async, within the timeout).
    Limits: one reviewer answers (``approvers`` and ``required_approvals`` are for ``require_review`` gates),
    and a reviewer that pauses the host (a LangGraph interrupt) counts as a rejection.

    Returns the rule's name (``judge:<name>``), which is also its severity key (``rule:judge:<name>``).
    """
    rule = f"judge:{name}"

    def check(context: RuleContext) -> Flow[CheckResult]:
        extra = {"executionId": context.engagement_id, "capability": context.capability}
        run_config = config.model_copy(update={"metadata": {**(config.metadata or {}), **extra}})
        answer = yield CallUser(judge.evaluate, (context.outputs, run_config), f"the judge of {rule}")
        result = _validated(answer, f"the judge of {rule}", run_config)
        verdict = (
            f"{rule} {'passed' if result.passed else 'failed'} with score {result.score:.2f} "
            f"(threshold {config.effective_threshold:.2f}): {result.reasoning}"
        )
        metadata: dict[str, Any] = {"rule": rule, "judge": result.wire()}
        if result.passed or route_to_review is None:
            return CheckResult(result.passed, verdict, metadata)
        approval = yield from _ask_reviewer(
            guard, route_to_review, context, f"{verdict}. Accept the result anyway?"
        )
        metadata["review"] = {"reviewer": route_to_review, "approvals": [approval.as_dict()]}
        answer = approval.reason or ("approved" if approval.approved else "rejected")
        return CheckResult(
            approval.approved, f"{verdict}; review by {approval.approved_by}: {answer}", metadata
        )

    guard.rules.add(rule, check, phase=Phase.OUTPUT, capabilities=capabilities)
    return rule


def _ask_reviewer(guard: Guard, reviewer_id: str, context: RuleContext, message: str) -> Flow[Approval]:
    """Ask the guard's reviewer ``reviewer_id`` about the result in ``context``; any failure is a rejection."""
    reviewer, config = guard.reviewer_for(reviewer_id)  # as the guard's own review gates ask it
    if reviewer is None:
        return Approval(False, f"no reviewer registered as {reviewer_id!r}", reviewer_id)
    request = ReviewRequest(
        reviewer=reviewer_id,
        capability=context.capability,
        phase=context.phase,
        message=message,
        execution_id=context.engagement_id,
        inputs=context.inputs,
        outputs=context.outputs,
        engagement=context.view(),
        timeout_ms=config.timeout_ms,
    )
    try:
        return coerce_approval((yield AskReviewer(reviewer, request, config.timeout_ms)), reviewer_id)
    except TimeoutError:
        auto = config.auto_approve_on_timeout
        reason = f"no answer within {config.timeout_ms} ms" + (" (auto-approved)" if auto else "")
        return Approval(auto, reason, reviewer_id)
    except Exception as exc:  # its type only: its text may quote what it was shown (a withheld output)
        return Approval(False, f"reviewer failed: {type(exc).__name__}", reviewer_id)
