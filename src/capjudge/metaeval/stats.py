"""Agreement statistics between judge scores and human judgments.

Correlations come from scipy (``kendalltau`` with ``variant="b"``/``"c"``, ``pearsonr``,
``spearmanr``) and return NaN, never raise, when undefined (fewer than two items, constant input).
Pairwise accuracy takes a stated tie rule: ``"wrong"`` (a tie is a miss, as FLEUR's code counts it)
or ``"half"`` (a tie is worth half a hit).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Literal

import numpy as np
from scipy import stats as _st

TieRule = Literal["wrong", "half"]
TIE_RULES: tuple[str, ...] = ("wrong", "half")

ArrayLike = Sequence[float] | np.ndarray


def _pair(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray] | None:
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"x and y differ in length ({a.size} vs {b.size})")
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return None
    return a, b


def _safe(fn: Callable[[], float]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            value = float(fn())
        except (ValueError, FloatingPointError):
            return math.nan
    return value


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall tau-b, ``(C - D) / sqrt((n0 - n1)(n0 - n2))``: adjusts for ties in either variable."""
    p = _pair(x, y)
    return math.nan if p is None else _safe(lambda: _st.kendalltau(p[0], p[1], variant="b")[0])


def kendall_tau_c(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall tau-c (Stuart), ``2m(C - D) / (n^2 (m - 1))`` with ``m`` the smaller number of
    distinct values; the Flickr8k-Expert and Composite convention."""
    p = _pair(x, y)
    return math.nan if p is None else _safe(lambda: _st.kendalltau(p[0], p[1], variant="c")[0])


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson's r."""
    p = _pair(x, y)
    return math.nan if p is None else _safe(lambda: _st.pearsonr(p[0], p[1])[0])


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho (Pearson on average ranks)."""
    p = _pair(x, y)
    return math.nan if p is None else _safe(lambda: _st.spearmanr(p[0], p[1])[0])


CORRELATIONS: dict[str, Callable[[ArrayLike, ArrayLike], float]] = {
    "tau_b": kendall_tau_b,
    "tau_c": kendall_tau_c,
    "pearson": pearson,
    "spearman": spearman,
}


def pair_outcomes(preferred: ArrayLike, other: ArrayLike) -> np.ndarray:
    """Per pair: ``1`` when the human-preferred caption scored higher, ``0`` on a tie, ``-1`` else."""
    a = np.asarray(preferred, dtype=float)
    b = np.asarray(other, dtype=float)
    return np.sign(a - b).astype(int)


def pairwise_accuracy(outcomes: ArrayLike, ties: TieRule = "wrong") -> float:
    """Share of pairs the judge got right (``outcomes`` from :func:`pair_outcomes`), in [0, 1].

    ``ties="wrong"`` counts a tie as a miss (FLEUR: ``true_count`` only on a strict win);
    ``ties="half"`` gives a tie half a hit. NaN for no pairs.
    """
    if ties not in TIE_RULES:
        raise ValueError(f"tie rule must be one of {TIE_RULES}, not {ties!r}")
    o = np.asarray(outcomes, dtype=float)
    if o.size == 0:
        return math.nan
    hits = float(np.sum(o > 0)) + (0.5 * float(np.sum(o == 0)) if ties == "half" else 0.0)
    return hits / o.size


def pick_one_credit(scores: Sequence[float], correct: int | Collection[int], ties: TieRule = "wrong") -> float:
    """One group's credit for picking a correct caption by the highest score.

    ``correct`` is the index of the correct caption, or the indices of several. With ``k``
    captions sharing the top score of which ``t`` are correct: 1 for a unique correct winner, 0 if
    none of the top is correct; otherwise 0 (``ties="wrong"``) or ``t / k`` (``ties="half"``: the
    expected hit of a random choice among the tied).
    """
    if ties not in TIE_RULES:
        raise ValueError(f"tie rule must be one of {TIE_RULES}, not {ties!r}")
    right = {correct} if isinstance(correct, int) else set(correct)
    s = np.asarray(scores, dtype=float)
    top = np.flatnonzero(s == s.max())
    t = sum(int(k) in right for k in top)
    if len(top) == 1:
        return float(t)
    return t / len(top) if ties == "half" else 0.0


def pick_one_accuracy(groups: Sequence[tuple[Sequence[float], int | Collection[int]]], ties: TieRule = "wrong") -> float:
    """Accuracy of picking a correct caption among N (Flaws-Caption style): the mean of
    :func:`pick_one_credit` over groups ``(scores of the N captions, index or indices of the
    correct ones)``. NaN for no groups.
    """
    if ties not in TIE_RULES:
        raise ValueError(f"tie rule must be one of {TIE_RULES}, not {ties!r}")
    if not groups:
        return math.nan
    return sum(pick_one_credit(scores, correct, ties) for scores, correct in groups) / len(groups)


def bootstrap_cis(
    statistic: Callable[[np.ndarray], Mapping[str, float]],
    n_units: int,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    progress: Callable[[], None] | None = None,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap confidence intervals of several measures at once.

    ``statistic(indices)`` computes the measures on the units at ``indices`` (drawn with replacement
    from ``range(n_units)``); a unit is what is resampled (a judged caption with all its rating rows,
    or a pair). Resamples where a measure is undefined (NaN) are dropped for that measure; a measure
    never defined gets ``(nan, nan)``. Deterministic for a given ``seed``. ``progress`` is called
    after each resample (a progress bar).
    """
    if n_units < 2 or n_resamples < 1:
        return {}
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {}
    for _ in range(n_resamples):
        for name, v in statistic(rng.integers(0, n_units, size=n_units)).items():
            values.setdefault(name, [])
            if not math.isnan(v):
                values[name].append(v)
        if progress is not None:
            progress()
    return percentile_cis({name: np.asarray(vs, dtype=float) for name, vs in values.items()}, confidence)


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float],
    n_units: int,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of one measure (see :func:`bootstrap_cis`).

    Returns ``(nan, nan)`` when nothing can be estimated.
    """
    cis = bootstrap_cis(lambda idx: {"v": statistic(idx)}, n_units, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return cis.get("v", (math.nan, math.nan))


def resample_index_chunks(n_units: int, n_resamples: int, *, seed: int = 0, max_cells: int = 2_000_000) -> Iterator[np.ndarray]:
    """Bootstrap resamples as index matrices, one row per resample (``n_units`` indices drawn with
    replacement from ``range(n_units)``), in chunks of rows holding at most ``max_cells`` indices so
    that memory stays bounded. Deterministic for a given ``seed``."""
    rng = np.random.default_rng(seed)
    rows = max(1, max_cells // max(1, n_units))
    done = 0
    while done < n_resamples:
        k = min(rows, n_resamples - done)
        yield rng.integers(0, n_units, size=(k, n_units))
        done += k


def resample_counts(indices: np.ndarray, n_units: int) -> np.ndarray:
    """How often each unit was drawn in each resample: ``(rows, n_units)`` float counts of an index
    matrix from :func:`resample_index_chunks` (weights for vectorised statistics)."""
    rows = indices.shape[0]
    flat = (indices + (np.arange(rows) * n_units)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n_units).reshape(rows, n_units).astype(float)


def percentile_cis(values: Mapping[str, np.ndarray], confidence: float = 0.95) -> dict[str, tuple[float, float]]:
    """Percentile intervals of bootstrap values per measure; NaN values (undefined in that resample)
    are dropped, a measure never defined gets ``(nan, nan)``."""
    lo = (1.0 - confidence) / 2
    out: dict[str, tuple[float, float]] = {}
    for name, vs in values.items():
        v = np.asarray(vs, dtype=float)
        v = v[~np.isnan(v)]
        out[name] = (float(np.quantile(v, lo)), float(np.quantile(v, 1.0 - lo))) if v.size else (math.nan, math.nan)
    return out


def bootstrap_cis_batched(
    statistic: Callable[[np.ndarray], Mapping[str, np.ndarray]],
    n_units: int,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, tuple[float, float]]:
    """Vectorised :func:`bootstrap_cis`: ``statistic(index_matrix)`` gets a chunk of resamples (one
    row of unit indices per resample) and returns, per measure, one value per row. Same percentile
    rule and NaN handling; deterministic for a given ``seed``."""
    if n_units < 2 or n_resamples < 1:
        return {}
    values: dict[str, list[np.ndarray]] = {}
    for idx in resample_index_chunks(n_units, n_resamples, seed=seed):
        for name, v in statistic(idx).items():
            values.setdefault(name, []).append(np.asarray(v, dtype=float).reshape(-1))
    return percentile_cis({k: np.concatenate(v) for k, v in values.items()}, confidence)
