"""Cascaded selective evaluation (Trust or Escalate, Jung et al., ICLR 2025): judges asked in order,
each keeping a judgment only when its confidence clears a threshold calibrated on human labels so
that the kept judgments disagree with people at most ``alpha`` of the time, with probability at
least ``1 - delta`` over the calibration sample.

The official code is ``jaehunjung1/cascaded-selective-evaluation`` at commit
:data:`OFFICIAL_COMMIT` (``cascaded_evaluation/util.py``: ``SelectiveClassificationUtil``;
``cascaded_evaluation/cascaded_classifier.py``: ``CascadedClassifier.calibrate`` and
``apply_decision_rule``). ``rule="official"`` reproduces it step by step (its float32 arithmetic
included); ``rule="guaranteed"`` (the default) keeps the guarantee where the official code does not
(docs/trust.md, "Differences from the official code", names each difference):

- the number of errors is the exact count (the official code floors ``float32(e / n) * n``, one
  less than ``e`` for about 4% of ``(e, n)``, which makes the bound too small);
- thresholds are tested on the grid itself, from the highest down, and the lowest one whose bound
  and every bound above it stay at or under ``alpha`` is taken (fixed-sequence testing; the
  official code tests ``lambda - 1 / (number of candidates)``, off the grid);
- a judge whose highest candidate already fails keeps nothing (the official code keeps that
  highest candidate, risk unbounded), and a judge reached by fewer than ``min_samples`` calibration
  samples keeps nothing (the official code reuses the previous judge's threshold);
- a set whose kept samples are all wrong has the bound 1 (the official code's ``brentq`` stops
  with a ``ValueError``).

The risk bound at a threshold is the binomial (Clopper-Pearson) upper bound: the ``r`` solving
``binom.cdf(k, n, r) = delta``, computed as ``beta.ppf(1 - delta, k + 1, n - k)`` (the same root
the official code finds with ``brentq``, to its tolerance of 2e-12), vectorised over the grid.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.stats import beta

OFFICIAL_COMMIT = "1b969f22b9c6c78ff1034e63237769041d8f1788"
"""The commit of ``jaehunjung1/cascaded-selective-evaluation`` this module was checked against."""

PLAN_FORMAT = "capjudge-cascade-plan"
PLAN_VERSION = 1

Rule = Literal["guaranteed", "official"]
RULES: tuple[str, ...] = ("guaranteed", "official")


def threshold_grid(size: int = 5000) -> np.ndarray:
    """The candidate thresholds: ``torch.linspace(0, 1, size)`` (float32, torch's formula: the
    first half counted up from 0, the second down from 1) as float64 values, as the official code
    has them."""
    if size < 2:
        raise ValueError(f"the threshold grid needs at least 2 points, not {size}")
    step = np.float32(1) / np.float32(size - 1)
    i = np.arange(size)
    values = np.where(i < size // 2, float(step) * i, 1.0 - float(step) * (size - 1 - i))
    return values.astype(np.float32).astype(np.float64)


def risk_upper_bound(errors: Any, n: Any, delta: float) -> np.ndarray:
    """The ``1 - delta`` upper confidence bound of a binomial error rate: the ``r`` with
    ``binom.cdf(errors, n, r) = delta`` (Clopper-Pearson); 1 where every one is wrong; NaN where
    ``n`` is 0. Vectorised over ``errors`` and ``n``."""
    e = np.asarray(errors, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    e, m = np.broadcast_arrays(e, m)
    out = np.full(e.shape, np.nan)
    some = m > 0
    out[some] = 1.0
    below = some & (e < m)
    # Many thresholds share their counts: the quantile once per distinct (errors, n).
    eb, mb = e[below], m[below]
    keys, first, inverse = np.unique(mb * (mb.max(initial=0.0) + 1.0) + eb, return_index=True, return_inverse=True)
    out[below] = beta.ppf(1.0 - delta, eb[first] + 1.0, mb[first] - eb[first])[inverse.ravel()]
    return out


def _official_errors(errors: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The error count the official code hands ``binom.cdf``: ``float32(e / n) * n`` in float32
    (torch's default dtype), floored by scipy."""
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = errors.astype(np.float32) / n.astype(np.float32)
        return np.floor(rate * n.astype(np.float32)).astype(np.float64)


@dataclass(frozen=True)
class JudgeThreshold:
    """One judge's place in a cascade: its threshold (``None``: it keeps nothing) and what the
    calibration saw: ``calibration_n`` samples reached it, ``kept`` of them cleared the threshold,
    ``empirical_risk`` of those disagreed with people, ``risk_bound`` is their ``1 - delta`` upper
    bound, ``candidates`` the thresholds with at least ``min_samples`` samples above."""

    name: str
    threshold: float | None
    calibration_n: int
    kept: int
    empirical_risk: float | None
    risk_bound: float | None
    candidates: int
    note: str = ""


def _counts(conf: np.ndarray, correct: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many samples have confidence >= each threshold, and how many of them are wrong."""
    order = np.argsort(conf, kind="stable")
    c = conf[order]
    wrong = (~correct[order]).astype(np.int64)
    start = np.searchsorted(c, thresholds, side="left")
    tail_wrong = np.concatenate([np.cumsum(wrong[::-1])[::-1], [0]])
    return len(c) - start, tail_wrong[start]


def calibrate_judge(
    confidences: Any,
    predictions: Any,
    human: Any,
    alpha: float,
    delta: float,
    *,
    name: str = "judge",
    rule: Rule = "guaranteed",
    grid: int = 5000,
    min_samples: int = 30,
    previous: float | None = None,
) -> JudgeThreshold:
    """The threshold of one judge on its calibration samples (``confidences``: the judge's
    confidence in its verdict, ``predictions``: the verdicts, ``human``: the human labels, one per
    sample; a sample is right when its verdict equals the human label). ``previous``: the threshold
    of the judge before it in a cascade (``rule="official"`` reuses it when too few samples are
    left)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")
    if not (0 < alpha < 1 and 0 < delta < 1):
        raise ValueError(f"alpha and delta must lie in (0, 1), not {alpha} and {delta}")
    conf = np.asarray(confidences, dtype=np.float64)
    correct = np.asarray(predictions) == np.asarray(human)
    if conf.shape != correct.shape or conf.ndim != 1:
        raise ValueError(f"confidences, predictions and human labels must be 1-D of one length, not {np.shape(confidences)}, {np.shape(predictions)}, {np.shape(human)}")
    if np.isnan(conf).any():
        raise ValueError("a confidence is NaN")
    if rule == "official":
        conf = conf.astype(np.float32).astype(np.float64)  # torch.Tensor(probs): float32
    n_total = int(conf.size)
    g = threshold_grid(grid)
    n_at, e_at = _counts(conf, correct, g)
    m = int(np.count_nonzero(n_at >= min_samples))  # n(lambda) falls as lambda rises: a prefix
    if m == 0:
        if rule == "official" and previous is not None:
            return _summary(name, previous, conf, correct, delta, rule, n_total, 0, "too few samples: the previous judge's threshold (official rule)")
        if rule == "official" and previous is None:
            raise ValueError(f"{name}: fewer than {min_samples} calibration samples (the official code stops here)")
        return JudgeThreshold(name, None, n_total, 0, None, None, 0, f"fewer than {min_samples} calibration samples reach it: keeps nothing")
    cand = g[:m]
    if rule == "official":
        ub_top = risk_upper_bound(_official_errors(e_at[m - 1 : m], n_at[m - 1 : m]), n_at[m - 1 : m], delta)[0]
        if ub_top > alpha:
            return _summary(name, float(cand[-1]), conf, correct, delta, rule, n_total, m, "the highest candidate's bound is above alpha: kept anyway (official rule)")
        nxt = (cand.astype(np.float32) - np.float32(1.0 / m)).astype(np.float64)
        n_next, e_next = _counts(conf, correct, nxt)
        fails = risk_upper_bound(_official_errors(e_next, n_next), n_next, delta) > alpha
        idx = int(np.nonzero(fails)[0][-1]) if fails.any() else 0
        return _summary(name, float(cand[idx]), conf, correct, delta, rule, n_total, m)
    ub = risk_upper_bound(e_at[:m], n_at[:m], delta)
    fails = ub > alpha
    if fails[-1]:
        return JudgeThreshold(name, None, n_total, 0, None, None, m, "even its highest threshold's risk bound is above alpha: keeps nothing")
    idx = int(np.nonzero(fails)[0][-1]) + 1 if fails.any() else 0
    return _summary(name, float(cand[idx]), conf, correct, delta, rule, n_total, m)


def _summary(name: str, lam: float, conf: np.ndarray, correct: np.ndarray, delta: float, rule: Rule, n_total: int, m: int, note: str = "") -> JudgeThreshold:
    keep = conf >= lam
    kept = int(keep.sum())
    wrong = int((~correct[keep]).sum())
    if kept == 0:
        return JudgeThreshold(name, lam, n_total, 0, None, None, m, note)
    k = _official_errors(np.array([wrong]), np.array([kept]))[0] if rule == "official" else wrong
    bound = float(risk_upper_bound(k, kept, delta))
    return JudgeThreshold(name, lam, n_total, kept, wrong / kept, bound, m, note)


@dataclass(frozen=True)
class CascadePlan:
    """The calibrated cascade: the judges in the order they are asked, with their thresholds, and
    what it was calibrated with. ``cost_per_judgment``: each judge's cost in USD per judgment
    (``None`` unknown), for :func:`apply`'s cost per 1,000 judgments. ``runs``: how each judge was
    run, as its records said (``backend`` spec with secrets masked, ``method``, ``mode``,
    ``template_hash``, ``results``): what ``compare --cascade PLAN`` runs live (empty in a plan
    made from arrays)."""

    judges: list[JudgeThreshold]
    alpha: float
    delta: float
    rule: str
    grid: int
    min_samples: int
    n: int
    cost_per_judgment: list[float | None] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The plan file's JSON object (``format``, ``version`` first)."""
        body = asdict(self)
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, **body}

    @classmethod
    def from_dict(cls, data: Any) -> CascadePlan:
        """A plan from :meth:`to_dict`'s object; ``ValueError`` naming what is wrong."""
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a capjudge cascade plan (no \"format\": \"{PLAN_FORMAT}\")")
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"cascade plan version {data.get('version')!r}: this capjudge reads version {PLAN_VERSION}")
        try:
            judges = [JudgeThreshold(**j) for j in data["judges"]]
            return cls(judges, float(data["alpha"]), float(data["delta"]), str(data["rule"]), int(data["grid"]), int(data["min_samples"]), int(data["n"]), list(data.get("cost_per_judgment") or []), [dict(r) for r in data.get("runs") or []])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"cascade plan: {type(exc).__name__}: {exc}") from None

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON (atomically)."""
        from capjudge.data.io import write_json_atomically

        write_json_atomically(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> CascadePlan:
        """Read a plan file; ``ValueError`` naming the file and the cause."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None


def _stack(values: Sequence[Any], what: str) -> list[np.ndarray]:
    arrays = [np.asarray(v) for v in values]
    if not arrays or any(a.ndim != 1 or a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"{what}: one 1-D array per judge, all of one length")
    return arrays


def calibrate(
    confidences: Sequence[Any],
    predictions: Sequence[Any],
    human: Any,
    alpha: float,
    delta: float,
    *,
    names: Sequence[str] | None = None,
    rule: Rule = "guaranteed",
    grid: int = 5000,
    min_samples: int = 30,
    cost_per_judgment: Sequence[float | None] | None = None,
) -> CascadePlan:
    """Calibrate a cascade (``CascadedClassifier.calibrate``): ``confidences[j]`` and
    ``predictions[j]`` are judge ``j``'s on the same calibration samples, in the order the judges
    are asked (cheapest first); each judge is calibrated on the samples that no judge before it
    kept."""
    confs = _stack(confidences, "confidences")
    preds = _stack(predictions, "predictions")
    labels = np.asarray(human)
    if len(confs) != len(preds) or confs[0].shape != preds[0].shape or labels.shape != confs[0].shape:
        raise ValueError("confidences, predictions (one per judge) and human labels must cover the same samples")
    names = list(names) if names is not None else [f"judge{j + 1}" for j in range(len(confs))]
    taken = np.zeros(labels.shape, dtype=bool)
    judges: list[JudgeThreshold] = []
    for j, (c, p) in enumerate(zip(confs, preds)):
        left = ~taken
        prev = judges[-1].threshold if judges else None
        t = calibrate_judge(c[left], p[left], labels[left], alpha, delta, name=names[j], rule=rule, grid=grid, min_samples=min_samples, previous=prev)
        judges.append(t)
        if t.threshold is not None:
            cj = np.asarray(c, dtype=np.float64)
            if rule == "official":
                cj = cj.astype(np.float32).astype(np.float64)
            taken |= cj >= t.threshold
    costs: list[float | None] = list(cost_per_judgment) if cost_per_judgment is not None else [None] * len(judges)
    return CascadePlan(judges, alpha, delta, rule, grid, min_samples, int(labels.size), costs)


@dataclass(frozen=True)
class CascadeOutcome:
    """The cascade applied to samples (``apply_decision_rule``): ``decided_by[i]`` the index of the
    judge whose verdict sample ``i`` keeps (-1: every judge abstained), ``verdicts[i]`` that verdict
    (``None`` when abstained); ``coverage`` the share decided; ``shares`` each judge's share of the
    decided samples; ``asked`` each judge's share of all samples that reached it (what it costs);
    ``selective_accuracy`` the agreement with people on the decided samples (``None`` without human
    labels or without decided samples); ``cost_per_1000`` in USD when every judge's cost is known."""

    decided_by: np.ndarray
    verdicts: list[Any]
    coverage: float
    shares: dict[str, float]
    asked: dict[str, float]
    selective_accuracy: float | None
    cost_per_1000: float | None

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-safe values (without the per-sample arrays)."""
        return {"coverage": self.coverage, "shares": self.shares, "asked": self.asked, "selective_accuracy": self.selective_accuracy, "cost_per_1000": self.cost_per_1000, "decided": int((self.decided_by >= 0).sum()), "n": int(self.decided_by.size)}


def apply(plan: CascadePlan, confidences: Sequence[Any], predictions: Sequence[Any], human: Any = None) -> CascadeOutcome:
    """Apply a calibrated cascade: each sample's verdict is the first judge's whose confidence
    clears its threshold."""
    confs = _stack(confidences, "confidences")
    preds = _stack(predictions, "predictions")
    if len(confs) != len(plan.judges) or len(preds) != len(plan.judges):
        raise ValueError(f"the plan has {len(plan.judges)} judges: give one confidence and one prediction array each")
    n = confs[0].size
    decided_by = np.full(n, -1, dtype=np.int64)
    verdicts: list[Any] = [None] * n
    asked: dict[str, float] = {}
    for j, (jt, c, p) in enumerate(zip(plan.judges, confs, preds)):
        asked[jt.name] = float((decided_by < 0).mean()) if n else 0.0
        if jt.threshold is None:
            continue
        cj = np.asarray(c, dtype=np.float64)
        if plan.rule == "official":
            cj = cj.astype(np.float32).astype(np.float64)
        now = (cj >= jt.threshold) & (decided_by < 0)
        decided_by[now] = j
        for i in np.nonzero(now)[0]:
            verdicts[i] = p[i].item() if hasattr(p[i], "item") else p[i]
    done = decided_by >= 0
    count = int(done.sum())
    shares = {jt.name: (float((decided_by == j).sum()) / count if count else 0.0) for j, jt in enumerate(plan.judges)}
    accuracy = None
    if human is not None and count:
        labels = np.asarray(human)
        hits = sum(1 for i in np.nonzero(done)[0] if verdicts[i] == (labels[i].item() if hasattr(labels[i], "item") else labels[i]))
        accuracy = hits / count
    costs = plan.cost_per_judgment
    cost = None
    if len(costs) == len(plan.judges) and all(c is not None for c in costs):
        cost = 1000.0 * sum(asked[jt.name] * float(c) for jt, c in zip(plan.judges, costs) if c is not None)
    return CascadeOutcome(decided_by, verdicts, count / n if n else 0.0, shares, asked, accuracy, cost)
