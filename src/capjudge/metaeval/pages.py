"""The meta-evaluation page (``capjudge meta-eval`` / ``report`` / ``run-benchmark --html``): the
comparison table of several results files, per file its measures, heatmap and counts, then every
results file's samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capjudge.metaeval.plots import plot_heatmap
from capjudge.metaeval.protocols import MetaEval
from capjudge.metaeval.report import COLUMNS, comparison_rows, fmt_ci, has_cis, unique_labels
from capjudge.report.figures import safe_figure, via_file
from capjudge.report.model import Figure, Page, Section, StatTable
from capjudge.report.numbers import fixed
from capjudge.report.pages import file_section, thumb_cache
from capjudge.report.records import DEFAULT_MAX_ROWS, load_results_file
from capjudge.report.thumbs import DEFAULT_MAX_PX


def heatmap(ev: MetaEval) -> Figure:
    """The meta-eval heatmap of ``capjudge meta-eval --plot`` (human rating vs judge score)."""
    return safe_figure(
        f"heatmap: {ev.label}",
        f"row-normalised heatmap of human judgments vs {ev.label}",
        lambda: via_file(lambda p: plot_heatmap(ev, p)),
        "each row sums to 100%: agreement puts the mass on the diagonal from bottom-left to top-right",
    )


def _metaeval_section(ev: MetaEval, label: str) -> Section:
    s = Section(title=f"{ev.dataset}: {label}")
    s.facts += [("results file", ev.scores_path), ("protocol", ev.protocol), ("scores", ev.scores_kind)]
    for key, header in COLUMNS.get(ev.dataset, [(ev.primary, ev.primary)]):
        s.facts.append((f"{header} ({ev.unit})" + (" - primary" if key == ev.primary else ""), fmt_ci(ev, key)))
    if ev.human is not None or ev.by_category:
        s.figures.append(heatmap(ev))
    if ev.by_category and ev.dataset in ("pascal50s", "foil"):
        hdr = ["category", "pairs", "evaluated", "correct", "ties", "wrong", "failed", "unmatched", "accuracy %"]
        s.stats.append(StatTable("per category", hdr, [[c, *(fixed(d.get(k)) for k in ("pairs", "evaluated", "correct", "ties", "wrong", "failed", "unmatched", "accuracy"))] for c, d in ev.by_category.items()]))
    elif ev.by_category:
        s.stats.append(StatTable("per group", ["group", "n", "tau-c"], [[g, fixed(d.get("n")), fixed(d.get("tau_c"))] for g, d in ev.by_category.items()]))
    s.stats.append(StatTable("counts", ["what", "n"], [[k, str(v)] for k, v in ev.counts.items()]))
    s.notes += list(ev.notes)
    return s


def metaeval_page(evals: Sequence[MetaEval], *, names: Sequence[str] | None = None, images: str | Path | None = None, max_rows: int = DEFAULT_MAX_ROWS, thumb_px: int = DEFAULT_MAX_PX, command: str = "") -> Page:
    """``capjudge meta-eval`` / ``report --html``: the comparison table (several files), per
    file its measures, heatmap and counts, then every results file's samples."""
    paths = [ev.scores_path for ev in evals]
    thumbs = thumb_cache(images, paths, thumb_px)
    labels = unique_labels(evals, names)
    dataset = evals[0].dataset if evals else "?"
    page = Page(title=f"capjudge meta-evaluation: {dataset}", subtitle=", ".join(labels), thumbs=thumbs, command=command)
    page.facts = [("benchmark", dataset), ("results files", str(len(evals)))]
    if len(evals) > 1:
        header, rows = comparison_rows(evals, names)
        top = Section(title="all judges")
        top.stats.append(StatTable(f"{dataset} ({evals[0].unit})", header, rows, "95% bootstrap CI in brackets" if has_cis(evals) else "no CIs (--bootstrap 0)"))
        page.sections.append(top)
    page.sections += [_metaeval_section(ev, label) for ev, label in zip(evals, labels, strict=True)]
    for n, (ev, label) in enumerate(zip(evals, labels, strict=True), start=1):
        try:
            rf = load_results_file(ev.scores_path)
        except ValueError as exc:  # meta-eval measured it, so this is rare: say so, keep the page
            page.sections.append(Section(title=f"results of {label}", notes=[str(exc)]))
            continue
        page.sections.append(file_section(rf, thumbs, n, f"results of {label}", max_rows, histogram=False))
    return page
