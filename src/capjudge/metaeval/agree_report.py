"""The ``--format table`` rendering of an :class:`~capjudge.metaeval.agree.AgreeReport` (rich)."""

from __future__ import annotations

import io
import math
from typing import Any

from capjudge.metaeval.agree import AgreeReport, PairComparison
from capjudge.parsing.text import shorten


def _f(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _g(v: Any) -> str:
    """A score as written (4 significant digits)."""
    return "-" if v is None else f"{v:.4g}"


def _with_ci(pc: PairComparison, key: str, digits: int = 1) -> str:
    v = _f(pc.measures.get(key, math.nan), digits)
    lo, hi = pc.ci.get(key, (math.nan, math.nan))
    if not (math.isnan(lo) or math.isnan(hi)):
        return f"{v} [{_f(lo, digits)}, {_f(hi, digits)}]"
    return v


def _judges_table(report: AgreeReport) -> Any:
    from rich.table import Table

    t = Table(title="judges", title_justify="left")
    for col in ("name", "judge", "file", "records", "ok", "errors", "scale"):
        t.add_column(col, overflow="fold", justify="right" if col in ("records", "ok", "errors") else "left")
    for j in report.judges:
        scale = "verdicts" if report.kind == "pairwise" else ("-" if not j["scale"] else f"{j['scale'][0]:g}-{j['scale'][1]:g}")
        t.add_row(j["name"], j["judge"], j["path"], str(j["records"]), str(j["ok"]), str(j["errors"]), scale)
    return t


def _pair_measures(pc: PairComparison) -> Any:
    from rich.table import Table

    t = Table(title=f"{pc.a} vs {pc.b}: {pc.n} samples in common", title_justify="left")
    t.add_column("measure")
    t.add_column("value [95% CI]", justify="right")
    if pc.kind == "score":
        rows = [("Kendall tau-b (x100)", "kendall_tau_b", 1), ("Spearman (x100)", "spearman", 1), ("Pearson (x100)", "pearson", 1)]
        if "mean_diff" in pc.measures:
            rows.append((f"mean difference {pc.b} - {pc.a}", "mean_diff", 4))
        for label, key, d in rows:
            t.add_row(label, _with_ci(pc, key, d))
        sp = pc.same_image_pairs
        t.add_row("same-image caption pairs ordered alike (%)", f"{_f(sp.get('same_order'))} of {sp.get('same', 0) + sp.get('opposite', 0)}")
        t.add_row(f"  ... opposite / tied by {pc.a} only / by {pc.b} only / by both", f"{sp.get('opposite', 0)} / {sp.get('tied_a_only', 0)} / {sp.get('tied_b_only', 0)} / {sp.get('tied_both', 0)}")
        t.add_row("compared by", "ranks (scales differ)" if pc.comparison == "ranks" else "values (same scale)")
    else:
        why = pc.undefined.get("cohen_kappa")
        t.add_row("Cohen's kappa (x100)", _with_ci(pc, "cohen_kappa") + (f" ({why.split(':')[0]}; see the note)" if why else ""))
        t.add_row("agreement (%)", _with_ci(pc, "agreement"))
    c = pc.counts
    t.add_row("only in " + pc.a, str(c["only_a"]))
    t.add_row("only in " + pc.b, str(c["only_b"]))
    t.add_row("left out (error record in either)", str(c["excluded_errors"]))
    if "content_mismatch" in c:
        t.add_row("ids with different image/caption", str(c["content_mismatch"]))
    return t


def _confusion(pc: PairComparison) -> Any:
    from rich.table import Table

    t = Table(title="verdicts", title_justify="left")
    t.add_column(f"{pc.a} \\ {pc.b}", overflow="fold")
    for label in ("A", "B", "tie"):
        t.add_column(label, justify="right")
    for label, row in zip(("A", "B", "tie"), pc.confusion, strict=True):
        t.add_row(label, *(str(v) for v in row))
    return t


def _calibration(pc: PairComparison) -> Any:
    from rich.table import Table

    t = Table(title=f"calibration: mean {pc.b} per quantile bin of {pc.a}", title_justify="left")
    for col in (f"{pc.a} range", f"mean {pc.a}", f"mean {pc.b}", "n"):
        t.add_column(col, justify="right")
    for b in pc.calibration:
        t.add_row(f"{_g(b['a_min'])} - {_g(b['a_max'])}", _g(b["mean_a"]), _g(b["mean_b"]), str(b["n"]))
    return t


def _disagreements(pc: PairComparison) -> Any:
    from rich.table import Table

    t = Table(title=f"largest rank differences (rank 1 = lowest of {pc.n})", title_justify="left")
    for col in ("id", "image", "caption", pc.a, pc.b, f"rank {pc.a}", f"rank {pc.b}"):
        t.add_column(col, overflow="fold", justify="left" if col in ("id", "image", "caption") else "right")
    for d in pc.disagreements:
        t.add_row(str(d["id"] or "-"), d["image"], shorten(d["caption"], 48), _g(d["score_a"]), _g(d["score_b"]), _f(d["rank_a"], 1), _f(d["rank_b"], 1))
    return t


def _position_bias(report: AgreeReport) -> Any:
    from rich.table import Table

    t = Table(
        title="position bias: first = votes for the caption shown first (50% = none), flips = verdict changed with the order, "
        "same pos. = the same position won in both orders",
        title_justify="left",
    )
    for col in ("judge", "two-order records", "first %", "tie votes %", "flips %", "same pos. %", "tie verdicts %"):
        t.add_column(col, justify="left" if col == "judge" else "right", overflow="fold")
    for name, pb in report.position_bias.items():
        t.add_row(name, str(pb["two_order_records"]), _f(pb["first_position"]), _f(pb["tie_votes"]), _f(pb["flip_rate"]), _f(pb["position_flips"]), _f(pb["tie_share"]))
    return t


def _matrix(report: AgreeReport) -> Any:
    from rich.table import Table

    names = [j["name"] for j in report.judges]
    key = "kendall_tau_b" if report.kind == "score" else "cohen_kappa"
    t = Table(title=f"{'Kendall tau-b' if report.kind == 'score' else 'Cohen kappa'} x100 per pair of judges (n in brackets)", title_justify="left")
    t.add_column("")
    for n in names:
        t.add_column(n, justify="right")
    cell = {(p.a, p.b): p for p in report.pairs} | {(p.b, p.a): p for p in report.pairs}
    for r in names:
        t.add_row(r, *("-" if r == c else f"{_f(cell[(r, c)].measures.get(key))} ({cell[(r, c)].n})" for c in names))
    return t


def render(report: AgreeReport, console: Any) -> None:
    """Print the report on a rich console."""
    console.print(_judges_table(report))
    if len(report.pairs) > 1:
        console.print(_matrix(report))
        ov = report.overall
        if report.kind == "pairwise":
            ci = ov.get("ci95", {})
            fk = _f(ov.get("fleiss_kappa")) + (f" [{_f(ci['fleiss_kappa'][0])}, {_f(ci['fleiss_kappa'][1])}]" if "fleiss_kappa" in ci else "")
            console.print(f"all {len(report.judges)} judges on {ov['n']} common samples: Fleiss' kappa (x100) {fk}, unanimous {_f(ov.get('agreement'))}%", markup=False)
            if "fleiss_kappa" in ov.get("undefined", {}):
                console.print(f"note: Fleiss' kappa is undefined ({ov['undefined']['fleiss_kappa']})", markup=False)
        else:
            console.print(f"{ov['n']} samples judged successfully by every judge")
    for pc in report.pairs:
        console.print(_pair_measures(pc))
        if pc.kind == "score":
            if pc.calibration:
                console.print(_calibration(pc))
            if pc.disagreements:
                console.print(_disagreements(pc))
        else:
            console.print(_confusion(pc))
        for note in pc.notes:
            console.print(f"note [{pc.a} vs {pc.b}]: {note}", markup=False)
    if report.position_bias:
        console.print(_position_bias(report))
    for note in report.notes:
        console.print(f"note: {note}", markup=False)


def format_table(report: AgreeReport, width: int = 120) -> str:
    """The report as plain text (no colours)."""
    from rich.console import Console

    buf = io.StringIO()
    render(report, Console(file=buf, width=width, color_system=None, highlight=False))
    return buf.getvalue()
