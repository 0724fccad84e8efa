"""Worker processes of the multi-process store tests: each builds its own Guard on the same Redis and
serves commands from the test over a pipe, so that "another worker" is really another process."""

from __future__ import annotations

import traceback
from multiprocessing.connection import Connection
from typing import Any

from agentguard import Approval, Guard, PolicyViolation, ReviewRequest, User
from agentguard.stores import RedisStore

SPEC = """
kind: openagentspec:v1/agent
name: shop
description: A shop agent whose calls are shared by several workers.
intent: Look orders up and refund them.
owner: shop@corp.com
capabilities:
  lookup:
    input_restriction:
      assertion: history._total < {limit}
  ping:
  refund:
    output_restriction:
      require_review: manager
lifespan:
  short_circuit: {loop}
"""

USER = User(id="u1", email="ann@corp.com")


class Pause(Exception):
    """What a host raises to pause a run for a reviewer (LangGraph's GraphInterrupt, say)."""


def make_guard(url: str, *, limit: int = 1000, pause: bool = False, loop: int = 3) -> Guard:
    """The guard every worker builds alike; ``pause``: the reviewer pauses instead of answering."""
    ran: list[str] = []

    def manager(request: ReviewRequest) -> Approval:
        if pause:
            raise Pause
        return Approval(approved=True, approved_by="manager")

    guard = Guard.from_yaml(
        SPEC.replace("{limit}", str(limit)).replace("{loop}", str(loop)),
        store=RedisStore(url),
        telemetry=False,
        reviewers={"manager": manager},
    )
    guard.add_passthrough_exceptions(Pause)
    guard.tool(name="lookup")(lambda q: {"q": q})
    guard.tool(name="ping")(lambda q: {"pong": q})
    guard.tool(name="refund")(lambda amount: ran.append("refund") or {"refunded": amount})
    guard.ran = ran  # type: ignore[attr-defined]
    return guard


def serve(conn: Connection, url: str, engagement_id: str, limit: int, pause: bool) -> None:
    """Answer ``("call", name, inputs, call_id)`` / ``("view",)`` / ``("ran",)`` commands until ``None``."""
    guard = make_guard(url, limit=limit, pause=pause)
    eng = guard.engagement(USER, engagement_id=engagement_id)
    conn.send("ready")
    while True:
        command = conn.recv()
        if command is None:
            return
        reply: Any
        try:
            if command[0] == "call":
                _, name, inputs, call_id = command
                with eng.activate():
                    reply = ("ok", guard.call(name, inputs, call_id=call_id))
            elif command[0] == "view":
                eng.refresh()
                reply = ("ok", eng.view())
            else:
                reply = ("ok", list(guard.ran))  # type: ignore[attr-defined]
        except PolicyViolation as violation:
            reply = ("denied", type(violation).__name__, violation.reason)
        except Pause:
            reply = ("paused",)
        except Exception:
            reply = ("error", traceback.format_exc())
        conn.send(reply)
