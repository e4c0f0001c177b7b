"""The official Trust or Escalate calibration, re-derived as plain loops for the tests.

Source: github.com/jaehunjung1/cascaded-selective-evaluation at commit
1b969f22b9c6c78ff1034e63237769041d8f1788, ``cascaded_evaluation/util.py``
(``SelectiveClassificationUtil``) and ``cascaded_evaluation/cascaded_classifier.py``
(``CascadedClassifier.calibrate``, ``apply_decision_rule``). That repository has no licence file
and its README names none, so its code is not copied here: these functions restate its steps one
for one, in the same order and with the same arithmetic (torch's default float32 emulated with
numpy float32, scipy's ``binom.cdf`` and ``brentq`` on [0, 0.9999] as there), written loop by loop
and threshold by threshold, with no vectorisation, to check capjudge.trust.cascade against. They,
and capjudge's rule="official", were checked once against the official code itself (run from a
checkout at that commit, its model clients stubbed) on 70 random two-judge cascades: equal
thresholds to 1e-9, equal deciding judge per sample, coverage and selective accuracy; the runs
took each of the official code's branches (the normal step down, the highest candidate kept
although its bound is above alpha, the previous judge's threshold reused). That script is not part
of the project.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom


def torch_linspace01(steps: int) -> np.ndarray:
    """torch.linspace(0, 1, steps) in float32 (first half counted up, second half down)."""
    step = np.float32(1) / np.float32(steps - 1)
    out = np.empty(steps, dtype=np.float32)
    for i in range(steps):
        out[i] = np.float32(float(step) * i) if i < steps // 2 else np.float32(1.0 - float(step) * (steps - 1 - i))
    return out


class Selective:
    """One judge's selective classification on its calibration samples (float32 confidences)."""

    def __init__(self, phats: np.ndarray, yhats: np.ndarray, labels: np.ndarray, delta: float, grid: int = 5000, min_samples: int = 30) -> None:
        self.phats = phats.astype(np.float32)
        self.right = np.asarray(yhats) == np.asarray(labels)
        self.delta = delta
        self.lambdas = [lam for lam in torch_linspace01(grid) if self.n_at(lam) >= min_samples]

    def n_at(self, lam: np.float32) -> int:
        return int(np.sum(self.phats >= lam))

    def risk(self, lam: np.float32) -> np.float32:
        keep = self.phats >= lam
        return np.float32(np.sum(~self.right[keep])) / np.float32(np.sum(keep))

    def bound(self, lam: np.float32) -> float:
        n = self.n_at(lam)
        k = self.risk(lam) * np.float32(n)  # float32 product, floored by binom.cdf
        return brentq(lambda r: binom.cdf(k, n, r) - self.delta, 0, 0.9999)

    def lambda_hat(self, alpha: float) -> float:
        if not self.lambdas:
            return 0.0
        if self.bound(self.lambdas[-1]) > alpha:
            return float(self.lambdas[-1])
        step = 1 / len(self.lambdas)
        for lam in reversed(self.lambdas):
            if self.bound(np.float32(lam - np.float32(step))) > alpha:
                return float(lam)
        return float(self.lambdas[0])


def calibrate(phats: list[np.ndarray], yhats: list[np.ndarray], labels: np.ndarray, alpha: float, delta: float, grid: int = 5000, min_samples: int = 30) -> list[float]:
    """``CascadedClassifier.calibrate``: each judge on the samples no earlier judge kept."""
    taken = np.zeros(len(labels), dtype=bool)
    out: list[float] = []
    for ph, yh in zip(phats, yhats):
        ph32 = ph.astype(np.float32)
        util = Selective(ph32[~taken], yh[~taken], labels[~taken], delta, grid, min_samples)
        lam = out[-1] if not util.lambdas else util.lambda_hat(alpha)  # IndexError for a first judge, as there
        out.append(lam)
        taken[ph32 >= np.float32(lam)] = True
    return out


def apply_rule(lams: list[float], phats: list[np.ndarray], yhats: list[np.ndarray], labels: np.ndarray) -> tuple[list[float], float, float, np.ndarray]:
    """``apply_decision_rule``: (each judge's share of the decided, selective accuracy, coverage,
    the deciding judge per sample or -1)."""
    n = len(labels)
    evaluator = np.full(n, -1)
    pred = np.full(n, -1.0)
    for j, (lam, ph, yh) in enumerate(zip(lams, phats, yhats)):
        for i in range(n):
            if np.float32(ph[i]) >= np.float32(lam) and evaluator[i] < 0:
                evaluator[i] = j
                pred[i] = yh[i]
    decided = int(np.sum(evaluator >= 0))
    if decided == 0:
        return [0.0] * len(lams), 1.0, 0.0, evaluator
    shares = [float(np.sum(evaluator == j)) / n for j in range(len(lams))]
    shares = [s / sum(shares) for s in shares]
    return shares, float(np.sum(pred == labels)) / decided, decided / n, evaluator
