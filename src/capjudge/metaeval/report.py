"""Text, JSON and Markdown renderings of meta-evaluation results."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

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
    lines = [f"{ev.dataset}: {ev.label}  ({ev.scores_path})", f"protocol: {ev.protocol}", f"scores: {ev.scores_kind}", ""]
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


def unique_labels(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> list[str]:
    """One label per row: the given name, else ``method @ backend``. Rows that share a label get
    their results file's name added (its path when the names are equal too; a number when the
    same file is given twice), so that no two rows read the same."""
    base = [names[i] if names and i < len(names) else ev.label for i, ev in enumerate(evals)]
    shared = Counter(base)

    def with_file(describe: Callable[[MetaEval], str]) -> list[str]:
        return [f"{b} ({describe(ev)})" if shared[b] > 1 else b for b, ev in zip(base, evals, strict=True)]

    by_name = with_file(lambda ev: Path(ev.scores_path).name)
    for labels in (base, by_name, with_file(lambda ev: ev.scores_path)):
        if len(set(labels)) == len(labels):
            return labels
    counts, seen = Counter(by_name), Counter[str]()
    out = []
    for label in by_name:
        seen[label] += 1
        out.append(f"{label} #{seen[label]}" if counts[label] > 1 else label)
    return out


def has_cis(evals: Sequence[MetaEval]) -> bool:
    """Whether any row has a bootstrap confidence interval."""
    return any(ev.ci for ev in evals)


def comparison_rows(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a comparison table (one row per results file); ``scores`` says whether
    each file's scores are smoothed or raw."""
    if not evals:
        return ["judge"], []
    cols = COLUMNS.get(evals[0].dataset, [(evals[0].primary, evals[0].primary)])
    header = ["judge", *(h for _, h in cols), "scores", "used", "failed", "unmatched"]
    rows = []
    for ev, name in zip(evals, unique_labels(evals, names), strict=True):
        c = ev.counts
        rows.append(
            [
                name,
                *(fmt_ci(ev, k) for k, _ in cols),
                ev.scores_kind,
                str(c.get("used_rows", c.get("used_pairs", 0))),
                str(c.get("failed_rows", c.get("failed_pairs", 0))),
                str(c.get("unmatched_rows", c.get("unmatched_pairs", 0))),
            ]
        )
    return header, rows


def format_comparison(evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> str:
    """Several judges on one benchmark as a plain-text table."""
    header, rows = comparison_rows(evals, names)
    ci = "95% bootstrap CI in brackets" if has_cis(evals) else "no CIs (--bootstrap 0)"
    title = f"{evals[0].dataset} ({evals[0].unit}; {ci})" if evals else ""
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
        ci = "Values in brackets: 95% bootstrap confidence interval." if has_cis(evals) else "No confidence intervals (--bootstrap 0)."
        out += ["", f"Protocol: {evals[0].protocol}. {ci} Scores: smoothed (FLEUR's digit-probability score) or raw (the number the judge wrote)."]
        for ev, name in zip(evals, unique_labels(evals, names), strict=True):
            for note in ev.notes:
                out.append(f"- {esc(name)}: {note}")
    return "\n".join(out) + "\n"
