"""Row-normalised heatmap of human rating vs judge score (where does the judge disagree?).

Each row is one human rating level; its cells show how that level's rows spread over the judge's
score bins, as a share of the row (rows sum to 100%). A judge that agrees with people puts the
mass on a diagonal from bottom-left (low rating, low score) to top-right. Pair benchmarks
(Pascal-50S, FOIL) get one row per category with the shares of correct, tied and wrong pairs.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from capjudge.metaeval.protocols import MetaEval
from capjudge.metaeval.report import fmt


def rating_levels(human: np.ndarray, max_levels: int = 12, bins: int = 10) -> tuple[np.ndarray, list[str]]:
    """Row index of each human value and the row labels (distinct values, or equal-width bins)."""
    values = np.unique(human)
    if values.size <= max_levels:
        idx = np.searchsorted(values, human)
        return idx, [f"{v:g}" for v in values]
    lo, hi = float(human.min()), float(human.max())
    edges = np.linspace(lo, hi, bins + 1)
    idx = np.clip(np.digitize(human, edges[1:-1]), 0, bins - 1)
    return idx, [f"{edges[i]:.2g}-{edges[i + 1]:.2g}" for i in range(bins)]


def heatmap_matrix(
    human: np.ndarray, judge: np.ndarray, scale: tuple[float, float] | None = None, bins: int = 10
) -> tuple[np.ndarray, list[str], list[str], np.ndarray]:
    """Row-normalised counts: (matrix rows x bins, row labels, column labels, row totals)."""
    h = np.asarray(human, dtype=float)
    j = np.asarray(judge, dtype=float)
    rows, row_labels = rating_levels(h)
    lo, hi = scale if scale else (float(j.min()) if j.size else 0.0, float(j.max()) if j.size else 1.0)
    if not hi > lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bins + 1)
    cols = np.clip(np.digitize(j, edges[1:-1]), 0, bins - 1)
    counts = np.zeros((len(row_labels), bins))
    np.add.at(counts, (rows, cols), 1)
    totals = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(totals[:, None] > 0, counts / np.maximum(totals[:, None], 1), 0.0)
    col_labels = [f"{edges[i]:.2g}" for i in range(bins)]
    return norm, row_labels, col_labels, totals


def plot_heatmap(ev: MetaEval, out: str | Path, *, bins: int = 10, title: str | None = None) -> Path:
    """Write the heatmap of ``ev`` as a PNG (or any format matplotlib infers from the suffix)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out)
    if ev.human is not None and ev.judge is not None:
        matrix, row_labels, col_labels, totals = heatmap_matrix(ev.human, ev.judge, ev.scale, bins)
        xlabel, ylabel = "judge score (bin lower edge)", "human rating"
        row_labels = [f"{lab} (n={int(t)})" for lab, t in zip(row_labels, totals, strict=True)]
    else:
        cats = list(ev.by_category)
        matrix = np.array(
            [[ev.by_category[c][k] / max(ev.by_category[c]["evaluated"], 1) for k in ("correct", "ties", "wrong")] for c in cats]
        ).reshape(len(cats), 3)
        row_labels = [f"{c} (n={ev.by_category[c]['evaluated']})" for c in cats]
        col_labels = ["correct", "tie", "wrong"]
        xlabel, ylabel = "judge outcome on the pair", "category"
    n_rows, n_cols = matrix.shape
    fig = Figure(figsize=(max(5.0, 0.7 * n_cols + 2.5), max(2.5, 0.55 * n_rows + 1.8)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    # highest rating on top
    im = ax.imshow(matrix[::-1], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_cols), labels=col_labels, rotation=45 if n_cols > 5 else 0, ha="right" if n_cols > 5 else "center")
    ax.set_yticks(range(n_rows), labels=row_labels[::-1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    for r in range(n_rows):
        for c in range(n_cols):
            v = matrix[::-1][r, c]
            if v > 0:
                ax.text(c, r, f"{100 * v:.0f}" if v >= 0.005 else "<1", ha="center", va="center", fontsize=7, color="white" if v > 0.55 else "black")
    primary = ev.measures.get(ev.primary, math.nan)
    ax.set_title(title or f"{ev.dataset}: {ev.label}\n{ev.primary} = {fmt(primary)} ({ev.unit}); cells: % of row", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="share of row")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    from capjudge.run.outguard import plot_save_options

    fig.savefig(out, **plot_save_options(out))  # names capjudge, so a re-run may replace it
    return out
