"""Text, JSON and Markdown renderings of meta-evaluation results."""

from __future__ import annotations

import math
from collections.abc import Sequence

from capjudge.metaeval.protocols import MetaEval

# columns shown per data set, in order (measure key -> header)
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "flickr8k-expert": [("tau_c", "tau-c"), ("tau_b", "tau-b"), ("pearson", "Pearson"), ("spearman", "Spearman")],
    "flickr8k-cf": [("tau_b", "tau-b"), ("tau_c", "tau-c"), ("pearson", "Pearson"), ("spearman", "Spearman")],
    "composite": [("tau_c", "tau-c"), ("tau_b", "tau-b"), ("pearson", "Pearson"), ("spearman", "Spearman")],
    "thumb": [
        ("pearson_P", "P"),
        ("pearson_R", "R"),
        ("pearson_total", "Total"),
        ("pearson_P_no_human", "P w/o Human"),
        ("pearson_R_no_human", "R w/o Human"),
        ("pearson_total_no_human", "Total w/o Human"),
    ],
    "pascal50s": [("HC", "HC"), ("HI", "HI"), ("HM", "HM"), ("MM", "MM"), ("mean", "Mean")],
    "foil": [("accuracy", "Accuracy")],
}


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table; ``-`` for undefined."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def fmt_ci(ev: MetaEval, key: str, digits: int = 1) -> str:
    """``value [lo, hi]`` when a CI exists, else just the value."""
    v = fmt(ev.measures.get(key, math.nan), digits)
    if key in ev.ci:
        lo, hi = ev.ci[key]
        return f"{v} [{fmt(lo, digits)}, {fmt(hi, digits)}]"
    return v


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_table(ev: MetaEval) -> str:
    """The ``--format table`` output of ``capjudge meta-eval``."""
    cols = COLUMNS.get(ev.dataset, [(ev.primary, ev.primary)])
    lines = [f"{ev.dataset}: {ev.label}  ({ev.scores_path})", f"protocol: {ev.protocol}", ""]
    lines.append(_grid([h for _, h in cols], [[fmt_ci(ev, k) for k, _ in cols]]))
    if ev.by_category and ev.dataset in ("pascal50s", "foil"):
        lines.append("")
        hdr = ["category", "pairs", "evaluated", "correct", "ties", "wrong", "failed", "unmatched", "accuracy %"]
        rows = [
            [c, d["pairs"], d["evaluated"], d["correct"], d["ties"], d["wrong"], d["failed"], d["unmatched"], fmt(d["accuracy"])]
            for c, d in ev.by_category.items()
        ]
        lines.append(_grid(hdr, [[str(x) for x in r] for r in rows]))
    elif ev.by_category:
        lines.append("")
        lines.append(_grid(["group", "n", "tau-c"], [[g, str(d["n"]), fmt(d["tau_c"])] for g, d in ev.by_category.items()]))
    lines.append("")
    lines.append("counts: " + ", ".join(f"{k}={v}" for k, v in ev.counts.items()))
    for note in ev.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def comparison_rows(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a comparison table (one row per results file)."""
    if not evals:
        return ["judge"], []
    cols = COLUMNS.get(evals[0].dataset, [(evals[0].primary, evals[0].primary)])
    header = ["judge", *(h for _, h in cols), "used", "failed", "unmatched"]
    rows = []
    for i, ev in enumerate(evals):
        c = ev.counts
        name = names[i] if names and i < len(names) else ev.label
        rows.append(
            [
                name,
                *(fmt_ci(ev, k) for k, _ in cols),
                str(c.get("used_rows", c.get("used_pairs", 0))),
                str(c.get("failed_rows", c.get("failed_pairs", 0))),
                str(c.get("unmatched_rows", c.get("unmatched_pairs", 0))),
            ]
        )
    return header, rows


def format_comparison(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> str:
    """Several judges on one benchmark as a plain-text table."""
    header, rows = comparison_rows(evals, names)
    title = f"{evals[0].dataset} ({evals[0].unit}; 95% bootstrap CI in brackets)" if evals else ""
    return title + "\n" + _grid(header, rows)


def comparison_markdown(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> str:
    """Several judges on one benchmark as a Markdown table, with the protocol and notes below."""
    header, rows = comparison_rows(evals, names)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    out = [f"### {evals[0].dataset}" if evals else "### meta-evaluation", ""]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    out.extend("| " + " | ".join(esc(c) for c in r) + " |" for r in rows)
    if evals:
        out += ["", f"Protocol: {evals[0].protocol}. Values in brackets: 95% bootstrap confidence interval."]
        for i, ev in enumerate(evals):
            name = names[i] if names and i < len(names) else ev.label
            for note in ev.notes:
                out.append(f"- {esc(name)}: {note}")
    return "\n".join(out) + "\n"
