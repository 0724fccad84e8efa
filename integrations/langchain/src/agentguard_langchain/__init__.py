"""agentguard for LangChain v1 agents: an agent middleware, a callback handler and review via ``interrupt()``.

::

    from langchain.agents import create_agent
    from agentguard import Guard
    from agentguard_langchain import AgentGuardMiddleware

    guard = Guard.from_file("agent.yaml")
    agent = create_agent(model, tools=[lookup_order, send_email], middleware=[AgentGuardMiddleware(guard)])
    agent.invoke({"messages": [{"role": "user", "content": "Where is A-1?"}]},
                 config={"configurable": {"thread_id": "t1"}}, context={"user_id": "u-42"})

:class:`AgentGuardMiddleware` enforces (tool calls, guardrails, reviews, loops);
:class:`AgentGuardCallbackHandler` records what any runnable does and, with ``raise_error=True``, enforces
the guardrails on chat models; :class:`ChatModelJudge` is an OS Protocol judge backed by any chat model;
:class:`GraphStore` keeps the engagements many workers share in the graph's own LangGraph store
(``Guard(spec, store=GraphStore(store))``).
"""

from agentguard.timeline import format_timeline, print_timeline
from agentguard_langchain._callbacks import AgentGuardCallbackHandler
from agentguard_langchain._judge import ChatModelJudge
from agentguard_langchain._middleware import AgentGuardMiddleware, AgentGuardState
from agentguard_langchain._review import approval_from_resume, interrupt_reviewer, review_payload
from agentguard_langchain._sessions import thread_of, user_from_context
from agentguard_langchain._store import GraphStore

__version__ = "0.1.0"

__all__ = [
    "AgentGuardCallbackHandler",
    "AgentGuardMiddleware",
    "AgentGuardState",
    "ChatModelJudge",
    "GraphStore",
    "__version__",
    "approval_from_resume",
    "format_timeline",
    "interrupt_reviewer",
    "print_timeline",
    "review_payload",
    "thread_of",
    "user_from_context",
]
