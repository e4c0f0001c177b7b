"""``capjudge score``: score every caption of a file (resumable; ``--batch``; ``--ray``; ``--html``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from capjudge.cli import batch
from capjudge.cli.common import (
    EXIT_CODES_HELP,
    add_common,
    add_resume,
    backend_options,
    bad_row_result,
    console,
    finish,
    judge_kwargs,
    make_judge,
    preflight,
    progress_of,
    resume_note,
    summary_table,
    usage_rows,
)
from capjudge.cli.html import add_html_option
from capjudge.cli.serve import command_method, remote_judge
from capjudge.cli.trust_common import (
    add_calibration_option,
    add_human_option,
    check_human,
    load_calibration,
    warn_backend,
)
from capjudge.core.errors import UsageError


def register(sub: Any) -> None:
    """Add ``score`` to an argparse subparsers object."""
    p = sub.add_parser("score", help="score every caption of a JSONL/CSV file", epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p, panel=True, remote=True)
    p.add_argument("--input", required=True, help="JSONL or CSV with image, caption[, references, id]")
    p.add_argument("--out", required=True, help="results JSONL (one record per input row)")
    add_resume(p)
    batch.add_batch_options(p)
    add_html_option(p)
    add_calibration_option(p)
    add_human_option(p)
    p.add_argument("--vqa-dir", default=None, metavar="DIR", help="capmas-coverage: the folder of CapMAS's question files, one <image file stem>.json per image ({\"questions\": [...], \"answers\": [...]})")
    scale = p.add_argument_group("many judges at once through Ray (pip install 'capjudge[ray]'; docs/ray.md)")
    scale.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS", help="judge on Ray actors, one judge (one model) each: a running cluster's ADDRESS (auto, HOST:6379, ray://HOST:10001), or none for $RAY_ADDRESS or a local instance")
    scale.add_argument("--ray-actors", type=int, default=None, metavar="N", help="judges running at once (default: the cluster's GPUs / --ray-gpus-per-actor, else 1); an API backend's --concurrency applies to each")
    scale.add_argument("--ray-gpus-per-actor", type=float, default=None, metavar="G", help="GPUs each actor holds (default 1 for hf: and llamacpp: on a cluster with GPUs, else 0)")
    p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
    """``capjudge score``."""
    from capjudge.data.types import ScoreResult
    from capjudge.run.inputcheck import load_items
    from capjudge.run.outfile import score_key
    from capjudge.run.runner import (
        kept_results,
        options_digest,
        planning_pass,
        resume_plan,
        run_rows,
    )
    from capjudge.run.summary import RunTally

    method = command_method(args)  # --remote: the server's
    if method.pairwise:
        raise UsageError(f"method {method.name!r} compares pairs: use `capjudge compare`")
    _vqa_dir_option(args, method)
    _annotations_option(args, method)
    _captioned_option(args, method)
    _oracle_facts_option(args, method)
    preflight(args, inputs=[(args.input, ("image", "caption"))], out=args.out, reports=[("--html", args.html)], out_kind="score")
    batch.check_batch_args(args)
    rows = load_items(args.input)  # no rows, or an id twice: exit 2
    if args.limit is not None:
        rows = rows[: args.limit]
    _check_ray_args(args)
    calibration: Any = load_calibration(args.calibration, method, "score")  # exit 2: another method or scale
    check_human(args.human, args.human_alpha)
    t0 = time.perf_counter()
    with (remote_judge(args) if args.remote else make_judge(args, method)) as judge, _score_stream(args, judge, method) as stream:
        # The judge's method has its options applied: score=expected reads log-probabilities too.
        tally = RunTally(method=method.name, smoothing=bool(judge.method.reads_logprobs))
        # What every record of this run says about how it was made (as bad_row_result writes it).
        fields = {"method": method.name, "backend": judge.backend_spec, "template_hash": method.template_hash}
        warn_backend(calibration, judge.backend_spec)
        digest = options_digest(judge)  # budget failures made with other options are asked again
        plan = resume_plan(args.out, rows, score_key, fields, overwrite=args.overwrite, retry_errors=args.retry_errors, options=judge.method.options, digest=digest)
        session = batch.session_for(args, judge, fields, backend_options(args))
        with batch.batch_run(session, args, planning_pass(judge.backend, rows, plan, judge.score_stream)) as outcome:
            if outcome != "ready":
                return batch.pending_exit(session, outcome)
            for kept in kept_results(plan, ScoreResult):
                tally.add(kept)
            bar = progress_of(f"{method.name} on {judge.backend_spec}", args.quiet)
            made = calibration.stream(stream) if calibration is not None else stream
            calibrated: list[float] = []
            for _, res in run_rows(judge.backend, rows, plan, made, out=args.out, bad_row=lambda row: bad_row_result(row, method, judge), progress=bar, digest=digest):
                tally.add(res)
                value = (res.details or {}).get("calibration", {}).get("calibrated") if calibration is not None else None
                if value is not None:
                    calibrated.append(value)
        usage = usage_rows(judge)
    if not args.quiet:
        con = console(stderr=False)
        rows_out = [
            ("method", method.name),
            ("backend", judge.backend_spec),
            *tally.score_rows(),
            *([("mean calibrated", f"{sum(calibrated) / len(calibrated):.4g} (of {len(calibrated)} new records, on the human scale)")] if calibrated else []),
            ("kept from --out", str(len(plan.kept))),
            ("seconds", f"{time.perf_counter() - t0:.1f}"),
            ("results", str(args.out)),
            *usage,
            *(session.summary_rows() if session is not None else []),
        ]
        con.print(summary_table("capjudge score", rows_out))
        resume_note(con, plan)
        if getattr(judge, "members", None) is not None:  # a panel: its judges and their agreement
            from capjudge.cli.panel import print_panel

            print_panel(con, judge, args.out)
    if args.human:
        from capjudge.cli.trust_common import human_summary

        human_summary("score", args.out, args.human, args.human_alpha)
    html_report(args)
    return finish(tally)


def _vqa_dir_option(args: argparse.Namespace, method: Any) -> None:
    """``--vqa-dir DIR``: capmas-coverage's question folder, passed as its method option
    ``vqa_dir`` (usage errors: another method, a folder that is not there, coverage without one)."""
    from pathlib import Path

    given = getattr(args, "vqa_dir", None)
    takes = "vqa_dir" in method.options
    options = [str(o) for o in (getattr(args, "method_option", None) or [])]
    if given is None:
        if takes and not any(o.strip().replace("-", "_").startswith("vqa_dir=") for o in options):
            raise UsageError(f"method {method.name!r} needs --vqa-dir DIR (CapMAS's per-image question files)")
        return
    if not takes:
        raise UsageError(f"--vqa-dir is for capmas-coverage, not method {method.name!r}")
    if not Path(given).is_dir():
        raise UsageError(f"--vqa-dir {given!r} is not a folder")
    args.method_option = [*options, f"vqa_dir={given}"]


def _annotations_option(args: argparse.Namespace, method: Any) -> None:
    """CAPability's ``annotations=DIR`` method option: given, and a folder (usage errors, exit 2)."""
    from pathlib import Path

    if "annotations" not in method.options:
        return
    given = [o.split("=", 1)[1] for o in (str(o).strip() for o in (getattr(args, "method_option", None) or [])) if o.split("=", 1)[0].strip() == "annotations" and "=" in o]
    if not given:
        raise UsageError(f"method {method.name!r} needs --method-option annotations=DIR (the benchmark's annotations/ folder)")
    if not Path(given[-1].strip()).is_dir():
        raise UsageError(f"--method-option annotations={given[-1]!r} is not a folder")
def _captioned_option(args: argparse.Namespace, method: Any) -> None:
    """captionqa: the question set must be given and readable (usage errors, exit 2, before any
    model loads); the images that have a caption are those of ``--input`` (method option
    ``captioned``, unless given), as qa.py's shuffles depend on which images its caption file holds."""
    if args.remote or "questions" not in method.options:
        return
    options = [str(o) for o in (getattr(args, "method_option", None) or [])]
    given = {k.strip().replace("-", "_"): v for k, _, v in (o.partition("=") for o in options)}
    if not given.get("questions"):
        raise UsageError(f"method {method.name!r} needs its question set: --method-option questions=FILE_OR_DIR (the benchmark's JSON / JSONL / Parquet files)")
    from capjudge.judges.captionqa_set import question_plan

    captioned = given.get("captioned") or str(args.input)
    try:
        question_plan(given["questions"], captioned if Path(captioned).is_file() else "")
    except ValueError as exc:
        raise UsageError(f"--method-option questions: {exc}") from None
    if "captioned" not in given:
        args.method_option = [*options, f"captioned={args.input}"]


def _check_ray_args(args: argparse.Namespace) -> None:
    """``--ray`` options: checked before the backend is built (usage errors, exit 2)."""
    if args.ray is None:
        if args.ray_actors is not None or args.ray_gpus_per_actor is not None:
            raise UsageError("--ray-actors and --ray-gpus-per-actor need --ray")
        return
    from capjudge.cli.ray import check_ray_args

    check_ray_args(args)


def _score_stream(args: argparse.Namespace, judge: Any, method: Any) -> Any:
    """A context giving the function that judges a list of rows: ``judge.score_stream``, or with
    ``--ray`` the same records made by judges on Ray actors (one Ray session for the command)."""
    if args.ray is None:
        from contextlib import nullcontext

        return nullcontext(judge.score_stream)
    from capjudge.cli.ray import ray_score_stream

    return ray_score_stream(args, judge, method, judge_kwargs(args), console())


def html_report(args: argparse.Namespace) -> None:
    """``--html FILE``: the report of the results file the run just wrote (its whole --out, kept
    records included), thumbnails from ``--images``."""
    if not getattr(args, "html", None):
        return
    from capjudge.cli.html import command_line, emit
    from capjudge.report.pages import results_page

    emit(args.html, lambda: results_page([args.out], images=args.images, command=command_line(), allow_outside_images=bool(args.allow_outside_images)), quiet=args.quiet)


def _oracle_facts_option(args: argparse.Namespace, method: Any) -> None:
    """DCScore's ``--method-option oracle_facts=FILE`` (DeCapBench's human facts): a usage error,
    before any request, when the method takes it and it is missing or not a file."""
    from pathlib import Path

    if "oracle_facts" not in method.options:
        return
    given = [o.split("=", 1)[1] for o in (str(x).strip() for x in (getattr(args, "method_option", None) or [])) if o.replace("-", "_").startswith("oracle_facts=")]
    if not given or not given[-1]:
        raise UsageError(f"method {method.name!r} needs --method-option oracle_facts=FILE (DeCapBench's human_annotated_oracle_facts.jsonl)")
    if not Path(given[-1]).is_file():
        raise UsageError(f"--method-option oracle_facts={given[-1]!r} is not a file")
