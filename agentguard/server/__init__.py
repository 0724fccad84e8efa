"""The OpenAgentSpec server: serve guarded agents over HTTP, for people and for other agents' servers.

Each agent's definition is a GET endpoint (``/agents/{name}``, YAML); a POST of JSON input to it starts an
engagement, run by your *runner* inside the agent's guard, and answers 303 with where to read the
engagement's state. It needs the ``server`` extra (``pip install 'agentguard[server]'``); run it from the
command line (``agentguard serve --spec-dir agents/ --runner myapp:run``) or in process::

    import httpx

    from agentguard import Guard
    from agentguard.server import create_app, serve_in_thread

    guard = Guard.from_yaml('''
    kind: openagentspec:v1/agent
    name: shop-agent
    description: The agent tells customers where their orders are.
    intent: You look orders up for customers.
    owner: shop@corp.com
    capabilities:
      lookup-order:
    exposes:
      lookups: history._total
    ''')

    @guard.tool
    def lookup_order(order_id: str) -> dict:
        return {"order_id": order_id, "status": "shipped"}

    def runner(guard, engagement, input):      # runs in a worker thread, inside the engagement
        return lookup_order(input["order_id"])

    with serve_in_thread(create_app([guard], runner)) as server, httpx.Client(base_url=server.url) as http:
        started = http.post("/agents/shop-agent", json={"order_id": "A-1"})     # 303 See Other
        state = http.get(started.headers["location"], params={"wait": 5}).json()
        assert (state["status"], state["output"]["status"], state["exposes"]) == (
            "completed", "shipped", {"lookups": 1})

What the runner is, what the engagement state holds, and the limits: :mod:`agentguard.server._runs` and
:mod:`agentguard.server._app`; calling agents served elsewhere: :mod:`agentguard.remote`. Starlette and
uvicorn are imported on first use of :func:`create_app` / :func:`serve_in_thread`, so the rest (and the
command line) loads without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentguard._lazy import lazy_attributes
from agentguard.serving import ServerLimits

from ._agents import SCHEMA_SUFFIX, ServedAgent, load_agents
from ._runs import Runner
from ._store import EngagementRecord, EngagementStore, MemoryEngagementStore, RunStatus

if TYPE_CHECKING:
    from agentguard.serving import RunningServer, serve_in_thread

    from ._app import MAX_WAIT, create_app

__all__ = [
    "MAX_WAIT",
    "SCHEMA_SUFFIX",
    "EngagementRecord",
    "EngagementStore",
    "MemoryEngagementStore",
    "RunStatus",
    "Runner",
    "RunningServer",
    "ServedAgent",
    "ServerLimits",
    "create_app",
    "load_agents",
    "serve_in_thread",
]

_LAZY = {
    "MAX_WAIT": "agentguard.server._app",
    "create_app": "agentguard.server._app",
    "RunningServer": "agentguard.serving",
    "serve_in_thread": "agentguard.serving",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
