"""How well a judge's numbers match people's: reliability diagrams, expected calibration error,
Brier score, and a monotone map from the judge's score to the human scale.

- :func:`reliability`: the samples binned by the judge's value (equal-width bins on ``[low, high]``),
  each bin's mean value, the mean of the human outcome in it (accuracy for 0/1 outcomes, the mean
  human score otherwise) and its count. :func:`ece` is the count-weighted mean absolute gap between
  the two (on the outcome's scale); :func:`brier` the mean squared difference.
- :class:`IsotonicMap`: the least-squares non-decreasing map from the judge's score to the human
  score (pool-adjacent-violators, :func:`pava`), applied between its
  knots by linear interpolation and held flat outside them. It is saved as a versioned JSON
  calibration file that says what it was fitted on (method, backend, number of samples);
  :meth:`IsotonicMap.apply` keeps each raw value beside its calibrated one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION_FORMAT = "capjudge-calibration"
CALIBRATION_VERSION = 1


def _pair(values: Any, outcomes: Any) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=np.float64)
    o = np.asarray(outcomes, dtype=np.float64)
    if v.ndim != 1 or v.shape != o.shape or v.size == 0:
        raise ValueError(f"values and outcomes must be non-empty 1-D arrays of one length, not {v.shape} and {o.shape}")
    if not (np.isfinite(v).all() and np.isfinite(o).all()):
        raise ValueError("values and outcomes must be finite")
    return v, o


@dataclass(frozen=True)
class Reliability:
    """A reliability diagram's data: bin ``edges`` (``bins + 1``), and per bin its ``count``, the
    judge's ``mean_value`` and the ``mean_outcome`` (``None`` for an empty bin)."""

    edges: list[float]
    count: list[int]
    mean_value: list[float | None]
    mean_outcome: list[float | None]

    def to_dict(self) -> dict[str, Any]:
        """One entry per bin: ``low``, ``high``, ``count``, ``mean_value``, ``mean_outcome``."""
        return {"bins": [{"low": lo, "high": hi, "count": c, "mean_value": v, "mean_outcome": o} for lo, hi, c, v, o in zip(self.edges[:-1], self.edges[1:], self.count, self.mean_value, self.mean_outcome)]}


def reliability(values: Any, outcomes: Any, *, bins: int = 10, low: float = 0.0, high: float = 1.0) -> Reliability:
    """Equal-width bins of the judge's ``values`` on ``[low, high]`` (the last bin closed, values
    outside clipped into the end bins) with the mean value and mean human ``outcome`` of each."""
    v, o = _pair(values, outcomes)
    if bins < 1 or not high > low:
        raise ValueError(f"need bins >= 1 and high > low, not {bins}, [{low}, {high}]")
    edges = np.linspace(low, high, bins + 1)
    idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, bins - 1)
    count = np.bincount(idx, minlength=bins)
    sv = np.bincount(idx, weights=v, minlength=bins)
    so = np.bincount(idx, weights=o, minlength=bins)
    mv = [float(s / c) if c else None for s, c in zip(sv, count)]
    mo = [float(s / c) if c else None for s, c in zip(so, count)]
    return Reliability(edges.tolist(), count.astype(int).tolist(), mv, mo)


def ece(values: Any, outcomes: Any, *, bins: int = 10, low: float = 0.0, high: float = 1.0) -> float:
    """Expected calibration error: the count-weighted mean of ``|mean value - mean outcome|`` over
    the bins of :func:`reliability`."""
    r = reliability(values, outcomes, bins=bins, low=low, high=high)
    total = sum(r.count)
    return float(sum(c * abs(v - o) for c, v, o in zip(r.count, r.mean_value, r.mean_outcome) if c and v is not None and o is not None) / total)


def brier(values: Any, outcomes: Any) -> float:
    """Brier score: the mean of ``(value - outcome) ** 2`` (probabilities against 0/1 outcomes)."""
    v, o = _pair(values, outcomes)
    return float(np.mean((v - o) ** 2))


def pava(values: Any, weights: Any) -> np.ndarray:
    """Pool-adjacent-violators: the weighted least-squares non-decreasing fit of ``values`` (in
    their order). scipy has it only from 1.12 (``scipy.optimize.isotonic_regression``)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, length]
    for v, w in zip(np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, k2 = blocks.pop()
            m1, w1, k1 = blocks[-1]
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, k1 + k2]
    return np.concatenate([np.full(int(k), m) for m, _, k in blocks]) if blocks else np.zeros(0)


@dataclass(frozen=True)
class Calibrated:
    """A value through a calibration map: the judge's ``raw`` value and its ``calibrated`` one."""

    raw: float
    calibrated: float


@dataclass(frozen=True)
class IsotonicMap:
    """A non-decreasing map from a judge's score to the human scale: knots ``x`` (the distinct
    judge scores it was fitted on) and ``y`` (the fitted human values), linear between them and
    flat outside. ``fitted_on``: what the map was fitted on (``method``, ``backend``, ``n``, ...)."""

    x: list[float]
    y: list[float]
    fitted_on: dict[str, Any] = field(default_factory=dict)
    method: str = "isotonic"

    @classmethod
    def fit(cls, scores: Any, human: Any, *, fitted_on: dict[str, Any] | None = None) -> IsotonicMap:
        """Least-squares isotonic regression of ``human`` on ``scores`` (ties in ``scores`` pooled
        first: each distinct score's mean human value, weighted by its count)."""
        s, h = _pair(scores, human)
        xs, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
        means = np.bincount(inverse, weights=h) / counts
        fit = pava(means, counts.astype(np.float64))
        info = {"n": int(s.size), **(fitted_on or {})}
        return cls(xs.tolist(), [float(v) for v in fit], info)

    def __call__(self, scores: Any) -> np.ndarray:
        """The calibrated values of ``scores``."""
        return np.interp(np.asarray(scores, dtype=np.float64), self.x, self.y)

    def apply(self, scores: Any) -> list[Calibrated]:
        """Each score with its calibrated value beside it."""
        raw = np.asarray(scores, dtype=np.float64).ravel()
        return [Calibrated(float(r), float(c)) for r, c in zip(raw, self(raw))]

    def to_dict(self) -> dict[str, Any]:
        """The calibration file's JSON object (``format``, ``version`` first)."""
        return {"format": CALIBRATION_FORMAT, "version": CALIBRATION_VERSION, "method": self.method, "fitted_on": self.fitted_on, "x": self.x, "y": self.y}

    @classmethod
    def from_dict(cls, data: Any) -> IsotonicMap:
        """A map from :meth:`to_dict`'s object; ``ValueError`` naming what is wrong."""
        if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"not a capjudge calibration file (no \"format\": \"{CALIBRATION_FORMAT}\")")
        if data.get("version") != CALIBRATION_VERSION:
            raise ValueError(f"calibration file version {data.get('version')!r}: this capjudge reads version {CALIBRATION_VERSION}")
        if data.get("method") != "isotonic":
            raise ValueError(f"calibration method {data.get('method')!r}: this capjudge applies 'isotonic'")
        x, y = data.get("x"), data.get("y")
        if not isinstance(x, list) or not isinstance(y, list) or len(x) != len(y) or not x:
            raise ValueError("calibration file: x and y must be lists of one non-zero length")
        xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if not (np.isfinite(xa).all() and np.isfinite(ya).all()) or (np.diff(xa) <= 0).any() or (np.diff(ya) < 0).any():
            raise ValueError("calibration file: x must rise strictly and y must not fall, all finite")
        return cls(xa.tolist(), ya.tolist(), dict(data.get("fitted_on") or {}))

    def save(self, path: str | Path) -> None:
        """Write the calibration file (JSON, atomically)."""
        from capjudge.data.io import write_json_atomically

        write_json_atomically(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> IsotonicMap:
        """Read a calibration file; ``ValueError`` naming the file and the cause."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None
