"""agentguard for the OpenAI Agents SDK: guarded function tools and handoffs, the spec's guardrails as the SDK's
guardrails, ``require_review`` through the SDK's approvals, one engagement per SDK session.

::

    from agents import Runner, SQLiteSession
    from agentguard import Guard, User
    from agentguard_openai_agents import AgentGuard

    guarded = AgentGuard(Guard.from_file("agent.yaml"))
    agent = guarded.wrap(agent)
    async with guarded.session(SQLiteSession("c-1"), user=User(id="u-42")) as session:
        result = await Runner.run(agent, "Where is A-1?", session=session, hooks=guarded.hooks)
        for item in result.interruptions:          # require_review: the SDK's human-in-the-loop
            state = result.to_state()
            state.approve(item)                     # or state.reject(item)
            result = await Runner.run(agent, state, session=session, hooks=guarded.hooks)

A denied call reaches the model as the tool's output; a loop stop ends the run with :class:`RunStopped`, a
failed guardrail with the SDK's tripwire exception (an output tripwire holds no trace of the stopped output: its
``agent_output`` is :data:`WITHHELD`). :func:`violation_of` finds agentguard's typed error in either. A tool the
adapter cannot guard (a hosted tool, an agent tool of an unwrapped agent, a tool added after ``wrap``) is refused
with :class:`UnguardedTool`, never run unguarded.
"""

from agentguard.timeline import format_timeline, print_timeline
from agentguard_openai_agents._adapter import AgentGuard, GuardHooks, UncheckedStreamWarning
from agentguard_openai_agents._sessions import GuardedSession
from agentguard_openai_agents._tools import RunStopped, UnguardedTool, spec_name, violation_of
from agentguard_openai_agents._withheld import WITHHELD

__version__ = "0.1.0"

__all__ = [
    "WITHHELD",
    "AgentGuard",
    "GuardHooks",
    "GuardedSession",
    "RunStopped",
    "UncheckedStreamWarning",
    "UnguardedTool",
    "__version__",
    "format_timeline",
    "print_timeline",
    "spec_name",
    "violation_of",
]
