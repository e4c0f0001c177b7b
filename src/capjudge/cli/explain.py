"""``capjudge explain``: score and ask the judge why (FLEUR's follow-up)."""

from __future__ import annotations

import argparse
from typing import Any

from capjudge.cli.aliases import add_format
from capjudge.cli.common import (
    add_common,
    bad_row_result,
    console,
    finish,
    make_judge,
    method_with_template,
    preflight,
)
from capjudge.core.errors import UsageError


def register(sub: Any) -> None:
    """Add ``explain`` to an argparse subparsers object."""
    p = sub.add_parser("explain", help="score and ask the judge why (FLEUR's follow-up)")
    add_common(p, method_default="fleur")
    p.add_argument("--image", default=None)
    p.add_argument("--caption", default=None)
    p.add_argument("--reference", action="append", help="reference caption (repeatable)")
    p.add_argument("--input", default=None, help="JSONL or CSV of samples instead of --image/--caption")
    p.add_argument("--out", default=None, help="also write the results JSONL here")
    add_format(p, help="table (default) or json: one JSON record per line", json_alias=True)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    """``capjudge explain``."""
    import json
    from contextlib import nullcontext

    from capjudge.data.io import BadRow, ResultWriter
    from capjudge.run.inputcheck import load_items
    from capjudge.run.summary import RunTally

    method = method_with_template(args.method, args.template, args.template_file)
    if method.kind != "score":
        raise UsageError(f"explain needs a scoring method, not {method.name!r}")
    rows: list[Any]
    preflight(args, inputs=[(args.input, ("image", "caption"))], out=args.out, out_kind="score")
    if args.input:
        rows = load_items(args.input, unique_ids=False)  # no rows: exit 2
    elif args.image and args.caption:
        rows = [{"image": args.image, "caption": args.caption, "references": args.reference or [], "id": "0"}]
    else:
        raise UsageError("give --image and --caption, or --input FILE")
    if args.limit is not None:
        rows = rows[: args.limit]
    con = console(stderr=False)
    tally = RunTally(method=method.name)
    with make_judge(args, method) as judge, (ResultWriter(args.out) if args.out else nullcontext()) as writer:
        for row in rows:
            if isinstance(row, BadRow):
                res = bad_row_result(row, method, judge)
            else:
                res = judge.explain(row)
            tally.add(res)
            if writer is not None:
                writer.write(res)
            if args.format == "json":
                print(json.dumps(res.to_dict(), ensure_ascii=False, default=float))
            else:
                con.print(f"[bold]{res.image}[/bold]  {res.caption!r}")
                if res.ok:
                    kind = "smoothed" if res.smoothed else "raw"
                    con.print(f"  score ({kind}): {res.score:.4g}")
                    con.print(f"  why: {res.explanation or res.details.get('explanation_error', '-')}")
                else:
                    con.print(f"  [red]error:[/red] {res.error}")
    return finish(tally)
