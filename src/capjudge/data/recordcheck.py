"""What a record with status ``ok`` always holds: pure checks, usable by every layer.

A score record that says ``ok`` has a finite score on its method's scale; a pair record that says
``ok`` has a verdict (``A``, ``B`` or ``tie``) and, when it was decided by grading, two finite
scores. The judges apply these checks where records are made (:mod:`capjudge.judges.invariants`);
a re-run applies :func:`record_problem` to the records already in ``--out``, so a status-``ok``
record written by an older capjudge (a null, NaN or out-of-scale score, no verdict) is asked
again rather than kept.

Two allowances: a score within :data:`SCALE_TOLERANCE` of the scale's range outside it is
rounding (probabilities from a float32 softmax can add up to a hair over 1) and is clipped to the
scale; methods that read the first integer keep numbers outside the scale as the VisCE2 code does
(``outside_ok``, recorded as ``details.outside_scale``), finite all the same.
"""

from __future__ import annotations

import math
from typing import Any, get_args

from capjudge.data.types import Verdict

SCALE_TOLERANCE = 1e-3
"""The share of a scale's range by which a score may overshoot it and be clipped, not refused."""

VERDICTS: tuple[str, ...] = get_args(Verdict)


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value))


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


def unit_score(score: float, scale: tuple[float, float]) -> float | None:
    """``score`` mapped from ``scale`` onto ``[0, 1]`` and clipped there (what a reward is, when
    normalised); ``None`` for a scale that cannot be mapped (not a range of finite numbers)."""
    low, high = (float(v) for v in scale)
    if not (high > low and math.isfinite(low) and math.isfinite(high)):
        return None
    return min(1.0, max(0.0, (float(score) - low) / (high - low)))


def pair_problem(verdict: Any, scores: Any = None) -> str | None:
    """Why a pair record cannot say ``ok`` (``None`` when it can): no valid verdict, or a score
    of a comparison by grading that is not a finite number."""
    if verdict not in VERDICTS:
        return f"the comparison reached no valid verdict ({_shown(verdict)})"
    for side, score in zip("AB", scores or ()):
        if not _finite(score):
            return f"the score of caption {side} ({_shown(score)}) is not a finite number"
    return None


def record_problem(record: dict[str, Any]) -> str | None:
    """Why a results-file record that says ``ok`` breaks the rules above (``None`` when it does
    not, or when it is not an ``ok`` record). A pair record is one with ``caption_a``; a score
    record is checked against its own ``scale`` (finite only, when it has no readable scale),
    out-of-scale finite scores allowed where ``details.outside_scale`` says the method keeps them."""
    if record.get("status") != "ok":
        return None
    if "caption_a" in record or "verdict" in record:
        scores = record.get("scores")
        return pair_problem(record.get("verdict"), scores if isinstance(scores, (list, tuple)) else None)
    scale = record.get("scale")
    details = record.get("details")
    outside_ok = isinstance(details, dict) and bool(details.get("outside_scale"))
    if isinstance(scale, (list, tuple)) and len(scale) == 2 and all(_finite(v) for v in scale):
        bounds = (float(scale[0]), float(scale[1]))
    else:
        bounds, outside_ok = (-math.inf, math.inf), True
    _, problem = checked_score(record.get("score"), bounds, outside_ok=outside_ok)
    return problem


__all__ = ["SCALE_TOLERANCE", "VERDICTS", "checked_score", "pair_problem", "record_problem", "unit_score"]
