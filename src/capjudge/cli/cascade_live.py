"""``capjudge compare --cascade PLAN``: a saved cascade plan run live (:mod:`capjudge.trust.live`).

The plan names its judges (backend spec, method, mode: ``capjudge cascade --save`` writes them from
the records); ``--backend``, ``--panel``, ``--method``, ``--mode``, ``--order``, ``--remote``,
``--batch``, ``--calibration`` do not go with it (exit 2). A re-run resumes: the records of the same
plan (``details.cascade.plan.digest``) are kept, the other rows asked; a ``--out`` holding records of
another run is refused (exit 2) unless ``--overwrite``. Exit codes as ``compare``.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

from capjudge.core.errors import UsageError


def _check(args: argparse.Namespace) -> None:
    given = [flag for flag, v in (("--backend", getattr(args, "backend", None) or getattr(args, "backends", None)), ("--panel", getattr(args, "panel", None)), ("--remote", getattr(args, "remote", None)), ("--batch", getattr(args, "batch", None)), ("--calibration", getattr(args, "calibration", None))) if v]
    if args.method not in (None, "gpt4v-pairwise"):
        given.append("--method")
    if args.mode != "auto":
        given.append("--mode")
    if args.order != "dual":
        given.append("--order")
    if given:
        raise UsageError(f"--cascade runs the plan's judges as the plan says: {', '.join(given)} do not go with it")


def _preflight(args: argparse.Namespace, backends: list[str]) -> None:
    """``compare``'s checks before any judge is built, each of the plan's backends included."""
    from capjudge.cli.common import backend_options, hold_out_lock
    from capjudge.run.preflight import (
        check_backend,
        check_columns,
        check_images,
        check_input,
        check_output,
    )

    check_input(args.input, "input file")
    check_columns(args.input, ("image", "caption_a", "caption_b"))
    check_images(args.images)
    for flag, path in (("--out", args.out), ("--html", args.html)):
        if path is not None:
            check_output(path, inputs=[args.input], what=flag)
    if args.html is not None and Path(args.html).resolve() == Path(args.out).resolve():
        raise UsageError(f"--html {args.html!r} is the --out results file: write the report elsewhere")
    for spec in backends:
        check_backend(spec, backend_options(args))
    check_output(args.out, what="--out", kind="pair")
    if args.html is not None:
        check_output(args.html, what="--html", kind="html")
    hold_out_lock(args, args.out)


def _resume(args: argparse.Namespace, rows: list[Any], digest: str) -> Any:
    """What is kept from ``--out``: the records of this plan (``details.cascade.plan.digest``),
    matched to the input rows as ``compare`` matches them; records of another run: exit 2."""
    from capjudge.run.outfile import ResumeConflict, pair_key, read_records
    from capjudge.run.runner import ResumePlan, resume_plan

    if args.overwrite:
        return ResumePlan()
    if Path(args.out).is_file():
        for rec in read_records(args.out):
            made = ((rec.get("details") or {}).get("cascade") or {}).get("plan") or {}
            if made.get("digest") != digest:
                raise UsageError(f"{args.out} holds records of another run than this cascade plan ({digest}); write to another --out, or pass --overwrite to start this file over")
    try:
        return resume_plan(args.out, rows, pair_key, {}, retry_errors=args.retry_errors)
    except ResumeConflict as exc:
        raise UsageError(str(exc)) from None


def cmd_cascade_compare(args: argparse.Namespace) -> int:
    """Run the plan's judges over ``--input`` and write one record per pair (module docstring)."""
    from capjudge.cli.common import (
        console,
        finish,
        judge_kwargs,
        progress_of,
        summary_table,
        usage_rows,
    )
    from capjudge.data.types import PairResult
    from capjudge.judges.judge import Judge
    from capjudge.judges.pairwise import run_fields
    from capjudge.run.inputcheck import load_items
    from capjudge.run.runner import run_rows
    from capjudge.run.summary import RunTally
    from capjudge.trust.live import LiveCascade, load_plan

    _check(args)
    try:
        plan, digest = load_plan(args.cascade)
    except ValueError as exc:
        raise UsageError(f"--cascade {exc}") from None
    _preflight(args, [str(run["backend"]) for run in plan.runs])
    rows = load_items(args.input, pairs=True)
    if args.limit is not None:
        rows = rows[: args.limit]
    resume = _resume(args, rows, digest)
    tally = RunTally(method="cascade")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        judges = []
        for jt, run in zip(plan.judges, plan.runs):
            try:
                judge = stack.enter_context(Judge(run["method"], run["backend"], **judge_kwargs(args)))
            except ValueError as exc:
                raise UsageError(f"--cascade {args.cascade}: judge {jt.name!r} ({run['backend']}): {exc}") from None
            want, now = run.get("template_hash"), run_fields(judge, run.get("mode"))["template_hash"]
            if want and want != now:
                raise UsageError(f"--cascade {args.cascade}: judge {jt.name!r} was calibrated with template {want}, {run['method']} now has {now}: calibrate again")
            judges.append(judge)
        live = LiveCascade(plan, judges, plan_file=Path(args.cascade).name, plan_digest=digest, seed=args.seed)
        first = judges[0]

        def bad_row(row: Any) -> PairResult:
            stamp: dict[str, Any] = {"cascade": {"decided_by": None, "abstained": False, "asked": [], "plan": {"file": live.plan_file, "digest": digest}}}
            return PairResult(image="", caption_a="", caption_b="", verdict=None, method=str(plan.runs[0]["method"]), backend=first.backend_spec, model=first.backend.model, template_hash=first.method.template_hash, status="error", error=row.error, id=row.id or str(row.line), details=stamp)

        bar = progress_of(f"cascade of {len(judges)} judges", args.quiet)
        decided: Counter[str] = Counter()  # the verdicts kept, "abstained" for the rest

        def count(res: PairResult) -> None:
            tally.add(res)  # an abstention is an ok record: the exit code counts it as answered
            if res.ok:
                decided["abstained" if (res.details or {}).get("cascade", {}).get("abstained") else str(res.verdict)] += 1

        for kept in resume.kept.values():
            count(PairResult.from_dict(kept))
        for _, res in run_rows(first.backend, rows, resume, live.stream, out=args.out, bad_row=bad_row, progress=bar):
            count(res)
        usage = [[(f"{jt.name}: {k}", v) for k, v in usage_rows(j)] for jt, j in zip(plan.judges, judges)]
    summary = live.summary()
    if not args.quiet:
        table: list[tuple[str, str]] = [("plan", f"{args.cascade} (risk <= {plan.alpha} with probability >= {1 - plan.delta:.2f}, rule {plan.rule})")]
        for jt, run, t, u in zip(plan.judges, plan.runs, summary["judges"], usage):
            thr = "never" if jt.threshold is None else f"{jt.threshold:.4f}"
            spent = "" if t["cost_usd"] is None else f", ${t['cost_usd']:.4f}"
            tokens = "" if t["tokens"] is None else f", {t['tokens']} tokens"
            table.append((f"{jt.name}", f"{run['backend']}, threshold {thr}: asked now {t['asked']}, decided {t['decided']}, failed {t['failed']}{tokens}{spent}"))
            table.extend(u)
        answered = sum(decided.values())
        cov = (answered - decided["abstained"]) / answered if answered else None
        table += [
            ("A / B / tie (decided)", f"{decided['A']} / {decided['B']} / {decided['tie']}"),
            *tally.failure_rows(),
            ("abstained (ask a person)", str(decided["abstained"])),
            ("kept from --out", str(len(resume.kept))),
            ("coverage", "-" if cov is None else f"{cov:.3f}"),
            ("seconds", f"{time.perf_counter() - t0:.1f}"),
            ("results", str(args.out)),
        ]
        console(stderr=False).print(summary_table("capjudge compare --cascade", table))
    from capjudge.cli.score import html_report

    html_report(args)
    return finish(tally)
