"""Judges: the OS Protocol models, judges as guard rules (with review routing) and as guardrail tools, and the
guardian judge against scripted transports and the real reference guardian."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentguard import (
    Approval,
    ApprovalConfig,
    Guard,
    GuardrailViolation,
    Outcome,
    ReviewRequest,
    RuleViolation,
    User,
)
from agentguard.aos import parse_request
from agentguard.checks import (
    DEFAULT_THRESHOLD,
    GuardianJudge,
    JudgeConfig,
    JudgeResult,
    RuleResult,
    add_judge,
    judge_tool,
    rule_results,
)
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.aos.schema_check import schema_errors
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      search:
      lookup:
    """
)


class ScriptedJudge:
    """Scores by substring; remembers what it was asked."""

    def __init__(self, scores: dict[str, float], default: float = 1.0) -> None:
        self.scores = scores
        self.default = default
        self.seen: list[tuple[object, JudgeConfig]] = []

    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
        self.seen.append((content, config))
        text = str(content)
        score = next((s for key, s in self.scores.items() if key in text), self.default)
        return JudgeResult.from_score(score, f"scripted score for {text!r}", config)


class BrokenJudge:
    def evaluate(self, content: object, config: JudgeConfig) -> JudgeResult:
        raise RuntimeError("model unavailable")


def _guard(**options: Any) -> Guard:
    guard = Guard.from_yaml(SPEC, **options)

    @guard.tool
    def search(q: str) -> str:
        return f"results for {q}"

    @guard.tool
    def lookup(key: str) -> dict[str, str]:
        return {"value": key}

    return guard


# -- models -----------------------------------------------------------------------------------------------


def test_passed_follows_score_and_threshold() -> None:
    assert DEFAULT_THRESHOLD == 0.5
    assert JudgeResult.from_score(0.5, "", JudgeConfig(criteria="c")).passed
    assert not JudgeResult.from_score(0.49, "", JudgeConfig(criteria="c")).passed
    assert not JudgeResult.from_score(0.79, "", JudgeConfig(criteria="c", threshold=0.8)).passed
    assert JudgeResult.from_score(0.8, "", JudgeConfig(criteria="c", threshold=0.8)).passed


def test_scores_and_thresholds_outside_0_1_are_refused() -> None:
    with pytest.raises(ValidationError):
        JudgeResult(score=1.5, passed=True, reasoning="")
    with pytest.raises(ValidationError):
        JudgeConfig(criteria="c", threshold=-0.1)
    with pytest.raises(ValidationError):
        JudgeConfig.model_validate({"threshold": 0.5})  # criteria is required


def test_judge_models_speak_camel_case() -> None:
    breakdown = RuleResult(rule_name="tone", passed=False, severity="warning", message="curt")
    result = JudgeResult(score=0.4, passed=False, reasoning="curt", rule_results=[breakdown])
    wire = result.wire()
    assert wire == {
        "score": 0.4,
        "passed": False,
        "reasoning": "curt",
        "ruleResults": [{"ruleName": "tone", "passed": False, "severity": "warning", "message": "curt"}],
    }
    assert JudgeResult.model_validate(wire) == result


# -- as a guard rule ---------------------------------------------------------------------------------------


def test_a_passing_judgment_lets_the_result_through_and_is_recorded() -> None:
    judge = ScriptedJudge({"secret": 0.1})
    guard = _guard()
    name = add_judge(guard, judge, JudgeConfig(criteria="No secrets.", threshold=0.8), name="secrets")
    assert name == "judge:secrets"
    with guard.engagement(user=User(id="u1")) as eng:
        assert guard.call("search", {"q": "cats"}) == "results for cats"
    content, config = judge.seen[0]
    assert content == "results for cats"
    assert config.criteria == "No secrets."
    assert config.metadata == {"executionId": eng.id, "capability": "search"}
    result = rule_results(eng)[-1]
    assert (result.rule_name, result.passed) == ("rule:judge:secrets", True)
    assert result.metadata is not None
    data = result.metadata["data"]
    assert isinstance(data, dict)
    assert data["judge"] == {
        "score": 1.0,
        "passed": True,
        "reasoning": "scripted score for 'results for cats'",
    }


def test_a_failing_judgment_withholds_the_result() -> None:
    guard = _guard()
    add_judge(guard, ScriptedJudge({"secret": 0.1}), JudgeConfig(criteria="No secrets."), name="secrets")
    with guard.engagement() as eng, pytest.raises(RuleViolation) as caught:
        guard.call("lookup", {"key": "secret"})
    assert "judge:secrets failed with score 0.10 (threshold 0.50)" in caught.value.reason
    assert eng.state.calls[-1].outputs is None  # the call happened; its output never left the pipeline
    assert eng.steps[-1].outcome is Outcome.DENY


def test_judges_apply_only_to_their_capabilities() -> None:
    judge = ScriptedJudge({}, default=0.0)
    guard = _guard()
    add_judge(guard, judge, JudgeConfig(criteria="c"), name="strict", capabilities={"lookup"})
    with guard.engagement():
        assert guard.call("search", {"q": "x"}) == "results for x"
        with pytest.raises(RuleViolation):
            guard.call("lookup", {"key": "x"})
    assert [content for content, _ in judge.seen] == [{"value": "x"}]


def test_a_judge_that_raises_fails_closed() -> None:
    guard = _guard()
    add_judge(guard, BrokenJudge(), JudgeConfig(criteria="c"), name="broken")
    with guard.engagement(), pytest.raises(RuleViolation, match=r"raised RuntimeError$"):
        guard.call("search", {"q": "x"})


def test_a_judge_in_shadow_mode_only_records() -> None:
    guard = _guard(severity={"rule:judge:strict": "warning"})
    add_judge(guard, ScriptedJudge({}, default=0.0), JudgeConfig(criteria="c"), name="strict")
    with guard.engagement() as eng:
        assert guard.call("search", {"q": "x"}) == "results for x"
    result = rule_results(eng)[-1]
    assert (result.passed, result.severity) == (False, "warning")
    assert "would deny (warning): judge:strict failed" in result.message


# -- routed to review ----------------------------------------------------------------------------------------


def test_a_failed_judgment_routed_to_review_passes_when_approved() -> None:
    requests: list[ReviewRequest] = []

    def supervisor(request: ReviewRequest) -> Approval:
        requests.append(request)
        return Approval(True, "acceptable here", "alice")

    guard = _guard(reviewers={"supervisor": supervisor})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="tone", route_to_review="supervisor"
    )
    with guard.engagement(user=User(id="u1")) as eng:
        assert guard.call("search", {"q": "x"}) == "results for x"
    [request] = requests
    assert request.reviewer == "supervisor"
    assert request.execution_id == eng.id
    assert request.outputs == "results for x"
    assert request.message.startswith("judge:tone failed with score 0.20")
    result = rule_results(eng)[-1]
    assert result.passed
    assert "review by alice: acceptable here" in result.message
    assert result.metadata is not None
    data = result.metadata["data"]
    assert isinstance(data, dict)
    review = data["review"]
    assert isinstance(review, dict)
    assert review["reviewer"] == "supervisor"
    assert review["approvals"][0]["approvedBy"] == "alice"  # type: ignore[index, call-overload]


def test_a_failed_judgment_routed_to_review_fails_when_rejected_or_unanswered() -> None:
    guard = _guard(reviewers={"supervisor": lambda request: False})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="a", route_to_review="supervisor"
    )
    with guard.engagement(), pytest.raises(RuleViolation, match="review by supervisor: rejected"):
        guard.call("search", {"q": "x"})

    guard = _guard()
    add_judge(guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="b", route_to_review="nobody")
    with guard.engagement(), pytest.raises(RuleViolation, match="no reviewer registered as 'nobody'"):
        guard.call("search", {"q": "x"})

    def crashes(request: ReviewRequest) -> bool:
        raise ValueError("inbox full")

    guard = _guard(reviewers={"supervisor": crashes})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="c", route_to_review="supervisor"
    )
    with guard.engagement(), pytest.raises(RuleViolation, match=r"reviewer failed: ValueError$"):
        guard.call("search", {"q": "x"})


def test_review_timeout_follows_the_reviewers_approval_config() -> None:
    release = threading.Event()

    def slow(request: ReviewRequest) -> bool:
        release.wait(5)
        return False

    try:
        for auto, outcome in ((True, "passes"), (False, "fails")):
            config = ApprovalConfig(timeout_ms=50, auto_approve_on_timeout=auto)
            guard = _guard(reviewers={"supervisor": slow}, approvals={"supervisor": config})
            add_judge(
                guard,
                ScriptedJudge({}, 0.2),
                JudgeConfig(criteria="c"),
                name="t",
                route_to_review="supervisor",
            )
            with guard.engagement() as eng:
                if outcome == "passes":
                    assert guard.call("search", {"q": "x"}) == "results for x"
                else:
                    with pytest.raises(RuleViolation):
                        guard.call("search", {"q": "x"})
            assert "no answer within 50 ms" in rule_results(eng)[-1].message
    finally:
        release.set()


async def test_an_async_reviewer_answers_inside_an_async_engagement() -> None:
    # The judge asks through the pipeline's reviewer effect, so the async driver awaits the reviewer
    # (until issue 15 the rule ran a nested sync driver and this was refused with a ConfigurationError).
    asked: list[ReviewRequest] = []

    async def supervisor(request: ReviewRequest) -> bool:
        asked.append(request)
        return True

    guard = _guard(reviewers={"supervisor": supervisor})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="t", route_to_review="supervisor"
    )
    async with guard.engagement():
        assert await guard.acall("search", {"q": "x"}) == "results for x"
    assert [r.reviewer for r in asked] == ["supervisor"]


async def test_an_async_reviewer_that_rejects_inside_an_async_engagement_denies() -> None:
    async def supervisor(request: ReviewRequest) -> bool:
        return False

    guard = _guard(reviewers={"supervisor": supervisor})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="t", route_to_review="supervisor"
    )
    async with guard.engagement():
        with pytest.raises(RuleViolation, match="review by supervisor: rejected"):
            await guard.acall("search", {"q": "x"})


def test_an_async_reviewer_answers_from_synchronous_code() -> None:
    async def supervisor(request: ReviewRequest) -> bool:
        return True

    guard = _guard(reviewers={"supervisor": supervisor})
    add_judge(
        guard, ScriptedJudge({}, 0.2), JudgeConfig(criteria="c"), name="t", route_to_review="supervisor"
    )
    with guard.engagement():
        assert guard.call("search", {"q": "x"}) == "results for x"


# -- as a guardrail tool ----------------------------------------------------------------------------------


def test_judge_tool_checks_model_answers_as_the_output_guardrail() -> None:
    spec = spec_text(
        """
        capabilities:
          search:
        guardrails:
          output:
            tool_name: answer-judge
            assertion: output.passed && output.score >= 0.9
        """
    )
    guard = Guard.from_yaml(spec)
    judge = ScriptedJudge({"rude": 0.95, "wrong": 0.1})
    guard.register("answer-judge", judge_tool(judge, JudgeConfig(criteria="Accurate.", threshold=0.5)))
    with guard.engagement() as eng:
        assert eng.check_output("Paris is the capital of France.") == "Paris is the capital of France."
        assert eng.check_output("rude but right") == "rude but right"
        with pytest.raises(GuardrailViolation):
            eng.check_output("wrong")
    assert [r.passed for r in rule_results(eng)] == [True, True, False]
    assert rule_results(eng)[0].rule_name == "guardrail:answer-judge:output"


# -- the guardian judge --------------------------------------------------------------------------------------

RULES = """
default_decision: allow
rules:
  - name: no-passwords
    methods: [steps/message]
    when: params.message.content.exists(p, p.text.contains("password"))
    decision: deny
    message: Mentions a password
    reason_codes: [credential]
  - name: strict-criteria
    methods: [steps/message]
    when: params.message.metadata.judge.criteria == "nothing passes"
    decision: deny
    message: Strict criteria
"""


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server:
        yield server


def test_guardian_judge_request_is_a_valid_agent_message() -> None:
    judge = GuardianJudge(GuardianClient("http://127.0.0.1:9/"))
    config = JudgeConfig(criteria="c", threshold=0.7, metadata={"executionId": "eng-1"})
    request = judge.request({"answer": 42}, config)
    parse_request(request)
    assert schema_errors(request) == []
    params = request["params"]
    assert request["method"] == "steps/message"
    assert params["context"]["session"] == {"id": "eng-1"}
    assert params["message"]["role"] == "agent"
    assert params["message"]["content"] == [{"kind": "text", "text": '{"answer": 42}'}]
    assert params["message"]["metadata"] == {"judge": config.wire()}


def test_guardian_judge_against_the_reference_guardian(guardian: RunningServer) -> None:
    with GuardianClient(guardian.url, timeout=2.0) as client:
        judge = GuardianJudge(client)
        allowed = judge.evaluate("all good", JudgeConfig(criteria="c"))
        denied = judge.evaluate("the password is hunter2", JudgeConfig(criteria="c"))
        strict = judge.evaluate("all good", JudgeConfig(criteria="nothing passes"))
    assert (allowed.score, allowed.passed) == (1.0, True)
    assert (denied.score, denied.passed, denied.reasoning) == (0.0, False, "Mentions a password")
    assert denied.metadata is not None
    assert denied.metadata["guardian"]["reasonCodes"] == ["credential"]  # type: ignore[index, call-overload]
    assert (strict.passed, strict.reasoning) == (False, "Strict criteria")


def test_guardian_judge_as_a_guard_rule(guardian: RunningServer) -> None:
    with GuardianClient(guardian.url, timeout=2.0) as client:
        guard = _guard()
        add_judge(
            guard, GuardianJudge(client, agent=guard.agent_descriptor()), JudgeConfig(criteria="c"), name="g"
        )
        with guard.engagement() as eng:
            assert guard.call("search", {"q": "x"}) == "results for x"
            with pytest.raises(RuleViolation, match="Mentions a password"):
                guard.call("search", {"q": "my password"})
    assert [r.passed for r in rule_results(eng) if r.rule_name.startswith("rule:")] == [True, False]


def _scripted(result: dict[str, Any]) -> GuardianClient:
    def reply(http_request: httpx.Request) -> httpx.Response:
        step = json.loads(http_request.content)
        answer = {**result, "modifiedRequest": step} if result["decision"] == "modify" else result
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": step["id"], "result": answer})

    return GuardianClient("http://guardian.test/", transport=httpx.MockTransport(reply))


def test_guardian_judge_reads_a_score_from_data() -> None:
    config = JudgeConfig(criteria="c", threshold=0.8)
    with _scripted({"decision": "allow", "data": {"score": 0.7}, "reasoning": "almost"}) as client:
        result = GuardianJudge(client).evaluate("x", config)
    assert (result.score, result.passed, result.reasoning) == (0.7, False, "almost")
    with (
        _scripted({"decision": "allow", "data": {"score": "high"}}) as client,
        pytest.raises(ValueError, match=r"data\.score"),
    ):
        GuardianJudge(client).evaluate("x", config)
    with _scripted({"decision": "deny", "data": {"score": 0.3}}) as client:
        assert GuardianJudge(client).evaluate("x", config).score == 0.3  # a refusal's score, below the bar


@pytest.mark.parametrize("decision", ["deny", "modify"])
@pytest.mark.parametrize("score", [0.8, 0.9, 1, 1.0])
def test_a_refusal_whose_score_would_pass_is_a_failed_judgment(decision: str, score: float) -> None:
    """Before, ``deny`` with ``data.score`` 0.9 passed a 0.8 bar: a score never turns a refusal into a pass."""
    config = JudgeConfig(criteria="c", threshold=0.8)
    with (
        _scripted({"decision": decision, "message": "no", "data": {"score": score}}) as client,
        pytest.raises(ValueError, match="contradicts itself"),
    ):
        GuardianJudge(client).evaluate("x", config)


def test_guardian_modify_scores_zero() -> None:
    with _scripted({"decision": "modify", "message": "rewritten"}) as client:
        result = GuardianJudge(client).evaluate("x", JudgeConfig(criteria="c"))
    assert (result.score, result.passed, result.reasoning) == (0.0, False, "rewritten")
    assert result.metadata == {"guardian": {"decision": "modify", "latencyMs": pytest.approx(0, abs=1e4)}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize(("on_failure", "passed"), [("deny", False), ("allow", True)])
def test_an_unreachable_guardian_follows_on_failure(on_failure: Any, passed: bool) -> None:
    url = f"http://127.0.0.1:{_free_port()}/"
    with GuardianClient(url, timeout=1.0, on_failure=on_failure) as client:
        result = GuardianJudge(client).evaluate("x", JudgeConfig(criteria="c"))
    assert result.passed is passed
    assert "no guardian decision (transport" in result.reasoning
    assert result.metadata is not None
    assert result.metadata["guardian"]["decision"] == "no-decision"  # type: ignore[index, call-overload]


class ForgedJudge:
    """A judge whose answer is no validated JudgeResult: a dict, another object, or one built without
    validation whose ``passed`` is the string "false" (a true value to Python)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def evaluate(self, content: object, config: JudgeConfig) -> Any:
        return self.answer


FORGED = [
    JudgeResult.model_construct(score=0.1, passed="false", reasoning="forged"),
    JudgeResult.model_construct(score=2.0, passed=1, reasoning="forged"),
    {"score": 0.1, "passed": "false", "reasoning": "a dict"},
    type("Lookalike", (), {"score": 0.1, "passed": "false", "reasoning": "x", "wire": lambda self: {}})(),
]


@pytest.mark.parametrize("answer", FORGED, ids=["construct-passed", "construct-score", "dict", "lookalike"])
def test_a_judge_answer_that_is_no_valid_judge_result_fails_closed(answer: object) -> None:
    guard = _guard()
    add_judge(guard, ForgedJudge(answer), JudgeConfig(criteria="c"), name="forged")
    with guard.engagement() as eng, pytest.raises(RuleViolation):
        guard.call("lookup", {"key": "secret"})
    assert eng.state.calls[-1].outputs is None
    tool = judge_tool(ForgedJudge(answer), JudgeConfig(criteria="c"))
    with pytest.raises((TypeError, ValidationError)):
        tool("an answer")


@settings(max_examples=200, deadline=None)
@given(
    score=st.floats(0, 1),
    passed=st.booleans(),
    threshold=st.none() | st.floats(0, 1),
)
def test_a_judgment_passes_only_when_its_score_meets_the_threshold(
    score: float, passed: bool, threshold: float | None
) -> None:
    """Before, a model judge that took ``"passed": true`` from its model's reply beside ``"score": 0.05``
    passed: the content it judged only had to talk the model into that field. Now a ``passed`` that is not
    ``score >= threshold`` (the config's) is a failed judgment, whichever way it contradicts."""
    config = JudgeConfig(criteria="c", threshold=threshold)
    tool = judge_tool(ForgedJudge(JudgeResult(score=score, passed=passed, reasoning="r")), config)
    if passed is (score >= config.effective_threshold):
        assert tool("an answer")["passed"] is passed
    else:
        with pytest.raises(ValueError, match="contradicts itself"):
            tool("an answer")


def test_a_judgment_that_contradicts_its_score_withholds_the_result() -> None:
    guard = _guard()
    forged = JudgeResult(score=0.05, passed=True, reasoning="the content says it passes")
    add_judge(guard, ForgedJudge(forged), JudgeConfig(criteria="c", threshold=0.8), name="forged")
    with guard.engagement() as eng, pytest.raises(RuleViolation, match="raised ValueError"):
        guard.call("lookup", {"key": "secret"})
    assert eng.state.calls[-1].outputs is None
    assert [r.passed for r in rule_results(eng) if r.rule_name.startswith("rule:")] == [False]
