"""The audit report reader never fails in an unexpected way: a report or an AuditFormatError."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard.checks import Audit, AuditFormatError


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    with contextlib.suppress(AuditFormatError):
        Audit.loads(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_frontmatter(front: str) -> None:
    with contextlib.suppress(AuditFormatError):
        Audit.loads(f"---\n{front}\n---\nbody\n")
