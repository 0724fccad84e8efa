"""The short-circuit detector (decision 5): does the sequence of attempted calls end in a repeated block?

The attempted names are kept newest first, one character per distinct name, at most ``window`` long; a
backreference regex anchored at position 0 finds the shortest block the sequence starts with ``k`` times, in
C, at a cost independent of how long the engagement has run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

__all__ = ["LoopDetector", "find_short_circuit", "repeated_block"]


class LoopDetector:
    """Every attempted call of one engagement, invoked or refused, as the detector needs them.

    Not locked: the :class:`~agentguard.record.EngagementState` that owns it holds its lock around each use.
    """

    __slots__ = ("_chars", "_next", "_pattern", "_reversed", "window")

    def __init__(self, window: int) -> None:
        self._chars: dict[str, str] = {}
        self._reversed = ""
        self.window = window
        # The sequence would_repeat last looked at (the attempted name prepended to ``_reversed``), with the
        # name and the ``_reversed`` it was made from: the attempt that usually follows reuses it.
        self._next: tuple[str, str, str] | None = None
        self._pattern: tuple[int, int, re.Pattern[str]] | None = None  # (k, max_block, its regex)

    def _char(self, name: str) -> str:
        char = self._chars.get(name)
        if char is None:
            char = self._chars[name] = chr(0x100 + len(self._chars))
        return char

    def attempt(self, name: str) -> None:
        """Count one attempt at ``name``."""
        following = self._next
        if following is not None and following[0] == name and following[1] is self._reversed:
            self._reversed = following[2][: self.window]
        else:
            self._reversed = (self._char(name) + self._reversed)[: self.window]
        self._next = None

    def take_back(self, name: str) -> None:
        """Forget the latest attempt at ``name`` (a host paused the run and will attempt it again)."""
        spot = self._reversed.find(self._char(name))
        if spot >= 0:
            self._reversed = self._reversed[:spot] + self._reversed[spot + 1 :]

    def would_repeat(self, name: str, k: int, max_block: int) -> int | None:
        """Block length at which attempting ``name`` now repeats a block ``k`` times, else ``None``.

        A longer window than the current one asked for here widens it from now on.
        """
        if k * max_block > self.window:
            self.window = k * max_block
        pattern = self._pattern
        if pattern is None or pattern[0] != k or pattern[1] != max_block:
            pattern = self._pattern = (k, max_block, _loop_pattern(k, max_block))
        base = self._reversed
        sequence = self._char(name) + base
        self._next = (name, base, sequence)
        match = pattern[2].match(sequence)
        return len(match.group(1)) if match else None

    def last(self, count: int) -> list[str]:
        """The last ``count`` attempted names, oldest first (to explain a loop)."""
        names = {char: name for name, char in self._chars.items()}
        return [names[char] for char in reversed(self._reversed[:count])]


@functools.lru_cache(maxsize=64)
def _loop_pattern(k: int, max_block: int) -> re.Pattern[str]:
    # On the *reversed* sequence, "ends with a block repeated k times" becomes "starts with one": a
    # backreference match anchored at position 0, run by the regex engine in C, smallest block first.
    return re.compile(rf"(.{{1,{max_block}}}?)\1{{{k - 1}}}", re.DOTALL)


def repeated_block(reversed_sequence: str, k: int, max_block: int) -> int | None:
    """Length of the shortest block that the (reversed, one char per name) sequence starts with k times."""
    match = _loop_pattern(k, max_block).match(reversed_sequence)
    return len(match.group(1)) if match else None


def find_short_circuit(sequence: Sequence[str], k: int, max_block: int) -> int | None:
    """Decision 5: does ``sequence`` (the invoked names plus the attempted one) end with a block of one or
    more names repeated ``k`` times in a row? Returns the block length, or ``None``.

    Blocks longer than ``max_block`` calls are not looked for (documented limit; default 100).
    """
    if k < 1:
        return None
    chars: dict[str, str] = {}
    window = sequence[-k * max_block :]
    text = "".join(chars.setdefault(n, chr(0x100 + len(chars))) for n in reversed(window))
    return repeated_block(text, k, max_block)
