"""The report's plots as ``data:image/png`` URIs: matplotlib on an Agg canvas, no display, no file
left behind. The meta-eval heatmap and the probe bars are the very plots the CLI writes with
``--plot`` (drawn by their own modules); the score histogram and the judge-vs-judge scatter are
drawn here. A plot that fails becomes a :class:`~capjudge.report.model.Figure` with ``error`` set.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capjudge.report.model import Figure


def png_uri(data: bytes) -> str:
    """A ``data:image/png;base64`` URI of PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _via_file(draw: Callable[[Path], Any]) -> str:
    """Run a plot function that writes a PNG to a path, and return that PNG as a URI."""
    with tempfile.TemporaryDirectory(prefix="capjudge-report-") as tmp:
        out = Path(tmp) / "plot.png"
        draw(out)
        return png_uri(out.read_bytes())


def _safe(title: str, alt: str, draw: Callable[[], str], caption: str = "") -> Figure:
    try:
        return Figure(title, uri=draw(), alt=alt, caption=caption)
    except Exception as exc:  # noqa: BLE001 - a plot must never cost the report
        return Figure(title, alt=alt, error=f"the plot could not be drawn: {type(exc).__name__}: {exc}", caption=caption)


def _new_figure(width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _png(fig: Any) -> str:
    import io

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return png_uri(buf.getvalue())


def heatmap(ev: Any) -> Figure:
    """The meta-eval heatmap of ``capjudge meta-eval --plot`` (human rating vs judge score)."""
    from capjudge.metaeval.plots import plot_heatmap

    return _safe(
        f"heatmap: {ev.label}",
        f"row-normalised heatmap of human judgments vs {ev.label}",
        lambda: _via_file(lambda p: plot_heatmap(ev, p)),
        "each row sums to 100%: agreement puts the mass on the diagonal from bottom-left to top-right",
    )


def probe_bars(report: Any) -> Figure:
    """The bar chart of ``capjudge probe --plot``."""
    from capjudge.probes.report import probe_plot

    return _safe(
        f"probe: {report.method}",
        f"per perturbation kind, the shares of pairs where {report.method} prefers the original, ties or prefers the perturbation",
        lambda: _via_file(lambda p: probe_plot(report, p)),
        "green: prefers the original caption; grey: tie; red: prefers the perturbed caption",
    )


def score_histogram(values: Sequence[float], title: str, scale: tuple[float, float] | None = None) -> Figure:
    """A histogram of scores (20 bins over the method's scale when known)."""

    def draw() -> str:
        fig, ax = _new_figure(4.6, 2.4)
        lo, hi = scale if scale else (min(values), max(values))
        if not hi > lo:
            lo, hi = lo - 0.5, hi + 0.5
        ax.hist(list(values), bins=20, range=(lo, hi), color="#3b75af", edgecolor="white")
        ax.set_xlabel("score")
        ax.set_ylabel("samples")
        ax.set_title(title, fontsize=9)
        return _png(fig)

    return _safe(f"score distribution: {title}", f"histogram of the scores of {title}", draw)


def agree_scatter(a: Sequence[float], b: Sequence[float], name_a: str, name_b: str, highlight: Sequence[int] = (), same_scale: bool = True) -> Figure:
    """Judge A's score against judge B's, one dot per sample both judged; ``highlight`` (indices)
    marks the largest disagreements, numbered as in the list below the plot."""

    def draw() -> str:
        fig, ax = _new_figure(4.8, 4.4)
        ax.scatter(a, b, s=14, alpha=0.55, color="#3b75af", edgecolors="none", label="sample")
        if highlight:
            ax.scatter([a[i] for i in highlight], [b[i] for i in highlight], s=40, facecolors="none", edgecolors="#c0392b", linewidths=1.2, label="largest disagreements")
            for n, i in enumerate(highlight, start=1):
                ax.annotate(str(n), (a[i], b[i]), textcoords="offset points", xytext=(4, 3), fontsize=7, color="#c0392b")
        if same_scale and len(a):
            lo, hi = min(min(a), min(b)), max(max(a), max(b))
            ax.plot([lo, hi], [lo, hi], color="#999999", linewidth=0.8, linestyle="--", label="equal scores")
        ax.set_xlabel(name_a)
        ax.set_ylabel(name_b)
        ax.set_title(f"{name_a} vs {name_b} ({len(a)} samples)", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        return _png(fig)

    return _safe(
        f"scatter: {name_a} vs {name_b}",
        f"scatter plot of the scores of {name_a} against those of {name_b}",
        draw,
        "one dot per sample both judges scored; circled and numbered: the largest rank differences (listed below)",
    )
