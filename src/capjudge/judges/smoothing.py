"""FLEUR score smoothing (the FLEUR paper, Sec. 3.2 and Appendix B, and its code, ``fleur.py``).

The model writes a score such as ``0.85``. Smoothing replaces the printed decimals by their expected
values under the model's own distribution over the digit tokens at those positions:
``0.1 * sum(i * p1[i]) + 0.01 * sum(i * p2[i])``. Probabilities are the full-vocabulary softmax
(not renormalised over the ten digits), as in FLEUR's code. For an answer of exactly ``1.0`` the
distribution at the units digit is used instead: ``0.9 * P("0") + 1.0 * P("1")``. A bare ``0`` or
``1`` is smoothed as the code smooths it (it reads them as ``0.0`` and ``1.0``): ``0.1 * E[digit]``
at the ``0`` and the ``1.0`` rule at the ``1``.

Second decimal: FLEUR's code adds it only when ``len(str(float(answer))) > 3``, so ``0.80``,
``0.10`` and ``0.00`` count as one-decimal answers; that is the default here
(``second_decimal="official"``). ``second_decimal="printed"`` adds it whenever a second digit is
printed (``0.80`` then adds ``0.01 * E[second digit]``).

Positions: FLEUR's code finds the digits by searching the generated ids for the printed digit (the
second occurrence of ``0`` for a first decimal ``0``, the second occurrence for any second
decimal). That search finds the right steps for every answer with one or two decimals (``0.85``,
``0.10``, ``0.00``, ``0.05``, ``0.55``) and the wrong ones for some answers with three or more
(``0.155`` reads its second decimal at the third; ``0.005`` reads it at the first).
:func:`smooth_from_steps` locates the printed score in the decoded tokens instead, which gives the
same steps wherever the search is right and the right steps where it is not;
:func:`smooth_by_code_search` is the code's search itself (method ``fleur-code``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from capjudge.backends.base import DIGITS, TokenStep
from capjudge.core.errors import SampleFailure

SCORE_PATTERN = re.compile(r"(?<![\d.])([01])\.(\d)(\d)?(\d*)")
"""A printed 0-1 score: units digit, first and second decimal, further decimals."""

SPACED_SCORE_PATTERN = re.compile(r"(?<![\d.])([01])[ \t]+(\d)(\d)?(\d*)(?![\d.])")
"""A 0-1 score written with a space for the decimal point, as MiniGPT-v2 answers FLEUR's prompt
(``0 5``, ``0 9``; the FLEUR paper, Sec. 5.4): the same groups as :data:`SCORE_PATTERN`."""

BARE_SCORE_PATTERN = re.compile(r"(?<![\d.])([01])(?!\d|\.\d)")
"""A bare ``0`` or ``1`` (no decimals). FLEUR's code reads it as ``0.0`` / ``1.0`` and smooths it at
that digit's token: ``0.1 * E[digit]`` for ``0`` (as a first decimal), ``0.9 * P("0") + P("1")``
for ``1``; so does :func:`smooth_from_steps`."""

AnswerForm = Literal["decimal", "spaced"]


def expected_digit_score(first: Sequence[float], second: Sequence[float] | None = None) -> float:
    """FLEUR smoothing: ``0.1 * sum(i * first[i]) + 0.01 * sum(i * second[i])``.

    ``first`` and ``second`` are the probabilities of the digits 0..9 at the first and second
    decimal places (``second`` is omitted when the model printed one decimal).
    """
    if len(first) != 10 or (second is not None and len(second) != 10):
        raise ValueError("digit distributions must have exactly 10 entries (digits 0..9)")
    score = 0.1 * sum(i * float(p) for i, p in enumerate(first))
    if second is not None:
        score += 0.01 * sum(i * float(q) for i, q in enumerate(second))
    return score


def units_score(units: Sequence[float]) -> float:
    """The paper's rule for an answer of exactly ``1.0``: ``0.9 * P(units="0") + P(units="1")``."""
    if len(units) != 10:
        raise ValueError("digit distribution must have exactly 10 entries (digits 0..9)")
    return 0.9 * float(units[0]) + float(units[1])


def _token_text(token: str) -> str:
    # SentencePiece marks a leading space with "▁"; byte-level BPE with "Ġ".
    return token.replace("▁", " ").replace("Ġ", " ")


def digit_distribution(step: TokenStep, char_index: int = 0) -> list[float] | None:
    """Probabilities of the digits 0..9 at one generated position.

    Exact when the backend reported the digit tokens' log-probabilities (``step.digits``) and the
    chosen token is a single digit; otherwise built from the step's top alternatives: a candidate
    that is all digits contributes its probability to its character at ``char_index`` (tokenizers
    that merge digits, e.g. ``"85"``), and candidates not in the list count as probability 0.

    A digit inside a merged token (``char_index > 0``: the ``5`` of ``"85"``) gets the distribution
    *given the digits printed before it*, as a per-digit tokenizer gives it at its own step: the
    alternatives that start with those digits, divided by their total mass (the bare ``"8"``
    included, whose answer stops or goes on at a later step). Two tokenizations of the same joint
    distribution thus smooth to the same score.
    Returns ``None`` when the step has no probabilities at all.
    """
    chosen = _token_text(step.token).strip()
    if step.digits is not None and len(chosen) == 1 and char_index == 0:
        return [math.exp(lp) for lp in step.digits]
    if not step.top:
        return None
    probs = [0.0] * 10
    prefix = chosen[:char_index]
    given = 0.0  # mass of the alternatives that print the same digits before char_index
    for tok, lp in step.top:
        text = _token_text(tok).strip()
        # ASCII digits only: str.isdigit() is also true for "²" or "٣", which are no decimal digit.
        if not (text.isascii() and text.isdigit() and text[:char_index] == prefix and len(text) >= max(char_index, 1)):
            continue
        given += math.exp(lp)
        if len(text) > char_index:
            probs[DIGITS.index(text[char_index])] += math.exp(lp)
    if char_index > 0:
        if given <= 0.0:
            return None
        probs = [p / given for p in probs]
    return probs


@dataclass(frozen=True)
class Smoothed:
    """A smoothed score and how it was obtained."""

    score: float
    raw_score: float
    first: list[float] | None = None
    second: list[float] | None = None
    units: list[float] | None = None


def _char_to_step(steps: Sequence[TokenStep]) -> tuple[str, list[int], list[int]]:
    """The decoded text of the steps, and for each character its step index and offset in the token."""
    text_parts: list[str] = []
    owner: list[int] = []
    offset: list[int] = []
    for i, step in enumerate(steps):
        t = _token_text(step.token)
        text_parts.append(t)
        owner.extend([i] * len(t))
        offset.extend(range(len(t)))
    return "".join(text_parts), owner, offset


def _offset_in_stripped(step: TokenStep, raw_offset: int) -> int:
    text = _token_text(step.token)
    return raw_offset - (len(text) - len(text.lstrip()))


def token_text(token: str) -> str:
    """A token's text with SentencePiece's ``▁`` and byte-level BPE's ``Ġ`` as spaces."""
    return _token_text(token)


def decoded_steps(steps: Sequence[TokenStep]) -> tuple[str, list[int], list[int]]:
    """The decoded text of ``steps`` and, for each of its characters, the index of its step and
    its offset in that step's token (:func:`char_index` turns the offset into the index that
    :func:`digit_distribution` takes)."""
    return _char_to_step(steps)


def char_index(step: TokenStep, raw_offset: int) -> int:
    """A character's index in its token with the token's leading spaces stripped (``digit_distribution``'s ``char_index``)."""
    return _offset_in_stripped(step, raw_offset)


def uses_second_decimal(printed: str) -> bool:
    """FLEUR's code's test for a second decimal: ``len(str(float(printed))) > 3`` (``0.85`` yes;
    ``0.8``, ``0.80``, ``0.10``, ``1.0`` no)."""
    return len(str(float(printed))) > 3


SecondDecimal = Literal["official", "printed"]


def smooth_from_steps(
    steps: Sequence[TokenStep],
    expected: float | None = None,
    occurrence: int = 0,
    *,
    second_decimal: SecondDecimal = "official",
    answer_form: AnswerForm = "decimal",
    bare: bool = False,
) -> Smoothed | None:
    """Locate the printed ``0.x[y]`` or ``1.0`` score in the generated tokens and smooth it.

    ``expected`` is the score the parser read from the answer: the number smoothed is that one
    (in "On a scale of 0.0 to 1.0, I'd give 0.7" it is 0.7, not the restated 0.0), and
    ``occurrence`` says which of the numbers with that value it is (0: the first; "... to 1.0, I'd
    give 1.0" is occurrence 1). ``second_decimal`` says when the second decimal counts (module
    doc). ``answer_form="spaced"`` reads a score written with a space for the point (``0 5``:
    the first decimal is the digit token after the space, whether the tokenizer gives the space a
    token of its own or merges it into the digit's). Returns ``None`` when the tokens hold no such
    score or carry no probabilities there (the caller then falls back to the raw score and says so).

    ``bare=True``: the parser read a bare ``0`` or ``1`` (``expected`` 0.0 or 1.0; ``occurrence``
    counts bare numbers of that value): it is smoothed as FLEUR's code smooths it
    (:data:`BARE_SCORE_PATTERN`).
    """
    if not steps:
        return None
    text, owner, offset = _char_to_step(steps)
    if bare:
        return _smooth_bare(steps, text, owner, offset, expected, occurrence)
    pattern = SPACED_SCORE_PATTERN if answer_form == "spaced" else SCORE_PATTERN
    same = [c for c in pattern.finditer(text) if expected is None or abs(float(_as_decimal(c)) - expected) < 1e-9]
    m = same[occurrence] if occurrence < len(same) else (same[-1] if same else None)
    if not m:
        return None
    units_digit, d1, d2 = m.group(1), m.group(2), m.group(3)
    printed = _as_decimal(m)
    raw = float(printed)
    if raw > 1.0:
        return None
    if units_digit == "1":
        if d1 != "0" or (d2 is not None and d2 != "0"):
            return None  # "1.5" is out of range, not a score
        pos = m.start(1)
        step = steps[owner[pos]]
        units = digit_distribution(step, _offset_in_stripped(step, offset[pos]))
        if units is None:
            return None
        return Smoothed(score=units_score(units), raw_score=raw, units=units)
    pos1 = m.start(2)
    step1 = steps[owner[pos1]]
    first = digit_distribution(step1, _offset_in_stripped(step1, offset[pos1]))
    if first is None:
        return None
    second = None
    if d2 is not None and (second_decimal == "printed" or uses_second_decimal(printed)):
        pos2 = m.start(3)
        step2 = steps[owner[pos2]]
        second = digit_distribution(step2, _offset_in_stripped(step2, offset[pos2]))
    return Smoothed(score=expected_digit_score(first, second), raw_score=raw, first=first, second=second)


def _smooth_bare(steps: Sequence[TokenStep], text: str, owner: list[int], offset: list[int], expected: float | None, occurrence: int) -> Smoothed | None:
    """A bare ``0`` / ``1`` smoothed at its digit's step, as ``fleur.py`` does (its ``score_check``
    is ``0.0`` / ``1.0``: the ``0`` step's digits weighted by 0.1, or the ``1`` step's units rule)."""
    if expected not in (0.0, 1.0):
        return None
    same = [c for c in BARE_SCORE_PATTERN.finditer(text) if float(c.group(1)) == expected]
    m = same[occurrence] if occurrence < len(same) else (same[-1] if same else None)
    if m is None:
        return None
    step = steps[owner[m.start(1)]]
    probs = digit_distribution(step, _offset_in_stripped(step, offset[m.start(1)]))
    if probs is None:
        return None
    if expected == 1.0:
        return Smoothed(score=units_score(probs), raw_score=1.0, units=probs)
    return Smoothed(score=expected_digit_score(probs), raw_score=0.0, first=probs)


def _as_decimal(m: re.Match[str]) -> str:
    """The matched score as decimal text (``0 85`` -> ``0.85``)."""
    return f"{m.group(1)}.{m.group(2)}{m.group(3) or ''}{m.group(4)}"


class CodeSearchError(SampleFailure, ValueError):
    """FLEUR's code could not smooth this answer (it would have crashed, or reused the previous
    sample's score)."""


def _exact_digit_steps(steps: Sequence[TokenStep], digit: int) -> list[int]:
    """The steps whose token is exactly the digit token (FLEUR's ``rate2token``: the bare digit,
    not a digit with a leading space)."""
    return [i for i, step in enumerate(steps) if _token_text(step.token) == DIGITS[digit]]


def _probs_at(steps: Sequence[TokenStep], index: int) -> list[float]:
    probs = digit_distribution(steps[index])
    if probs is None:
        raise CodeSearchError(f"step {index} carries no token probabilities")
    return probs


def smooth_by_code_search(steps: Sequence[TokenStep], score_check: float) -> Smoothed:
    """FLEUR's code's smoothing of ``score_check`` (its reading of the answer), step for step.

    The steps are found as ``fleur.py`` finds them: the generated tokens equal to the printed
    digit; of several, the second for a first decimal ``0`` and the first otherwise, and the
    second for the second decimal; for ``1.0`` the only ``1``. Where the code fails (no such
    token, several ``1`` tokens) :class:`CodeSearchError` says why; the code itself then
    reused the previous sample's score.
    """
    if not 0.0 <= score_check <= 1.0:
        raise CodeSearchError(f"{score_check:g} is outside 0-1 (FLEUR's code skips such answers)")
    text = str(score_check)
    if score_check >= 1.0:
        ones = _exact_digit_steps(steps, 1)
        if len(ones) != 1:
            raise CodeSearchError(f"FLEUR's code needs exactly one '1' token for a score of 1.0; the answer has {len(ones)}")
        units = _probs_at(steps, ones[0])
        return Smoothed(score=units_score(units), raw_score=score_check, units=units)
    if "." not in text:
        raise CodeSearchError(f"FLEUR's code cannot index the decimals of {text!r}")
    d1 = int(text[text.index(".") + 1])
    hits = _exact_digit_steps(steps, d1)
    if not hits:
        raise CodeSearchError(f"no '{d1}' token among the generated tokens")
    pos1 = hits[0] if len(hits) == 1 else (hits[1] if d1 == 0 else hits[0])
    first = _probs_at(steps, pos1)
    second = None
    if uses_second_decimal(text):
        d2 = int(text[text.index(".") + 2])
        hits2 = _exact_digit_steps(steps, d2)
        if not hits2:
            raise CodeSearchError(f"no '{d2}' token among the generated tokens")
        pos2 = hits2[0] if len(hits2) == 1 else hits2[1]
        second = _probs_at(steps, pos2)
    return Smoothed(score=expected_digit_score(first, second), raw_score=score_check, first=first, second=second)
