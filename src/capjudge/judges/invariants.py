"""What a record with status ``ok`` always holds, checked where records are made.

A score record that says ``ok`` has a finite score on its method's scale; a pair record that says
``ok`` has a verdict (``A``, ``B`` or ``tie``) and, when it was decided by grading, two finite
scores. Whatever the backend answered, a record that breaks this is turned into an error record
naming the cause (:func:`score_problem`, :func:`pair_problem`), so no status-``ok`` record holds a
score of 1e22 on a 0-1 scale, or none at all.

Two allowances: a score within :data:`SCALE_TOLERANCE` of the scale's range outside it is
rounding (probabilities from a float32 softmax can add up to a hair over 1) and is clipped to the
scale; methods that read the first integer keep numbers outside the scale as the VisCE2 code does
(``outside_ok``, recorded as ``details.outside_scale``), finite all the same.
"""

from __future__ import annotations

import math
from typing import Any

from capjudge.judges.voting import VERDICTS

SCALE_TOLERANCE = 1e-3
"""The share of a scale's range by which a score may overshoot it and be clipped, not refused."""


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def checked_score(score: Any, scale: tuple[float, float], *, outside_ok: bool = False) -> tuple[float | None, str | None]:
    """``(score, None)`` for a valid score (clipped to ``scale`` when it overshoots by rounding
    only), else ``(None, why)``."""
    low, high = scale
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return None, f"the judge produced no score ({_shown(score)}) for an answer it called scored"
    value = float(score)
    if not math.isfinite(value):
        return None, f"the judge produced score {_shown(value)}, which is not a finite number"
    if outside_ok or low <= value <= high:
        return value, None
    slack = SCALE_TOLERANCE * (high - low)
    if low - slack <= value <= high + slack:
        return min(max(value, low), high), None
    return None, f"the judge produced score {_shown(value)}, outside the method's scale {low:g}-{high:g}"


def pair_problem(verdict: Any, scores: Any = None) -> str | None:
    """Why a pair record cannot say ``ok`` (``None`` when it can): no valid verdict, or a score
    of a comparison by grading that is not a finite number."""
    if verdict not in VERDICTS:
        return f"the comparison reached no valid verdict ({_shown(verdict)})"
    for side, score in zip("AB", scores or ()):
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(float(score)):
            return f"the score of caption {side} ({_shown(score)}) is not a finite number"
    return None


__all__ = ["SCALE_TOLERANCE", "checked_score", "pair_problem"]
