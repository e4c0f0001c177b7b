"""Bradley-Terry strengths of captioning models from battles, corrected by a few human verdicts:
prediction-powered logistic regression (``ppi_py.ppi_logistic_pointestimate`` / ``ppi_logistic_ci``,
re-derived with numpy and scipy).

The battle design: one row per battle, ``x = e_a - e_b`` (``+1`` in model A's column, ``-1`` in
model B's) with the first model's column dropped (its strength is 0: the reference), no intercept;
the outcome is 1 when A wins, 0 when B wins, 0.5 for a tie (the logistic loss takes fractional
outcomes). ``y``: people's outcomes on the labelled battles; ``yhat`` / ``yhat_unlabeled``: the
judge's outcomes on the labelled and on the other battles.

The rectified loss is minimised by Newton's method to machine precision (``ppi_py`` starts from
scikit-learn's fit and runs L-BFGS-B with ``ftol = gtol = 1e-15``: the two agree to the optimiser's
precision, checked to 1e-6 in the tests). The power-tuning follows ``ppi_py`` step for step:
``lam`` from the gradients at the PPI (``lam = 1``) estimate, then again at the tuned estimate, and
the interval at that second ``lam``. ``clusters``: the cluster-robust (CR0) covariance of the
gradients (cluster sums of centred gradients, divided by ``n - 1`` as ``np.cov``), equal to
``ppi_py``'s with one row per cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from capjudge.trust.ppi import cluster_variance


def _log1pexp(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _loss_parts(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Sum of the logistic losses, their gradient and Hessian at ``theta``."""
    z = x @ theta
    mu = expit(z)
    loss = float(np.sum(-y * z + _log1pexp(z)))
    grad = x.T @ (mu - y)
    hess = (x * (mu * (1 - mu))[:, None]).T @ x
    return loss, grad, hess


def _rectified(theta: np.ndarray, lam: float, x: np.ndarray, y: np.ndarray, yhat: np.ndarray, xu: np.ndarray, yu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    n, N = y.size, yu.size
    lu, gu, hu = _loss_parts(theta, xu, yu)
    lh, gh, hh = _loss_parts(theta, x, yhat)
    ly, gy, hy = _loss_parts(theta, x, y)
    return lam / N * lu - lam / n * lh + ly / n, lam / N * gu - lam / n * gh + gy / n, lam / N * hu - lam / n * hh + hy / n


def rectified_fit(x: np.ndarray, y: np.ndarray, yhat: np.ndarray, xu: np.ndarray, yu: np.ndarray, lam: float, *, max_iter: int = 100) -> np.ndarray:
    """The minimiser of the rectified logistic loss (convex for ``lam`` in [0, 1]): damped Newton
    steps from 0 until the step is below 1e-13 of the estimate."""
    theta = np.zeros(x.shape[1])
    for _ in range(max_iter):
        f, g, h = _rectified(theta, lam, x, y, yhat, xu, yu)
        try:
            step = np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(h, g, rcond=None)[0]
        t = 1.0
        while t > 1e-10:
            new = theta - t * step
            if _rectified(new, lam, x, y, yhat, xu, yu)[0] <= f + 1e-12 * abs(f):
                break
            t /= 2
        theta = new
        if np.max(np.abs(t * step)) <= 1e-13 * max(1.0, np.max(np.abs(theta))):
            break
    return theta


def _stats(theta: np.ndarray, x: np.ndarray, y: np.ndarray, yhat: np.ndarray, xu: np.ndarray, yu: np.ndarray, use_unlabeled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``ppi_py._logistic_get_stats``: per-row gradients and the inverse Hessian."""
    n, N = y.size, yu.size
    mu = expit(x @ theta)
    mu_u = expit(xu @ theta)
    if use_unlabeled:
        hess = ((xu * (mu_u * (1 - mu_u))[:, None]).T @ xu + (x * (mu * (1 - mu))[:, None]).T @ x) / (N + n)
        grads_u = xu * (mu_u - yu)[:, None]
    else:
        hess = (x * (mu * (1 - mu))[:, None]).T @ x / n
        grads_u = np.zeros(xu.shape)
    grads = x * (mu - y)[:, None]
    grads_hat = x * (mu - yhat)[:, None]
    return grads, grads_hat, grads_u, np.linalg.inv(hess)


def _lam(grads: np.ndarray, grads_hat: np.ndarray, grads_u: np.ndarray, inv_h: np.ndarray) -> float:
    """``ppi_py._calc_lam_glm`` (overall mode, clipped to [0, 1])."""
    n, N = grads.shape[0], grads_u.shape[0]
    gc = grads - grads.mean(axis=0)
    ghc = grads_hat - grads_hat.mean(axis=0)
    cov = (1 / n) * (gc.T @ ghc + ghc.T @ gc)
    d = inv_h.shape[0]
    var = np.cov(np.concatenate([grads_hat, grads_u], axis=0).T).reshape(d, d)
    lam = np.trace(inv_h @ cov @ inv_h) / (2 * (1 + n / N) * np.trace(inv_h @ var @ inv_h))
    return float(np.clip(lam, 0, 1))


@dataclass(frozen=True)
class LogisticEstimate:
    """Coefficients, their standard errors and ``1 - alpha`` intervals, and the ``lam`` used."""

    coef: np.ndarray
    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    lam: float


def ppi_logistic(
    x: Any,
    y: Any,
    yhat: Any,
    x_unlabeled: Any,
    yhat_unlabeled: Any,
    *,
    alpha: float = 0.1,
    lam: float | None = None,
    clusters: Any | None = None,
    clusters_unlabeled: Any | None = None,
) -> LogisticEstimate:
    """Prediction-powered logistic regression (``ppi_logistic_ci``; two-sided): ``lam=None`` tunes
    it (PPI++), 1 is PPI, 0 the human labels alone."""
    X = np.asarray(x, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64)
    Yh = np.asarray(yhat, dtype=np.float64)
    Xu = np.asarray(x_unlabeled, dtype=np.float64)
    Yu = np.asarray(yhat_unlabeled, dtype=np.float64)
    if X.ndim != 2 or Xu.ndim != 2 or X.shape[0] != Y.size or Y.shape != Yh.shape or Xu.shape[0] != Yu.size or X.shape[1] != Xu.shape[1]:
        raise ValueError("x (n x d), y and yhat (n), x_unlabeled (N x d) and yhat_unlabeled (N) do not fit together")
    if lam is None:
        theta = rectified_fit(X, Y, Yh, Xu, Yu, 1.0)
        lam1 = _lam(*_stats(theta, X, Y, Yh, Xu, Yu, True))
        theta = rectified_fit(X, Y, Yh, Xu, Yu, lam1)
        lam = _lam(*_stats(theta, X, Y, Yh, Xu, Yu, True))
    theta = rectified_fit(X, Y, Yh, Xu, Yu, lam)
    grads, grads_hat, grads_u, inv_h = _stats(theta, X, Y, Yh, Xu, Yu, lam != 0)
    n, N, d = Y.size, Yu.size, X.shape[1]
    var_u = np.asarray(cluster_variance(lam * grads_u, clusters_unlabeled, ddof=1)).reshape(d, d)
    var = np.asarray(cluster_variance(grads - lam * grads_hat, clusters, ddof=1)).reshape(d, d)
    sigma = inv_h @ (n / N * var_u + var) @ inv_h
    se = np.sqrt(np.diag(sigma) / n)
    z = norm.ppf(1 - alpha / 2.0)
    return LogisticEstimate(theta, se, theta - z * se, theta + z * se, float(lam))


def battle_design(model_a: Sequence[str], model_b: Sequence[str], models: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """The rows ``e_a - e_b`` of battles, the first model's column dropped (its strength is 0), and
    the models in column order (the reference first)."""
    names = list(models) if models is not None else sorted(set(model_a) | set(model_b))
    if len(names) < 2:
        raise ValueError("Bradley-Terry needs battles between at least two models")
    col = {m: i for i, m in enumerate(names)}
    x = np.zeros((len(model_a), len(names)))
    for r, (a, b) in enumerate(zip(model_a, model_b)):
        if a == b:
            raise ValueError(f"battle {r + 1}: a model against itself ({a!r})")
        x[r, col[a]] += 1.0
        x[r, col[b]] -= 1.0
    return x[:, 1:], names


OUTCOME = {"A": 1.0, "B": 0.0, "tie": 0.5}
"""A verdict as a battle outcome for model A."""


@dataclass(frozen=True)
class Strengths:
    """Bradley-Terry strengths (log-odds units, the reference model 0) with intervals."""

    models: list[str]
    strength: list[float]
    low: list[float]
    high: list[float]
    lam: float
    n: int
    N: int

    def to_dict(self) -> dict[str, Any]:
        """Models best first, each with its strength and interval."""
        rows = sorted(zip(self.models, self.strength, self.low, self.high), key=lambda r: -r[1])
        return {"lam": self.lam, "n": self.n, "N": self.N, "models": [{"model": m, "strength": s, "ci": [lo, hi]} for m, s, lo, hi in rows]}


def bradley_terry(
    labelled: Sequence[tuple[str, str, str, str]],
    unlabelled: Sequence[tuple[str, str, str]],
    *,
    alpha: float = 0.1,
    lam: float | None = None,
    clusters: Any | None = None,
    clusters_unlabeled: Any | None = None,
) -> Strengths:
    """Bradley-Terry strengths by PPI logistic regression: ``labelled`` battles as ``(model_a,
    model_b, judge verdict, human verdict)``, ``unlabelled`` ones as ``(model_a, model_b, judge
    verdict)``; verdicts ``A`` / ``B`` / ``tie``."""
    models = sorted({r[0] for r in [*labelled, *unlabelled]} | {r[1] for r in [*labelled, *unlabelled]})
    x, names = battle_design([r[0] for r in labelled], [r[1] for r in labelled], models)
    xu, _ = battle_design([r[0] for r in unlabelled], [r[1] for r in unlabelled], models)
    y = np.array([OUTCOME[r[3]] for r in labelled])
    yh = np.array([OUTCOME[r[2]] for r in labelled])
    yu = np.array([OUTCOME[r[2]] for r in unlabelled])
    est = ppi_logistic(x, y, yh, xu, yu, alpha=alpha, lam=lam, clusters=clusters, clusters_unlabeled=clusters_unlabeled)
    return Strengths(names, [0.0, *est.coef.tolist()], [0.0, *est.low.tolist()], [0.0, *est.high.tolist()], est.lam, len(labelled), len(unlabelled))
