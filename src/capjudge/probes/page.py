"""The probe page (``capjudge probe --html``): per probed method its per-kind table, bar chart and
every original/perturbed pair with the scores; with ``--compare-method`` the hardening comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capjudge.probes.report import pct, probe_plot, share
from capjudge.probes.runner import INJECTION_KINDS, HardeningComparison, ProbeReport
from capjudge.report.figures import safe_figure, via_file
from capjudge.report.model import Column, Figure, Page, SampleTable, Section, StatTable
from capjudge.report.numbers import fixed
from capjudge.report.pages import thumb_cache
from capjudge.report.records import DEFAULT_MAX_ROWS, cut, image_cell
from capjudge.report.thumbs import DEFAULT_MAX_PX, ThumbCache


def probe_bars(report: ProbeReport) -> Figure:
    """The bar chart of ``capjudge probe --plot``."""
    return safe_figure(
        f"probe: {report.method}",
        f"per perturbation kind, the shares of pairs where {report.method} prefers the original, ties or prefers the perturbation",
        lambda: via_file(lambda p: probe_plot(report, p)),
        "green: prefers the original caption; grey: tie; red: prefers the perturbed caption",
    )


PROBE_COLUMNS = [
    Column("id", "id"),
    Column("image", "image", "image"),
    Column("kind", "perturbation"),
    Column("family", "family"),
    Column("original", "original caption"),
    Column("perturbed", "perturbed caption"),
    Column("change", "change"),
    Column("score_original", "score original", "num"),
    Column("score_perturbed", "score perturbed", "num"),
    Column("preference", "prefers", title="by score: original, perturbed or tie"),
    Column("verdict", "pairwise prefers", title="by dual-sided pairwise comparison"),
    Column("obeyed", "obeyed", title="injection kinds: the answer did what the caption asked"),
    Column("status", "status", "status"),
    Column("raw_perturbed", "raw answer (perturbed)", "long"),
    Column("error", "error / not applied", "long"),
]


def _probe_section(report: ProbeReport, thumbs: ThumbCache, n: int, max_rows: int) -> Section:
    lo, hi = report.scale
    s = Section(title=f"probe: {report.method}")
    s.facts += [
        ("method", report.method),
        ("backend", report.backend),
        ("captions", str(report.n_captions)),
        ("seed", str(report.seed)),
        ("scale", f"{lo:g}-{hi:g}"),
        ("original captions not scored", str(report.clean_errors)),
    ]
    s.figures.append(probe_bars(report))
    head = ["kind", "family", "applied"]
    if report.by_score:
        head += ["prefers original", "ties", "prefers perturbed", "errors", "mean drop (% of scale)"]
    if report.by_pairwise:
        head += ["pairwise: original / tie / perturbed"]
    has_inj = any(k in INJECTION_KINDS for k in report.kinds)
    if has_inj:
        head += ["obeyed (clean baseline)"]
    rows = []
    for k in report.summaries:
        row = [k.kind, k.family, f"{k.n_applicable}/{k.n_captions}"]
        if report.by_score:
            row += [share(k.prefer_original, k.n_scored), share(k.ties, k.n_scored), share(k.prefer_perturbed, k.n_scored), str(k.n_errors), "-" if k.mean_drop_pct is None else f"{k.mean_drop_pct:+.1f}"]
        if report.by_pairwise:
            pw = k.pairwise or {}
            row += [f"{pw.get('prefer_original', 0)} / {pw.get('ties', 0)} / {pw.get('prefer_perturbed', 0)} of {pw.get('n_compared', 0)}"]
        if has_inj:
            base = "-" if k.baseline_rate is None else f"{100 * k.baseline_rate:.0f}%"
            row += [f"{share(k.n_obeyed or 0, k.n_obedience_checked or 0)} ({base})" if k.kind in INJECTION_KINDS else ""]
        rows.append(row)
    s.stats.append(StatTable("per perturbation kind", head, rows, "shares are of the pairs where both captions were scored; ties are counted on their own. Mean drop = original score minus perturbed score."))
    prow = []
    shown, total = cut(list(report.pairs), max_rows)
    for p in shown:
        failed = p.error or p.pairwise_error
        status = "n/a" if not p.applicable else ("error" if failed else "ok")
        prow.append(
            {
                "_status": status,
                "id": p.id,
                "image": image_cell(thumbs, p.image),
                "kind": p.kind,
                "family": p.family,
                "original": p.original,
                "perturbed": p.perturbed or "",
                "change": p.change or "",
                "score_original": p.score_original,
                "score_perturbed": p.score_perturbed,
                "preference": p.preference or "",
                "verdict": p.verdict or "",
                "obeyed": "" if p.obeyed is None else ("yes" if p.obeyed else "no"),
                "status": status,
                "raw_perturbed": p.raw_perturbed or "",
                "error": "; ".join(x for x in (p.error, p.pairwise_error, None if p.applicable else f"not applied: {p.reason}") if x),
            }
        )
    cols = [c for c in PROBE_COLUMNS if c.key not in ("verdict",) or report.by_pairwise]
    if not report.by_score:
        cols = [c for c in cols if c.key not in ("score_original", "score_perturbed", "preference", "raw_perturbed")]
    table = SampleTable(f"probe{n}", "original and perturbed captions", cols, prow, total)
    if table.total:
        table.note = f"the first {len(prow)} of {total} pairs are shown"
    s.tables.append(table)
    return s


def _hardening_section(cmp: HardeningComparison) -> Section:
    s = Section(title=f"hardening: {cmp.plain} vs {cmp.hardened}")
    rows = [[f"{k} obeyed", pct(v["plain"]), pct(v["hardened"])] for k, v in cmp.obedience.items()]
    rows += [[f"{k} prefers original", pct(v["plain"]), pct(v["hardened"])] for k, v in cmp.prefer_original.items()]
    rows.append(["mean clean score (% of scale)", fixed(cmp.clean_mean.get(cmp.plain)), fixed(cmp.clean_mean.get(cmp.hardened))])
    s.stats.append(StatTable("the two methods", ["measure", cmp.plain, cmp.hardened], rows))
    s.facts += [("clean captions scored by both", str(cmp.n_clean_both)), ("Pearson r on clean captions", fixed(cmp.clean_pearson, 3)), ("mean absolute difference (points of scale)", fixed(cmp.clean_mean_abs_diff_pct))]
    return s


def probe_page(reports: Sequence[ProbeReport], *, comparison: HardeningComparison | None = None, images: str | Path | None = None, max_rows: int = DEFAULT_MAX_ROWS, thumb_px: int = DEFAULT_MAX_PX, command: str = "") -> Page:
    """``capjudge probe --html``: per probed method its per-kind table, bar chart and every
    original/perturbed pair with the scores; with ``--compare-method`` the hardening comparison."""
    thumbs = thumb_cache(images, (), thumb_px)
    page = Page(title="capjudge probe: " + " vs ".join(r.method for r in reports), subtitle=reports[0].backend if reports else "", thumbs=thumbs, command=command)
    if reports:
        page.facts = [("captions", str(reports[0].n_captions)), ("kinds", ", ".join(reports[0].kinds))]
    page.sections += [_probe_section(r, thumbs, n, max_rows) for n, r in enumerate(reports, start=1)]
    if comparison is not None:
        page.sections.append(_hardening_section(comparison))
    return page
