"""The reference AOS guardian: a JSON-RPC server that allows, denies or modifies agent steps by CEL rules.

It needs the ``server`` extra (``pip install 'agentguard[server]'``: Starlette and uvicorn); nothing in
agentguard imports it unless asked, and the rules (:func:`parse_rules`, :func:`load_rules`) load without
the extra. Run it from the command line (``agentguard guardian --rules rules.yaml``) or in-process::

    import httpx

    from agentguard.guardian.server import create_app, parse_rules, serve_in_thread

    rules = parse_rules('''
    rules:
      - name: no-shell
        methods: [steps/toolCallRequest]
        when: params.toolCallRequest.toolId == "shell"
        decision: deny
        message: No shell access
    ''')
    with serve_in_thread(create_app(rules)) as server:       # a free port on 127.0.0.1
        reply = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping",
                                             "params": {"timestamp": "2025-07-01T12:00:00Z"}})
        assert reply.json()["result"]["status"] == "connected"

The rules file format and how rule failures are treated: :mod:`agentguard.guardian.server._rules`. The
JSON-RPC and HTTP behaviour: :mod:`._dispatch` and :mod:`._app`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentguard._lazy import lazy_attributes
from agentguard.serving import ServerLimits

from ._rules import DECLARATIONS, MODIFY_FAILED, RULE_FAILED, GuardianRules, Rule, load_rules, parse_rules

if TYPE_CHECKING:
    from agentguard.serving import RunningServer, serve_in_thread

    from ._app import ENDPOINTS, GuardianApp, ServerErrorCode, create_app

__all__ = [
    "DECLARATIONS",
    "ENDPOINTS",
    "MODIFY_FAILED",
    "RULE_FAILED",
    "GuardianApp",
    "GuardianRules",
    "Rule",
    "RunningServer",
    "ServerErrorCode",
    "ServerLimits",
    "create_app",
    "load_rules",
    "parse_rules",
    "serve_in_thread",
]

# Starlette and uvicorn are imported on first use of these names, so that the rules (and the command line
# that registers ``agentguard guardian``) work without the extra.
_LAZY = {
    "ENDPOINTS": "._app",
    "GuardianApp": "._app",
    "ServerErrorCode": "._app",
    "create_app": "._app",
    "RunningServer": "agentguard.serving",
    "serve_in_thread": "agentguard.serving",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
