"""Issue 12, items 4, 5, 8 and 9 (and the reserved-name sibling): the pipeline fails closed.

An approval is only ``approved is True`` from distinct approvers; what restrictions check is what the caller
gets; a failing credential resolver is a recorded denial; credentials reach async tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import (
    Approval,
    ApprovalConfig,
    CapabilityDenied,
    Credentials,
    Guard,
    IdentityError,
    Outcome,
    RestrictionViolation,
    ReviewDenied,
    User,
    current_credentials,
)
from tests.conftest import spec_text

REVIEWED = spec_text(
    """
    capabilities:
      refund:
        input_restriction:
          require_review: supervisor
    """
)


def _reviewed(answer: Any, **options: Any) -> tuple[Guard, list[int]]:
    guard = Guard.from_yaml(REVIEWED, reviewers={"supervisor": lambda request: answer}, **options)
    ran: list[int] = []
    guard.tool(name="refund")(lambda amount: ran.append(amount))
    return guard, ran


# -- item 4: an approval is an approval -------------------------------------------------------------------


@pytest.mark.parametrize("approved", ["false", "true", 0.0001, 1, [0], None, "yes"])
def test_only_approved_is_true_approves(approved: Any) -> None:
    guard, ran = _reviewed(Approval(approved=approved))
    with guard.engagement() as eng:
        with pytest.raises(ReviewDenied):
            guard.call("refund", {"amount": 5})
        approvals = eng.steps[-1].decisions[-1].data["approvals"]  # type: ignore[index]
    assert ran == []
    assert approvals[0]["approved"] is False


@settings(max_examples=100, deadline=None)
@given(approved=st.from_type(object).filter(lambda value: value is not True))
def test_nothing_but_true_approves(approved: object) -> None:
    guard, ran = _reviewed(Approval(approved=approved))  # type: ignore[arg-type]
    with guard.engagement(), pytest.raises(ReviewDenied):
        guard.call("refund", {"amount": 5})
    assert ran == []


def test_required_approvals_count_distinct_approvers() -> None:
    config = ApprovalConfig(approvers=("deputy", "deputy", "other"), required_approvals=2)
    alice = lambda request: Approval(True, approved_by="alice")  # noqa: E731 - every reviewer answers as alice
    asked: list[str] = []

    def counting(request: Any) -> Approval:
        asked.append(request.reviewer)
        return alice(request)

    guard = Guard.from_yaml(
        REVIEWED,
        reviewers={"supervisor": counting, "deputy": counting, "other": counting},
        approvals={"supervisor": config},
    )
    guard.tool(name="refund")(lambda amount: None)
    with guard.engagement(), pytest.raises(ReviewDenied):
        guard.call("refund", {"amount": 5})
    assert asked == ["supervisor", "deputy", "other"]  # each asked once


def test_two_distinct_approvers_approve() -> None:
    config = ApprovalConfig(approvers=("deputy",), required_approvals=2)
    guard = Guard.from_yaml(
        REVIEWED,
        reviewers={"supervisor": lambda r: True, "deputy": lambda r: True},
        approvals={"supervisor": config},
    )
    ran: list[int] = []
    guard.tool(name="refund")(lambda amount: ran.append(amount))
    with guard.engagement():
        guard.call("refund", {"amount": 5})
    assert ran == [5]


# -- item 5: what is checked is what is delivered ---------------------------------------------------------

SECRETIVE = spec_text(
    """
    capabilities:
      x:
        output_restriction:
          assertion: '!string(recent["x"].outputs).contains("SECRET")'
    """
)


def _secretive(result: Any) -> Guard:
    guard = Guard.from_yaml(SECRETIVE)
    guard.tool(name="x")(lambda: result)
    return guard


def _seeing(result: Any) -> tuple[Guard, list[Any]]:
    """A guard whose output rule records the output the checks see."""
    seen: list[Any] = []
    guard = Guard.from_yaml(spec_text("capabilities:\n  z:\n"))
    guard.rules.add("see", lambda context: seen.append(context.outputs) or True, phase="output")
    guard.tool(name="z")(lambda: result)
    return guard, seen


def test_a_generator_result_is_withheld() -> None:
    def secrets() -> Iterator[str]:
        yield "SECRET"

    generator = secrets()
    guard = _secretive(generator)
    with guard.engagement(), pytest.raises(RestrictionViolation, match="generator"):
        guard.call("x", {})
    with pytest.raises(StopIteration):  # closed: nobody gets its items
        next(generator)


def test_a_generator_nested_in_a_result_is_withheld() -> None:
    guard = _secretive({"rows": iter(["SECRET"])})
    with guard.engagement(), pytest.raises(RestrictionViolation, match="consumed only once"):
        guard.call("x", {})


class Hiding:
    """An object whose ``str()`` hides what it holds."""

    secret = "SECRET"

    def __str__(self) -> str:
        return "nothing to see"

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def test_an_object_is_delivered_as_the_value_that_was_checked() -> None:
    guard, seen = _seeing({"item": Hiding()})
    with guard.engagement():
        delivered = guard.call("z", {})
    assert seen == [delivered]
    assert delivered == {"item": "nothing to see"}
    assert type(delivered["item"]) is str


def test_a_json_like_result_is_delivered_as_a_copy_of_what_was_checked() -> None:
    """Decision 22: the caller gets the value checked, as a copy of the guard's own: neither the tool's object
    (which the tool could change after the check) nor the record's (which the caller's changes would reach)."""
    result = {"rows": [1, 2, {"a": None}]}
    guard, _ = _seeing(result)
    with guard.engagement() as eng:
        delivered = guard.call("z", {})
        assert delivered == {"rows": [1, 2, {"a": None}]}
        assert delivered is not result
        result["rows"][2]["a"] = "changed by the tool"
        delivered["rows"].append("changed by the caller")
        assert delivered["rows"][2] == {"a": None}
        assert eng.view()["history"]["z"][0]["outputs"] == {"rows": [1, 2, {"a": None}]}


def test_a_generator_input_is_refused_before_the_tool_runs() -> None:
    guard = Guard.from_yaml(spec_text("capabilities:\n  y:\n"))
    ran: list[Any] = []
    guard.tool(name="y")(lambda items: ran.append(list(items)))
    with guard.engagement() as eng, pytest.raises(RestrictionViolation, match="consumed only once"):
        guard.call("y", {"items": iter(["rm -rf /"])})
    assert ran == []
    assert eng.view()["history"]["_total"] == 0


@settings(max_examples=60, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3).map(tuple) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_the_caller_gets_exactly_what_the_checks_saw(value: Any) -> None:
    guard, seen = _seeing(value)
    with guard.engagement():
        delivered = guard.call("z", {})
    assert seen == [delivered]


# -- item 8: a failing credential resolver is a recorded denial -------------------------------------------

IDENTIFIED = spec_text("capabilities:\n  mail:\n")


@pytest.mark.parametrize("answer", [RuntimeError("vault down"), "a-token-string"])
def test_a_failing_credential_resolver_denies(answer: Any) -> None:
    def resolver(request: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    guard = Guard.from_yaml(IDENTIFIED, credential_resolver=resolver)
    ran: list[str] = []
    guard.tool(name="mail")(lambda: ran.append("ran"))
    with guard.engagement(user=User(id="u1")) as eng:
        with pytest.raises(IdentityError, match="credential resolver"):
            guard.call("mail", {})
        assert eng.steps[-1].outcome is Outcome.DENY
        assert eng.view()["history"]["_total"] == 0
    assert ran == []


# -- item 9: credentials reach async tools ----------------------------------------------------------------


def test_credentials_reach_async_tools() -> None:
    guard = Guard.from_yaml(
        IDENTIFIED, credential_resolver=lambda request: Credentials("user", request.subject, secret="s3")
    )
    seen: list[Credentials | None] = []

    @guard.tool(name="mail")
    async def mail() -> None:
        await asyncio.sleep(0)
        seen.append(current_credentials())

    async def main() -> None:
        async with guard.engagement(user=User(id="u1")):
            await mail()
            await guard.acall("mail", {}, mail.__wrapped__)  # type: ignore[attr-defined]

    asyncio.run(main())
    assert [c.secret if c else None for c in seen] == ["s3", "s3"]


def test_credentials_reach_async_tools_with_a_timeout() -> None:
    from agentguard.runs import Timeout

    guard = Guard.from_yaml(
        IDENTIFIED, credential_resolver=lambda request: Credentials("user", request.subject, secret="s3")
    )
    seen: list[Credentials | None] = []

    @guard.tool(name="mail", timeout=Timeout(ms=2000))
    async def mail() -> None:
        seen.append(current_credentials())

    async def main() -> None:
        async with guard.engagement(user=User(id="u1")):
            await mail()

    asyncio.run(main())
    assert [c.secret if c else None for c in seen] == ["s3"]


@pytest.mark.parametrize("resolver", [True, False], ids=["resolver", "identity"])
def test_credentials_reach_async_tools_run_by_the_sync_api(resolver: bool) -> None:
    """Under the sync API an async tool is run to completion in place; its body runs with the credentials
    set, whether the call went through the flow (a resolver) or directly."""
    guard = Guard.from_yaml(
        IDENTIFIED,
        credential_resolver=(lambda request: Credentials("user", request.subject, secret="s3"))
        if resolver
        else None,
    )
    seen: list[Credentials | None] = []

    async def mail() -> None:
        await asyncio.sleep(0)
        seen.append(current_credentials())

    with guard.engagement(user=User(id="u1")):
        guard.call("mail", {}, mail)
    assert [(c.subject, c.secret) if c else None for c in seen] == [("u1", "s3" if resolver else None)]
    assert current_credentials() is None


# -- sibling: names the Engagement reserves ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["_total", "_name", "_list", "_anything"])
def test_a_reserved_name_is_refused_even_when_unknown_tools_are_allowed(name: str) -> None:
    guard = Guard.from_yaml(spec_text("capabilities:\n  a:\n"), unknown_capability="allow")
    with guard.engagement() as eng:
        with pytest.raises(CapabilityDenied, match="reserved"):
            guard.call(name, {}, lambda: 1)
        view = eng.view()
    assert view["history"] == {"_list": [], "_total": 0}
    assert view["recent"] == {}


def test_which_denials_an_agent_can_recover_from() -> None:
    """One place decides it; every adapter asks ``exc.recoverable`` (an error result, or the run ends)."""
    import agentguard.errors as errors

    recoverable = {
        cls.__name__
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.PolicyViolation) and cls.recoverable
    }
    assert recoverable == {
        "CapabilityDenied",
        "RestrictionViolation",
        "ReviewDenied",
        "IdentityError",
        "RuleViolation",
        "GuardianDenied",
    }
