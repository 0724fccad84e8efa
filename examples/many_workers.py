"""One engagement, two worker processes, one Redis: the record, the loop detector and the count assertion
carry over from one worker to the next, as behind a load balancer.

    python examples/many_workers.py redis://127.0.0.1:6379/0

Each worker process builds the same Guard with ``store=RedisStore(url)`` and continues the engagement by id;
the calls alternate between them. The fifth call is refused by ``history._total < 5`` (the pending call
counts), and the sixth, the third ``[lookup-order, greet]`` in a row, stops the loop: exactly as in one
process.
"""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.connection import Connection

from agentguard import Guard, PolicyViolation, User
from agentguard.stores import RedisStore

SPEC = """
kind: openagentspec:v1/agent
name: order-desk
description: Looks orders up for a customer.
intent: Find the customer's orders; at most five lookups in one conversation.
owner: desk@corp.com
capabilities:
  lookup-order:
    input_restriction:
      assertion: history._total < 5
  greet:
lifespan:
  short_circuit: 3
"""


def worker(conn: Connection, url: str) -> None:
    """One worker process: its own Guard, its own connection to Redis, the same engagement."""
    guard = Guard.from_yaml(SPEC, store=RedisStore(url), telemetry=False)
    guard.tool(name="lookup-order")(lambda order_id: {"order_id": order_id, "status": "shipped"})
    guard.tool(name="greet")(lambda name: f"hello {name}")
    while (command := conn.recv()) is not None:
        name, inputs = command
        eng = guard.engagement(User(id="ann"), engagement_id="conversation-42")  # continued, not new
        try:
            with eng.activate():
                conn.send(f"{name}: {guard.call(name, inputs)}")
        except PolicyViolation as refused:
            conn.send(f"{name}: refused -- {refused}")


def main(url: str) -> None:
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(2):
        ours, theirs = context.Pipe()
        process = context.Process(target=worker, args=(theirs, url), daemon=True)
        process.start()
        pipes.append(ours)
        processes.append(process)
    calls = [("lookup-order", {"order_id": "A-1"}), ("greet", {"name": "Ann"})] * 3
    for index, call in enumerate(calls):
        pipes[index % 2].send(call)
        print(f"worker {index % 2 + 1}  {pipes[index % 2].recv()}")
    for pipe, process in zip(pipes, processes, strict=True):
        pipe.send(None)
        process.join(10)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
