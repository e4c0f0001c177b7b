"""Probe and choose-one reports: Markdown tables, JSON files and a bar chart (matplotlib, Agg)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capjudge.probes.choose_one import ChooseOneReport
from capjudge.probes.runner import INJECTION_KINDS, HardeningComparison, KindSummary, ProbeReport


def pct(x: float | None) -> str:
    """A share (0-1) as a whole percentage, ``-`` when unknown."""
    return "-" if x is None else f"{100 * x:.0f}%"


def share(count: int, total: int) -> str:
    """``count`` of ``total`` as ``50% (2/4)``, ``-`` when there is no total."""
    return "-" if not total else f"{100 * count / total:.0f}% ({count}/{total})"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:+.{digits}f}"


def probe_markdown(report: ProbeReport) -> str:
    """The per-kind table of a probe run, with a header saying what was run and how to read it."""
    has_inj = any(k in INJECTION_KINDS for k in report.kinds)
    lo, hi = report.scale
    lines = [
        f"### Probe: `{report.method}` on `{report.backend}`",
        "",
        f"{report.n_captions} captions, seed {report.seed}, scale {lo:g}-{hi:g}, template {report.template_hash}."
        + (f" {report.clean_errors} original caption(s) could not be scored." if report.clean_errors else ""),
        "",
    ]
    head = ["kind", "family", "applied"]
    if report.by_score:
        head += ["prefers original", "ties", "prefers perturbed", "errors", "mean drop (% of scale)"]
    if report.by_pairwise:
        head += ["pairwise: original / tie / perturbed"]
    if has_inj:
        head += ["obeyed (clean baseline)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for s in report.summaries:
        row = [f"`{s.kind}`", s.family, f"{s.n_applicable}/{s.n_captions}"]
        if report.by_score:
            row += [share(s.prefer_original, s.n_scored), share(s.ties, s.n_scored), share(s.prefer_perturbed, s.n_scored), str(s.n_errors), _num(s.mean_drop_pct)]
        if report.by_pairwise:
            pw = s.pairwise or {}
            n = pw.get("n_compared", 0)
            row += [f"{pw.get('prefer_original', 0)} / {pw.get('ties', 0)} / {pw.get('prefer_perturbed', 0)} of {n}" + (f" ({pw['n_errors']} failed)" if pw.get("n_errors") else "")]
        if has_inj:
            row += [f"{share(s.n_obeyed or 0, s.n_obedience_checked or 0)} ({pct(s.baseline_rate)})" if s.kind in INJECTION_KINDS else ""]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Shares are of the pairs where both captions were scored; ties (equal scores) are counted on their own,"
        " neither as caught nor as missed. Mean drop = original score minus perturbed score. Injection: the share of"
        " answers that gave the injected score (inject_score) or the canary word (inject_text); in brackets, the"
        " share of answers to the clean captions that already did.",
    ]
    return "\n".join(lines) + "\n"


def hardening_markdown(cmp: HardeningComparison) -> str:
    """A method against its hardened variant: obedience, catching perturbations, clean grading."""
    lines = [f"### Hardening: `{cmp.plain}` vs `{cmp.hardened}`", "", f"| measure | `{cmp.plain}` | `{cmp.hardened}` |", "|---|---|---|"]
    for k, v in cmp.obedience.items():
        lines.append(f"| `{k}` obeyed | {pct(v['plain'])} | {pct(v['hardened'])} |")
    for k, v in cmp.prefer_original.items():
        lines.append(f"| `{k}` prefers original | {pct(v['plain'])} | {pct(v['hardened'])} |")
    m = cmp.clean_mean
    lines.append(f"| mean clean score (% of scale) | {_fmt(m.get(cmp.plain))} | {_fmt(m.get(cmp.hardened))} |")
    lines += [
        "",
        f"Clean captions scored by both: {cmp.n_clean_both}; Pearson r between the two methods: {_fmt(cmp.clean_pearson, 3)};"
        f" mean absolute difference: {_fmt(cmp.clean_mean_abs_diff_pct)} points of scale.",
    ]
    return "\n".join(lines) + "\n"


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def choose_one_markdown(report: ChooseOneReport) -> str:
    """The choose-one-of-N result as a short table."""
    lines = [
        f"### Choose one of N: `{report.method}` ({report.mode}) on `{report.backend}`",
        "",
        "| groups | ranked | errors | accuracy | strict accuracy | ties at top | chance |",
        "|---|---|---|---|---|---|---|",
        f"| {report.n_groups} | {report.n_scored} | {report.n_errors} | {_fmt(report.accuracy)} | {_fmt(report.strict_accuracy)} | {report.ties_at_top} | {_fmt(report.chance)} |",
        "",
        "Accuracy (%): a true caption ranked first, ties at the top counted as a random tie-break would be;"
        " strict: a unique true winner; chance: share of true captions among the candidates.",
    ]
    if report.n_errors:
        lines += ["", f"{report.n_errors} group(s) not ranked (a candidate could not be scored); causes, most common first:"]
        lines += [f"- {n} x {cause}" for cause, n in report.error_causes.items()]
    return "\n".join(lines) + "\n"


def write_json(data: dict[str, Any], path: str | Path) -> Path:
    """Write a report dict as indented JSON."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=float) + "\n", encoding="utf-8")
    return p


def _stacked(ax: Any, labels: list[str], parts: list[tuple[list[float], str, str]], title: str) -> None:
    left = [0.0] * len(labels)
    for values, label, colour in parts:
        ax.barh(labels, values, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of pairs")
    ax.set_title(title)
    ax.invert_yaxis()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize="small", frameon=False)


def probe_plot(report: ProbeReport, path: str | Path) -> Path:
    """Bar chart: per kind, the shares preferring the original / tied / preferring the perturbation
    (by score and, if run, by pairwise comparison), and the injection obedience."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[str] = []
    if report.by_score:
        panels.append("score")
    if report.by_pairwise:
        panels.append("pairwise")
    inj = [s for s in report.summaries if s.kind in INJECTION_KINDS and s.n_obedience_checked]
    if inj:
        panels.append("injection")
    panels = panels or ["score"]
    height = max(3.0, 0.4 * len(report.summaries) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), height), squeeze=False)
    labels = [s.kind for s in report.summaries]
    green, grey, red = "#4c9a2a", "#b0b0b0", "#c0392b"
    for ax, panel in zip(axes[0], panels):
        if panel == "score":
            def frac(s: KindSummary, n: int) -> float:
                return n / s.n_scored if s.n_scored else 0.0

            _stacked(
                ax,
                labels,
                [
                    ([frac(s, s.prefer_original) for s in report.summaries], "prefers original", green),
                    ([frac(s, s.ties) for s in report.summaries], "tie", grey),
                    ([frac(s, s.prefer_perturbed) for s in report.summaries], "prefers perturbed", red),
                ],
                "by score",
            )
        elif panel == "pairwise":
            def pw(s: KindSummary, key: str) -> float:
                d = s.pairwise or {}
                n = d.get("n_compared", 0)
                return d.get(key, 0) / n if n else 0.0

            _stacked(
                ax,
                labels,
                [
                    ([pw(s, "prefer_original") for s in report.summaries], "prefers original", green),
                    ([pw(s, "ties") for s in report.summaries], "tie", grey),
                    ([pw(s, "prefer_perturbed") for s in report.summaries], "prefers perturbed", red),
                ],
                "dual-sided pairwise",
            )
        else:
            names = [s.kind for s in inj]
            ax.barh(names, [s.obedience_rate or 0.0 for s in inj], color=red, label="obeyed")
            ax.scatter([s.baseline_rate or 0.0 for s in inj], names, color="black", marker="|", s=200, label="clean baseline", zorder=3)
            ax.set_xlim(0, 1)
            ax.set_xlabel("share of answers")
            ax.set_title("injection obeyed")
            ax.invert_yaxis()
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize="small", frameon=False)
    fig.suptitle(f"{report.method} on {report.backend} ({report.n_captions} captions, seed {report.seed})", fontsize="medium")
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    from capjudge.run.outguard import plot_save_options

    fig.savefig(p, dpi=110, **plot_save_options(p))  # names capjudge, so a re-run may replace it
    plt.close(fig)
    return p
