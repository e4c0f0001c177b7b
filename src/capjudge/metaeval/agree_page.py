"""The agreement page (``capjudge agree --html``) and its sections, which ``capjudge html --agree``
puts before the results files (:func:`agree_lead`): the judges, each pair compared (scatter,
calibration, the largest disagreements with their images, or the verdict table), position bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from capjudge.metaeval.agree import AgreeReport, PairComparison, agree
from capjudge.metaeval.datasets import image_name
from capjudge.report.figures import new_figure, png_of, safe_figure
from capjudge.report.model import Column, Figure, Page, SampleTable, Section, StatTable
from capjudge.report.numbers import fixed, fixed_ci
from capjudge.report.pages import LeadSections, file_section, thumb_cache
from capjudge.report.records import (
    DEFAULT_MAX_ROWS,
    ResultsFile,
    fmt_num,
    image_cell,
    load_results_file,
)
from capjudge.report.thumbs import DEFAULT_MAX_PX, ThumbCache

DISAGREEMENT_COLUMNS = [
    Column("n", "#", "num", "number of the circled dot in the scatter plot"),
    Column("id", "id"),
    Column("image", "image", "image"),
    Column("caption", "caption"),
    Column("score_a", "score A", "num"),
    Column("score_b", "score B", "num"),
    Column("rank_a", "rank A", "num"),
    Column("rank_b", "rank B", "num"),
    Column("rank_diff", "rank B - A", "num"),
]


def _original_images(files: Sequence[ResultsFile]) -> dict[str, str]:
    """Image file name -> the path a record wrote (agree joins on file names only)."""
    out: dict[str, str] = {}
    for rf in files:
        for _, r in rf.records:
            img = r.get("image")
            if isinstance(img, str) and img:
                out.setdefault(image_name(img), img)
    return out


def _pair_section(pc: PairComparison, report: AgreeReport, paths: Sequence[str], thumbs: ThumbCache, n: int, originals: dict[str, str]) -> Section:
    s = Section(title=f"agreement: {pc.a} vs {pc.b}")
    s.facts.append(("samples in common", str(pc.n)))
    ci = pc.ci
    if pc.kind == "score":
        s.facts += [
            ("Kendall tau-b (x100)", fixed_ci(pc.measures.get("kendall_tau_b"), ci.get("kendall_tau_b"))),
            ("Spearman (x100)", fixed_ci(pc.measures.get("spearman"), ci.get("spearman"))),
            ("Pearson (x100)", fixed_ci(pc.measures.get("pearson"), ci.get("pearson"))),
        ]
        if "mean_diff" in pc.measures:
            s.facts.append((f"mean difference {pc.b} - {pc.a}", fixed_ci(pc.measures["mean_diff"], ci.get("mean_diff"), 4)))
        s.facts.append(("compared by", "ranks (scales differ)" if pc.comparison == "ranks" else "values (same scale)"))
        sp = pc.same_image_pairs
        if sp:
            s.facts.append(("same-image caption pairs ordered alike (%)", f"{fixed(sp.get('same_order'))} of {sp.get('same', 0) + sp.get('opposite', 0)}"))
    else:
        s.facts += [
            ("Cohen's kappa (x100)", fixed_ci(pc.measures.get("cohen_kappa"), ci.get("cohen_kappa"))),
            ("agreement (%)", fixed_ci(pc.measures.get("agreement"), ci.get("agreement"))),
        ]
    c = pc.counts
    s.facts += [(f"only in {pc.a} / only in {pc.b}", f"{c.get('only_a', 0)} / {c.get('only_b', 0)}"), ("left out (error record in either)", str(c.get("excluded_errors", 0)))]
    if pc.kind == "score" and pc.n >= 1 and isinstance(paths[0], str):
        a, b = pc.scores
        s.figures.append(agree_scatter(a, b, pc.a, pc.b, pc.top, same_scale=pc.comparison == "values"))
        if pc.calibration:
            s.stats.append(
                StatTable(
                    f"calibration: mean {pc.b} per quantile bin of {pc.a}",
                    [f"{pc.a} range", f"mean {pc.a}", f"mean {pc.b}", "n"],
                    [[f"{fmt_num(r['a_min'])} - {fmt_num(r['a_max'])}", fmt_num(r["mean_a"]), fmt_num(r["mean_b"]), str(r["n"])] for r in pc.calibration],
                )
            )
        rows = []
        for k, d in enumerate(pc.disagreements, start=1):
            rows.append(
                {
                    "_status": "ok",
                    "n": k,
                    "id": "" if d.get("id") is None else str(d["id"]),
                    "image": image_cell(thumbs, originals.get(str(d["image"]), str(d["image"]))),
                    "caption": str(d.get("caption") or ""),
                    "score_a": d.get("score_a"),
                    "score_b": d.get("score_b"),
                    "rank_a": d.get("rank_a"),
                    "rank_b": d.get("rank_b"),
                    "rank_diff": d.get("rank_diff"),
                }
            )
        if rows:
            cols = [Column(c.key, c.label.replace("score A", f"{pc.a}").replace("score B", f"{pc.b}").replace("rank A", f"rank {pc.a}").replace("rank B", f"rank {pc.b}"), c.kind, c.title) for c in DISAGREEMENT_COLUMNS]
            s.tables.append(SampleTable(f"agree{n}", f"largest disagreements (rank 1 = lowest of {pc.n})", cols, rows))
    elif pc.kind == "pairwise" and pc.confusion:
        s.stats.append(StatTable(f"verdicts: {pc.a} (rows) vs {pc.b} (columns)", ["", "A", "B", "tie"], [[lab, *(str(v) for v in row)] for lab, row in zip(("A", "B", "tie"), pc.confusion, strict=True)]))
    s.notes += list(pc.notes)
    return s


def agree_sections(report: AgreeReport, paths: Sequence[str], thumbs: ThumbCache, files: Sequence[ResultsFile]) -> list[Section]:
    """The agreement report: the judges, each pair compared (scatter, calibration, the largest
    disagreements with their images, or the verdict table), position bias and notes."""
    head = Section(title="judges compared")
    head.stats.append(
        StatTable(
            "judges",
            ["name", "judge", "file", "records", "ok", "errors", "scale"],
            [
                [
                    str(j["name"]),
                    str(j["judge"]),
                    str(j["path"]),
                    str(j["records"]),
                    str(j["ok"]),
                    str(j["errors"]),
                    "verdicts" if report.kind == "pairwise" else ("-" if not j["scale"] else f"{j['scale'][0]:g}-{j['scale'][1]:g}"),
                ]
                for j in report.judges
            ],
        )
    )
    head.facts.append(("joined on", "sample id" if report.key == "id" else "image file name + caption"))
    if report.overall:
        head.facts.append(("samples judged by every judge", str(report.overall.get("n", "-"))))
        if "fleiss_kappa" in report.overall:
            head.facts.append(("Fleiss' kappa (x100)", fixed(report.overall.get("fleiss_kappa"))))
    if report.position_bias:
        head.stats.append(
            StatTable(
                "position bias",
                ["judge", "two-order records", "first %", "tie votes %", "flips %", "same pos. %", "tie verdicts %"],
                [[name, str(pb["two_order_records"]), fixed(pb["first_position"]), fixed(pb["tie_votes"]), fixed(pb["flip_rate"]), fixed(pb["position_flips"]), fixed(pb["tie_share"])] for name, pb in report.position_bias.items()],
                "first: votes for the caption shown first (50% = no bias); flips: the verdict changed with the order; same pos.: the same position won in both orders",
            )
        )
    head.notes += list(report.notes)
    originals = _original_images(files)
    return [head, *(_pair_section(pc, report, paths, thumbs, n, originals) for n, pc in enumerate(report.pairs, start=1))]


def agree_page(report: AgreeReport, paths: Sequence[str], *, images: str | Path | None = None, max_rows: int = DEFAULT_MAX_ROWS, thumb_px: int = DEFAULT_MAX_PX, command: str = "") -> Page:
    """``capjudge agree --html``: the agreement sections, then every judge's results file."""
    thumbs = thumb_cache(images, paths, thumb_px)
    names = [str(j["name"]) for j in report.judges]
    page = Page(title="capjudge agree: " + " vs ".join(names), thumbs=thumbs, command=command)
    page.facts = [("judges", str(len(names))), ("kind", "scores" if report.kind == "score" else "pairwise verdicts")]
    if report.bootstrap:
        page.facts.append(("bootstrap", f"{report.bootstrap} resamples, seed {report.seed}"))
    files = [load_results_file(p) for p in paths]
    page.sections += agree_sections(report, paths, thumbs, files)
    for n, (rf, name) in enumerate(zip(files, names, strict=True), start=1):
        page.sections.append(file_section(rf, thumbs, n, f"results of {name}", max_rows, histogram=False))
    return page

def agree_lead(paths: Sequence[str | Path], names: Sequence[str] | None = None) -> LeadSections:
    """For :func:`capjudge.report.pages.results_page`'s ``lead`` (``capjudge html --agree``): with
    two or more files, their agreement (no bootstrap) before the files. Raises
    :class:`~capjudge.metaeval.agree_load.AgreeInputError` when the files cannot be compared."""

    def lead(files: Sequence[ResultsFile], thumbs: ThumbCache) -> list[Section]:
        if len(files) < 2:
            return []
        report = agree([str(p) for p in paths], list(names) if names else None, bootstrap=0)
        return agree_sections(report, [str(p) for p in paths], thumbs, files)

    return lead


def agree_scatter(a: Sequence[float], b: Sequence[float], name_a: str, name_b: str, highlight: Sequence[int] = (), same_scale: bool = True) -> Figure:
    """Judge A's score against judge B's, one dot per sample both judged; ``highlight`` (indices)
    marks the largest disagreements, numbered as in the list below the plot."""

    def draw() -> str:
        fig, ax = new_figure(4.8, 4.4)
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
        return png_of(fig)

    return safe_figure(
        f"scatter: {name_a} vs {name_b}",
        f"scatter plot of the scores of {name_a} against those of {name_b}",
        draw,
        "one dot per sample both judges scored; circled and numbered: the largest rank differences (listed below)",
    )
