"""The Guard facade: decorators, engagements, and each rule of the OpenAgentSpec enforced in process."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import io
import threading
import typing
from typing import Any

import pytest

from agentguard import (
    Approval,
    ApprovalConfig,
    CapabilityDenied,
    ConfigurationError,
    Credentials,
    EngagementStatus,
    Guard,
    GuardrailViolation,
    IdentityError,
    Outcome,
    Phase,
    PolicyViolation,
    RestrictionViolation,
    ReviewDenied,
    ReviewRequest,
    Rule,
    ShortCircuitViolation,
    SpecError,
    TerminalReviewer,
    User,
    current_credentials,
)
from tests.conftest import spec_text

BASIC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      web-search:
        output_restriction:
          assertion: '!recent["web-search"].outputs.exists(r, r.contains("secret"))'
      lookup:
      quiet:
        collect_results: false
    """
)


def make_guard(text: str = BASIC, **options: Any) -> Guard:
    return Guard.from_yaml(text, **options)


# -- decorator --------------------------------------------------------------------------------------------


def test_decorated_function_keeps_signature_docstring_and_hints() -> None:
    guard = make_guard()

    def send_email(to: str, body: str = "") -> dict[str, str]:
        """Send an email."""
        return {"to": to}

    guarded = guard.tool(send_email)
    assert guarded is not send_email
    assert guarded.__name__ == "send_email"
    assert guarded.__doc__ == "Send an email."
    assert inspect.signature(guarded) == inspect.signature(send_email)
    assert typing.get_type_hints(guarded) == {"to": str, "body": str, "return": dict[str, str]}
    assert not inspect.iscoroutinefunction(guarded)


def test_async_tool_stays_a_coroutine_function() -> None:
    guard = make_guard()

    @guard.tool(name="web-search")
    async def search(q: str) -> list[str]:
        return [q]

    assert inspect.iscoroutinefunction(search)

    async def main() -> list[str]:
        async with guard.engagement():
            return await search("x")

    assert asyncio.run(main()) == ["x"]


def test_default_name_maps_underscores_and_invalid_names_are_refused() -> None:
    guard = make_guard()

    @guard.tool
    def send_email(to: str) -> str:
        return to

    assert "send-email" in repr(guard)
    with pytest.raises(ConfigurationError, match="not a valid OpenAgentSpec name"):

        @guard.tool
        def SendThing() -> None:
            return None


def test_outside_an_engagement_a_guarded_tool_refuses_to_run() -> None:
    guard = make_guard()
    ran = []

    @guard.tool
    def lookup(x: int) -> int:
        ran.append(x)
        return x

    with pytest.raises(ConfigurationError, match="outside an engagement"):
        lookup(1)
    assert ran == []


def test_auto_engagement_opens_one_per_call() -> None:
    guard = make_guard(auto_engagement=True)

    @guard.tool
    def lookup(x: int) -> int:
        return x

    assert lookup(2) == 2


def test_inputs_are_recorded_by_parameter_name_with_defaults() -> None:
    guard = make_guard()

    @guard.tool
    def lookup(order: str, verbose: bool = False, *, region: str = "eu") -> str:
        return order

    with guard.engagement() as eng:
        lookup("A-1", True)
        assert eng.view()["recent"]["lookup"]["inputs"] == {"order": "A-1", "verbose": True, "region": "eu"}
        with pytest.raises(TypeError):
            lookup("A-1", order="B")
        with pytest.raises(TypeError):
            lookup()


def test_positional_only_and_var_args_are_bound() -> None:
    guard = make_guard(unknown_capability="allow")

    @guard.tool(name="odd")
    def odd(a: int, /, *rest: int, **extra: int) -> int:
        return a + sum(rest) + sum(extra.values())

    with guard.engagement() as eng:
        assert odd(1, 2, 3, z=4) == 10
        # The keywords of **extra are recorded flat, as the keywords they are (see agentguard._binding).
        assert eng.view()["recent"]["odd"]["inputs"] == {"a": 1, "rest": [2, 3], "z": 4}


# -- capabilities ---------------------------------------------------------------------------------------


def test_capability_allow_list_denies_unknown_tools() -> None:
    guard = make_guard()
    ran = []

    @guard.tool(name="delete-db")
    def delete_db() -> None:
        ran.append(1)

    with guard.engagement() as eng:
        with pytest.raises(CapabilityDenied) as info:
            delete_db()
        assert info.value.rule is Rule.CAPABILITY
        assert info.value.capability == "delete-db"
        assert info.value.engagement_id == eng.id
        assert eng.view()["history"]["_total"] == 0
        assert eng.steps[-1].outcome is Outcome.DENY
    assert ran == []


@pytest.mark.parametrize(("mode", "outcome"), [("allow", Outcome.ALLOW), ("observe", Outcome.WARN)])
def test_unknown_capability_can_be_allowed_or_observed(mode: str, outcome: Outcome) -> None:
    guard = make_guard(unknown_capability=mode)

    @guard.tool(name="delete-db")
    def delete_db() -> str:
        return "gone"

    with guard.engagement() as eng:
        assert delete_db() == "gone"
        assert eng.steps[-1].decisions[0].outcome is outcome


def test_sub_agent_is_a_capability_and_tool_wins_for_bare_names() -> None:
    text = spec_text(
        """
        capabilities:
          billing:
          oagent://research:
        """
    )
    guard = make_guard(text)

    @guard.agent(name="research")
    def research(question: str) -> str:
        return "answer"

    @guard.agent(name="billing")
    def billing_agent(q: str) -> str:
        return "billed"

    with guard.engagement() as eng:
        assert research("q") == "answer"
        assert billing_agent("q") == "billed"  # bare name, no tool named billing: the agent
        assert eng.view()["history"]["_list"] == ["research", "billing"]

    # A tool named "billing" now exists: the bare reference means the tool; the agent is no capability.
    guard2 = make_guard(text)

    @guard2.tool(name="billing")
    def billing_tool() -> str:
        return "tool"

    @guard2.agent(name="billing")
    def billing_agent2() -> str:
        return "agent"

    with guard2.engagement():
        assert billing_tool() == "tool"
        with pytest.raises(CapabilityDenied):
            billing_agent2()


TWO_RULES = spec_text(
    """
    capabilities:
      billing:
        input_restriction:
          assertion: recent["billing"].inputs.amount < 10
      oagent://billing:
    """
)


@pytest.mark.parametrize("mode", ["deny", "observe", "allow"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_agent_the_spec_names_twice_is_called_under_neither_rule(mode: str, asynchronous: bool) -> None:
    """``billing`` and ``oagent://billing`` both refer to the agent when no tool is named ``billing``: the
    unrestricted entry used to win, and ``billing(amount=1000)`` ran. Whatever ``unknown_capability`` says."""
    guard = make_guard(TWO_RULES, unknown_capability=mode)
    ran: list[int] = []

    if asynchronous:

        @guard.agent(name="billing")
        async def billing(amount: int) -> str:
            ran.append(amount)
            return "billed"

        def call(amount: int) -> Any:
            return asyncio.run(billing(amount=amount))
    else:

        @guard.agent(name="billing")
        def billing(amount: int) -> str:
            ran.append(amount)
            return "billed"

        call = billing

    with guard.engagement() as eng:
        for amount in (1000, 1):
            with pytest.raises(CapabilityDenied, match="two capabilities in the spec") as denied:
                call(amount)
            assert denied.value.phase is Phase.INPUT
        assert ran == []
        assert [d.outcome for s in eng.steps for d in s.decisions if d.rule is Rule.CAPABILITY] == [
            Outcome.DENY,
            Outcome.DENY,
        ]

    # With a tool named "billing", the bare entry is the tool's: the agent has one rule, oagent://billing.
    guard = make_guard(TWO_RULES, unknown_capability=mode)
    guard.tool(name="billing")(lambda amount: "tool")

    @guard.agent(name="billing")
    def agent(amount: int) -> str:
        return "agent"

    with guard.engagement():
        assert agent(amount=1000) == "agent"


# -- restrictions ---------------------------------------------------------------------------------------


def test_input_restriction_denies_and_rolls_back() -> None:
    guard = make_guard()
    sent = []

    @guard.tool
    def send_email(to: str, body: str) -> dict[str, str]:
        sent.append(to)
        return {"status": "sent"}

    with guard.engagement() as eng:
        assert send_email(to="bob@corp.com", body="hi") == {"status": "sent"}
        with pytest.raises(RestrictionViolation) as info:
            send_email(to="eve@evil.test", body="hi")
        err = info.value
        assert err.phase is Phase.INPUT
        assert err.expression == 'recent["send-email"].inputs.to.endsWith("@corp.com")'
        assert "assertion is false" in err.reason
        view = eng.view()
        assert view["history"]["_total"] == 1
        assert view["recent"]["send-email"]["inputs"]["to"] == "bob@corp.com"
    assert sent == ["bob@corp.com"]


def test_output_restriction_withholds_the_output() -> None:
    guard = make_guard()

    @guard.tool(name="web-search")
    def search(q: str) -> list[str]:
        return ["public", "top secret"] if q == "bad" else ["public"]

    with guard.engagement() as eng:
        assert search("good") == ["public"]
        with pytest.raises(RestrictionViolation) as info:
            search("bad")
        assert info.value.phase is Phase.OUTPUT
        view = eng.view()
        assert view["history"]["_total"] == 2  # it happened
        assert view["recent"]["web-search"]["outputs"] is None  # but the output is withheld
        assert "top secret" not in repr(eng.view())


def test_assertion_error_at_run_time_is_a_failed_assertion() -> None:
    text = spec_text(
        """
        capabilities:
          lookup:
            input_restriction:
              assertion: recent["lookup"].inputs.missing == 1
          other:
            input_restriction:
              assertion: '"not a bool"'
        """
    )
    guard = make_guard(text)

    @guard.tool
    def lookup(x: int) -> int:
        return x

    @guard.tool
    def other() -> int:
        return 1

    with guard.engagement():
        with pytest.raises(RestrictionViolation, match="could not be evaluated"):
            lookup(1)
        with pytest.raises(RestrictionViolation, match="not a boolean"):
            other()


def test_json_numbers_compare_as_users_expect() -> None:
    text = spec_text(
        """
        capabilities:
          score:
            output_restriction:
              assertion: recent["score"].outputs.score == 1
        """
    )
    guard = make_guard(text)

    @guard.tool
    def score() -> dict[str, float]:
        return {"score": 1.0}

    with guard.engagement():
        assert score() == {"score": 1.0}


def test_collect_results_false_records_null_but_returns_output() -> None:
    guard = make_guard()

    @guard.tool
    def quiet() -> str:
        return "payload"

    with guard.engagement() as eng:
        assert quiet() == "payload"
        assert eng.view()["recent"]["quiet"]["outputs"] is None


def test_history_and_user_assertions() -> None:
    text = spec_text(
        """
        capabilities:
          lookup:
            input_restriction:
              assertion: history._total < 3 && user.email.endsWith("@corp.com")
        """
    )
    guard = make_guard(text)

    @guard.tool
    def lookup() -> int:
        return 1

    with guard.engagement(user=User(id="u", email="ann@corp.com")):
        lookup()
        lookup()
        with pytest.raises(RestrictionViolation):
            lookup()  # the pending call counts: _total is 3
    with guard.engagement(user=User(id="x", email="x@evil.test")), pytest.raises(RestrictionViolation):
        lookup()


def test_tool_exception_propagates_and_is_recorded() -> None:
    guard = make_guard()

    @guard.tool
    def lookup() -> None:
        raise ValueError("boom")

    with guard.engagement() as eng:
        with pytest.raises(ValueError, match="boom"):
            lookup()
        assert eng.state.calls[-1].status == "failed"
        assert eng.steps[-1].payload["error"] == "ValueError: boom"


# -- short circuit ----------------------------------------------------------------------------------------


def _loop_guard(k: int) -> Guard:
    return make_guard(
        spec_text(
            f"""
            capabilities:
              a:
              b:
            lifespan:
              short_circuit: {k}
            """
        )
    )


def test_short_circuit_spec_example_one() -> None:
    guard = _loop_guard(3)
    calls = []

    @guard.tool
    def a() -> None:
        calls.append("a")

    with guard.engagement() as eng:
        a()
        a()
        with pytest.raises(ShortCircuitViolation):
            a()
        assert calls == ["a", "a"]
        assert eng.status is EngagementStatus.STOPPED


def test_short_circuit_spec_example_two_and_engagement_stays_stopped() -> None:
    guard = _loop_guard(3)
    calls = []

    @guard.tool
    def a() -> None:
        calls.append("a")

    @guard.tool
    def b() -> None:
        calls.append("b")

    with guard.engagement() as eng:
        for fn in (a, b, a, b, a):
            fn()
        with pytest.raises(ShortCircuitViolation):
            b()
        with pytest.raises(ShortCircuitViolation, match="stopped"):
            a()  # a stopped engagement refuses every later step
        assert eng.view()["history"]["_list"] == ["a", "b", "a", "b", "a"]
    assert calls == ["a", "b", "a", "b", "a"]


def test_refused_attempts_count_toward_a_loop() -> None:
    """Decision 5: the detector sees every attempt; ``history`` holds only the invoked calls."""
    text = spec_text(
        """
        capabilities:
          a:
            input_restriction:
              assertion: recent["a"].inputs.ok
        lifespan:
          short_circuit: 3
        """
    )
    guard = make_guard(text)

    @guard.tool
    def a(ok: bool) -> None:
        return None

    with guard.engagement() as eng:
        a(ok=True)
        with pytest.raises(RestrictionViolation):
            a(ok=False)
        with pytest.raises(ShortCircuitViolation):  # "a a a": the refused attempt is the second
            a(ok=True)
        assert eng.view()["history"]["_list"] == ["a"]


def test_an_agent_retrying_a_refused_call_forever_is_stopped() -> None:
    text = spec_text(
        """
        capabilities:
          a:
            input_restriction:
              assertion: "false"
        lifespan:
          short_circuit: 3
        """
    )
    guard = make_guard(text)
    guard.tool(name="a")(lambda: None)
    with guard.engagement() as eng:
        for _ in range(2):
            with pytest.raises(RestrictionViolation):
                guard.call("a", {}, lambda: None)
        with pytest.raises(ShortCircuitViolation):
            guard.call("a", {}, lambda: None)
        assert eng.status is EngagementStatus.STOPPED


def test_attempts_at_a_tool_that_is_not_a_capability_count_toward_a_loop() -> None:
    guard = make_guard(spec_text("capabilities:\n  a:\nlifespan:\n  short_circuit: 2\n"))
    with guard.engagement():
        with pytest.raises(CapabilityDenied):
            guard.call("shell", {}, lambda: None)
        with pytest.raises(ShortCircuitViolation):
            guard.call("shell", {}, lambda: None)


# -- guardrails ---------------------------------------------------------------------------------------------

GUARDRAILS = spec_text(
    """
    capabilities:
      lookup:
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok == true
      output:
        tool_name: toxicity-check
        assertion: output.score < 0.5
    """
)


def _guardrail_guard() -> tuple[Guard, list[str]]:
    guard = make_guard(GUARDRAILS)
    seen: list[str] = []

    @guard.tool(name="pii-check")
    def pii(text: str) -> dict[str, bool]:
        seen.append(f"pii:{text}")
        return {"ok": "ssn" not in text}

    @guard.tool(name="toxicity-check")
    async def toxicity(text: str) -> dict[str, float]:
        seen.append(f"tox:{text}")
        return {"score": 0.9 if "idiot" in text else 0.1}

    @guard.tool
    def lookup() -> str:
        return "ok"

    return guard, seen


def test_guardrails_run_on_every_input_and_output() -> None:
    guard, seen = _guardrail_guard()
    with guard.engagement() as eng:
        assert eng.check_input("hello") == "hello"
        assert eng.check_output("hi there") == "hi there"
        assert eng.check_input("again") == "again"
        assert eng.view()["history"]["_total"] == 0  # guardrail tools are not agent calls
    assert seen == ["pii:hello", "tox:hi there", "pii:again"]


def test_failed_input_guardrail_fails_the_engagement() -> None:
    guard, _ = _guardrail_guard()
    with guard.engagement() as eng:
        with pytest.raises(GuardrailViolation) as info:
            eng.check_input("my ssn is 123")
        assert info.value.phase is Phase.INPUT
        assert eng.status is EngagementStatus.FAILED
        with pytest.raises(GuardrailViolation):
            guard.call("lookup", {})  # no more tools run in a failed engagement


def test_failed_output_guardrail_async() -> None:
    guard, _ = _guardrail_guard()

    async def main() -> None:
        async with guard.engagement() as eng:
            assert await eng.acheck_input("fine") == "fine"
            with pytest.raises(GuardrailViolation):
                await eng.acheck_output("you idiot")
            assert eng.status is EngagementStatus.FAILED

    asyncio.run(main())


def test_guardrail_tool_missing_or_raising_fails_closed() -> None:
    guard = make_guard(GUARDRAILS)
    with pytest.raises(ConfigurationError, match="guardrail tool 'pii-check'"):
        guard.engagement()

    guard2 = make_guard(GUARDRAILS)
    guard2.register("toxicity-check", lambda text: {"score": 0.0})

    @guard2.tool(name="pii-check")
    def pii(text: str) -> dict[str, bool]:
        raise RuntimeError("service down")

    with (
        guard2.engagement() as eng,
        pytest.raises(GuardrailViolation, match=r"'pii-check' failed: RuntimeError$"),
    ):
        eng.check_input("x")


# -- review -------------------------------------------------------------------------------------------------

REVIEW = spec_text(
    """
    capabilities:
      refund:
        input_restriction:
          require_review: supervisor
          assertion: recent["refund"].inputs.amount <= 100
      report:
        output_restriction:
          require_review: auditor
    """
)


def _review_guard(**options: Any) -> tuple[Guard, list[float]]:
    """The REVIEW guard; a reviewer the test does not give refuses (no guard starts without its reviewers)."""
    reviewers = {"supervisor": lambda r: False, "auditor": lambda r: False, **options.pop("reviewers", {})}
    guard = make_guard(REVIEW, reviewers=reviewers, **options)
    refunds: list[float] = []

    @guard.tool
    def refund(amount: float) -> str:
        refunds.append(amount)
        return "refunded"

    @guard.tool
    def report() -> str:
        return "numbers"

    return guard, refunds


def test_review_approves_and_rejects() -> None:
    requests: list[ReviewRequest] = []

    def supervisor(request: ReviewRequest) -> Approval:
        requests.append(request)
        return Approval(approved=request.inputs["amount"] < 50, reason="limit 50")

    guard, refunds = _review_guard(reviewers={"supervisor": supervisor})
    with guard.engagement() as eng:
        assert refund_call(guard, 20) == "refunded"
        with pytest.raises(ReviewDenied) as info:
            refund_call(guard, 70)
        assert "limit 50" in info.value.reason
        assert eng.view()["history"]["_total"] == 1
    assert refunds == [20]
    assert requests[0].engagement["recent"]["refund"]["inputs"] == {
        "amount": 20
    }  # the reviewer sees the call
    assert requests[0].as_dict()["executionId"] == eng.id
    approved = [d for d in eng.decisions if d.rule is Rule.REVIEW]
    assert [d.outcome for d in approved] == [Outcome.REVIEW_APPROVED, Outcome.REVIEW_REJECTED]
    assert approved[0].data is not None
    assert approved[0].data["approvals"][0]["approvedBy"] == "supervisor"


def refund_call(guard: Guard, amount: float) -> Any:
    return guard.call("refund", {"amount": amount})


def test_restriction_is_checked_before_review() -> None:
    asked = []
    guard, _ = _review_guard(reviewers={"supervisor": lambda r: asked.append(r) or True})
    with guard.engagement(), pytest.raises(RestrictionViolation):
        refund_call(guard, 500)
    assert asked == []  # a step the local policy denies is never sent for approval


def test_no_reviewer_denies() -> None:
    """Without its reviewer no engagement starts, so no call can continue unconfirmed (decided up front)."""
    guard = make_guard(REVIEW)
    guard.register("refund", lambda amount: "refunded")
    with pytest.raises(ConfigurationError, match="cannot start an engagement") as info:
        guard.engagement()
    assert "reviewer 'auditor'" in str(info.value)
    assert "reviewer 'supervisor'" in str(info.value)


def test_reviewer_error_denies() -> None:
    def broken(request: ReviewRequest) -> bool:
        raise RuntimeError("pager down")

    guard, _ = _review_guard(reviewers={"supervisor": broken})
    with guard.engagement(), pytest.raises(ReviewDenied, match=r"reviewer failed: RuntimeError\)$"):
        refund_call(guard, 1)


@pytest.mark.parametrize(("auto", "approved"), [(False, False), (True, True)])
def test_review_timeout_denies_unless_auto_approved(auto: bool, approved: bool) -> None:
    release = threading.Event()

    def slow(request: ReviewRequest) -> bool:
        release.wait(5)
        return True

    guard, refunds = _review_guard(
        reviewers={"supervisor": slow}, approval=ApprovalConfig(timeout_ms=50, auto_approve_on_timeout=auto)
    )
    with guard.engagement():
        if approved:
            assert refund_call(guard, 1) == "refunded"
        else:
            with pytest.raises(ReviewDenied, match="no answer within 50 ms"):
                refund_call(guard, 1)
    release.set()
    assert refunds == ([1] if approved else [])


def test_async_review_timeout() -> None:
    async def slow(request: ReviewRequest) -> bool:
        await asyncio.sleep(5)
        return True

    guard, _ = _review_guard(reviewers={"supervisor": slow}, approval=ApprovalConfig(timeout_ms=30))

    async def main() -> None:
        async with guard.engagement():
            with pytest.raises(ReviewDenied, match="no answer"):
                await guard.acall("refund", {"amount": 1})

    asyncio.run(main())


def test_multi_approval_needs_required_count() -> None:
    votes = {"supervisor": True, "alice": False, "bob": True}
    asked: list[str] = []

    def voter(name: str) -> Any:
        def vote(request: ReviewRequest) -> bool:
            asked.append(name)
            return votes[name]

        return vote

    reviewers = {name: voter(name) for name in votes}
    config = ApprovalConfig(approvers=["alice", "bob"], required_approvals=2)
    guard, refunds = _review_guard(reviewers=reviewers, approvals={"supervisor": config})
    with guard.engagement():
        assert refund_call(guard, 5) == "refunded"
    assert refunds == [5]
    assert asked == ["supervisor", "alice", "bob"]

    votes["bob"] = False
    asked.clear()
    guard2, _ = _review_guard(reviewers=reviewers, approvals={"supervisor": config})
    with guard2.engagement(), pytest.raises(ReviewDenied):
        refund_call(guard2, 5)
    assert asked == ["supervisor", "alice", "bob"]


def test_output_review_sees_the_output_and_rejection_withholds_it() -> None:
    seen: list[Any] = []

    def auditor(request: ReviewRequest) -> bool:
        seen.append((request.phase, request.outputs))
        return False

    guard, _ = _review_guard(reviewers={"auditor": auditor})
    with guard.engagement() as eng:
        with pytest.raises(ReviewDenied) as info:
            guard.call("report", {})
        assert info.value.phase is Phase.OUTPUT
        assert eng.view()["recent"]["report"]["outputs"] is None
    assert seen == [(Phase.OUTPUT, "numbers")]


def test_terminal_reviewer() -> None:
    out = io.StringIO()
    guard, _ = _review_guard(reviewers={"supervisor": TerminalReviewer(stdin=io.StringIO("y\n"), stdout=out)})
    with guard.engagement():
        assert refund_call(guard, 3) == "refunded"
    assert "approve call refund?" in out.getvalue()
    guard2, _ = _review_guard(
        reviewers={"supervisor": TerminalReviewer(stdin=io.StringIO("n\n"), stdout=out)}
    )
    with guard2.engagement(), pytest.raises(ReviewDenied, match="rejected at terminal"):
        refund_call(guard2, 3)


def test_reviewer_decorator_and_bool_answers() -> None:
    guard, refunds = _review_guard()

    @guard.reviewer("supervisor")
    def yes(request: ReviewRequest) -> bool:
        return True

    with guard.engagement():
        refund_call(guard, 1)
    assert refunds == [1]


# -- identity ---------------------------------------------------------------------------------------------

IDENTITY = spec_text(
    """
    capabilities:
      mailbox:
      crm:
        user_identity: false
        static_identity: crm-service
      wiki:
        user_identity: false
    """
)


def test_user_identity_and_static_identity() -> None:
    guard = make_guard(IDENTITY)
    seen: list[Credentials | None] = []

    @guard.tool(needs_credentials=True)
    def mailbox() -> None:
        seen.append(current_credentials())

    @guard.tool(needs_credentials=True)
    def crm() -> None:
        seen.append(current_credentials())

    @guard.tool(needs_credentials=True)
    def wiki() -> None:
        seen.append(current_credentials())

    with guard.engagement(user=User(id="ann")):
        mailbox()
        crm()
        with pytest.raises(IdentityError):
            wiki()  # user_identity false and no static identity: not called
    with guard.engagement():
        with pytest.raises(IdentityError):
            mailbox()  # no user, no static identity
        crm()
    assert [(c.kind, c.subject) for c in seen if c] == [
        ("user", "ann"),
        ("static", "crm-service"),
        ("static", "crm-service"),
    ]
    assert current_credentials() is None


def test_each_call_runs_under_its_own_capabilitys_identity_call_after_call() -> None:
    """The identity is remembered per capability after a first call: later calls, interleaved, in another
    engagement, or of another user, each still get their own capability's and user's credentials."""
    guard = make_guard(IDENTITY)
    seen: list[tuple[str, str, str | None]] = []

    def tool(name: str) -> Any:
        def body() -> None:
            credentials = current_credentials()
            assert credentials is not None
            seen.append((name, credentials.kind, credentials.subject))

        return guard.tool(name=name, needs_credentials=True)(body)

    mailbox, crm, wiki = tool("mailbox"), tool("crm"), tool("wiki")
    for user in ("ann", "bob"):
        with guard.engagement(user=User(id=user)):
            for _ in range(3):
                mailbox()
                crm()
                with pytest.raises(IdentityError):
                    wiki()
    with guard.engagement():
        crm()
        with pytest.raises(IdentityError):
            mailbox()
    expected = [
        ("mailbox", "user", u) if n == "mailbox" else ("crm", "static", "crm-service")
        for u in ("ann", "bob")
        for _ in range(3)
        for n in ("mailbox", "crm")
    ]
    assert seen == [*expected, ("crm", "static", "crm-service")]


def test_credential_resolver() -> None:
    tokens = {("user", "ann"): "tok-ann"}

    def resolver(request: Any) -> Credentials | None:
        secret = tokens.get((request.kind, request.subject))
        return Credentials(request.kind, request.subject, secret=secret) if secret else None

    guard = make_guard(IDENTITY, credential_resolver=resolver)
    got = []

    @guard.tool(needs_credentials=True)
    def mailbox() -> None:
        creds = current_credentials()
        got.append(creds.secret if creds else None)

    with guard.engagement(user=User(id="ann")):
        mailbox()
    with guard.engagement(user=User(id="bob")), pytest.raises(IdentityError):
        mailbox()
    assert got == ["tok-ann"]
    assert "tok-ann" not in repr(Credentials("user", "ann", secret="tok-ann"))


# -- exposes, spec errors, misc --------------------------------------------------------------------------


def test_exposes() -> None:
    text = spec_text(
        """
        capabilities:
          lookup:
        exposes:
          calls: history._total
          last: recent._name
          missing: recent["nothing"].outputs
        """
    )
    guard = make_guard(text)

    @guard.tool
    def lookup() -> int:
        return 1

    with guard.engagement() as eng:
        lookup()
        assert eng.exposed() == {
            "calls": 1,
            "last": "lookup",
            "missing": {
                "error": 'Key not found in map: "nothing"',
                "expression": 'recent["nothing"].outputs',
            },
        }


def test_bad_spec_raises_spec_error() -> None:
    with pytest.raises(SpecError):
        Guard.from_yaml("kind: wrong\n")


def test_call_api_checks_a_guarded_function_once() -> None:
    guard = make_guard()
    runs = []

    @guard.tool
    def lookup(x: int) -> int:
        runs.append(x)
        return x

    with guard.engagement() as eng:
        assert guard.call("lookup", {"x": 3}, lookup) == 3
        assert len(eng.steps) == 1
    assert runs == [3]


def test_policy_violation_message_names_rule_and_capability() -> None:
    guard = make_guard()

    @guard.tool
    def send_email(to: str) -> None:
        return None

    with guard.engagement(), pytest.raises(PolicyViolation) as info:
        send_email(to="x@evil.test")
    text = str(info.value)
    assert text.startswith("[restriction input] send-email:")
    assert "endsWith" in text


def test_engagement_closed_after_exit_refuses_steps() -> None:
    guard = make_guard()
    with guard.engagement() as eng:
        pass
    assert eng.status is EngagementStatus.CLOSED
    with eng, pytest.raises(PolicyViolation, match="closed"):
        guard.call("lookup", {}, lambda: 1)


def test_review_gate_added_outside_the_spec() -> None:
    guard = make_guard()
    asked: list[str] = []
    guard.add_reviewer("ops", lambda request: asked.append(request.capability) or False)
    guard.add_review_gate("lookup", "ops")

    @guard.tool
    def lookup() -> str:
        return "x"

    with guard.engagement(), pytest.raises(ReviewDenied):
        lookup()
    assert asked == ["lookup"]


def test_remote_agent_capability_is_called_by_its_name() -> None:
    text = spec_text("capabilities:\n  oagent://agents.corp.com/team/billing-agent:\n")
    guard = make_guard(text)
    assert {n: r.host for n, r in guard.policy.remote_agents.items()} == {"billing-agent": "agents.corp.com"}

    @guard.agent(name="billing-agent")
    def billing(question: str) -> str:
        return "remote answer"

    with guard.engagement() as eng:
        assert billing("q") == "remote answer"
        assert eng.view()["history"]["_list"] == ["billing-agent"]


def test_a_host_runner_keeps_the_registered_settings_and_gets_flat_kwargs() -> None:
    guard = make_guard(IDENTITY)

    @guard.tool(needs_credentials=True)
    def wiki(page: str) -> str:
        return page

    received: list[dict[str, Any]] = []

    def runner(**kwargs: Any) -> str:  # how a framework adapter runs the tool
        received.append(kwargs)
        return "ran"

    # needs_credentials survived the host runner
    with guard.engagement(user=User(id="ann")), pytest.raises(IdentityError):
        guard.call("wiki", {"page": "home"}, runner)
    guard2 = make_guard(IDENTITY)
    guard2.register("mailbox", lambda folder: folder)
    with guard2.engagement(user=User(id="ann")):
        assert guard2.call("mailbox", {"folder": "inbox"}, runner) == "ran"
    assert received == [{"folder": "inbox"}]


def test_record_call_records_without_checking() -> None:
    guard = make_guard()
    with guard.engagement() as eng:
        eng.record_call("send-email", {"to": "eve@evil.test"}, {"status": "sent"}, call_id="c1")
        eng.record_call("lookup", {"x": 1}, error=ValueError("boom"))
        view = eng.view()
    assert view["history"]["_list"] == ["send-email", "lookup"]
    assert view["recent"]["send-email"]["outputs"] == {"status": "sent"}
    assert view["recent"]["lookup"]["outputs"] is None
    assert eng.steps[0].decisions[0].reason.startswith("observed after the fact")
    assert [r["method"] for r in eng.steps[0].aos] == ["steps/toolCallRequest", "steps/toolCallResult"]


def test_turns_can_be_started_and_ended_by_a_host() -> None:
    guard = make_guard()
    eng = guard.engagement()
    first = eng.start_turn()
    assert eng.start_turn() == first  # already open
    eng.end_turn()
    assert eng.start_turn() != first


def test_reviewer_introspection() -> None:
    guard = make_guard(REVIEW, reviewers={"supervisor": lambda r: True})
    guard.add_review_gate("lookup", "ops")
    assert guard.reviewer_ids == {"supervisor"}
    assert guard.required_reviewers() == {"supervisor", "auditor", "ops"}


class _Pause(Exception):
    """What a host raises to pause a run for a reviewer (LangGraph's GraphInterrupt, say)."""


def _pausing_guard(text: str, answers: list[Approval | None]) -> Guard:
    """A guard whose reviewer ``auditor`` gives the next of ``answers``, pausing the run (``_Pause``, a
    pass-through exception) for a ``None``."""

    def auditor(request: ReviewRequest) -> Approval:
        answer = answers.pop(0)
        if answer is None:
            raise _Pause
        return answer

    guard = make_guard(text, reviewers={"auditor": auditor})
    guard.add_passthrough_exceptions(_Pause)
    return guard


def test_a_call_of_another_tool_under_a_paused_call_id_is_refused() -> None:
    """A model may give two calls one id. The host re-runs a call paused in output review under its id to
    resume it; a call of another tool under that id was taken for it, and handed the paused call's held
    output (and its review) without running."""
    text = spec_text(
        """
        capabilities:
          lookup:
          export:
            output_restriction:
              require_review: auditor
        """
    )
    answers: list[Approval | None] = [None]
    guard = _pausing_guard(text, answers)
    ran: list[str] = []
    guard.tool(name="lookup")(lambda q: ran.append("lookup") or {"q": q})
    guard.tool(name="export")(lambda table: ran.append("export") or {"rows": ["secret-row"]})

    with guard.engagement() as eng:
        with pytest.raises(_Pause):
            guard.call("export", {"table": "orders"}, call_id="x")
        with pytest.raises(ReviewDenied, match="paused in output review for tool 'export'") as denied:
            guard.call("lookup", {"q": "a"}, call_id="x")
        assert denied.value.phase is Phase.INPUT
        assert ran == ["export"]
        answers.append(Approval(approved=False, reason="not for the model"))
        with pytest.raises(ReviewDenied):  # the paused call itself still resumes, to its own review
            guard.call("export", {"table": "orders"}, call_id="x")
        assert ran == ["export"]
        assert "secret-row" not in str(eng.view())


def test_a_call_of_the_same_tool_with_other_inputs_under_a_paused_call_id_is_refused() -> None:
    """A provider that numbers the calls of each response gives a later call the id of one whose run was left
    paused in output review: a call of the same tool with other inputs under it was taken for the paused
    call, and handed its held output without its own inputs ever checked."""
    text = spec_text(
        """
        capabilities:
          export:
            input_restriction:
              assertion: recent["export"].inputs.table == "orders"
            output_restriction:
              require_review: auditor
        """
    )
    answers: list[Approval | None] = [None, Approval(approved=True)]
    guard = _pausing_guard(text, answers)
    ran: list[str] = []
    guard.tool(name="export")(lambda table: ran.append(table) or {"rows": [f"{table}-row"]})

    with guard.engagement():
        with pytest.raises(_Pause):
            guard.call("export", {"table": "orders"}, call_id="x")
        with pytest.raises(ReviewDenied, match="with other inputs under the same id") as denied:
            guard.call("export", {"table": "payroll"}, call_id="x")
        assert "payroll" not in str(denied.value)
        assert ran == ["orders"]
        # The paused call itself resumes, with the inputs the host made it with.
        assert guard.call("export", {"table": "orders"}, call_id="x") == {"rows": ["orders-row"]}
        assert ran == ["orders"]


@pytest.mark.parametrize("graceful", [False, True])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_call_whose_engagement_was_cancelled_during_its_review_never_runs(
    asynchronous: bool, graceful: bool
) -> None:
    """The engagement is cancelled while the reviewer is being asked, and the reviewer then approves: the
    tool ran all the same (and only its result was withheld). A cancelled engagement starts no tool; a
    graceful cancel lets a tool already running finish, and this one had not started."""
    from agentguard import EngagementClosed
    from agentguard.runs import Cancel

    text = spec_text(
        """
        capabilities:
          refund:
            input_restriction:
              require_review: boss
        """
    )
    asked, answer = threading.Event(), threading.Event()

    def boss(request: ReviewRequest) -> Approval:
        asked.set()
        answer.wait(10)
        return Approval(True, "fine", "boss")

    guard = make_guard(text, reviewers={"boss": boss})
    ran: list[int] = []

    @guard.tool(name="refund")
    def refund(amount: int) -> dict[str, bool]:
        ran.append(amount)
        return {"ok": True}

    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(asyncio.run(guard.acall("refund", {"amount": 5})) if asynchronous else refund(5))
        except BaseException as exc:
            outcome.append(exc)

    with guard.engagement() as eng:
        caller = threading.Thread(target=contextvars.copy_context().run, args=(call,))
        caller.start()
        assert asked.wait(10)
        eng.cancel(Cancel("the user hung up", graceful=graceful, graceful_timeout_ms=200))
        answer.set()
        caller.join(10)
    assert ran == []
    assert len(outcome) == 1
    assert isinstance(outcome[0], EngagementClosed)
    assert eng.view()["history"]["_total"] == 0  # taken back: it never ran


def test_a_failed_calls_error_is_withheld_under_output_review() -> None:
    """Output review holds a result for a reviewer; an error cannot be held (nothing is delivered to resume
    with), and its text went to the caller, unreviewed."""
    text = spec_text(
        """
        capabilities:
          export:
            output_restriction:
              require_review: auditor
        """
    )
    asked: list[ReviewRequest] = []
    guard = make_guard(text, reviewers={"auditor": lambda request: asked.append(request) or True})

    def export(table: str) -> Any:
        raise ValueError(f"cannot export {table}: rows secret-1, secret-2")

    with guard.engagement() as eng:
        with pytest.raises(ReviewDenied, match="output review") as denied:
            guard.call("export", {"table": "orders"}, export)
        assert "secret" not in str(denied.value)
        assert denied.value.__cause__ is None
        assert asked == []
        assert "secret" not in str(eng.view())
