"""The LangChain support-agent demo: ``python examples/langchain_support_agent/agent.py``
(= ``agentguard-langchain-demo``).

The agent, its tools, the scripted conversation, the spec and the guardian's rules live in
``agentguard_langchain.demo`` (integrations/langchain/src/agentguard_langchain/demo/), so that the
``agentguard-langchain-demo`` command works from an installed package too. Read that module: it is the example.
"""

from __future__ import annotations

import sys

from agentguard_langchain.demo import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
