"""User code other than the tool -- credential resolvers, Python rules, run hooks -- is called by the driver.

So an async one is awaited under the async API (and run under the sync one), and a failure in it is the flow's
to judge: a denial, recorded, and the tool does not run.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentguard import (
    CredentialRequest,
    Credentials,
    Guard,
    IdentityError,
    RuleViolation,
    User,
    current_credentials,
)
from agentguard.pipeline import Invoke
from agentguard.policy import RuleContext
from agentguard.runs import Retry

SPEC = """
kind: openagentspec:v1/agent
name: effects-agent
description: d
intent: i
owner: o@corp.com
capabilities:
  lookup: {}
"""


def _guard(**options: Any) -> tuple[Guard, list[dict[str, Any]]]:
    guard = Guard.from_yaml(SPEC, telemetry=False, **options)
    ran: list[dict[str, Any]] = []

    @guard.tool(needs_credentials=True)
    def lookup(q: str) -> dict[str, Any]:
        creds = current_credentials()
        ran.append({"q": q, "secret": creds.secret if creds else None})
        return {"q": q}

    return guard, ran


async def _resolver(request: CredentialRequest) -> Credentials:
    return Credentials(request.kind, request.subject, secret=f"token-for-{request.subject}")


async def test_an_async_credential_resolver_is_awaited() -> None:
    guard, ran = _guard(credential_resolver=_resolver)
    async with guard.engagement(user=User(id="u1")):
        await guard.acall("lookup", {"q": "x"})
    assert ran == [{"q": "x", "secret": "token-for-u1"}]


def test_an_async_credential_resolver_runs_under_the_sync_api() -> None:
    guard, ran = _guard(credential_resolver=_resolver)
    with guard.engagement(user=User(id="u1")):
        guard.call("lookup", {"q": "x"})
    assert ran == [{"q": "x", "secret": "token-for-u1"}]


async def test_an_async_resolver_that_raises_denies_and_the_tool_does_not_run() -> None:
    async def broken(request: CredentialRequest) -> Credentials:
        raise RuntimeError("vault down: secret=hunter2")

    guard, ran = _guard(credential_resolver=broken)
    async with guard.engagement(user=User(id="u1")) as eng:
        with pytest.raises(IdentityError, match="resolver failed \\(RuntimeError\\)") as caught:
            await guard.acall("lookup", {"q": "x"})
    assert ran == []
    assert "hunter2" not in str(caught.value)
    assert eng.steps[-1].outcome.value == "deny"


@pytest.mark.parametrize("answer", [True, False, "true", 1, None])
async def test_an_async_rule_is_awaited_and_only_true_passes(answer: object) -> None:
    guard, ran = _guard()

    @guard.rules.rule("async-check", phase="input")
    async def check(context: RuleContext) -> object:
        return answer

    async with guard.engagement(user=User(id="u1")):
        if answer is True:
            await guard.acall("lookup", {"q": "x"})
        else:
            with pytest.raises(RuleViolation):
                await guard.acall("lookup", {"q": "x"})
    assert len(ran) == (1 if answer is True else 0)


def test_a_rule_flow_may_only_ask_reviewers_and_call() -> None:
    guard, ran = _guard()

    def sneaky(context: RuleContext) -> Any:
        yield Invoke(print, ("ran outside the pipeline's checks",), {})
        return True

    guard.rules.add("sneaky", sneaky)
    with guard.engagement(user=User(id="u1")), pytest.raises(RuleViolation, match="raised TypeError"):
        guard.call("lookup", {"q": "x"})
    assert ran == []


def test_a_raising_retry_hook_stops_the_retries() -> None:
    guard = Guard.from_yaml(SPEC, telemetry=False)
    calls: list[int] = []

    def hook(error: BaseException, attempt: int) -> None:
        raise RuntimeError("hook failed")

    @guard.tool(retry=Retry(attempts=3, on_retry=hook))
    def lookup(q: str) -> dict[str, Any]:
        calls.append(1)
        raise ConnectionError("flaky")

    with guard.engagement(user=User(id="u1")), pytest.raises(RuntimeError, match="hook failed"):
        lookup("x")
    assert calls == [1]
