"""The HTML pages of ``capjudge calibrate --html`` and ``capjudge cascade --html`` (docs/trust.md,
"The HTML report"), built on the report kit (:mod:`capjudge.report`), and the figures and tables
other pages reuse: :func:`reliability_figure` (the reliability diagram), :func:`intervals_figure` and
:func:`intervals_table` (judge-only, human-only, PPI and PPI++ intervals side by side),
:func:`coverage_risk_figure` and :func:`risk_target_figure` (a cascade's coverage-risk curve).

The records' images are thumbnails only when an image folder is given (``--images DIR``: embedded
only from inside it); without one the image column holds the image's name.

Every figure is drawn on an Agg canvas into a ``data:`` URI (:mod:`capjudge.report.figures`); one
that fails to draw says why in its place and costs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capjudge.report.figures import new_figure, png_of, safe_figure
from capjudge.report.model import Column, Figure, Page, SampleTable, Section, StatTable
from capjudge.report.numbers import fixed
from capjudge.report.pages import thumb_cache
from capjudge.report.random_model import random_model_warnings
from capjudge.report.records import DEFAULT_MAX_ROWS, cut, image_cell
from capjudge.report.thumbs import DEFAULT_MAX_PX, ThumbCache
from capjudge.trust.curves import SelectiveCurve
from capjudge.trust.run import Report

METHOD_LABELS = {"naive": "judge only", "classical": "human only", "ppi": "PPI", "ppi++": "PPI++"}
"""How the report names each estimate of a mean (:func:`capjudge.trust.ppi.estimate_all`'s keys)."""

_COLORS = {"naive": "#c0392b", "classical": "#5f6b76", "ppi": "#8e6bb8", "ppi++": "#2e7d32"}
_ACCENT, _MAP, _GUIDE = "#3b75af", "#e67e22", "#999999"


def _num(v: Any, digits: int = 3) -> str:
    return fixed(float(v), digits) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _money(v: Any) -> str:
    return "-" if v is None else f"${v:.4f}"


# ------------------------------------------------------------------------------------ figures
def reliability_figure(
    bins: Sequence[Mapping[str, Any]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    calibration_map: tuple[Sequence[float], Sequence[float]] | None = None,
    caption: str = "",
    points: str = "bins: mean judge, mean human",
) -> Figure:
    """The reliability diagram: each bin's mean judge value against its mean human outcome (the
    diagonal is a perfectly calibrated judge), the bins' counts as grey bars behind, and the
    isotonic ``calibration_map`` ``(x, y)`` when given; all on ``[0, 1]``. ``points``: the bins'
    legend."""

    def draw() -> str:
        fig, ax = new_figure(5.0, 3.9)
        counts = ax.twinx()
        counts.bar([(b["low"] + b["high"]) / 2 for b in bins], [b["count"] for b in bins], width=[0.9 * (b["high"] - b["low"]) for b in bins], color="#e3e8ed")
        counts.set_ylabel("samples per bin", fontsize=8)
        ax.set_zorder(counts.get_zorder() + 1)  # the curves in front of the bars
        ax.patch.set_visible(False)
        ax.plot([0, 1], [0, 1], ls="--", lw=1, color=_GUIDE, label="perfectly calibrated")
        full = [b for b in bins if b["count"] and b["mean_value"] is not None and b["mean_outcome"] is not None]
        ax.plot([b["mean_value"] for b in full], [b["mean_outcome"] for b in full], "o-", color=_ACCENT, label=points)
        ys = [b["mean_outcome"] for b in full]
        if calibration_map is not None:
            ax.plot(list(calibration_map[0]), list(calibration_map[1]), color=_MAP, lw=1.5, label="isotonic map")
            ys += list(calibration_map[1])
        ax.set_xlim(0, 1)
        ax.set_ylim(min([0.0, *ys]) - 0.02, max([1.0, *ys]) + 0.02)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="best")
        return png_of(fig)

    return safe_figure(f"reliability: {title}", f"reliability diagram of {title}: mean judge value against mean human outcome per bin", draw, caption)


def intervals_figure(groups: Mapping[str, Mapping[str, Mapping[str, Any]]], *, title: str, xlabel: str, caption: str = "") -> Figure:
    """Intervals side by side: per group (a captioner, a model, one mean), each estimate's value
    and interval (``{group: {method: {"estimate", "low", "high"}}}``; methods as
    :data:`METHOD_LABELS`), one row each."""
    rows = [(g, m, e) for g, ests in groups.items() for m, e in ests.items()]

    def draw() -> str:
        fig, ax = new_figure(5.6, 0.9 + 0.34 * max(len(rows), 1))
        labels = []
        for k, (g, m, e) in enumerate(rows):
            color = _COLORS.get(m, _ACCENT)
            ax.errorbar([e["estimate"]], [-k], xerr=[[e["estimate"] - e["low"]], [e["high"] - e["estimate"]]], fmt="o", color=color, capsize=3, lw=1.6)
            name = METHOD_LABELS.get(m, m)
            labels.append(name if len(groups) == 1 else f"{g}: {name}")
        ax.set_yticks([-k for k in range(len(rows))])
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(-len(rows) + 0.5, 0.5)
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", color="#eeeeee")
        return png_of(fig)

    return safe_figure(f"intervals: {title}", f"{title}: the estimate and its interval by each method", draw, caption)


def effective_labels(estimate: Mapping[str, Any], classical: Mapping[str, Any] | None) -> float | None:
    """How many human labels the labels alone would need for an interval as narrow as
    ``estimate``'s: ``n * (se_classical / se) ** 2`` (``None`` for the judge alone or the labels
    alone, or without a standard error)."""
    if classical is None or estimate.get("method") not in ("ppi", "ppi++") or not estimate.get("se") or not classical.get("se"):
        return None
    return float(classical["n"]) * (float(classical["se"]) / float(estimate["se"])) ** 2


def intervals_table(estimates: Mapping[str, Mapping[str, Any]], *, title: str, digits: int = 3, note: str = "") -> StatTable:
    """The estimates of one mean (:func:`capjudge.trust.ppi.estimate_all`'s, as dicts) as a table:
    value, interval, width, standard error, the PPI weight, the human labels and judge values
    used, and what the labels are worth (:func:`effective_labels`)."""
    classical = estimates.get("classical")
    rows = []
    for m, e in estimates.items():
        judged = e["N"] + (e["n"] if m in ("ppi", "ppi++") else 0)
        worth = effective_labels(e, classical)
        rows.append([
            METHOD_LABELS.get(m, m),
            _num(e["estimate"], digits),
            f"[{_num(e['low'], digits)}, {_num(e['high'], digits)}]",
            _num(e["high"] - e["low"], digits),
            _num(e["se"], digits + 1),
            _num(e["lam"], 2),
            str(e["n"]),
            str(judged),
            "-" if worth is None else f"{worth:.0f}",
        ])
    header = ["estimate", "value", "interval", "width", "standard error", "weight on the judge", "human labels", "judge values", "worth human labels"]
    return StatTable(title, header, rows, note)


def coverage_risk_figure(judge_curves: Mapping[str, SelectiveCurve], points: Sequence[Mapping[str, Any]], *, alpha: float, chosen: tuple[float, float] | None = None, caption: str = "") -> Figure:
    """The coverage-risk curve: each judge alone (its threshold lowered through its confidences),
    the cascade calibrated at each risk target (:func:`capjudge.trust.curves.cascade_curve`'s
    points, dicts: the disagreement of its kept verdicts and its guaranteed bound), the target
    ``alpha`` and the plan's own point (``chosen``: coverage, risk)."""

    def draw() -> str:
        fig, ax = new_figure(5.8, 4.0)
        tops = [alpha]
        for name, c in judge_curves.items():
            ax.plot(c.coverage, c.risk, lw=1.2, alpha=0.8, label=f"{name} alone")
            tops.append(max(c.risk))
        pts = [p for p in points if p["risk"] is not None]
        if pts:
            ax.plot([p["coverage"] for p in pts], [p["risk"] for p in pts], "o-", color="#1d2329", ms=4, lw=1, label="cascade at each risk target")
            bounds = [p for p in pts if p["risk_bound"] is not None]
            ax.plot([p["coverage"] for p in bounds], [p["risk_bound"] for p in bounds], "v", mfc="none", color="#1d2329", ms=5, label="its guaranteed bound")
            tops += [p["risk_bound"] for p in bounds]
        ax.axhline(alpha, ls="--", lw=1, color="#c62828", label=f"risk target {alpha:g}")
        if chosen is not None:
            ax.plot([chosen[0]], [chosen[1]], "*", ms=14, color="#f1c40f", mec="#1d2329", label="this plan")
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, min(1.0, max(tops) * 1.15 + 0.01))
        ax.set_xlabel("coverage: share of pairs decided")
        ax.set_ylabel("disagreement with people")
        ax.set_title("coverage and risk", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        return png_of(fig)

    return safe_figure("coverage-risk curve", "coverage against disagreement with people: each judge alone and the cascade at each risk target", draw, caption)


def risk_target_figure(points: Sequence[Mapping[str, Any]], *, alpha: float, caption: str = "") -> Figure:
    """What each risk target buys: the cascade's coverage and, when known, its cost per 1,000
    judgments, against the target."""

    def draw() -> str:
        fig, ax = new_figure(5.2, 3.4)
        xs = [p["alpha"] for p in points]
        ax.plot(xs, [p["coverage"] for p in points], "o-", color=_ACCENT, ms=4, label="coverage")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("risk target (alpha)")
        ax.set_ylabel("coverage", color=_ACCENT)
        ax.axvline(alpha, ls="--", lw=1, color="#c62828")
        if points and all(p["cost_per_1000"] is not None for p in points):
            cost = ax.twinx()
            cost.plot(xs, [p["cost_per_1000"] for p in points], "s--", color=_MAP, ms=3, label="cost per 1,000 judgments")
            cost.set_ylabel("USD per 1,000 judgments", color=_MAP)
            cost.set_ylim(bottom=0)
        ax.set_title("coverage and cost by risk target", fontsize=9)
        return png_of(fig)

    return safe_figure("risk target", "the cascade's coverage and cost against the risk target", draw, caption)


# ------------------------------------------------------------------------------ sample tables
def _thumbs(images: str | Path | None, thumb_px: int) -> ThumbCache:
    """Thumbnails from inside ``images`` only; none at all without it."""
    return thumb_cache(images, (), thumb_px if images is not None else 0)


def _with_images(columns: list[Column], thumbs: ThumbCache, rows: list[dict[str, Any]]) -> tuple[list[Column], list[dict[str, Any]]]:
    """The ``image`` column as thumbnails when the page has any (``thumbs.max_px``), else as names."""
    if not thumbs.max_px:
        return columns, rows
    cols = [Column("image", "image", "image") if c.key == "image" else c for c in columns]
    return cols, [{**r, "image": image_cell(thumbs, r.get("image"))} for r in rows]


# ------------------------------------------------------------------------------ calibrate page
def _norm_map(d: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The calibration map on [0, 1] of both scales (score records) or as it is (pair records)."""
    x, y = d["calibration_map"]["x"], d["calibration_map"]["y"]
    if d["kind"] != "score":
        return list(x), list(y)
    (lo, hi), (hlo, hhi) = d["scale"], d["human_scale"]
    return [(v - lo) / (hi - lo) for v in x], [(v - hlo) / (hhi - hlo) for v in y]


def _reliability_section(d: Mapping[str, Any]) -> Section:
    s = Section(title="reliability")
    pair = d["kind"] == "pair"
    s.facts += [("ECE", _num(d["ece"], 4)), ("Brier", _num(d["brier"], 4))]
    if "after_calibration" in d:
        a = d["after_calibration"]
        s.facts += [("ECE after the map (in sample)", _num(a["ece"], 4)), ("Brier after the map (in sample)", _num(a["brier"], 4))]
    if pair:
        s.facts += [("confidence rule", str(d["confidence_rule"])), ("agreement with people", _num(d["agreement"]))]
        labels = ("the judge's confidence in its verdict", "share agreeing with people")
        points = "bins: mean confidence, share agreeing"
    else:
        (lo, hi), (hlo, hhi) = d["scale"], d["human_scale"]
        labels = (f"judge's score ({lo:g}-{hi:g} as 0-1)", f"human score ({hlo:g}-{hhi:g} as 0-1)")
        points = "bins: mean judge, mean human"
    caption = "points on the diagonal: the judge's number means what it says; orange: the isotonic map fitted on these labels"
    s.figures.append(reliability_figure(d["reliability"], title=f"{d['method']} @ {d['backend']}", xlabel=labels[0], ylabel=labels[1], calibration_map=_norm_map(d), caption=caption, points=points))
    rows = [[f"[{b['low']:.2f}, {b['high']:.2f}]", str(b["count"]), _num(b["mean_value"]), _num(b["mean_outcome"])] for b in d["reliability"]]
    head = ["bin", "samples", "mean confidence" if pair else "mean judge", "share agreeing" if pair else "mean human"]
    s.stats.append(StatTable("reliability bins", head, rows, "equal-width bins; ECE is the count-weighted mean gap between the two means, Brier the mean squared difference"))
    return s


def _mean_section(d: Mapping[str, Any]) -> Section:
    s = Section(title="mean human score: judge only, human only, PPI++")
    est = d.get("mean_human_score")
    if not est:
        s.notes.append("every record has a human label: the labels' own mean is the answer, the judge has nothing to add")
        return s
    anyone = next(iter(est.values()))
    level = f"{100 * (1 - anyone['alpha']):g}%"
    s.facts += [("labelled records", str(d["labelled"])), ("records without a label", str(d["unlabelled"])), ("interval", level), ("clustered by image", "yes" if anyone["clustered"] else "no")]
    hlo, hhi = d["human_scale"]
    caption = "judge only: the judge's mean as if it were people's (its bias is not in the interval); human only: the labels alone; PPI / PPI++: the judge on every record, corrected by its error on the labelled ones"
    s.figures.append(intervals_figure({"mean human score": est}, title=f"mean human score, {level} intervals", xlabel=f"human scale ({hlo:g}-{hhi:g})", caption=caption))
    note = ("worth human labels: how many labels the labels alone would need for an interval as narrow. The PPI intervals hold when the labelled "
            "records are a random draw from the same pool as the others (docs/trust.md)")
    s.stats.append(intervals_table(est, title="the estimates", note=note))
    return s


_SCORE_COLUMNS = [
    Column("id", "id"),
    Column("image", "image"),
    Column("judge", "judge score", "num"),
    Column("human", "human score", "num", "the mean of the annotators"),
    Column("annotators", "annotators", "num"),
    Column("calibrated", "calibrated", "num", "the judge's score through the isotonic map, on the human scale"),
    Column("gap", "gap", "num", "|judge - human|, both on 0-1 of their scales"),
]
_PAIR_COLUMNS = [
    Column("id", "id"),
    Column("image", "image"),
    Column("verdict", "judge's verdict"),
    Column("confidence", "confidence", "num"),
    Column("human", "human verdict", title="the annotators' majority (a shared top is tie)"),
    Column("annotators", "annotators", "num"),
    Column("agrees", "agrees"),
    Column("calibrated", "calibrated", "num", "the chance of agreeing with people, by the isotonic map"),
]


def _labelled_table(rows: list[dict[str, Any]], kind: str, thumbs: ThumbCache, max_rows: int) -> SampleTable:
    shown, total = cut(rows, max_rows)
    if kind == "pair":
        cells = [{**r, "agrees": "yes" if r["agrees"] else "no", "_status": "agrees" if r["agrees"] else "disagrees"} for r in shown]
    else:
        cells = [{**r, "_status": "ok"} for r in shown]
    cols, cells = _with_images(_PAIR_COLUMNS if kind == "pair" else _SCORE_COLUMNS, thumbs, cells)
    table = SampleTable("labelled", "labelled records", cols, cells, total)
    if total:
        table.note = f"the first {len(shown)} of {total} records are shown"
    return table


def calibration_page(report: Report, *, images: str | Path | None = None, thumb_px: int = DEFAULT_MAX_PX, command: str = "", max_rows: int = DEFAULT_MAX_ROWS) -> Page:
    """``capjudge calibrate --html``: the reliability diagram and its bins, for score records the
    mean human score's intervals (judge only, human only, PPI, PPI++), and the labelled records
    (thumbnails from inside ``images`` when given)."""
    d = report.data
    name = Path(d["results"]).name
    page = Page(title=f"capjudge calibrate: {name} against {Path(d['human']).name}", subtitle=f"{d['kind']} records of {d['method']} @ {d['backend']}", thumbs=_thumbs(images, thumb_px), command=command)
    page.facts = [("results", d["results"]), ("human labels", d["human"]), ("records", str(d["records"])), ("labelled ids", str(d["labelled"])), ("failed records", str(d["failed"])), ("bad rows", str(d["bad_rows"]))]
    page.warnings = random_model_warnings([(name, [{"backend": d["backend"]}])])
    page.sections.append(_reliability_section(d))
    if d["kind"] == "score":
        page.sections.append(_mean_section(d))
    s = Section(title="labelled records")
    s.tables.append(_labelled_table(report.detail.get("rows", []), d["kind"], page.thumbs, max_rows))
    page.sections.append(s)
    return page


# -------------------------------------------------------------------------------- cascade page
def _judges_table(d: Mapping[str, Any]) -> StatTable:
    c = d["calibration"]
    rows = []
    for j in d["judges"]:
        rows.append([
            j["name"],
            str(j.get("backend") or "-"),
            "never" if j["threshold"] is None else f"{j['threshold']:.4f}",
            str(j["calibration_n"]),
            str(j["kept"]),
            _num(j["empirical_risk"]),
            _num(j["risk_bound"]),
            str(j["confidence_rule"]),
            _num(c["asked"].get(j["name"])),
            _num(c["shares"].get(j["name"])),
            _money(j["cost_per_judgment"]),
        ])
    head = ["judge", "backend", "threshold", "reached", "kept", "disagreement", "bound", "confidence rule", "asked", "share of decided", "cost per judgment"]
    note = "in the order asked: reached = labelled pairs no earlier judge kept; bound = the 1 - delta upper bound of its disagreement with people; asked = share of all pairs that reach it; never: it keeps nothing"
    return StatTable("the judges", head, rows, note)


def _curve_table(points: Sequence[Mapping[str, Any]], names: Sequence[str]) -> StatTable:
    """One row per run of neighbouring risk targets that give the same cascade."""
    runs: list[tuple[list[float], Mapping[str, Any]]] = []
    for p in points:
        if runs and runs[-1][1]["thresholds"] == p["thresholds"]:
            runs[-1][0].append(p["alpha"])
        else:
            runs.append(([p["alpha"]], p))
    rows = []
    for alphas, p in runs:
        target = f"{alphas[0]:g}" if len(alphas) == 1 else f"{alphas[0]:g} to {alphas[-1]:g}"
        th = ", ".join(f"{n} {'never' if t is None else f'{t:.4f}'}" for n, t in zip(names, p["thresholds"]))
        rows.append([target, _num(p["coverage"]), _num(p["risk"]), _num(p["risk_bound"]), _money(p["cost_per_1000"]), th])
    note = "each target calibrates the cascade again on the same labelled pairs (neighbouring targets that give the same thresholds share a row); disagreement is in sample"
    return StatTable("the cascade at each risk target", ["risk target", "coverage", "disagreement", "guaranteed bound", "cost per 1,000", "thresholds"], rows, note)


def _pairs_table(rows: list[dict[str, Any]], names: Sequence[str], thumbs: ThumbCache, max_rows: int) -> SampleTable:
    cols = [Column("id", "id"), Column("image", "image")]
    for j, n in enumerate(names):
        cols += [Column(f"verdict{j}", f"{n} verdict"), Column(f"confidence{j}", f"{n} confidence", "num")]
    cols += [Column("decided_by", "decided by", title="the first judge whose confidence clears its threshold; empty: abstained (ask a person)"), Column("verdict", "cascade verdict"), Column("human", "human verdict"), Column("status", "status", title="agrees / disagrees with people, abstained, or unlabelled")]
    shown, total = cut(rows, max_rows)
    cols, cells = _with_images(cols, thumbs, [{**r, "_status": r["status"]} for r in shown])
    table = SampleTable("pairs", "pairs", cols, cells, total)
    if total:
        table.note = f"the first {len(shown)} of {total} pairs are shown"
    return table


def cascade_page(report: Report, *, images: str | Path | None = None, thumb_px: int = DEFAULT_MAX_PX, command: str = "", max_rows: int = DEFAULT_MAX_ROWS) -> Page:
    """``capjudge cascade --html``: the judges' thresholds, the coverage-risk curve, coverage and
    cost by risk target, and every pair with the judge that decided it (thumbnails from inside
    ``images`` when given)."""
    d = report.data
    names = [j["name"] for j in d["judges"]]
    c = d["calibration"]
    sub = f"risk <= {d['alpha']:g} with probability >= {1 - d['delta']:.2f} (rule {d['rule']})"
    page = Page(title="capjudge cascade: " + " -> ".join(names), subtitle=sub, thumbs=_thumbs(images, thumb_px), command=command)
    page.facts = [
        ("human labels", d["human"]),
        ("labelled pairs (calibration)", str(d["calibration_n"])),
        ("coverage", _num(c["coverage"])),
        ("agreement with people on decided pairs", _num(c["selective_accuracy"])),
        ("guaranteed risk", _num(d["guaranteed_risk"])),
        ("cost per 1,000 judgments", _money(c["cost_per_1000"])),
        ("bad rows", str(d["bad_rows"])),
    ]
    if "unlabelled" in d:
        u = d["unlabelled"]
        page.facts += [("unlabelled pairs", str(u["n"])), ("their coverage", _num(u["coverage"])), ("their cost per 1,000", _money(u["cost_per_1000"]))]
    page.warnings = random_model_warnings((j["name"], [{"backend": j.get("backend")}]) for j in d["judges"])
    s = Section(title="the cascade")
    s.stats.append(_judges_table(d))
    points = d.get("coverage_risk", [])
    chosen = None if c["selective_accuracy"] is None else (c["coverage"], 1 - c["selective_accuracy"])
    caption = "lines: each judge alone as its threshold falls (in sample); dots: the cascade calibrated at risk targets 0.02 to 0.50; triangles: their guaranteed bounds; star: this plan"
    s.figures.append(coverage_risk_figure(report.detail.get("judge_curves", {}), points, alpha=d["alpha"], chosen=chosen, caption=caption))
    s.figures.append(risk_target_figure(points, alpha=d["alpha"], caption="dashed: this plan's target"))
    s.stats.append(_curve_table(points, names))
    page.sections.append(s)
    p = Section(title="pairs")
    p.tables.append(_pairs_table(report.detail.get("rows", []), names, page.thumbs, max_rows))
    page.sections.append(p)
    return page
