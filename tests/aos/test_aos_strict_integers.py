"""``strict_json`` and integers: every integer it accepts is one that a double-based JSON parser
(JavaScript's, most others') reads as the same number; every other one is refused (docs/decisions.md)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentguard.aos import AmbiguousJSON, strict_json

MAX_EXACT_INTEGER = 2**53 - 1  # I-JSON (RFC 7493 §2.2): agentguard.aos._json.MAX_EXACT_INTEGER


@given(st.integers())
def test_an_integer_is_read_only_where_every_peer_reads_it_alike(number: int) -> None:
    """Python reads ``9007199254740993`` exactly, a double-based peer as ``9007199254740992``: a guardian in
    one and a guard in the other would check two different numbers."""
    text = json.dumps({"amount": [number]})
    if abs(number) <= MAX_EXACT_INTEGER:
        value = strict_json(text)
        assert value == {"amount": [number]}
        assert float(number) == number  # a double holds it exactly: every peer reads this number
    else:
        with pytest.raises(AmbiguousJSON, match="integer"):
            strict_json(text)


def test_the_bound_is_where_doubles_stop_telling_integers_apart() -> None:
    """The first integers refused are the first two a double reads as one number."""
    assert float(MAX_EXACT_INTEGER + 1) == float(MAX_EXACT_INTEGER + 2)
    for number in (MAX_EXACT_INTEGER + 1, MAX_EXACT_INTEGER + 2, -MAX_EXACT_INTEGER - 1):
        with pytest.raises(AmbiguousJSON):
            strict_json(str(number).encode())


def test_thousands_of_digits_are_refused_as_ambiguous_not_converted() -> None:
    """Not the ``ValueError`` of Python's 4300-digit conversion limit: the same refusal as any other."""
    with pytest.raises(AmbiguousJSON):
        strict_json("[" + "9" * 100_000 + "]")
