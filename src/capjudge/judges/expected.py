"""Expected scores (method option ``score=expected``): the probability-weighted value of the number
a scoring method's parser read, taken at that number's tokens in the final answer (after any
reasoning: the readers get :func:`capjudge.judges.reasoning.final_answer`'s steps).

Two rules, by how the number was tokenized:

* ``one-token``: the number is one token (OpenAI's tokenizers write 0-999 as one token: ``"85"``).
  The alternatives at that step that are numbers (an integer, or a decimal number held whole in one
  token) on the scale the number was read on are weighted by their probabilities, renormalised over
  their mass: ``E = sum_a p(a) * a / sum_a p(a)``. The chosen token counts even where the backend did
  not list it among the alternatives; alternatives that are no number, or a number off the scale, do
  not count (their share is the ``mass`` the record gives: ``sum_a p(a)``).
* ``per-digit``: the number spans tokens (one digit per token, as LLaMA and Qwen tokenizers write
  ``85``; or ``85.5``). Each printed digit, with place value ``w_j`` (10, 1, 0.1, ...), gets the
  digit distribution ``p_j`` at its token (exact where the backend gives the ten digits'
  log-probabilities; from the alternatives otherwise; inside a merged token such as ``"85"`` in
  ``"85.5"``, FLEUR smoothing's merged-digit rule, :func:`capjudge.judges.smoothing.digit_distribution`:
  given the digits printed before it), restricted to the digits ``D_j`` that, put in place of the
  printed digit with the other printed digits kept, give a number on the scale (no leading zero in
  front of an integer part of two or more digits), and renormalised over their mass:
  ``E = sum_j w_j * sum_{d in D_j} d * p_j(d) / sum_{d in D_j} p_j(d)``. ``85`` on 0-100 is
  ``10 * E[d1] + E[d2]``; ``0.85`` on 0-1 is ``0.1 * E[d1] + 0.01 * E[d2]`` (the units digit can
  only be 0 there), FLEUR's rule with each position renormalised over its digits; ``100`` on 0-100
  stays 100 (no other digit keeps it on the scale). The record's ``mass`` is the product of the
  positions' masses (listed in ``masses``). A value that the positions, weighted one at a time,
  take off the scale is clipped to it (``clipped_from``).

Renormalised, where FLEUR's smoothing is not: FLEUR reads a ``0.xy`` whose leading ``0.`` is fixed,
and counts a digit missing from the alternatives as 0; on a 0-100 number that would count every
other token (a space, a word) as the digit 0 in the tens and pull the score down, and would make the
one-token and per-digit rules disagree on the same distribution. The ``mass`` says how much of the
distribution the weighted alternatives covered.

The value is mapped to the method's scale as the parser mapped the printed number (a fraction
``8/10``, a percentage, a restated scale: linear maps, so the mean maps likewise). Answers without
token log-probabilities are estimated by sampling when the judge asks for it
(``estimate_by_sampling=N``, :mod:`capjudge.judges.sampling`), and are error records otherwise:
never a plain score in place of an expected one.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from capjudge.backends.base import Completion, TokenStep
from capjudge.judges.sampling import fleur_score
from capjudge.judges.smoothing import char_index, decoded_steps, digit_distribution, token_text
from capjudge.parsing import ScoreParse, parse_score
from capjudge.parsing.numbers import scan
from capjudge.parsing.official import first_integer
from capjudge.parsing.text import clean, coerce_text
from capjudge.prompts.registry import Method

WHOLE_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
"""A token that is a number by itself (after its leading space): an alternative of the one-token rule."""

_FIRST_RUN = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Printed:
    """The number a parser read: ``text`` as printed (digits, and a point or decimal comma),
    ``occurrence`` (how many numbers printed the same stand before it), the bounds of the scale it
    was read on, and the linear map to the method's scale (``offset + slope * x``).
    ``first_run``: the number is the answer's first run of digits (the VisCE2 code's reading)."""

    text: str
    occurrence: int
    low: float
    high: float
    offset: float = 0.0
    slope: float = 1.0
    first_run: bool = False

    def value(self, x: float) -> float:
        """``x`` (on the printed scale) on the method's scale."""
        return x if (self.offset, self.slope) == (0.0, 1.0) else self.offset + self.slope * x


MAX_DISTRIBUTION_POSITIONS = 4
"""The most digit positions whose joint distribution is spelled out (10**4 values at most)."""


@dataclass(frozen=True)
class Expected:
    """An expected score and how it was taken (``details``: the record's ``details.expected``).
    ``distribution``: the score's distribution on the method's scale, ``(value, probability)``
    sorted by value (per-digit: the positions taken as independent, each value clipped to the
    scale; empty past :data:`MAX_DISTRIBUTION_POSITIONS` positions); ``printed_probability``: the
    probability of the printed number itself (renormalised as the expectation is)."""

    score: float
    details: dict[str, Any] = field(default_factory=dict)
    distribution: tuple[tuple[float, float], ...] = ()
    printed_probability: float | None = None


def printed_by_rules(text: str, parsed: ScoreParse, low: float, high: float) -> Printed | str:
    """The number capjudge's rules read (``parsed``, from :func:`capjudge.parsing.parse_score_details`
    on ``text`` and the scale ``[low, high]``), or why it cannot be weighted."""
    if parsed.value is None or parsed.span is None:
        return "no score was read"
    if parsed.rule == "spaced":
        return "a score written with a space for the point has no number token to weight"
    sc = scan(clean(coerce_text(text) or ""))
    i = sc.index_at(parsed.span[0])
    if i is None:
        return "the number read could not be found again in the answer"
    tok = sc.tokens[i]
    occurrence = sum(1 for other in sc.tokens[:i] if other.text == tok.text)
    span = high - low
    if tok.percent:
        printed = Printed(tok.text, occurrence, 0.0, 100.0, low, span / 100.0)
    elif tok.denom is not None:
        printed = Printed(tok.text, occurrence, 0.0, tok.denom, low, span / tok.denom)
    else:
        restated = sc.nearest_scale(tok.start)
        # As parsing.numbers.token_value: a bare number is rescaled from a restated scale that differs.
        if restated is not None and (restated.low, restated.high) != (low, high) and restated.low <= tok.value <= restated.high and restated.high > 0:
            printed = Printed(tok.text, occurrence, restated.low, restated.high, low, span / restated.high)
        else:
            printed = Printed(tok.text, occurrence, low, high)
    if not math.isclose(printed.value(tok.value), parsed.value, rel_tol=1e-9, abs_tol=1e-12):
        return f"the reading of {parsed.matched!r} as {parsed.value:g} could not be retraced"
    return printed


def printed_first_integer(text: str, low: float, high: float) -> Printed | str:
    """The first run of digits (the VisCE2 code's reading), or why it cannot be weighted: a number
    off the scale is kept as the code keeps it, but has no alternatives on the scale to weigh."""
    m = _FIRST_RUN.search(coerce_text(text) or "")
    if m is None:
        return "no number was read"
    value = float(m.group())
    if not low <= value <= high:
        return f"the printed number {m.group()} is outside the scale {low:g}-{high:g} (score=expected weighs numbers on the scale)"
    return Printed(m.group(), 0, low, high, first_run=True)


def has_logprobs(out: Completion) -> bool:
    """Whether the answer's token steps carry any probabilities to weigh."""
    return any(step.top or step.digits is not None for step in out.steps)


def expected_score(steps: Sequence[TokenStep], printed: Printed) -> Expected | str:
    """The expected value of ``printed`` at its tokens among ``steps`` (module doc), or why not."""
    text, owner, offset = decoded_steps(steps)
    span = _find(text, printed)
    if span is None:
        return f"the number {printed.text!r} was not found among the answer's tokens"
    start, end = span
    covering = sorted({owner[k] for k in range(start, end)})
    if len(covering) == 1:
        step = steps[covering[0]]
        if token_text(step.token).strip() == printed.text and not (len(printed.text) == 1 and step.digits is not None):
            return _one_token(step, printed)
    return _per_digit(steps, owner, offset, start, printed)


def _find(text: str, printed: Printed) -> tuple[int, int] | None:
    if printed.first_run:
        m = _FIRST_RUN.search(text)
        return (m.start(), m.end()) if m is not None and m.group() == printed.text else None
    pattern = re.compile(r"(?<![0-9.,])" + re.escape(printed.text) + r"(?![0-9])(?![.,][0-9])")
    found = list(pattern.finditer(text))
    if not found:
        return None
    m = found[printed.occurrence] if printed.occurrence < len(found) else found[-1]
    return m.start(), m.end()


def _one_token(step: TokenStep, printed: Printed) -> Expected | str:
    if not step.top:
        return f"the token {printed.text!r} carries no alternatives"
    items = list(step.top)
    if step.logprob is not None and step.token not in {tok for tok, _ in items}:
        items.append((step.token, step.logprob))
    weights: dict[str, float] = {}
    for tok, lp in items:
        t = token_text(tok).strip()
        if WHOLE_NUMBER.fullmatch(t) and printed.low <= float(t) <= printed.high:
            weights[t] = weights.get(t, 0.0) + math.exp(lp)
    mass = sum(weights.values())
    if mass <= 0.0:
        return f"no alternative at the token {printed.text!r} is a number on the scale"
    mean = sum(float(t) * p for t, p in weights.items()) / mass
    details = {"rule": "one-token", "mass": mass, "alternatives": len(weights), "printed": printed.text, "weights": weights}
    dist: dict[float, float] = {}
    for t, p in weights.items():
        v = printed.value(float(t))
        dist[v] = dist.get(v, 0.0) + p / mass
    return Expected(printed.value(mean), details, tuple(sorted(dist.items())), weights.get(printed.text.strip(), 0.0) / mass)


def _on_scale(chars: str, k: int, digit: int, int_len: int, printed: Printed) -> bool:
    """The printed number with ``digit`` at position ``k`` is on the scale (no leading zero)."""
    if digit == 0 and k == 0 and int_len > 1:
        return False
    return printed.low <= float(chars[:k] + str(digit) + chars[k + 1 :]) <= printed.high


def _per_digit(steps: Sequence[TokenStep], owner: list[int], offset: list[int], start: int, printed: Printed) -> Expected | str:
    chars = printed.text.replace(",", ".")
    point = chars.find(".")
    int_len = point if point >= 0 else len(chars)
    total = 0.0
    masses: list[float] = []
    positions: list[tuple[float, dict[int, float]]] = []  # place value, renormalised digit probabilities
    printed_p = 1.0
    for k, c in enumerate(chars):
        if not c.isdigit():
            continue
        place = 10.0 ** (int_len - 1 - k) if k < int_len else 10.0 ** -(k - int_len)
        step = steps[owner[start + k]]
        probs = digit_distribution(step, char_index(step, offset[start + k]))
        if probs is None:
            return f"the digit {c!r} of {printed.text!r} carries no token probabilities"
        allowed = [d for d in range(10) if _on_scale(chars, k, d, int_len, printed)]
        mass = sum(probs[d] for d in allowed)
        if mass <= 0.0:
            return f"no digit on the scale has a probability at the digit {c!r} of {printed.text!r}"
        total += place * sum(d * probs[d] for d in allowed) / mass
        masses.append(mass)
        positions.append((place, {d: probs[d] / mass for d in allowed}))
        printed_p *= probs[int(c)] / mass if int(c) in allowed else 0.0
    details: dict[str, Any] = {"rule": "per-digit", "mass": math.prod(masses), "masses": masses, "positions": len(masses), "printed": printed.text}
    clipped = min(max(total, printed.low), printed.high)
    if clipped != total:
        details["clipped_from"] = printed.value(total)
    return Expected(printed.value(clipped), details, _joint(positions, printed), printed_p)


def _joint(positions: Sequence[tuple[float, dict[int, float]]], printed: Printed) -> tuple[tuple[float, float], ...]:
    """The distribution of ``sum(place * digit)`` over independent positions, each value clipped to
    the printed scale and mapped to the method's (empty past MAX_DISTRIBUTION_POSITIONS positions)."""
    if len(positions) > MAX_DISTRIBUTION_POSITIONS:
        return ()
    dist: dict[float, float] = {0.0: 1.0}
    for place, probs in positions:
        nxt: dict[float, float] = {}
        for v, p in dist.items():
            for d, q in probs.items():
                key = round(v + place * d, 9)  # place values of 0.1, 0.01: one key per printed number
                nxt[key] = nxt.get(key, 0.0) + p * q
        dist = nxt
    out: dict[float, float] = {}
    for v, p in dist.items():
        key = printed.value(min(max(v, printed.low), printed.high))
        out[key] = out.get(key, 0.0) + p
    return tuple(sorted(out.items()))


def estimate_parser(method: Method) -> Callable[[str], float | None]:
    """How the sampling estimate reads a sampled answer: the method's own reader on its scale
    (FLEUR's smoothing methods: :func:`capjudge.judges.sampling.fleur_score`, as before)."""
    if method.smoothing or not (method.expected_score or method.confidence):
        return fleur_score
    if method.parser == "first-integer":
        return first_integer
    low, high = method.scale
    return functools.partial(parse_score, low=low, high=high)


__all__ = ["WHOLE_NUMBER", "Expected", "Printed", "estimate_parser", "expected_score", "has_logprobs", "printed_by_rules", "printed_first_integer"]
