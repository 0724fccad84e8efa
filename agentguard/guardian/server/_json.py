"""The JSON text the reference guardian sends: compact, ASCII only, and never a NaN or an infinity.

ASCII, because a string may hold a lone surrogate (a valid JSON escape, not valid UTF-8), which only an
escape can carry. The AOS models refuse NaN and the infinities; ``allow_nan=False`` makes sure that no body a
client cannot parse ever leaves (it would surface as an internal error instead).
"""

from __future__ import annotations

import json

from agentguard.aos import JSONValue

__all__ = ["encode_json"]

# Made once: ``json.dumps`` with options builds a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_json(data: JSONValue) -> bytes:
    """``data`` as the guardian's JSON text."""
    return _ENCODER.encode(data).encode("ascii")
