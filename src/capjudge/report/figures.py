"""The report's plots as ``data:image/png`` URIs: matplotlib on an Agg canvas, no display, no file
left behind. The kit's part: turning a drawing (:func:`new_figure` + :func:`png_of`, or a plot
function that writes a file: :func:`via_file`) into a :class:`~capjudge.report.model.Figure`, where a
plot that fails becomes a figure with ``error`` set (:func:`safe_figure`); and the score histogram of
a results file. The features draw their own figures with these (``metaeval.pages``,
``metaeval.agree_page``, ``probes.page``).
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capjudge.core.lazyexport import moved_names
from capjudge.report.model import Figure


def png_uri(data: bytes) -> str:
    """A ``data:image/png;base64`` URI of PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def via_file(draw: Callable[[Path], Any]) -> str:
    """Run a plot function that writes a PNG to a path, and return that PNG as a URI."""
    with tempfile.TemporaryDirectory(prefix="capjudge-report-") as tmp:
        out = Path(tmp) / "plot.png"
        draw(out)
        return png_uri(out.read_bytes())


def safe_figure(title: str, alt: str, draw: Callable[[], str], caption: str = "") -> Figure:
    """The figure ``draw`` (returning a data URI) makes; a failure becomes the figure's ``error``."""
    try:
        return Figure(title, uri=draw(), alt=alt, caption=caption)
    except Exception as exc:  # noqa: BLE001 - a plot must never cost the report
        return Figure(title, alt=alt, error=f"the plot could not be drawn: {type(exc).__name__}: {exc}", caption=caption)


def new_figure(width: float, height: float) -> tuple[Any, Any]:
    """A matplotlib figure (inches) on an Agg canvas and its one axes; no pyplot, no display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def png_of(fig: Any) -> str:
    """The figure, laid out tight, as a PNG data URI."""
    import io

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return png_uri(buf.getvalue())


def score_histogram(values: Sequence[float], title: str, scale: tuple[float, float] | None = None) -> Figure:
    """A histogram of scores (20 bins over the method's scale when known)."""

    def draw() -> str:
        fig, ax = new_figure(4.6, 2.4)
        lo, hi = scale if scale else (min(values), max(values))
        if not hi > lo:
            lo, hi = lo - 0.5, hi + 0.5
        ax.hist(list(values), bins=20, range=(lo, hi), color="#3b75af", edgecolor="white")
        ax.set_xlabel("score")
        ax.set_ylabel("samples")
        ax.set_title(title, fontsize=9)
        return png_of(fig)

    return safe_figure(f"score distribution: {title}", f"histogram of the scores of {title}", draw)


# Names of the feature figures that moved to their features' page modules (imported only when used).
__getattr__ = moved_names(
    __name__,
    {
        "heatmap": "capjudge.metaeval.pages",
        "agree_scatter": "capjudge.metaeval.agree_page",
        "probe_bars": "capjudge.probes.page",
    },
)
