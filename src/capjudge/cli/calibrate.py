"""CLI subcommand ``calibrate``: how a judge's numbers match people's (docs/trust.md).

``register(subparsers)`` adds it to the ``capjudge`` parser; the statistics are imported only when
the command runs. Exit codes: 0 done (bad rows of the inputs are named on stderr, the others
used), 2 bad input (a file missing, too few labelled ids, labels of the wrong kind, a ``--save``
that would replace a file capjudge did not write, an ``--html`` that would replace an input or a
file that is not a capjudge report, an ``--images`` that is not a folder). ``--html FILE``: the
page of :mod:`capjudge.trust.page` (reliability diagram, the mean's intervals, the labelled records).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.cli.html import add_html_option

# The `capjudge calibrate` parser's help texts.
CALIBRATE_PARSER: dict[str, Any] = dict(
    help="how far a judge's scores or confidences match human labels: reliability, ECE, Brier, a calibration map",
    description=(
        "Join a results file (score or pair records) to a human-labels JSONL file (id, human: a score, A/B/tie, "
        "or a list of them) by id. Score records: reliability bins of the judge's score against the human score, "
        "ECE and Brier on [0, 1], a monotone (isotonic) map from the judge's score to the human scale, and the mean "
        "human score estimated four ways (judge alone, labels alone, PPI, PPI++) when some records have no label. "
        "Pair records: the confidence (details.confidence, else the agreement of the two votes) against agreement "
        "with the human verdict. See docs/trust.md."
    ),
    epilog="exit codes: 0 done, 2 bad input",
)


def register(subparsers: Any) -> None:
    """Add ``calibrate`` to an argparse subparsers object."""
    p = subparsers.add_parser("calibrate", **CALIBRATE_PARSER)
    p.add_argument("results", metavar="RESULTS.jsonl", help="a judge's results file (capjudge score or compare)")
    p.add_argument("--human", required=True, metavar="LABELS.jsonl", help="human labels: one JSON object per line with id and human")
    p.add_argument("--save", default=None, metavar="FILE", help="write the calibration map as a JSON calibration file")
    p.add_argument("--bins", type=int, default=10, help="reliability bins (default 10)")
    p.add_argument("--alpha", type=float, default=0.1, help="1 - confidence level of the mean's intervals (default 0.1: 90%%)")
    p.add_argument("--human-scale", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"), help="the human scores' scale (default: the judge's)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or one JSON object on the last line")
    add_html_option(p, images=True)
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``capjudge calibrate``: print the calibration report, save the map."""
    from capjudge.cli.html import check_html
    from capjudge.cli.trust_common import check_save, finish_report
    from capjudge.core.errors import UsageError
    from capjudge.trust.run import calibration_report

    if args.bins < 1 or not 0 < args.alpha < 1:
        raise UsageError("--bins must be at least 1 and --alpha in (0, 1)")
    if args.human_scale is not None and not args.human_scale[1] > args.human_scale[0]:
        raise UsageError("--human-scale LOW HIGH needs HIGH > LOW")
    if args.images is not None and not Path(args.images).is_dir():
        raise UsageError(f"--images {args.images!r} is not a folder")
    check_html(args.html, [args.results, args.human, args.save])
    check_save(args.save, "calibration-json")
    report = calibration_report(args.results, args.human, bins=args.bins, alpha=args.alpha, human_scale=tuple(args.human_scale) if args.human_scale else None)
    from capjudge.trust.page import calibration_page

    return finish_report(report, args, _text, calibration_page)


def _text(d: dict[str, Any]) -> None:
    out = sys.stdout
    out.write(f"{d['results']}: {d['kind']} records of {d['method']} @ {d['backend']}; {d['labelled']} labelled ids ({d['failed']} failed records, {d['bad_rows']} bad rows)\n")
    if d["kind"] == "pair":
        out.write(f"confidence rule: {d['confidence_rule']}; agreement with people {d['agreement']:.3f}\n")
    out.write(f"ECE {d['ece']:.4f}  Brier {d['brier']:.4f}\n")
    if "after_calibration" in d:
        a = d["after_calibration"]
        out.write(f"after the isotonic map (in sample): ECE {a['ece']:.4f}  Brier {a['brier']:.4f}\n")
    out.write("bin              count  mean judge  mean human\n")
    for b in d["reliability"]:
        mv = "-" if b["mean_value"] is None else f"{b['mean_value']:.3f}"
        mo = "-" if b["mean_outcome"] is None else f"{b['mean_outcome']:.3f}"
        out.write(f"[{b['low']:.2f}, {b['high']:.2f}]  {b['count']:>7}  {mv:>10}  {mo:>10}\n")
    for name, e in (d.get("mean_human_score") or {}).items():
        out.write(f"mean human score, {name:<9} {e['estimate']:.3f}  [{e['low']:.3f}, {e['high']:.3f}]  (n={e['n']}, N={e['N']}, lam={e['lam']:.2f})\n")
    if d.get("saved"):
        out.write(f"calibration file: {d['saved']}\n")
