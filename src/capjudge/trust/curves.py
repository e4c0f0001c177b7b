"""Coverage-risk curves: what a judge or a cascade keeps, and how often the kept verdicts disagree
with people, as the threshold or the risk target moves (the data of the report's figures).

- :func:`selective_curve`: one judge alone, its threshold lowered through each of its distinct
  confidences: the share of samples it keeps (``coverage``) and the share of those that disagree
  with the human label (``risk``, in sample: no guarantee).
- :func:`cascade_curve`: the cascade calibrated again at each risk target ``alpha`` (the same
  labels, judges, ``delta`` and rule): its coverage, the disagreement of its kept verdicts, the
  guaranteed bound and the cost per 1,000 judgments, one point per target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.trust import cascade as csc

DEFAULT_TARGETS: tuple[float, ...] = tuple(round(0.02 * k, 2) for k in range(1, 26))
"""The risk targets of :func:`cascade_curve` unless given: 0.02, 0.04, ..., 0.50."""


@dataclass(frozen=True)
class SelectiveCurve:
    """One judge's coverage-risk curve: at each ``threshold`` (its distinct confidences, highest
    first), the share of samples kept (``coverage``, rising) and the share of kept samples that
    disagree with people (``risk``)."""

    threshold: list[float]
    coverage: list[float]
    risk: list[float]


def selective_curve(confidences: Any, correct: Any) -> SelectiveCurve:
    """The coverage-risk curve of one judge: keeping the samples whose confidence is at least each
    of its distinct confidence values in turn (``correct``: whether each verdict agrees with the
    human label)."""
    conf = np.asarray(confidences, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    if conf.ndim != 1 or conf.shape != ok.shape or conf.size == 0:
        raise ValueError(f"confidences and correct must be non-empty 1-D arrays of one length, not {conf.shape} and {ok.shape}")
    if np.isnan(conf).any():
        raise ValueError("a confidence is NaN")
    order = np.argsort(-conf, kind="stable")
    c, wrong = conf[order], (~ok[order]).astype(np.int64)
    # the last position of each distinct confidence (descending): everything up to it is kept
    ends = np.nonzero(np.r_[c[1:] != c[:-1], True])[0]
    kept = ends + 1
    errors = np.cumsum(wrong)[ends]
    return SelectiveCurve(c[ends].tolist(), (kept / c.size).tolist(), (errors / kept).tolist())


def guaranteed_risk(plan: csc.CascadePlan) -> float | None:
    """The largest risk bound of the judges that keep verdicts (each bound holds for its judge's
    kept share, so the largest bounds the kept verdicts as a whole); ``None`` when none keeps any."""
    return max((j.risk_bound for j in plan.judges if j.threshold is not None and j.risk_bound is not None), default=None)


@dataclass(frozen=True)
class CurvePoint:
    """The cascade calibrated at the risk target ``alpha``: ``coverage`` (share decided), ``risk``
    (disagreement with people of the decided verdicts, in sample; ``None`` when none is decided),
    ``risk_bound`` (:func:`guaranteed_risk`), ``cost_per_1000`` (USD, ``None`` unknown) and each
    judge's ``thresholds`` (``None``: keeps nothing)."""

    alpha: float
    coverage: float
    risk: float | None
    risk_bound: float | None
    cost_per_1000: float | None
    thresholds: list[float | None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return dict(self.__dict__)


def cascade_curve(
    confidences: Sequence[Any],
    predictions: Sequence[Any],
    human: Any,
    delta: float,
    *,
    targets: Sequence[float] = DEFAULT_TARGETS,
    names: Sequence[str] | None = None,
    rule: csc.Rule = "guaranteed",
    grid: int = 5000,
    min_samples: int = 30,
    cost_per_judgment: Sequence[float | None] | None = None,
) -> list[CurvePoint]:
    """The cascade (:func:`capjudge.trust.cascade.calibrate`, same arguments) calibrated and
    applied on the same labelled samples at each risk target in ``targets`` (sorted, each in
    (0, 1)); a target the rule cannot calibrate at is left out."""
    points: list[CurvePoint] = []
    for alpha in sorted(set(float(a) for a in targets)):
        if not 0 < alpha < 1:
            raise ValueError(f"a risk target must lie in (0, 1), not {alpha}")
        try:
            plan = csc.calibrate(confidences, predictions, human, alpha, delta, names=names, rule=rule, grid=grid, min_samples=min_samples, cost_per_judgment=cost_per_judgment)
        except ValueError:  # the official rule stops where too few samples reach the first judge
            continue
        out = csc.apply(plan, confidences, predictions, human)
        risk = None if out.selective_accuracy is None else 1.0 - out.selective_accuracy
        points.append(CurvePoint(alpha, out.coverage, risk, guaranteed_risk(plan), out.cost_per_1000, [j.threshold for j in plan.judges]))
    return points
