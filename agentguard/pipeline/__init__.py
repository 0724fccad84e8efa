"""The policy pipeline: every step an agent takes, decided by sans-I/O flows and performed by one driver.

Layer 5 (``docs/architecture.md``). A *flow* (:mod:`._tool`, :mod:`._messages`) is a generator that makes
every decision itself -- with the pure rules of :mod:`agentguard.policy` and the record of
:mod:`agentguard.record` -- and yields an *effect* (:mod:`._effects`) whenever something outside has to
happen: run the tool, ask a reviewer, ask the guardian, wait. :mod:`._driver` performs the effects, in this
thread (:func:`run_sync`) or under asyncio (:func:`run_async`), so the sync and the async path cannot drift
apart (the pattern of httpx's ``auth_flow``). :class:`Runtime` is what a flow needs from its Guard.

Nothing here is public API: :class:`agentguard.Guard` and :class:`agentguard.Engagement` are.
"""

from agentguard.pipeline._driver import run_async, run_in_daemon_thread, run_sync
from agentguard.pipeline._effects import (
    AskGuardian,
    AskReviewer,
    AwaitLate,
    CallUser,
    Claim,
    Commit,
    Effect,
    Flow,
    Invoke,
    InvokeTimedOut,
    Observe,
    Sleep,
)
from agentguard.pipeline._messages import (
    answers_checked,
    guardrail_flow,
    message_text,
    record_flow,
    report_flow,
)
from agentguard.pipeline._runtime import Runtime
from agentguard.pipeline._shared import flush_flow
from agentguard.pipeline._steps import AgentInfo, StepBuilder, new_step, tool_definition
from agentguard.pipeline._tool import Reasoning, ToolCall, arun_tool_call, run_tool_call, tool_call_flow

__all__ = [
    "AgentInfo",
    "AskGuardian",
    "AskReviewer",
    "AwaitLate",
    "CallUser",
    "Claim",
    "Commit",
    "Effect",
    "Flow",
    "Invoke",
    "InvokeTimedOut",
    "Observe",
    "Reasoning",
    "Runtime",
    "Sleep",
    "StepBuilder",
    "ToolCall",
    "answers_checked",
    "arun_tool_call",
    "flush_flow",
    "guardrail_flow",
    "message_text",
    "new_step",
    "record_flow",
    "report_flow",
    "run_async",
    "run_in_daemon_thread",
    "run_sync",
    "run_tool_call",
    "tool_call_flow",
    "tool_definition",
]
