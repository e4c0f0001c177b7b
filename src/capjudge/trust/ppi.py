"""System scores corrected by a few human labels: prediction-powered inference of a mean.

Prediction-powered inference (PPI; Angelopoulos et al., Science 2023) and its power-tuned form
PPI++ (Angelopoulos, Duchi and Zrnic, arXiv 2311.01453): a judge's scores ``yhat_unlabeled`` on many
samples, corrected by the judge's error on a few samples people labelled (``y`` the human value,
``yhat`` the judge's on the same samples). The estimators are re-derived from the ``ppi-python``
package (``ppi_py``: ``ppi_mean_pointestimate``, ``ppi_mean_ci``, ``classical_mean_ci``; the tests
check equality to 1e-9 on the same arrays), so capjudge does not depend on it at run time.

``clusters``: where several rows share one image (the captions of one image), the rows are not
independent. The clustered interval replaces each variance by the cluster-robust (CR0) one: the
sum over clusters of the squared sum of the cluster's centred values, divided by the square of the
number of rows. With one row per cluster it is ``ppi_py``'s variance exactly. The power-tuning
``lam`` is ``ppi_py``'s (from the unclustered covariances) in both cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import norm

Alternative = Literal["two-sided", "larger", "smaller"]


@dataclass(frozen=True)
class MeanEstimate:
    """A mean and its ``1 - alpha`` interval: ``method`` (``ppi``, ``ppi++``, ``classical``,
    ``naive``), ``lam`` (the power-tuning weight: 1 for PPI, 0 for classical), ``se`` the standard
    error, ``n`` labelled and ``N`` unlabelled samples, ``clustered`` whether clusters were used."""

    method: str
    estimate: float
    low: float
    high: float
    se: float
    lam: float
    n: int
    N: int
    alpha: float
    clustered: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return dict(self.__dict__)


def _vector(values: Any, what: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{what}: a non-empty 1-D array of numbers")
    if not np.isfinite(a).all():
        raise ValueError(f"{what}: every value must be finite")
    return a


def zconfint(mean: float, std: float, alpha: float, alternative: Alternative = "two-sided") -> tuple[float, float]:
    """statsmodels' ``_zconfint_generic``: the normal interval ``mean -/+ z * std``."""
    if alternative in ("two-sided", "2-sided", "2s"):
        z = norm.ppf(1 - alpha / 2.0)
        return mean - z * std, mean + z * std
    if alternative in ("larger", "l"):
        return mean - norm.ppf(1 - alpha) * std, np.inf
    if alternative in ("smaller", "s"):
        return -np.inf, mean + norm.ppf(1 - alpha) * std
    raise ValueError(f"unknown alternative {alternative!r}")


def cluster_variance(values: np.ndarray, clusters: Any | None, *, ddof: int = 0) -> np.ndarray:
    """The variance of the mean of ``values`` (rows; a 2-D array gives the covariance matrix) times
    the number of rows: ``values.var(ddof)`` (``np.cov`` with ``ddof=1``) without clusters; with
    clusters, the sum over clusters of the outer product of each cluster's summed centred rows,
    divided by ``n - ddof``. One row per cluster gives the unclustered value exactly."""
    v = values if values.ndim == 2 else values[:, None]
    centred = v - v.mean(axis=0)
    n = v.shape[0]
    if clusters is not None:
        keys = np.asarray(clusters)
        if keys.shape != (n,):
            raise ValueError(f"clusters: one key per row ({n}), not {keys.shape}")
        _, inverse = np.unique(keys, return_inverse=True)
        sums = np.zeros((inverse.max() + 1, v.shape[1]))
        np.add.at(sums, inverse, centred)
        centred = sums
    cov = centred.T @ centred / (n - ddof)
    return cov if values.ndim == 2 else cov[0, 0]


def tuned_lambda(y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray) -> float:
    """PPI++'s power-tuning weight of a mean (``ppi_py._calc_lam_glm`` with an identity Hessian,
    at the PPI point estimate, clipped to [0, 1])."""
    theta = yhat_unlabeled.mean() + (y - yhat).mean()
    g = y - theta
    gh = yhat - theta
    n, N = y.size, yhat_unlabeled.size
    cov = (1 / n) * 2 * np.sum((g - g.mean()) * (gh - gh.mean()))
    var = np.cov(np.concatenate([gh, yhat_unlabeled - theta]))
    if not var > 0:  # a constant judge carries no information: the labels alone (ppi_py: NaN)
        return 0.0
    lam = cov / (2 * (1 + n / N) * var)
    return float(np.clip(lam, 0, 1))


def ppi_mean(
    y: Any,
    yhat: Any,
    yhat_unlabeled: Any,
    *,
    alpha: float = 0.1,
    lam: float | None = None,
    alternative: Alternative = "two-sided",
    clusters: Any | None = None,
    clusters_unlabeled: Any | None = None,
) -> MeanEstimate:
    """The prediction-powered mean and interval: ``lam=None`` tunes it (PPI++), ``lam=1`` is PPI,
    ``lam=0`` the classical interval of the labels alone. ``ppi_mean_pointestimate`` and
    ``ppi_mean_ci`` of ``ppi_py``; ``clusters`` / ``clusters_unlabeled``: one key per labelled /
    unlabelled row (e.g. the image) for the clustered interval."""
    y = _vector(y, "human labels")
    yhat = _vector(yhat, "judge values on the labelled samples")
    yu = _vector(yhat_unlabeled, "judge values on the unlabelled samples")
    if y.shape != yhat.shape:
        raise ValueError(f"human labels ({y.size}) and the judge's values on them ({yhat.size}) must pair up")
    method = "ppi" if lam == 1 else ("classical" if lam == 0 else "ppi++")
    if lam is None:
        lam = tuned_lambda(y, yhat, yu)
    n, N = y.size, yu.size
    estimate = float((lam * yu).mean() + (y - lam * yhat).mean())
    var = cluster_variance(lam * yu, clusters_unlabeled) / N + cluster_variance(y - lam * yhat, clusters) / n
    se = float(np.sqrt(var))
    low, high = zconfint(estimate, se, alpha, alternative)
    clustered = clusters is not None or clusters_unlabeled is not None
    return MeanEstimate(method, estimate, float(low), float(high), se, float(lam), n, N, alpha, clustered)


def classical_mean(y: Any, *, alpha: float = 0.1, alternative: Alternative = "two-sided", clusters: Any | None = None) -> MeanEstimate:
    """The human labels alone (``ppi_py.classical_mean_ci``): their mean and normal interval."""
    y = _vector(y, "human labels")
    se = float(np.sqrt(cluster_variance(y, clusters) / y.size))
    low, high = zconfint(float(y.mean()), se, alpha, alternative)
    return MeanEstimate("classical", float(y.mean()), float(low), float(high), se, 0.0, y.size, 0, alpha, clusters is not None)


def naive_mean(yhat: Any, *, alpha: float = 0.1, alternative: Alternative = "two-sided", clusters: Any | None = None) -> MeanEstimate:
    """The judge alone, as if its values were human labels: the mean of every judge value and its
    normal interval. Its interval says nothing of the judge's bias: it covers the human mean only
    when the judge is unbiased (docs/trust.md)."""
    v = _vector(yhat, "judge values")
    se = float(np.sqrt(cluster_variance(v, clusters) / v.size))
    low, high = zconfint(float(v.mean()), se, alpha, alternative)
    return MeanEstimate("naive", float(v.mean()), float(low), float(high), se, 1.0, 0, v.size, alpha, clusters is not None)


def estimate_all(y: Any, yhat: Any, yhat_unlabeled: Any, *, alpha: float = 0.1, clusters: Any | None = None, clusters_unlabeled: Any | None = None) -> dict[str, MeanEstimate]:
    """Every estimate of the mean side by side: ``naive`` (judge on all rows), ``classical``
    (labels only), ``ppi`` and ``ppi++``."""
    yh_all = np.concatenate([np.asarray(yhat, dtype=np.float64), np.asarray(yhat_unlabeled, dtype=np.float64)])
    cl_all = None
    if clusters is not None and clusters_unlabeled is not None:
        cl_all = np.concatenate([np.asarray(clusters, dtype=object), np.asarray(clusters_unlabeled, dtype=object)]).astype(str)
    return {
        "naive": naive_mean(yh_all, alpha=alpha, clusters=cl_all),
        "classical": classical_mean(y, alpha=alpha, clusters=clusters),
        "ppi": ppi_mean(y, yhat, yhat_unlabeled, alpha=alpha, lam=1.0, clusters=clusters, clusters_unlabeled=clusters_unlabeled),
        "ppi++": ppi_mean(y, yhat, yhat_unlabeled, alpha=alpha, clusters=clusters, clusters_unlabeled=clusters_unlabeled),
    }
