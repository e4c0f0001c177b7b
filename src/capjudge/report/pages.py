"""Report pages, one builder per command: results files (``capjudge html``, ``score``/``compare
--html``), judge agreement (``agree --html``), meta-evaluation (``meta-eval``/``report --html``)
and robustness probes (``probe --html``). Each returns a :class:`~capjudge.report.model.Page`
that :func:`capjudge.report.html.write_html` renders.

Thumbnails are looked up under ``images`` (the run's ``--images`` folder) and then beside each
results file and in the current folder, the places a relative image path usually means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capjudge.probes.report import _pct, _share
from capjudge.report import figures
from capjudge.report.model import Column, Page, SampleTable, Section, StatTable
from capjudge.report.random_model import random_model_warnings
from capjudge.report.records import (
    DEFAULT_MAX_ROWS,
    ResultsFile,
    cut,
    fmt_num,
    image_cell,
    load_results_file,
    results_section,
    score_values,
)
from capjudge.report.thumbs import DEFAULT_MAX_PX, ThumbCache

if TYPE_CHECKING:
    from capjudge.metaeval.agree import AgreeReport, PairComparison
    from capjudge.metaeval.protocols import MetaEval
    from capjudge.probes.runner import HardeningComparison, ProbeReport


def thumb_cache(
    images: str | Path | None,
    results: Sequence[str | Path] = (),
    max_px: int = DEFAULT_MAX_PX,
    *,
    allow_outside: bool = False,
    confine_searched: bool = False,
) -> ThumbCache:
    """Thumbnails resolved under ``images``, then the results files' folders, then the current folder.

    Embedded only from inside ``images`` when it is given; with ``confine_searched`` (``capjudge
    html``: the results may be someone else's) and no ``images``, only from the folders searched;
    ``allow_outside`` embeds any file found."""
    roots: list[Path] = [Path(images)] if images else []
    for r in results:
        parent = Path(r).resolve().parent
        if parent not in roots:
            roots.append(parent)
    if Path.cwd() not in roots:
        roots.append(Path.cwd())
    allowed: list[Path] | None = None
    if not allow_outside:
        if images:
            allowed = [Path(images)]
        elif confine_searched:
            allowed = list(roots)
    return ThumbCache(roots, max_px, allowed)


def _f(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _ci(value: Any, ci: tuple[float, float] | None, digits: int = 1) -> str:
    text = _f(value, digits)
    if ci and not any(isinstance(x, float) and math.isnan(x) for x in ci):
        text += f" [{_f(ci[0], digits)}, {_f(ci[1], digits)}]"
    return text


def _scale_of(rf: ResultsFile) -> tuple[float, float] | None:
    for _, r in rf.records:
        s = r.get("scale")
        if isinstance(s, list) and len(s) == 2 and all(isinstance(x, (int, float)) for x in s):
            return float(s[0]), float(s[1])
    return None


def _file_section(rf: ResultsFile, thumbs: ThumbCache, n: int, title: str | None = None, max_rows: int = DEFAULT_MAX_ROWS, histogram: bool = True) -> Section:
    section = results_section(rf, thumbs, title=title, table_id=f"f{n}", max_rows=max_rows)
    values = score_values(rf)
    if histogram and len(values) >= 2:
        section.figures.append(figures.score_histogram(values, title or Path(rf.path).name, _scale_of(rf)))
    return section


# ------------------------------------------------------------------------------ results files
def results_page(
    paths: Sequence[str | Path],
    *,
    images: str | Path | None = None,
    names: Sequence[str] | None = None,
    title: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    thumb_px: int = DEFAULT_MAX_PX,
    with_agree: bool = False,
    command: str = "",
    allow_outside_images: bool = False,
    confine_searched: bool = False,
) -> Page:
    """One section per results file (summary, score histogram, sample table); with ``with_agree``
    and two or more files, the judges' agreement first. Raises
    :class:`~capjudge.report.records.ReportInputError` for a missing or unusable file. Thumbnails
    come only from inside ``images`` (or, with ``confine_searched``, the folders searched) unless
    ``allow_outside_images`` (:func:`thumb_cache`)."""
    if names is not None and len(names) != len(paths):
        from capjudge.report.records import ReportInputError

        raise ReportInputError(f"{len(names)} names for {len(paths)} results files")
    files = [load_results_file(p) for p in paths]
    thumbs = thumb_cache(images, paths, thumb_px, allow_outside=allow_outside_images, confine_searched=confine_searched)
    labels = list(names) if names else [Path(p).name for p in paths]
    page = Page(title=title or ("capjudge report: " + ", ".join(labels)), thumbs=thumbs, command=command)
    page.facts = [("results files", str(len(files))), ("records", str(sum(len(f.records) for f in files)))]
    page.warnings = random_model_warnings((label, (r for _, r in rf.records)) for rf, label in zip(files, labels, strict=True))
    if with_agree and len(files) >= 2:
        from capjudge.metaeval.agree import agree

        report = agree([str(p) for p in paths], list(names) if names else None, bootstrap=0)
        page.sections += agree_sections(report, [str(p) for p in paths], thumbs, files)
    for n, (rf, label) in enumerate(zip(files, labels, strict=True), start=1):
        page.sections.append(_file_section(rf, thumbs, n, label, max_rows))
    return page


# ----------------------------------------------------------------------------------- agree
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
    from capjudge.metaeval.datasets import image_name

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
            ("Kendall tau-b (x100)", _ci(pc.measures.get("kendall_tau_b"), ci.get("kendall_tau_b"))),
            ("Spearman (x100)", _ci(pc.measures.get("spearman"), ci.get("spearman"))),
            ("Pearson (x100)", _ci(pc.measures.get("pearson"), ci.get("pearson"))),
        ]
        if "mean_diff" in pc.measures:
            s.facts.append((f"mean difference {pc.b} - {pc.a}", _ci(pc.measures["mean_diff"], ci.get("mean_diff"), 4)))
        s.facts.append(("compared by", "ranks (scales differ)" if pc.comparison == "ranks" else "values (same scale)"))
        sp = pc.same_image_pairs
        if sp:
            s.facts.append(("same-image caption pairs ordered alike (%)", f"{_f(sp.get('same_order'))} of {sp.get('same', 0) + sp.get('opposite', 0)}"))
    else:
        s.facts += [
            ("Cohen's kappa (x100)", _ci(pc.measures.get("cohen_kappa"), ci.get("cohen_kappa"))),
            ("agreement (%)", _ci(pc.measures.get("agreement"), ci.get("agreement"))),
        ]
    c = pc.counts
    s.facts += [(f"only in {pc.a} / only in {pc.b}", f"{c.get('only_a', 0)} / {c.get('only_b', 0)}"), ("left out (error record in either)", str(c.get("excluded_errors", 0)))]
    if pc.kind == "score" and pc.n >= 1 and isinstance(paths[0], str):
        a, b = pc.scores
        s.figures.append(figures.agree_scatter(a, b, pc.a, pc.b, pc.top, same_scale=pc.comparison == "values"))
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
            head.facts.append(("Fleiss' kappa (x100)", _f(report.overall.get("fleiss_kappa"))))
    if report.position_bias:
        head.stats.append(
            StatTable(
                "position bias",
                ["judge", "two-order records", "first %", "tie votes %", "flips %", "same pos. %", "tie verdicts %"],
                [[name, str(pb["two_order_records"]), _f(pb["first_position"]), _f(pb["tie_votes"]), _f(pb["flip_rate"]), _f(pb["position_flips"]), _f(pb["tie_share"])] for name, pb in report.position_bias.items()],
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
        page.sections.append(_file_section(rf, thumbs, n, f"results of {name}", max_rows, histogram=False))
    return page


# -------------------------------------------------------------------------------- meta-eval
def _metaeval_section(ev: MetaEval, label: str) -> Section:
    from capjudge.metaeval.report import COLUMNS, fmt_ci

    s = Section(title=f"{ev.dataset}: {label}")
    s.facts += [("results file", ev.scores_path), ("protocol", ev.protocol), ("scores", ev.scores_kind)]
    for key, header in COLUMNS.get(ev.dataset, [(ev.primary, ev.primary)]):
        s.facts.append((f"{header} ({ev.unit})" + (" - primary" if key == ev.primary else ""), fmt_ci(ev, key)))
    if ev.human is not None or ev.by_category:
        s.figures.append(figures.heatmap(ev))
    if ev.by_category and ev.dataset in ("pascal50s", "foil"):
        hdr = ["category", "pairs", "evaluated", "correct", "ties", "wrong", "failed", "unmatched", "accuracy %"]
        s.stats.append(StatTable("per category", hdr, [[c, *(_f(d.get(k)) for k in ("pairs", "evaluated", "correct", "ties", "wrong", "failed", "unmatched", "accuracy"))] for c, d in ev.by_category.items()]))
    elif ev.by_category:
        s.stats.append(StatTable("per group", ["group", "n", "tau-c"], [[g, _f(d.get("n")), _f(d.get("tau_c"))] for g, d in ev.by_category.items()]))
    s.stats.append(StatTable("counts", ["what", "n"], [[k, str(v)] for k, v in ev.counts.items()]))
    s.notes += list(ev.notes)
    return s


def metaeval_page(evals: Sequence[MetaEval], *, names: Sequence[str] | None = None, images: str | Path | None = None, max_rows: int = DEFAULT_MAX_ROWS, thumb_px: int = DEFAULT_MAX_PX, command: str = "") -> Page:
    """``capjudge meta-eval`` / ``report --html``: the comparison table (several files), per
    file its measures, heatmap and counts, then every results file's samples."""
    from capjudge.metaeval.report import comparison_rows, has_cis, unique_labels

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
        page.sections.append(_file_section(rf, thumbs, n, f"results of {label}", max_rows, histogram=False))
    return page


# ------------------------------------------------------------------------------------ probe
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
    from capjudge.probes.runner import INJECTION_KINDS

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
    s.figures.append(figures.probe_bars(report))
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
            row += [_share(k.prefer_original, k.n_scored), _share(k.ties, k.n_scored), _share(k.prefer_perturbed, k.n_scored), str(k.n_errors), "-" if k.mean_drop_pct is None else f"{k.mean_drop_pct:+.1f}"]
        if report.by_pairwise:
            pw = k.pairwise or {}
            row += [f"{pw.get('prefer_original', 0)} / {pw.get('ties', 0)} / {pw.get('prefer_perturbed', 0)} of {pw.get('n_compared', 0)}"]
        if has_inj:
            base = "-" if k.baseline_rate is None else f"{100 * k.baseline_rate:.0f}%"
            row += [f"{_share(k.n_obeyed or 0, k.n_obedience_checked or 0)} ({base})" if k.kind in INJECTION_KINDS else ""]
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
    rows = [[f"{k} obeyed", _pct(v["plain"]), _pct(v["hardened"])] for k, v in cmp.obedience.items()]
    rows += [[f"{k} prefers original", _pct(v["plain"]), _pct(v["hardened"])] for k, v in cmp.prefer_original.items()]
    rows.append(["mean clean score (% of scale)", _f(cmp.clean_mean.get(cmp.plain)), _f(cmp.clean_mean.get(cmp.hardened))])
    s.stats.append(StatTable("the two methods", ["measure", cmp.plain, cmp.hardened], rows))
    s.facts += [("clean captions scored by both", str(cmp.n_clean_both)), ("Pearson r on clean captions", _f(cmp.clean_pearson, 3)), ("mean absolute difference (points of scale)", _f(cmp.clean_mean_abs_diff_pct))]
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
