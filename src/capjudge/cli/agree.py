"""CLI subcommand ``agree``: agreement between two or more judges' results on the same samples.

``register(subparsers)`` adds it to the ``capjudge`` parser; the statistics are imported only when
the command runs. Exit codes: 0 done, 1 no two judges had two samples in common, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from capjudge.cli.html import add_html_option
from capjudge.cli.terminal import visible

# The `capjudge agree` parser's help texts.
AGREE_PARSER: dict[str, Any] = dict(
    help="agreement between two or more judges' results on the same samples (no human labels needed)",
    description=(
        "Compare judges' results files sample by sample: Kendall tau-b, Spearman, Pearson (x100) with bootstrap "
        "CIs, mean difference, calibration, same-image pair order and the largest disagreements for scores; Cohen's "
        "(Fleiss') kappa, agreement and position bias for pairwise verdicts."
    ),
)


def register(subparsers: Any) -> None:
    """Add ``agree`` to an argparse subparsers object."""
    p = subparsers.add_parser("agree", **AGREE_PARSER)
    p.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="two or more results files of capjudge score (or all of capjudge compare)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="judge names, one per file (default: the file names)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or one JSON object on the last line")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples for 95%% CIs (default 1000; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_html_option(p, images=True)
    p.set_defaults(func=cmd_agree)


def cmd_agree(args: argparse.Namespace) -> int:
    """``capjudge agree``: print the agreement report."""
    from capjudge.cli.html import check_html
    from capjudge.metaeval.agree import AgreeInputError, agree
    from capjudge.run.preflight import PreflightError

    if len(args.results) < 2:
        print("capjudge: error: agree needs two or more results files", file=sys.stderr)
        return 2
    try:
        check_html(args.html, args.results)
        report = agree(args.results, args.names, bootstrap=max(0, args.bootstrap), seed=args.seed)
    except (AgreeInputError, PreflightError) as exc:
        from capjudge.core.redact import scrub

        print(visible(f"capjudge: error: {scrub(str(exc))}"), file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(report.to_dict(), ensure_ascii=False))
    else:
        from capjudge.cli.terminal import make_console
        from capjudge.metaeval.agree_report import render

        render(report, make_console(highlight=False))
    if args.html:
        from capjudge.cli.html import command_line, emit
        from capjudge.metaeval.agree_page import agree_page

        emit(args.html, lambda: agree_page(report, args.results, images=args.images, command=command_line()))
    return 0 if report.ok else 1
