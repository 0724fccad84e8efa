"""The Engagement record: who the user is and which tools and agents were called, as CEL sees it.

Layer 3 (``docs/architecture.md``): it imports only the CEL layer and :mod:`agentguard.errors`. Nothing here
does I/O or knows about the Guard; :class:`agentguard.Engagement` is the facade users hold, and the pipeline
(:mod:`agentguard.pipeline`) is what writes to the record.

Example::

    from agentguard.record import EngagementState, User

    state = EngagementState(user=User(id="u1", email="ann@corp.com"))
    call = state.begin_call("send-email", {"to": "bob@corp.com"})
    state.complete_call(call, {"status": "sent"})
    state.view()["recent"]["send-email"]["outputs"]     # {'status': 'sent'}
"""

from agentguard.record._journal import (
    Appended,
    CommitBusy,
    EventRefused,
    Journal,
    Pipelined,
    Posted,
    Snapshot,
    decode_event,
    encode_event,
    fresh_events,
    held_outputs,
)
from agentguard.record._loop import LoopDetector, find_short_circuit, repeated_block
from agentguard.record._state import EngagementState
from agentguard.record._types import (
    CallRecord,
    Chains,
    Decision,
    DirectCallRecord,
    EngagementStatus,
    Outcome,
    StepRecord,
    StepRef,
    Steps,
    User,
    chained,
)
from agentguard.record._values import (
    NOT_PLAIN,
    SCALARS,
    ValueLimits,
    ValueTooComplex,
    is_plain,
    new_id,
    one_shot,
    plain_copies,
    plain_copy,
    to_plain,
    unfaithful,
)
from agentguard.record._view import QuickCheck, ViewPlan

__all__ = [
    "NOT_PLAIN",
    "SCALARS",
    "Appended",
    "CallRecord",
    "Chains",
    "CommitBusy",
    "Decision",
    "DirectCallRecord",
    "EngagementState",
    "EngagementStatus",
    "EventRefused",
    "Journal",
    "LoopDetector",
    "Outcome",
    "Pipelined",
    "Posted",
    "QuickCheck",
    "Snapshot",
    "StepRecord",
    "StepRef",
    "Steps",
    "User",
    "ValueLimits",
    "ValueTooComplex",
    "ViewPlan",
    "chained",
    "decode_event",
    "encode_event",
    "find_short_circuit",
    "fresh_events",
    "held_outputs",
    "is_plain",
    "new_id",
    "one_shot",
    "plain_copies",
    "plain_copy",
    "repeated_block",
    "to_plain",
    "unfaithful",
]
