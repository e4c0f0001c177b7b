"""CLI subcommand ``capability-results``: CAPability judge outputs scored as its ``eval.py`` does.

``register(subparsers)`` adds it to the ``capjudge`` parser (standard library only at import).
Exit codes: 0 printed, 2 usage error (a folder or file that is not CAPability output, named).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

CAPABILITY_PARSER: dict[str, Any] = dict(
    help="print CAPability's official numbers (eval.py) for judge output folders (evaluation/output/<model>/<dimension>.jsonl)",
    description=(
        "Reads CAPability judge outputs (the benchmark's released evaluation/output/<model>/ folders, or eval.py's "
        "--save_root of one's own run; a folder of such folders gives one row per model) with the benchmark's "
        "annotations, and prints what ali-vilab/CAPability's evaluation/eval.py prints: per dimension all / hit / "
        "correct, precision, recall, F1, hit rate, then their means over the dimensions. See docs/methods.md, 'CAPability'."
    ),
    epilog="exit codes: 0 printed, 2 usage error",
)


def register(subparsers: Any) -> None:
    """Add ``capability-results`` to an argparse subparsers object."""
    p = subparsers.add_parser("capability-results", **CAPABILITY_PARSER)
    p.add_argument(
        "dirs",
        nargs="+",
        metavar="PATH",
        help="a model's output folder (<dimension>.jsonl files), a folder of them, or a capjudge results file of method capability (one row each, in one table)",
    )
    p.add_argument(
        "--annotations",
        required=True,
        metavar="DIR",
        help="the benchmark's annotations/ folder (<dimension>.jsonl)",
    )
    p.add_argument(
        "--max-allow-missing",
        type=int,
        default=5,
        metavar="N",
        help="eval.py's --max_allow_missing (default 5): a dimension missing more items is flagged (eval.py would ask the judge again)",
    )
    p.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="table (default: eval.py's lines and one F1 table) or JSON",
    )
    p.set_defaults(func=cmd_capability_results)


def cmd_capability_results(args: argparse.Namespace) -> int:
    """Print the numbers (exit 0); a bad folder or file raises a usage error (exit 2)."""
    from capjudge.capability import capability_results, format_results

    models = capability_results(args.dirs, args.annotations, args.max_allow_missing)
    print(
        json.dumps(models, indent=2, ensure_ascii=False)
        if args.format == "json"
        else format_results(models)
    )
    return 0
