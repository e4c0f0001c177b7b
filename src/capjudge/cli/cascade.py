"""CLI subcommand ``cascade``: calibrate a cascade of judges with a guaranteed agreement with people
(Trust or Escalate; docs/trust.md).

``register(subparsers)`` adds it to the ``capjudge`` parser; the statistics are imported only when
the command runs. Exit codes: 0 done (bad rows of the inputs are named on stderr, the others
used), 2 bad input (a file missing, records that are not pair records, no labelled id, a
``--save`` that would replace a file capjudge did not write, an ``--html`` that would replace an
input or a file that is not a capjudge report, an ``--images`` that is not a folder). ``--html
FILE``: the page of :mod:`capjudge.trust.page` (the judges, the coverage-risk curve, every pair).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.cli.html import add_html_option

# The `capjudge cascade` parser's help texts.
CASCADE_PARSER: dict[str, Any] = dict(
    help="calibrate a cascade of pairwise judges so that kept verdicts agree with people (risk <= --risk with probability >= 1 - --delta)",
    description=(
        "Each --judge is a results file of capjudge compare (pair records with id), in the order the judges are asked "
        "(cheapest first). On the ids every judge answered and people labelled (--human: id and human A/B/tie, or a "
        "list), each judge gets the lowest confidence threshold whose disagreement with people stays at or under "
        "--risk with probability at least 1 - --delta (fixed-sequence testing of a binomial bound); a verdict is kept "
        "from the first judge whose confidence clears its threshold, else the cascade abstains. See docs/trust.md."
    ),
    epilog="exit codes: 0 done, 2 bad input",
)


def register(subparsers: Any) -> None:
    """Add ``cascade`` to an argparse subparsers object."""
    p = subparsers.add_parser("cascade", **CASCADE_PARSER)
    p.add_argument("--human", required=True, metavar="LABELS.jsonl", help="human verdicts: one JSON object per line with id and human (A, B, tie or a list)")
    p.add_argument("--judge", action="append", required=True, metavar="RESULTS.jsonl", help="a judge's pair records, repeatable, cheapest first")
    p.add_argument("--risk", type=float, required=True, metavar="ALPHA", help="the largest share of kept verdicts that may disagree with people, e.g. 0.15")
    p.add_argument("--delta", type=float, default=0.1, help="the chance allowed that the guarantee fails (default 0.1)")
    p.add_argument("--rule", choices=("guaranteed", "official"), default="guaranteed", help="guaranteed (default) or official: the official code's rule, differences in docs/trust.md")
    p.add_argument("--min-samples", type=int, default=30, metavar="N", help="a threshold needs N calibration samples above it (default 30)")
    p.add_argument("--save", default=None, metavar="PLAN", help="write the calibrated cascade as a JSON plan")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or one JSON object on the last line")
    add_html_option(p, images=True)
    p.set_defaults(func=cmd_cascade)


def cmd_cascade(args: argparse.Namespace) -> int:
    """``capjudge cascade``: calibrate, print, save the plan."""
    from capjudge.cli.html import check_html
    from capjudge.cli.trust_common import check_save, finish_report
    from capjudge.core.errors import UsageError
    from capjudge.trust.run import cascade_report

    if not (0 < args.risk < 1 and 0 < args.delta < 1):
        raise UsageError("--risk and --delta must lie in (0, 1)")
    if args.min_samples < 1:
        raise UsageError("--min-samples must be at least 1")
    if args.images is not None and not Path(args.images).is_dir():
        raise UsageError(f"--images {args.images!r} is not a folder")
    check_html(args.html, [*args.judge, args.human, args.save])
    check_save(args.save, "cascade-json")
    report = cascade_report(args.judge, args.human, alpha=args.risk, delta=args.delta, rule=args.rule, min_samples=args.min_samples)
    from capjudge.trust.page import cascade_page

    return finish_report(report, args, _text, cascade_page)


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def _text(d: dict[str, Any]) -> None:
    out = sys.stdout
    out.write(f"cascade calibrated on {d['calibration_n']} labelled ids: risk <= {d['alpha']} with probability >= {1 - d['delta']:.2f} (rule {d['rule']})\n")
    out.write("judge                     threshold  reached  kept  risk    bound   confidence rule\n")
    for j in d["judges"]:
        t = "never" if j["threshold"] is None else f"{j['threshold']:.4f}"
        r = "-" if j["empirical_risk"] is None else f"{j['empirical_risk']:.3f}"
        b = "-" if j["risk_bound"] is None else f"{j['risk_bound']:.3f}"
        out.write(f"{j['name'][:24]:<24}  {t:>9}  {j['calibration_n']:>7}  {j['kept']:>4}  {r:>6}  {b:>6}  {j['confidence_rule']}\n")
        if j["note"]:
            out.write(f"  {j['note']}\n")
    c = d["calibration"]
    acc = "-" if c["selective_accuracy"] is None else f"{c['selective_accuracy']:.3f}"
    out.write(f"on the labelled ids: coverage {c['coverage']:.3f}, agreement with people on kept verdicts {acc}, cost per 1,000 judgments {_money(c['cost_per_1000'])}\n")
    if d.get("guaranteed_risk") is not None:
        out.write(f"largest risk bound of the judges that keep verdicts: {d['guaranteed_risk']:.3f}\n")
    out.write("each judge's share of kept verdicts: " + ", ".join(f"{k} {v:.3f}" for k, v in c["shares"].items()) + "\n")
    if "unlabelled" in d:
        u = d["unlabelled"]
        out.write(f"on {u['n']} unlabelled ids: coverage {u['coverage']:.3f}, cost per 1,000 judgments {_money(u['cost_per_1000'])}\n")
    if d.get("saved"):
        out.write(f"plan: {d['saved']}\n")
