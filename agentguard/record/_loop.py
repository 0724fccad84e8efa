"""The short-circuit detector (decision 5): does the sequence of attempted calls end in a repeated block?

The sequence ends with a block of length ``L`` repeated ``k`` times when its last ``(k - 1) * L`` attempts
each equal the one ``L`` before. :class:`LoopDetector` keeps, for every ``L`` up to ``max_block``, how many
more such equal attempts in a row it needs: a countdown, all of them packed side by side in one integer, so
that one attempt updates every ``L`` with a dozen integer operations run in C, and a countdown at zero is a
loop. Matching the whole window against a backreference regex, as :func:`repeated_block` does, costs several
times more at the default ``max_block`` of 100; the regex stays the definition the detector is tested against.
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Sequence

__all__ = ["LoopDetector", "find_short_circuit", "repeated_block"]

_ASK = 1
_ALWAYS = 2

_Lanes = tuple[int, int, int, int, int, int, int, int, int]
"""The constants of the packed countdowns for one ``(k, max_block)``, see :func:`_lanes`."""


@functools.lru_cache(maxsize=64)
def _lanes(k: int, max_block: int) -> _Lanes:
    """``(k, max_block, width, first, window, low, high, reset, ones)``: lane ``L`` (``width`` bits, at bit
    ``width * L``) holds the countdown of block length ``L``; lane 0 holds none. ``first``: lane 0 all ones
    (the newest attempt in a name's mask); ``window``: lanes 0 .. max_block all ones (what a mask keeps);
    ``low`` / ``high``: in lanes 1 .. max_block, every bit below the top one / the top bit; ``reset``: lane
    ``L`` holds ``(k - 1) * L``, the countdown after an attempt unlike the one ``L`` before; ``ones``: 1 in
    lanes 1 .. max_block (every countdown down by one). A countdown never reaches its lane's top bit, which
    the ``(x + low) & high`` trick uses to tell the lanes not at zero."""
    width = ((k - 1) * max_block).bit_length() + 1
    top = 1 << (width - 1)
    low = high = reset = 0
    for block in range(1, max_block + 1):
        at = width * block
        low |= (top - 1) << at
        high |= top << at
        reset |= ((k - 1) * block) << at
    window = (1 << (width * (max_block + 1))) - 1
    return k, max_block, width, (1 << width) - 1, window, low, high, reset, high >> (width - 1)


class LoopDetector:
    """Every attempted call of one engagement, invoked or refused, as the detector needs them.

    Not locked: the :class:`~agentguard.record.EngagementState` that owns it holds its lock around each use.
    """

    __slots__ = ("_attempts", "_count", "_ids", "_lanes", "_runs", "_seen", "_zero", "window")

    def __init__(self, window: int) -> None:
        # The attempted names, as a number per distinct name, oldest first (4 bytes each); the last ``window``
        # of them explain a loop (last) and are what the countdowns are rebuilt from.
        self._ids: dict[str, int] = {}
        self._attempts = array("I")
        self.window = window
        self._count = 0  # attempts so far
        # The countdowns, for the (k, max_block) last asked about (None: rebuild them on the next question).
        self._lanes: _Lanes | None = None
        self._runs = 0
        self._zero = (
            False  # a countdown of _runs is at zero (only after an attempt counted although it repeats)
        )
        # Per name: (mask, count, number) -- lane j of mask all ones where the name was attempted j attempts
        # before the count-th one (lanes 0 .. max_block); the name's number in _attempts.
        self._seen: dict[str, tuple[int, int, int]] = {}

    def _id(self, name: str) -> int:
        number = self._ids.get(name)
        if number is None:
            number = self._ids[name] = len(self._ids)
        return number

    def _reversed(self) -> list[int]:
        """The last ``window`` attempts, newest first."""
        return self._attempts[-self.window :].tolist()[::-1] if self.window > 0 else []

    def attempt(self, name: str) -> None:
        """Count one attempt at ``name``."""
        lanes = self._lanes
        if lanes is None:  # nobody asked yet: the first question builds the countdowns from the sequence
            self._count += 1
            self._append(self._id(name))
        else:
            self.attempt_unless_repeat(name, lanes[0], lanes[1], _ALWAYS)

    def _append(self, number: int) -> None:
        """Add the attempt at the name numbered ``number`` (:meth:`_id`) to the sequence."""
        attempts = self._attempts
        attempts.append(number)
        if len(attempts) > self.window + 64:  # trimmed now and then, not on every attempt
            del attempts[: len(attempts) - self.window]

    def take_back(self, name: str) -> None:
        """Forget the latest attempt at ``name`` (a host paused the run and will attempt it again)."""
        number = self._id(name)
        attempts = self._attempts
        for position in range(len(attempts) - 1, max(len(attempts) - self.window, 0) - 1, -1):
            if attempts[position] == number:
                del attempts[position]
                self._lanes = None  # the countdowns are rebuilt from the sequence on the next question
                return

    def would_repeat(self, name: str, k: int, max_block: int) -> int | None:
        """Block length at which attempting ``name`` now repeats a block ``k`` times, else ``None``.

        A longer window than the current one asked for here widens it from now on.
        """
        return self.attempt_unless_repeat(name, k, max_block, _ASK)

    def attempt_unless_repeat(self, name: str, k: int, max_block: int, mode: int = 0) -> int | None:
        """:meth:`would_repeat`, and the attempt counted when it does not repeat (one pass, for the direct
        path of a call).

        ``mode`` is the detector's own: the attempt counted unless it repeats (0), never (``_ASK``, for
        :meth:`would_repeat`), always (``_ALWAYS``, for :meth:`attempt`). One method for the three, so that the
        direct path runs one frame.
        """
        lanes = self._lanes
        if lanes is None or lanes[0] != k or lanes[1] != max_block:
            if k < 1 or max_block < 1:
                return None
            lanes = self._rebuild(k, max_block)
        _, _, width, first, window, low, high, reset, ones = lanes
        seen = self._seen.get(name)
        count = self._count
        mask = first
        if seen is not None and (gap := count + 1 - seen[1]) <= max_block:
            mask |= (seen[0] << (width * gap)) & window  # older than max_block: nothing to keep
        # Lane L of mask is all ones where the attempt L before is this name: that countdown goes on (those
        # not at zero go down by one), every other starts again (lane 0, this attempt, holds none).
        runs = self._runs
        # Those at zero stay there; while none is (always, but after a repeat counted anyway), all go down.
        runs -= ((runs + low) & high) >> (width - 1) if self._zero else ones
        runs = reset ^ ((reset ^ runs) & mask)
        block = None
        if (runs + low) & high != high:  # a lane's top bit is clear: its countdown is at zero
            zero = high ^ ((runs + low) & high)  # the top bit of every lane at zero
            block = ((zero & -zero).bit_length() - 1) // width
        if mode == _ASK or (block is not None and mode != _ALWAYS):
            return block
        self._runs = runs
        self._zero = block is not None
        number = self._id(name) if seen is None else seen[2]
        self._seen[name] = (mask, count + 1, number)
        self._count = count + 1
        attempts = self._attempts  # _append, written out: this is the per-call path
        attempts.append(number)
        if not count & 63 and len(attempts) > self.window:  # every 64th attempt: never 64 beyond the window
            del attempts[: len(attempts) - self.window]
        return block

    def _rebuild(self, k: int, max_block: int) -> _Lanes:
        """The countdowns and masks for ``(k, max_block)``, from the sequence (on the first question, when the
        question changes, after a take-back); widens the window to ``k * max_block`` if it is narrower."""
        self.window = max(self.window, k * max_block)
        lanes = self._lanes = _lanes(k, max_block)
        width, first = lanes[2], lanes[3]
        sequence = self._reversed()
        masks: dict[int, int] = {}
        for j, number in enumerate(sequence[: max_block + 1]):
            masks[number] = masks.get(number, 0) | (first << (width * j))
        self._seen = {name: (masks[i], self._count, i) for name, i in self._ids.items() if i in masks}
        # Every countdown starts full; a block shorter than the sequence may have counted down already (a new
        # engagement's first question has nothing to look at).
        runs = lanes[7]
        for block in range(1, min(max_block, len(sequence) - 1) + 1):
            runs -= _agreeing(sequence, block, min((k - 1) * block, len(sequence) - block)) << (width * block)
        self._runs = runs
        self._zero = (runs + lanes[5]) & lanes[6] != lanes[6]
        return lanes

    def last(self, count: int) -> list[str]:
        """The last ``count`` attempted names, oldest first (to explain a loop)."""
        names = {number: name for name, number in self._ids.items()}
        count = min(count, self.window)
        return [names[number] for number in self._attempts[-count:]] if count > 0 else []


def _agreeing(sequence: list[int], block: int, limit: int) -> int:
    """How many of the first ``limit`` attempts (newest first) each equal the one ``block`` further back.

    Slices are compared in windows that double while they agree, then halved inside the one that does not:
    work in C proportional to the answer, and ``O(log limit)`` steps of Python, where comparing attempt by
    attempt took up to ``k * max_block**2 / 2`` steps to rebuild the countdowns.
    """
    agree, step = 0, 1
    while agree < limit:
        end = min(agree + step, limit)
        if sequence[agree:end] != sequence[agree + block : end + block]:
            while end - agree > 1:  # sequence[:agree] agrees, sequence[:end] does not
                middle = (agree + end) // 2
                if sequence[agree:middle] == sequence[agree + block : middle + block]:
                    agree = middle
                else:
                    end = middle
            return agree
        agree, step = end, step * 2
    return agree


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
