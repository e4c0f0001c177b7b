"""Stop rules: where a method has read all it needs of an answer, so decoding can end there.

A rule is named in :attr:`capjudge.backends.base.GenerationConfig.stop_rule` by the method
(:attr:`capjudge.prompts.registry.Method.stop_rule`); backends that decode token by token check it
after every new token and end the answer at the first token where it holds (that token kept).

``"score"`` (the paper form of FLEUR, ``fleur`` and ``ref-fleur``): the answer opens with a
decimal score whose digits are complete: ``0.75`` followed by a newline or punctuation (``0.75,``
``0.8\n``), or by a space and a word (``0.7 because``; not ``out``, as in ``0.7 out of 1.0``, and
not ``to``, too short to count, as in ``0.0 to 1.0``). The token that ends the digits is kept: its
step holds the distribution FLEUR's rule reads for a second decimal, so the smoothed score is the
one the whole answer gives. An answer that opens otherwise ("On a scale of 0.0 to 1.0, I'd give
0.7") is never cut: the parser may need all of it. A digit at the end of the text is not complete
yet (a second decimal may follow).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

WINDOW = 32
"""Longest answer (in tokens) a rule is checked on: every rule matches at the answer's start, so
past this many tokens without a match it never will."""

RULES: dict[str, re.Pattern[str]] = {"score": re.compile(r"^\s*\d\.\d+(?:[ \t]*[\n.,;:!)\]]|[ \t]+(?!out\b)[A-Za-z]{3})")}
"""The rules by name and the pattern (matched at the answer's start) that ends the answer."""


def reached(rule: str, ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> bool:
    """Whether ``rule`` holds once the last of ``ids`` is generated (the text decoded with
    ``decode``); always false for ``""`` and past :data:`WINDOW` tokens."""
    if not rule or not ids or len(ids) > WINDOW:
        return False
    return RULES[rule].match(decode(list(ids))) is not None


def stop_index(rule: str, ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> int | None:
    """The index of the first token at which ``rule`` holds (checked after each token, as
    :func:`reached` is during decoding); None when it never does."""
    if not rule:
        return None
    for t in range(min(len(ids), WINDOW)):
        if reached(rule, ids[: t + 1], decode):
            return t
    return None


__all__ = ["RULES", "WINDOW", "reached", "stop_index"]
