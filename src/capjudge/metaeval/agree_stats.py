"""Statistics of agreement between two (or more) judges, with vectorised bootstrap intervals.

Score judges: Kendall tau-b, Spearman and Pearson (x100), the mean difference, a binned
calibration view, the ordering of caption pairs of the same image, and the largest rank
differences. Verdict judges (A/B/tie): Cohen's kappa, Fleiss' kappa, the agreement rate and each
judge's position-bias figures.

The bootstrap resamples samples. Pearson, Spearman, the mean difference and the kappas are computed
for a whole chunk of resamples at once from the resample counts (how often each sample was drawn):
a resample is the original data weighted by those counts, so no resampled copy is built and no
resample is re-sorted. Kendall tau-b is computed the same way (:class:`KendallPlan`: one merge-sort
plan over the fixed order, weighted by the counts of each resample).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from capjudge.judges.voting import VERDICTS, position_bias  # noqa: F401 - position_bias: part of this module's interface
from capjudge.metaeval import stats


# ------------------------------------------------------------------------------ weighted, batched
def weighted_pearson(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of ``x`` and ``y`` with each point counted ``w`` times, one value per row of
    ``w`` (``(k, n)`` counts). ``x``, ``y``: ``(n,)`` or ``(k, n)``. NaN where a side is constant."""
    total = w.sum(axis=1)
    if x.ndim == 1 and y.ndim == 1:
        # centre first: sums of squares of raw 0-100 scores would lose digits to cancellation
        x = x - x.mean()
        y = y - y.mean()
        sx, sy = w @ x, w @ y
        sxx, syy, sxy = w @ (x * x), w @ (y * y), w @ (x * y)
    else:
        wx, wy = w * x, w * y
        sx, sy = wx.sum(axis=1), wy.sum(axis=1)
        sxx, syy, sxy = np.einsum("ij,ij->i", wx, x), np.einsum("ij,ij->i", wy, y), np.einsum("ij,ij->i", wx, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = sxy / total - sx * sy / total**2
        vx = sxx / total - (sx / total) ** 2
        vy = syy / total - (sy / total) ** 2
        r = cov / np.sqrt(vx * vy)
    # a variance that is zero up to rounding means a constant side: undefined, as scipy says
    scale_x = sxx / total + (sx / total) ** 2
    scale_y = syy / total + (sy / total) ** 2
    r[(vx <= 1e-12 * np.maximum(scale_x, 1e-300)) | (vy <= 1e-12 * np.maximum(scale_y, 1e-300))] = math.nan
    return np.clip(r, -1.0, 1.0)


class RankPlan:
    """What average ranks under any resample weights need: the sort order and the tie groups of
    ``x`` (computed once)."""

    def __init__(self, x: np.ndarray) -> None:
        self.order = np.argsort(x, kind="stable")
        xs = x[self.order]
        first = np.r_[True, xs[1:] != xs[:-1]] if xs.size else np.zeros(0, dtype=bool)
        self.starts = np.flatnonzero(first)
        group_sorted = np.cumsum(first) - 1
        self.group = np.empty(x.size, dtype=int)
        self.group[self.order] = group_sorted

    def group_sums(self, w: np.ndarray) -> np.ndarray:
        """How many points of each tie group (distinct value, ascending) each resample row of
        ``w`` drew: ``(k, groups)``."""
        if not self.starts.size:
            return np.zeros((w.shape[0], 0))
        return np.add.reduceat(w[:, self.order], self.starts, axis=1)

    def ranks(self, w: np.ndarray, sums: np.ndarray | None = None) -> np.ndarray:
        """Average ranks (1-based, ties share the mean rank) of every point in each resample row
        of ``w``; points not drawn get a rank too, with weight 0 it does not count. ``sums``:
        :meth:`group_sums` of ``w`` when already computed."""
        g = self.group_sums(w) if sums is None else sums
        avg = np.cumsum(g, axis=1) - (g - 1.0) / 2.0
        return avg[:, self.group]

    def mean_ranks(self, sums: np.ndarray) -> np.ndarray:
        """The average rank of each tie group per resample, from :meth:`group_sums`."""
        return np.cumsum(sums, axis=1) - (sums - 1.0) / 2.0

    @staticmethod
    def tied_pairs(sums: np.ndarray) -> np.ndarray:
        """Pairs tied on this variable per resample, ``sum t (t - 1) / 2`` over the tie groups."""
        return (sums * (sums - 1.0)).sum(axis=1) / 2.0


class KendallPlan:
    """Kendall tau-b under any resample weights, without sorting each resample.

    With the points in (x, y) order, the discordant pairs are the strict inversions of y, and a
    point drawn c times adds c identical copies, which invert nothing among themselves. So for
    counts ``w`` the discordant count is ``sum over k < l, y_k > y_l of w_k w_l``: a bottom-up merge
    sort over the fixed order, whose blocks and merge positions are the same for every resample,
    computes it for a whole chunk of resamples with a few array passes per level. The ties
    (``n1``, ``n2``, ``n3`` of tau-b) come from the weights of the tie groups.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        n = x.size
        self.order = np.lexsort((y, x))
        xs, ys = x[self.order], y[self.order]
        yrank = np.unique(ys, return_inverse=True)[1].reshape(-1).astype(np.int64)
        same_x = np.r_[False, xs[1:] == xs[:-1]] if n else np.zeros(0, dtype=bool)
        same_y = np.r_[False, ys[1:] == ys[:-1]] if n else np.zeros(0, dtype=bool)
        self.xy_starts = np.flatnonzero(~(same_x & same_y))
        self.x_plan, self.y_plan = RankPlan(x), RankPlan(y)  # their tie groups
        self.levels: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        pos = np.arange(n)
        span = int(yrank.max()) + 2 if n else 1
        s = 1
        while s < n:
            block, inblock = pos // (2 * s), pos % (2 * s)
            left, right = pos[inblock < s], pos[inblock >= s]
            left = left[np.lexsort((yrank[left], block[left]))]  # each block's left half by y
            keys = block[left] * span + yrank[left]
            # per right point: the left points of its block with y <= its y end at `le`,
            # the block's left half ends at `end`; the weight between them is y > its y
            le = np.searchsorted(keys, block[right] * span + yrank[right], side="right")
            end = np.minimum(block[right] * s + s, left.size)
            self.levels.append((left, right, le, end))
            s *= 2

    def tau_b(self, w: np.ndarray, x_sums: np.ndarray | None = None, y_sums: np.ndarray | None = None) -> np.ndarray:
        """Kendall tau-b (in [-1, 1]) for each resample row of counts ``w``; NaN when a side is
        constant in that resample. ``x_sums``, ``y_sums``: the :meth:`RankPlan.group_sums` of
        ``w`` for x and y when already computed (Spearman needs them too)."""
        ws = w[:, self.order]
        # Points as rows: the merge levels gather points, and whole rows gather ~6x faster. Counts
        # and their running sums stay below 2**24, exact in float32 (half the memory traffic);
        # the products are summed in float64.
        dtype = np.float32 if w.shape[1] < 2**24 else np.float64
        wt = np.ascontiguousarray(ws.T, dtype=dtype)
        disc = np.zeros(w.shape[0])
        for left, right, le, end in self.levels:
            csum = np.zeros((left.size + 1, w.shape[0]), dtype=dtype)
            np.cumsum(wt[left], axis=0, out=csum[1:])
            disc += np.einsum("ij,ij->j", csum[end] - csum[le], wt[right], dtype=np.float64)
        total = w.sum(axis=1)
        n0 = total * (total - 1.0) / 2.0
        n1 = RankPlan.tied_pairs(self.x_plan.group_sums(w) if x_sums is None else x_sums)
        n2 = RankPlan.tied_pairs(self.y_plan.group_sums(w) if y_sums is None else y_sums)
        n3 = RankPlan.tied_pairs(np.add.reduceat(ws, self.xy_starts, axis=1) if self.xy_starts.size else np.zeros((w.shape[0], 0)))
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = (n0 - n1 - n2 + n3 - 2.0 * disc) / np.sqrt((n0 - n1) * (n0 - n2))
        tau[(n0 - n1 <= 0) | (n0 - n2 <= 0)] = math.nan
        return np.clip(tau, -1.0, 1.0)


def weighted_spearman(w: np.ndarray, plan_x: RankPlan, plan_y: RankPlan, x_sums: np.ndarray, y_sums: np.ndarray) -> np.ndarray:
    """Spearman's rho per resample row of counts ``w`` (Pearson of the resample's average ranks).
    Only the cross sum needs the ranks point by point: the ranks' mean is ``(N + 1) / 2`` and
    their sum of squares comes from the tie groups (``sum_g t_g * rank_g**2``)."""
    ax, ay = plan_x.mean_ranks(x_sums), plan_y.mean_ranks(y_sums)
    total = w.sum(axis=1)
    mean = (total + 1.0) / 2.0
    sxy = np.einsum("ij,ij,ij->i", w, ax[:, plan_x.group], ay[:, plan_y.group])
    vx = (x_sums * ax * ax).sum(axis=1) / total - mean**2
    vy = (y_sums * ay * ay).sum(axis=1) / total - mean**2
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (sxy / total - mean**2) / np.sqrt(vx * vy)
    rho[(vx <= 1e-9 * mean**2) | (vy <= 1e-9 * mean**2)] = math.nan  # a constant side
    return np.clip(rho, -1.0, 1.0)


def score_bootstrap(a: np.ndarray, b: np.ndarray, *, n_resamples: int, seed: int, with_mean_diff: bool) -> dict[str, tuple[float, float]]:
    """95% percentile-bootstrap intervals of ``kendall_tau_b``, ``spearman``, ``pearson`` (x100) and
    ``mean_diff`` (B - A, when asked), resampling samples."""
    n = a.size
    kendall = KendallPlan(a, b)
    plan_a, plan_b = kendall.x_plan, kendall.y_plan

    def batch(idx: np.ndarray) -> dict[str, np.ndarray]:
        w = stats.resample_counts(idx, n)
        ga, gb = plan_a.group_sums(w), plan_b.group_sums(w)  # shared by Spearman and Kendall
        out = {
            "pearson": 100.0 * weighted_pearson(w, a, b),
            "spearman": 100.0 * weighted_spearman(w, plan_a, plan_b, ga, gb),
            "kendall_tau_b": 100.0 * kendall.tau_b(w, ga, gb),
        }
        if with_mean_diff:
            out["mean_diff"] = w @ (b - a) / n
        return out

    return stats.bootstrap_cis_batched(batch, n, n_resamples=n_resamples, seed=seed)


# ------------------------------------------------------------------------------------ score views
def calibration(a: np.ndarray, b: np.ndarray, bins: int = 10) -> list[dict[str, float]]:
    """B as a function of A: for ~``bins`` quantile bins of A, the range of A, mean A, mean B and
    the count. Ties in A can merge bins (a value never straddles two bins); with fewer than
    ``2 * bins`` samples there are ``n // 2`` bins."""
    if a.size == 0:
        return []
    bins = max(1, min(bins, a.size // 2))
    edges = np.unique(np.quantile(a, np.linspace(0.0, 1.0, bins + 1)))
    which = np.searchsorted(edges[1:-1], a, side="right")
    out: list[dict[str, float]] = []
    for k in range(len(edges) - 1 if len(edges) > 1 else 1):
        sel = which == k
        if not sel.any():
            continue
        out.append(
            {
                "bin": len(out) + 1,
                "a_min": float(a[sel].min()),
                "a_max": float(a[sel].max()),
                "mean_a": float(a[sel].mean()),
                "mean_b": float(b[sel].mean()),
                "n": int(sel.sum()),
            }
        )
    return out


def same_image_order(a: np.ndarray, b: np.ndarray, groups: Sequence[Hashable]) -> dict[str, Any]:
    """How the two judges order the captions of the same image: over every pair of captions that
    share an image, the pairs both judges order the same way, the opposite way, and the pairs tied
    in A only, in B only, or in both. ``same_order`` is the share (%) of pairs ordered the same way
    among the pairs neither judge tied."""
    _, gid = np.unique(np.asarray([str(g) for g in groups], dtype=object), return_inverse=True)
    order = np.argsort(gid, kind="stable")
    sizes = np.bincount(gid)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    counts = dict.fromkeys(("same", "opposite", "tied_a_only", "tied_b_only", "tied_both"), 0)

    def tally(sa: np.ndarray, sb: np.ndarray) -> None:
        counts["same"] += int(np.sum((sa == sb) & (sa != 0)))
        counts["opposite"] += int(np.sum((sa == -sb) & (sa != 0)))
        counts["tied_a_only"] += int(np.sum((sa == 0) & (sb != 0)))
        counts["tied_b_only"] += int(np.sum((sa != 0) & (sb == 0)))
        counts["tied_both"] += int(np.sum((sa == 0) & (sb == 0)))

    for k in (int(v) for v in np.unique(sizes[sizes >= 2])):
        members = order[starts[sizes == k][:, None] + np.arange(k)]
        if k * (k - 1) // 2 > 2_000_000:
            # an image with thousands of captions: caption by caption against the later ones,
            # so that the pairs never sit in memory all at once
            for m in members:
                for r in range(k - 1):
                    tally(np.sign(a[m[r]] - a[m[r + 1 :]]), np.sign(b[m[r]] - b[m[r + 1 :]]))
            continue
        # every image with k captions at once: an (images, k) index matrix and its k(k-1)/2 pairs
        i, j = np.triu_indices(k, 1)
        step = max(1, 2_000_000 // len(i))
        for lo in range(0, members.shape[0], step):
            m = members[lo : lo + step]
            tally(np.sign(a[m[:, i]] - a[m[:, j]]), np.sign(b[m[:, i]] - b[m[:, j]]))
    untied = counts["same"] + counts["opposite"]
    return {
        "images": int(np.sum(sizes >= 2)),
        "pairs": sum(counts.values()),
        **counts,
        "same_order": 100.0 * counts["same"] / untied if untied else math.nan,
    }


def largest_rank_differences(a: np.ndarray, b: np.ndarray, top: int = 10) -> list[tuple[int, float, float, float]]:
    """The ``top`` samples whose ranks differ most: ``(index, rank_a, rank_b, rank_b - rank_a)``,
    average ranks 1..n, largest absolute difference first (input order among equals)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    diff = rb - ra
    pick = np.argsort(-np.abs(diff), kind="stable")[:top]
    return [(int(i), float(ra[i]), float(rb[i]), float(diff[i])) for i in pick if diff[i] != 0]


# --------------------------------------------------------------------------------------- verdicts
def verdict_codes(verdicts: Sequence[str]) -> np.ndarray:
    """A/B/tie as 0/1/2."""
    index = {v: k for k, v in enumerate(VERDICTS)}
    return np.asarray([index[v] for v in verdicts], dtype=int)


def confusion(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """3x3 table of verdict codes (rows: first judge A/B/tie, columns: second judge), or one
    table per resample row of counts ``w``: ``(k, 3, 3)``."""
    q = len(VERDICTS)
    cell = x * q + y
    if w is None:
        return np.bincount(cell, minlength=q * q).reshape(q, q)
    onehot = np.zeros((cell.size, q * q))
    onehot[np.arange(cell.size), cell] = 1.0
    return (w @ onehot).reshape(-1, q, q)


def cohen_kappa_from_table(table: np.ndarray) -> np.ndarray | float:
    """Cohen's kappa ``(p_o - p_e) / (1 - p_e)`` of a square confusion table (or a stack of
    tables): ``p_o`` the share on the diagonal, ``p_e`` the chance agreement from the margins. NaN
    when ``p_e`` is 1 (both judges always gave the same one verdict)."""
    t = np.asarray(table, dtype=float)
    total = t.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        po = np.trace(t, axis1=-2, axis2=-1) / total
        pe = (t.sum(axis=-1) * t.sum(axis=-2)).sum(axis=-1) / total**2
        k = np.where(np.isclose(pe, 1.0), math.nan, (po - pe) / (1.0 - pe))
    return float(k) if np.ndim(k) == 0 else k


def kappa_undefined_reason(table: np.ndarray) -> str | None:
    """Why Cohen's kappa of a 3x3 verdict table is undefined (``None`` when it is defined): no
    samples, or both judges gave one and the same verdict to every sample (chance agreement 1).
    The reason starts with a short label (``"no overlap"``, ``"one verdict only"``) and a colon."""
    t = np.asarray(table)
    n = int(t.sum())
    if n == 0:
        return "no overlap: no sample has a verdict from both judges"
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    i, j = int(rows.argmax()), int(cols.argmax())
    if rows[i] == n and cols[j] == n and i == j:
        return (
            f"one verdict only: both judges gave {VERDICTS[i]!r} to all {n} samples, so chance agreement "
            "is 100% and kappa divides by zero (the agreement rate still counts)"
        )
    return None


def fleiss_undefined_reason(counts: np.ndarray) -> str | None:
    """Why Fleiss' kappa of an ``(items, A/B/tie)`` count table is undefined, as
    :func:`kappa_undefined_reason` says it for Cohen's (``None`` when defined)."""
    c = np.asarray(counts)
    if c.shape[0] == 0:
        return "no overlap: no sample has a verdict from every judge"
    totals = c.sum(axis=0)
    if np.count_nonzero(totals) == 1:
        i = int(totals.argmax())
        return (
            f"one verdict only: every judge gave {VERDICTS[i]!r} to all {c.shape[0]} samples, so chance agreement "
            "is 100% and kappa divides by zero (the agreement rate still counts)"
        )
    return None


def cohen_kappa(x: Sequence[str], y: Sequence[str]) -> float:
    """Cohen's kappa of two judges' A/B/tie verdicts on the same items (in [-1, 1]; NaN when
    undefined)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    if not x:
        return math.nan
    return float(cohen_kappa_from_table(confusion(verdict_codes(x), verdict_codes(y))))


def fleiss_kappa_from_counts(counts: np.ndarray, w: np.ndarray | None = None) -> np.ndarray | float:
    """Fleiss' kappa from an ``(items, categories)`` table of how many raters put each item in
    each category (every item rated by the same number ``m >= 2`` of raters):
    ``P_i = (sum_j n_ij^2 - m) / (m (m - 1))``, ``P = mean P_i``, ``p_j = sum_i n_ij / (N m)``,
    ``P_e = sum_j p_j^2``, kappa ``= (P - P_e) / (1 - P_e)``. With resample counts ``w`` (``(k,
    items)``), one kappa per row."""
    c = np.asarray(counts, dtype=float)
    m = c.sum(axis=1)[0] if c.size else 0.0
    if c.shape[0] == 0 or m < 2:
        return math.nan
    p_item = ((c * c).sum(axis=1) - m) / (m * (m - 1))
    if w is None:
        w = np.ones((1, c.shape[0]))
        single = True
    else:
        single = False
    n = w.sum(axis=1)
    p_bar = (w @ p_item) / n
    p_cat = (w @ c) / (n * m)[:, None]
    pe = (p_cat * p_cat).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(np.isclose(pe, 1.0), math.nan, (p_bar - pe) / (1.0 - pe))
    return float(k[0]) if single else k


def verdict_counts(ratings: Sequence[Sequence[str]]) -> np.ndarray:
    """Items x (A, B, tie): how many judges gave each verdict on item ``i`` (``ratings[i]``)."""
    counts = np.zeros((len(ratings), len(VERDICTS)))
    for i, row in enumerate(ratings):
        for code in verdict_codes(row):
            counts[i, code] += 1
    return counts


def fleiss_kappa(ratings: Sequence[Sequence[str]]) -> float:
    """Fleiss' kappa of A/B/tie verdicts: ``ratings[i]`` holds every judge's verdict on item ``i``."""
    if not ratings:
        return math.nan
    return float(fleiss_kappa_from_counts(verdict_counts(ratings)))


def verdict_bootstrap(x: np.ndarray, y: np.ndarray, *, n_resamples: int, seed: int) -> dict[str, tuple[float, float]]:
    """95% intervals of ``cohen_kappa`` (x100) and ``agreement`` (%), resampling items."""

    def batch(idx: np.ndarray) -> dict[str, np.ndarray]:
        w = stats.resample_counts(idx, x.size)
        t = confusion(x, y, w)
        agree = np.trace(t, axis1=1, axis2=2) / t.sum(axis=(1, 2))
        return {"cohen_kappa": 100.0 * np.asarray(cohen_kappa_from_table(t)), "agreement": 100.0 * agree}

    return stats.bootstrap_cis_batched(batch, x.size, n_resamples=n_resamples, seed=seed)


def fleiss_bootstrap(counts: np.ndarray, *, n_resamples: int, seed: int) -> dict[str, tuple[float, float]]:
    """95% intervals of ``fleiss_kappa`` (x100) and ``agreement`` (% of items where every judge
    gave the same verdict), resampling items."""
    unanimous = (counts.max(axis=1) == counts.sum(axis=1)).astype(float)

    def batch(idx: np.ndarray) -> dict[str, np.ndarray]:
        w = stats.resample_counts(idx, counts.shape[0])
        return {
            "fleiss_kappa": 100.0 * np.asarray(fleiss_kappa_from_counts(counts, w)),
            "agreement": 100.0 * (w @ unanimous) / w.sum(axis=1),
        }

    return stats.bootstrap_cis_batched(batch, counts.shape[0], n_resamples=n_resamples, seed=seed)
