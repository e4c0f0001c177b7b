"""``capjudge compare``: A/B comparison of caption pairs (resumable; ``--batch``; ``--html``)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from capjudge.cli import batch
from capjudge.cli.common import (
    EXIT_CODES_HELP,
    add_common,
    add_resume,
    backend_options,
    console,
    finish,
    make_judge,
    preflight,
    progress_of,
    resume_note,
    summary_table,
    usage_rows,
)
from capjudge.cli.html import add_html_option
from capjudge.cli.score import html_report
from capjudge.cli.serve import command_method, remote_judge
from capjudge.cli.trust_common import add_calibration_option, load_calibration, warn_backend
from capjudge.core.errors import UsageError


def register(sub: Any) -> None:
    """Add ``compare`` to an argparse subparsers object."""
    p = sub.add_parser("compare", help="A/B comparison of caption pairs (dual-sided or by grading)", epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p, method_default="gpt4v-pairwise", panel=True, remote=True)
    p.add_argument("--input", required=True, help="JSONL or CSV with image, caption_a, caption_b[, id]")
    p.add_argument("--out", required=True, help="results JSONL")
    p.add_argument("--mode", choices=("auto", "pairwise", "grading"), default="auto", help="pairwise: ask both orders and vote (the GPT-4V evaluator paper); grading: higher single score wins; auto: by method")
    p.add_argument("--order", choices=("dual", "single"), default="dual", help="dual (default): both orders asked and voted; single: each pair asked once, the caption shown first chosen by a seeded hash of the image and the two captions (recorded in details.shown_first; a shown_first column A/B fixes it)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shown-first choice of --order single (default 0)")
    add_resume(p)
    batch.add_batch_options(p)
    add_html_option(p)
    add_calibration_option(p)
    p.add_argument("--cascade", default=None, metavar="PLAN", help="run a cascade plan of `capjudge cascade --save` live: its first judge on every pair, the next only on the pairs below the first's threshold, abstention at the end (details.cascade); the judges are the plan's, --backend and --method are not given")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """``capjudge compare``."""
    from capjudge.data.types import PairResult
    from capjudge.judges.pairwise import run_fields, with_order
    from capjudge.run.inputcheck import load_items
    from capjudge.run.outfile import pair_key
    from capjudge.run.runner import (
        kept_results,
        options_digest,
        planning_pass,
        resume_plan,
        run_rows,
    )
    from capjudge.run.summary import RunTally

    if args.cascade:
        from capjudge.cli.cascade_live import cmd_cascade_compare

        return cmd_cascade_compare(args)
    method = command_method(args, "gpt4v-pairwise")  # --remote: the server's
    mode = args.mode if args.mode != "auto" else None
    if mode == "grading" and method.kind != "score":
        raise UsageError(f"comparison by grading needs a scoring method, not {method.name!r}")
    if args.order == "single":
        if mode == "grading":
            raise UsageError("--order single asks one order of a pairwise comparison: it does not go with --mode grading")
        mode = "single"
    preflight(args, inputs=[(args.input, ("image", "caption_a", "caption_b"))], out=args.out, reports=[("--html", args.html)], out_kind="pair")
    batch.check_batch_args(args)
    rows = load_items(args.input, pairs=True)  # no rows, or an id twice: exit 2
    if args.limit is not None:
        rows = rows[: args.limit]
    calibration: Any = load_calibration(args.calibration, method, "pair")  # exit 2: another method
    tally = RunTally(method=method.name)
    t0 = time.perf_counter()
    with (remote_judge(args) if args.remote else make_judge(args, method)) as judge:
        run = judge.run_fields(mode) if args.remote else run_fields(judge, mode)
        warn_backend(calibration, judge.backend_spec)
        digest = options_digest(judge)  # budget failures made with other options are asked again
        plan = resume_plan(args.out, rows, pair_key, run, overwrite=args.overwrite, retry_errors=args.retry_errors, digest=digest)
        session = batch.session_for(args, judge, run, backend_options(args))

        def bad_row(row: Any) -> PairResult:
            return PairResult(image="", caption_a="", caption_b="", verdict=None, method=run["method"], backend=judge.backend_spec, model=judge.backend.model, template_hash=run["template_hash"], mode=run["mode"], status="error", error=row.error, id=row.id or str(row.line))

        def stream(pairs: list[Any]) -> Iterator[tuple[int, Any]]:
            if mode == "single":
                pairs = [with_order(p, args.seed) for p in pairs]
            return judge.compare_stream(pairs, mode=mode)  # type: ignore[no-any-return]

        with batch.batch_run(session, args, planning_pass(judge.backend, rows, plan, stream)) as outcome:
            if outcome != "ready":
                return batch.pending_exit(session, outcome)
            for kept in kept_results(plan, PairResult):
                tally.add(kept)
            bar = progress_of(f"compare with {method.name}", args.quiet)
            made = calibration.stream(stream) if calibration is not None else stream
            for _, res in run_rows(judge.backend, rows, plan, made, out=args.out, bad_row=bad_row, progress=bar, digest=digest):
                tally.add(res)
        usage = usage_rows(judge)
    if not args.quiet:
        con = console(stderr=False)
        con.print(
            summary_table(
                "capjudge compare",
                [
                    ("method", method.name),
                    ("backend", judge.backend_spec),
                    ("A better", str(tally.verdicts["A"])),
                    ("B better", str(tally.verdicts["B"])),
                    ("tie", str(tally.verdicts["tie"])),
                    *tally.position_rows(),
                    *tally.judge_rows(),
                    *tally.failure_rows(),
                    ("cache hits", str(tally.cached)),
                    ("kept from --out", str(len(plan.kept))),
                    ("seconds", f"{time.perf_counter() - t0:.1f}"),
                    ("results", str(args.out)),
                    *usage,
                    *(session.summary_rows() if session is not None else []),
                ],
            )
        )
        resume_note(con, plan)
        if getattr(judge, "members", None) is not None:  # a panel: its judges and their agreement
            from capjudge.cli.panel import print_panel

            print_panel(con, judge, args.out)
    html_report(args)
    return finish(tally)
