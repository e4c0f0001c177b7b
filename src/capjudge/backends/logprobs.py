"""Token log-probabilities that are not log-probabilities: found once, named, never scored.

A log-probability is a number ``<= 0`` (probability at most 1). A server (or a broken model) can
send anything: ``5.0``, ``NaN``, ``Infinity``, a string. Smoothing turns such values into scores far
off the method's scale (``exp(50)`` is 5e21), so an answer that carries one is refused as a whole:
:func:`steps_problem` names the first bad value and where it is, and :func:`checked` turns the
answer into an :class:`InvalidLogprobError` that the judge records as that sample's error.

Accepted: finite values up to :data:`LOGPROB_TOLERANCE` above 0 (rounding in a float32 softmax),
and ``-inf`` for an alternative (probability 0, as a masked token has); refused: ``NaN``, ``+inf``,
values above the tolerance, non-numbers, ``-inf`` for the token the model chose (it cannot have
chosen a token of probability 0), and alternatives at one step whose probabilities add up to more
than ``1 + MASS_TOLERANCE`` (distinct tokens of one distribution).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from capjudge.backends.base import BackendError, Completion, TokenStep

LOGPROB_TOLERANCE = 1e-4
"""How far above 0 a log-probability may be and still be one (a probability up to 1.0001)."""

MASS_TOLERANCE = 1e-3
"""How far above 1 the probabilities of the alternatives at one step may add up."""


class InvalidLogprobError(BackendError):
    """An answer carries a log-probability that is not one (the sample becomes an error record)."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def logprob_problem(value: Any, *, chosen: bool = False) -> str | None:
    """Why ``value`` is not a log-probability (``None`` when it is one). ``chosen``: the value is
    the log-probability of the token the model wrote (``-inf`` is then refused too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{_shown(value)} (not a number)"
    number = float(value)
    if math.isnan(number):
        return "NaN (not a number)"
    if number == math.inf:
        return "inf (> 0)"
    if number == -math.inf:
        return "-inf (probability 0 for the token the model wrote)" if chosen else None
    if number > LOGPROB_TOLERANCE:
        return f"{number!r} (> 0)"
    return None


def as_logprob(value: Any) -> Any:
    """A log-probability as a server sent it, made a float where it is a number (numeric strings
    included, as the protocol's readers always took them); anything else is returned as it is,
    for :func:`logprob_problem` to name."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _token(step: TokenStep) -> str:
    return _shown(step.token) if isinstance(step.token, str) else _shown(str(step.token))


def steps_problem(steps: Sequence[TokenStep], *, who: str = "the backend") -> str | None:
    """The first value of ``steps`` that is not a log-probability, named with its place
    ("the server returned log-probability 5 (> 0) at token 3 '0'"), or ``None``. Tokens are
    numbered from 1."""
    for n, step in enumerate(steps, start=1):
        where = f"at token {n} {_token(step)}"
        if step.logprob is not None:
            why = logprob_problem(step.logprob, chosen=True)
            if why:
                return f"{who} returned log-probability {why} {where}"
        for values, what in ((step.top, "top alternatives"), (tuple(("digit " + str(d), lp) for d, lp in enumerate(step.digits or ())), "digit tokens")):
            mass = 0.0
            for alt, lp in values:
                why = logprob_problem(lp)
                if why:
                    return f"{who} returned log-probability {why} for alternative {_shown(alt)} {where}"
                mass += math.exp(float(lp))
            if mass > 1.0 + MASS_TOLERANCE:
                return f"{who} returned {what} whose probabilities add up to {mass:.4g} (> 1) {where}"
    return None


def checked(answer: Completion | BaseException, *, who: str = "the backend") -> Completion | BaseException:
    """``answer``, or an :class:`InvalidLogprobError` naming why its log-probabilities are none
    (an answer its backend has checked already, ``steps_checked``, is not checked again)."""
    if isinstance(answer, Completion) and answer.steps and not answer.steps_checked:
        problem = steps_problem(answer.steps, who=who)
        if problem:
            cached = " (this answer came from the response cache)" if answer.cached else ""
            return InvalidLogprobError(f"{problem}; the answer is not scored{cached}")
    return answer


__all__ = ["LOGPROB_TOLERANCE", "MASS_TOLERANCE", "InvalidLogprobError", "as_logprob", "checked", "logprob_problem", "steps_problem"]
