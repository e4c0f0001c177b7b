"""The ``capjudge`` command line: score, compare, explain, demo, methods, meta-eval, agree, cache, probe, html, arena, batch.

Exit codes (:data:`EXIT_CODES_HELP`): 0 the run completed, also with per-sample errors (records in
the results file, counted in the summary); 3 samples failed for backend reasons (server gone,
retries exhausted, budget spent: re-running resumes); 1 the backend could not start; 2 a usage
error, found before any backend is built (paths, columns, backend spec and options: see
:mod:`capjudge.preflight`); 4 ``--batch``: batches submitted or in progress
(:mod:`capjudge.backends.openai.batch_commands`); 130 interrupted. Every message, log line and summary passes through
:mod:`capjudge.redact`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from capjudge.backends.openai import batch_commands
from capjudge.cli_errors import UsageError

T = TypeVar("T")

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = """exit codes (score, compare, arena, explain, run-benchmark):
  0    the run completed; samples that failed on their own (a corrupt image, an
       answer with no score) are error records in the results file
  1    the backend could not start (model not loadable, missing credentials)
  2    usage error (unknown method or backend, bad option, missing input or image
       folder, missing columns, an input with no rows or an id twice,
       unwritable --out, an --out that is not a results file of the command
       or that another run holds): found before any model loads
  3    samples failed for backend reasons (server gone, retries exhausted, budget
       spent): their records say why; re-run the same command to resume
  4    --batch: batches submitted or still in progress; run the same command
       again (or `capjudge batch collect OUT`) to collect them
  5    parity --tolerance: the two backends differ beyond the tolerance
  130  interrupted; results written so far are kept
probe and choose-one exit 0, 1, 2 or 130; meta-eval and report exit 1 when
nothing could be measured."""

# What `capjudge --help` shows first: commands that run as printed from the repository's root.
EXAMPLES_HELP = """examples (from the repository's root; scripted: needs no model):
  capjudge demo                      # the whole pipeline on a tiny random model (meaningless scores)
  capjudge score --method vanilla --backend "scripted:I would rate it 85 out of 100." \\
      --images examples/images --input examples/captions.jsonl --out out/try.jsonl --no-cache
  capjudge score --method fleur --backend hf:llava-hf/llava-1.5-7b-hf \\
      --images examples/images --input examples/captions.jsonl --out out/fleur.jsonl --html out/fleur.html
  capjudge compare --backend openai:gpt-4o --images examples/images \\
      --input examples/pairs.jsonl --out out/pairs.jsonl
  capjudge arena --input examples/arena.jsonl --round-robin --backend "scripted:Answer 1" \\
      --images examples/images --out out/battles.jsonl
  capjudge agree out/fleur.jsonl out/try.jsonl  # how far two judges agree
  capjudge methods                   # the judging methods; capjudge COMMAND --help for each command"""



def _console(stderr: bool = True) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _parse_options(items: Sequence[str] | None, flag: str = "--backend-opt") -> dict[str, Any]:
    """``--backend-opt key=value`` pairs (values stay strings; backends convert what they need)."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip().replace("-", "_")] = v
    return out


def progress_bar(label_format: str = "[bold]{task.description}") -> Any:
    """A rich progress bar on stderr (label, bar, done/total, elapsed, remaining), not yet started."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(label_format), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    return Progress(*columns, console=_console(), transient=False)


def _progress(items: Iterable[T], total: int | None, label: str, quiet: bool, done: int = 0) -> Iterator[T]:
    if quiet:
        yield from items
        return
    with progress_bar() as bar:
        task = bar.add_task(label, total=total, completed=done)
        for item in items:
            yield item
            bar.advance(task)


def _method_with_template(method_name: str, template: str | None, template_file: str | None) -> Any:
    from capjudge.prompts.registry import get_method, register_template

    method = get_method(method_name)
    if template_file:
        name = f"user:{Path(template_file).name}"
        register_template(name, path=template_file, overwrite=True)
        method = method.with_options(name=f"{method.name}+{Path(template_file).stem}", template=name)
    elif template:
        method = method.with_options(name=f"{method.name}+{template}", template=template)
    return method


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--backend-opt`` pairs plus the API flags (``--concurrency`` ...), checked for the kind."""
    options = _parse_options(args.backend_opt)
    if getattr(args, "judge", None):
        from capjudge.backends.presets import UnknownPresetError, preset_options

        try:
            options = {**preset_options(args.backend.split(":", 1)[0], args.judge), **options}
        except (UnknownPresetError, ValueError) as exc:
            raise UsageError(f"--judge {args.judge}: {exc}") from None
    api_flags = {k: getattr(args, k, None) for k in ("concurrency", "max_cost", "prices", "detail")}
    api_flags = {k: v for k, v in api_flags.items() if v is not None}
    if api_flags:
        from capjudge.judges.judge import API_KINDS

        if args.backend.split(":", 1)[0].lower() not in API_KINDS:
            raise UsageError(f"{', '.join('--' + k.replace('_', '-') for k in api_flags)} apply to API backends only")
        options.update(api_flags)
    return options


def _preflight(
    args: argparse.Namespace,
    *,
    inputs: Sequence[tuple[str | None, Sequence[str]]] = (),
    out: str | None = None,
    reports: Sequence[tuple[str, str | None]] = (),
    out_kind: str | None = None,
    report_kinds: Mapping[str, str] | None = None,
) -> None:
    """Everything that can be checked before the backend is built (a 13B model loads for minutes):
    each input file and its ``columns``, ``--images``, ``out`` and the ``reports`` (``(flag,
    path)``: writable, none of them an input, ``--template-file`` and ``--prices`` included), the
    backend spec and its options, ``--prices``. An existing ``out`` must be a results file of
    ``out_kind`` records (``"score"``, ``"pair"``), an existing ``--html`` a capjudge report and
    an existing report of a flag in ``report_kinds`` one of that kind (:data:`capjudge.outguard.KINDS`).
    Raises a usage error naming the item."""
    from capjudge.preflight import (
        check_backend,
        check_columns,
        check_images,
        check_input,
        check_output,
    )

    for path, columns in inputs:
        if path is not None:
            check_input(path, "input file")
            if columns:
                check_columns(path, columns)
    check_images(getattr(args, "images", None))
    if getattr(args, "prices", None):
        check_input(args.prices, "--prices")
    sources = [path for path, _ in inputs] + [getattr(args, "template_file", None), getattr(args, "prices", None)]
    for flag, path in [("--out", out), *reports]:
        if path is not None:
            check_output(path, inputs=sources, what=flag)
            if flag != "--out" and out is not None and Path(path).resolve() == Path(out).resolve():
                raise UsageError(f"{flag} {path!r} is the --out results file: write the report elsewhere")
    check_backend(args.backend, _backend_options(args))
    # Last, so that a mistake in the options is named first: what an existing output holds.
    for flag, path in [("--out", out), *reports]:
        kind = out_kind if flag == "--out" else (report_kinds or {}).get(flag, "html" if flag == "--html" else None)
        if path is not None and kind is not None:
            check_output(path, what=flag, kind=kind)
    if out is not None:
        hold_out_lock(args, out)


def hold_out_lock(args: argparse.Namespace, out: str) -> None:
    """Lock ``out`` against other runs until the command returns (:mod:`capjudge.outlock`; held by
    :func:`_run`); another run holding it is a usage error naming its pid."""
    held = getattr(args, "held", None)
    if held is not None:
        from capjudge.outlock import out_lock

        held.enter_context(out_lock(out))


def _judge_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`~capjudge.judges.judge.Judge`'s keyword arguments from the command line."""
    cache_dir = None
    if not getattr(args, "no_cache", False):
        from capjudge.backends.cache import default_cache_dir

        cache_dir = args.cache_dir or default_cache_dir()
    system: str | None = args.system
    if system == "none":
        system = None
    elif system == "llava_v1":
        from capjudge.prompts.registry import LLAVA_V1_SYSTEM

        system = LLAVA_V1_SYSTEM
    return {
        "cache_dir": cache_dir,
        "system": system,
        "images_root": args.images,
        "batch_size": args.batch_size,
        "max_new_tokens": getattr(args, "max_new_tokens", None),
        "backend_options": _backend_options(args),
        "method_options": _parse_options(getattr(args, "method_option", None), "--method-option"),
        **image_options(args),
    }


def image_options(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`~capjudge.judges.judge.Judge`'s image keyword arguments (``--allow-outside-images``,
    ``--max-image-pixels``, ``--oversize-images``, ``--max-image-bytes``, ``--image-timeout``)."""
    names = ("allow_outside_images", "max_image_pixels", "oversize_images", "max_image_bytes", "image_timeout")
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def _count(text: str) -> int:
    """A whole number >= 0 for argparse (``--max-image-pixels 0`` turns the limit off)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def _positive(text: str) -> int:
    """A whole number >= 1 for argparse."""
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {text!r}")
    return value


def _seconds(text: str) -> float:
    """A positive number of seconds for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def add_image_options(p: argparse.ArgumentParser) -> None:
    """The options that bound what an image may cost and where it may come from."""
    from capjudge.images import DEFAULT_LIMITS

    g = p.add_argument_group("images")
    g.add_argument("--allow-outside-images", action="store_true", default=None, help="with --images DIR: also read image paths that leave DIR (../, absolute paths, symlinks pointing outside); without it such a row is an error record")
    g.add_argument("--max-image-pixels", type=_count, default=None, metavar="N", help=f"decoded pixel budget of one image (default {DEFAULT_LIMITS.max_pixels:,}; 0: none); larger images are downscaled at load, see --oversize-images")
    g.add_argument("--oversize-images", choices=("downscale", "refuse"), default=None, help="an image above --max-image-pixels is downscaled to fit (default; the record's details say from what size) or refused (an error record)")
    g.add_argument("--max-image-bytes", type=_positive, default=None, metavar="B", help=f"size cap of an http(s) image a local backend downloads (default {DEFAULT_LIMITS.max_download_bytes:,})")
    g.add_argument("--image-timeout", type=_seconds, default=None, metavar="S", help=f"deadline for downloading one http(s) image, the whole download (default {DEFAULT_LIMITS.download_timeout:g} s)")


def _make_judge(args: argparse.Namespace, method: Any) -> Any:
    from capjudge.backends.registry import UnknownBackendError
    from capjudge.judges.judge import Judge
    from capjudge.prompts.registry import TemplateError, UnknownMethodError

    try:
        judge = Judge(method, args.backend, **_judge_kwargs(args))
    except ValueError as exc:
        # Bad option values (a concurrency of 0, an unknown price, ...) are usage errors; the
        # subclasses that name an unknown method or backend are reported as they are.
        if isinstance(exc, (UnknownMethodError, UnknownBackendError, TemplateError)):
            raise
        raise UsageError(f"cannot build the judge: {exc}") from exc
    return judge


def _usage_rows(judge: Any) -> list[tuple[str, str]]:
    """API usage and cost of the run, when the backend counts them."""
    usage = getattr(judge.backend, "usage", None)
    if usage is None or not hasattr(usage, "summary"):
        return []
    u = usage.summary()
    batch = u.get("batch_calls") or 0
    rows = [
        ("API calls", str(u["calls"])),
        ("tokens in/out", f"{u['prompt_tokens']}/{u['completion_tokens']}"),
        ("cost (USD)", f"{u['cost_usd']:.4f}"),
    ]
    if batch:  # batch lines are billed at batch prices (usage.BATCH_DISCOUNT of the standard ones)
        rows.append(("  calls at batch prices", f"{batch} of {u['calls']}"))
    rows.append(("not sent (budget)", str(u["budget_refused"])))
    return rows


def _add_common(p: argparse.ArgumentParser, *, method_default: str | None = None) -> None:
    p.add_argument("--backend", required=True, help="backend spec, e.g. hf:llava-hf/llava-1.5-7b-hf, llamacpp:m.gguf?mmproj=p.gguf, openai:gpt-4o")
    if method_default is None:
        p.add_argument("--method", required=True, help="judging method (see `capjudge methods`)")
    else:
        p.add_argument("--method", default=method_default, help=f"judging method (default: {method_default})")
    p.add_argument("--images", default=None, help="folder that relative image paths are resolved against; paths that leave it are refused (see --allow-outside-images)")
    p.add_argument("--template", default=None, help="run the method with another registered template")
    p.add_argument("--template-file", default=None, help="run the method with your own Jinja template file (sandboxed)")
    p.add_argument("--judge", default=None, metavar="PRESET", help="judge preset of a local model: how its family is prompted (see `capjudge judges`); hf: models choose it from their config when omitted; explicit --backend-opt settings win")
    p.add_argument("--system", default="auto", help="system turn: auto (the judge preset's: the paper's sentence for LLaVA-1.5, the model's own default otherwise), none, llava_v1, or your own sentence")
    p.add_argument("--max-new-tokens", type=int, default=None, help="override the method's answer length (tokens)")
    p.add_argument("--method-option", action="append", metavar="KEY=VALUE", help="method option, repeatable: second_decimal=official|printed (FLEUR smoothing), no_number=error|zero (VisCE2 *-code), temperature=T")
    p.add_argument("--batch-size", type=int, default=64, help="samples handed to the backend together (default 64)")
    p.add_argument("--backend-opt", action="append", metavar="KEY=VALUE", help="backend option, repeatable (device=cuda, dtype=float16, concurrency=16, ...)")
    p.add_argument("--cache-dir", default=None, help="response cache folder (default: $CAPJUDGE_CACHE_DIR or ~/.cache/capjudge)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.add_argument("--limit", type=int, default=None, help="judge only the first N rows")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    api = p.add_argument_group("API judges (openai, azure, openai-compatible)")
    api.add_argument("--concurrency", type=int, default=None, help="API requests in flight at once (default 8; with --ray, per actor)")
    api.add_argument("--max-cost", type=float, default=None, metavar="USD", help="stop before the run spends more than this; requests not sent become error records")
    api.add_argument("--prices", default=None, metavar="JSON", help="price overrides: JSON file of model -> {\"input\": USD/1M, \"output\": USD/1M}")
    api.add_argument("--detail", choices=("low", "high", "auto"), default=None, help="image detail for OpenAI models")
    add_image_options(p)


def _add_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true", help="start --out over instead of keeping the records already in it")
    p.add_argument("--retry-errors", action="store_true", help="ask again for the rows whose record in --out is an error, bypassing cached answers")


# ---------------------------------------------------------------------------------------- score
def _summary_table(title: str, rows: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    from capjudge.redact import scrub

    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, scrub(v))
    return table


def _bad_row_result(row: Any, method: Any, judge: Any) -> Any:
    """The error record of an input row that could not be read (it names the line and the cause;
    its scale is the method's, as every other record of the run)."""
    from capjudge.types import ScoreResult

    return ScoreResult(image="", caption="", score=None, method=method.name, backend=judge.backend_spec, model=judge.backend.model, template_hash=method.template_hash, raw=row.raw or None, status="error", error=row.error, id=row.id or str(row.line), scale=method.scale)


def _finish(tally: Any) -> int:
    """Print the run's loud warnings and backend-failure message (also with --quiet) and choose
    the exit code: 3 when samples failed for backend reasons, else 0."""
    from capjudge.redact import scrub

    for warning in tally.warnings():
        print(f"capjudge: {warning}", file=sys.stderr)
    message = tally.backend_failure_message()
    if message is None:
        return EXIT_OK
    print(f"capjudge: {scrub(message)}", file=sys.stderr)
    return EXIT_BACKEND


def _resume_plan(args: argparse.Namespace, rows: Sequence[Any], key: Callable[[dict[str, Any]], Any], run: dict[str, Any]) -> Any:
    """What is kept from ``--out`` (nothing with ``--overwrite``); a conflict is a usage error."""
    from capjudge.io import BadRow
    from capjudge.outfile import ResumeConflict, ResumePlan, plan_resume

    if args.overwrite:
        return ResumePlan()
    try:
        return plan_resume(args.out, [None if isinstance(r, BadRow) else r for r in rows], key, run, retry_errors=args.retry_errors)
    except ResumeConflict as exc:
        raise UsageError(str(exc)) from None


def _run_rows(
    args: argparse.Namespace,
    judge: Any,
    rows: Sequence[Any],
    plan: Any,
    stream: Callable[[list[Any]], Iterator[tuple[int, Any]]],
    bad_row: Callable[[Any], Any],
    label: str,
) -> Iterator[Any]:
    """Judge the rows ``plan`` does not keep and write each record to ``--out`` as it completes;
    yields every new record (for the summary). Error records of ``plan.retry`` are asked again
    without the cache; the file ends in input order whatever happens."""
    from capjudge.backends.cache import bypass_cache
    from capjudge.io import BadRow
    from capjudge.outfile import ResultsFile

    todo = [pos for pos in range(len(rows)) if pos not in plan.kept]
    retry = [pos for pos in todo if pos in plan.retry and not isinstance(rows[pos], BadRow)]
    fresh = [pos for pos in todo if pos not in plan.retry and not isinstance(rows[pos], BadRow)]
    bad = [pos for pos in todo if isinstance(rows[pos], BadRow)]
    with ResultsFile(args.out, ((pos + 1, rec) for pos, rec in plan.kept.items())) as out:

        def records() -> Iterator[tuple[int, Any]]:
            for pos in bad:
                yield pos, bad_row(rows[pos])
            if retry:
                with bypass_cache(judge.backend):
                    for k, res in stream([rows[pos] for pos in retry]):
                        yield retry[k], res
            for k, res in stream([rows[pos] for pos in fresh]):
                yield fresh[k], res

        # The bar counts answers as they arrive (records kept from --out are already done).
        for pos, res in _progress(records(), len(rows), label, args.quiet, done=len(plan.kept)):
            out.write(pos + 1, res)
            yield res


def _kept_results(plan: Any, kind: Any) -> Iterator[Any]:
    """The records kept from ``--out`` as results, for the summary (their cache flags are the
    old run's, so they are dropped: cache hits count this run's answers)."""
    for rec in plan.kept.values():
        res = kind.from_dict(rec)
        res.details.pop("cached", None)
        res.details.pop("row", None)
        yield res


def _resume_note(con: Any, plan: Any) -> None:
    if plan.kept:
        con.print(f"{len(plan.kept)} record(s) kept from the results file, not asked again.")
    if plan.kept_errors:
        con.print(f"[yellow]{plan.kept_errors} of them are errors; --retry-errors asks them again, bypassing cached answers.[/yellow]")
    invalid = getattr(plan, "invalid", None)
    if invalid:
        from rich.markup import escape

        first = min(invalid)
        con.print(
            f"[yellow]{len(invalid)} record(s) said ok without a valid score or verdict (written by an older capjudge): "
            f"asked again, bypassing cached answers (first: row {first + 1}: {escape(invalid[first])}).[/yellow]"
        )


def _cmd_score(args: argparse.Namespace) -> int:
    from capjudge.inputcheck import load_items
    from capjudge.outfile import score_key
    from capjudge.summary import RunTally
    from capjudge.types import ScoreResult

    method = _method_with_template(args.method, args.template, args.template_file)
    if method.kind == "pairwise":
        raise UsageError(f"method {method.name!r} compares pairs: use `capjudge compare`")
    _preflight(args, inputs=[(args.input, ("image", "caption"))], out=args.out, reports=[("--html", args.html)], out_kind="score")
    batch_commands.check_batch_args(args)
    rows = load_items(args.input)  # no rows, or an id twice: exit 2
    if args.limit is not None:
        rows = rows[: args.limit]
    _check_ray_args(args)
    tally = RunTally(method=method.name, smoothing=bool(method.smoothing))
    t0 = time.perf_counter()
    with _make_judge(args, method) as judge, _score_stream(args, judge, method) as stream:
        # What every record of this run says about how it was made (as _bad_row_result writes it).
        fields = {"method": method.name, "backend": judge.backend_spec, "template_hash": method.template_hash}
        plan = _resume_plan(args, rows, score_key, fields)
        session = batch_commands.session_for(args, judge, fields, _backend_options(args))
        with batch_commands.batch_run(session, args, batch_commands.planning_pass(judge, rows, plan, judge.score_stream)) as outcome:
            if outcome != "ready":
                return batch_commands.pending_exit(session, outcome)
            for kept in _kept_results(plan, ScoreResult):
                tally.add(kept)
            for res in _run_rows(args, judge, rows, plan, stream, lambda row: _bad_row_result(row, method, judge), f"{method.name} on {judge.backend_spec}"):
                tally.add(res)
        usage = _usage_rows(judge)
    if not args.quiet:
        con = _console(stderr=False)
        rows_out = [
            ("method", method.name),
            ("backend", judge.backend_spec),
            *tally.score_rows(),
            ("kept from --out", str(len(plan.kept))),
            ("seconds", f"{time.perf_counter() - t0:.1f}"),
            ("results", str(args.out)),
            *usage,
            *(session.summary_rows() if session is not None else []),
        ]
        con.print(_summary_table("capjudge score", rows_out))
        if tally.failed:
            con.print(f"[yellow]{tally.failed} sample(s) failed; their records have status \"error\" and say why.[/yellow]")
        _resume_note(con, plan)
    _html_report(args)
    return _finish(tally)


def _check_ray_args(args: argparse.Namespace) -> None:
    """``--ray`` options: checked before the backend is built (usage errors, exit 2)."""
    if args.ray is None:
        if args.ray_actors is not None or args.ray_gpus_per_actor is not None:
            raise UsageError("--ray-actors and --ray-gpus-per-actor need --ray")
        return
    from capjudge.distributed.commands import check_ray_args

    check_ray_args(args)


def _score_stream(args: argparse.Namespace, judge: Any, method: Any) -> Any:
    """A context giving the function that judges a list of rows: ``judge.score_stream``, or with
    ``--ray`` the same records made by judges on Ray actors (one Ray session for the command)."""
    if args.ray is None:
        from contextlib import nullcontext

        return nullcontext(judge.score_stream)
    from capjudge.distributed.commands import ray_score_stream

    return ray_score_stream(args, judge, method, _judge_kwargs(args), _console())


def _html_report(args: argparse.Namespace) -> None:
    """``--html FILE``: the report of the results file the run just wrote (its whole --out, kept
    records included), thumbnails from ``--images``."""
    if not getattr(args, "html", None):
        return
    from capjudge.report.commands import command_line, emit
    from capjudge.report.pages import results_page

    emit(args.html, lambda: results_page([args.out], images=args.images, command=command_line(), allow_outside_images=bool(args.allow_outside_images)), quiet=args.quiet)


# -------------------------------------------------------------------------------------- compare
def _cmd_compare(args: argparse.Namespace) -> int:
    from capjudge.inputcheck import load_items
    from capjudge.judges.pairwise import run_fields
    from capjudge.outfile import pair_key
    from capjudge.summary import RunTally
    from capjudge.types import PairResult

    method = _method_with_template(args.method, args.template, args.template_file)
    mode = args.mode if args.mode != "auto" else None
    if mode == "grading" and method.kind != "score":
        raise UsageError(f"comparison by grading needs a scoring method, not {method.name!r}")
    _preflight(args, inputs=[(args.input, ("image", "caption_a", "caption_b"))], out=args.out, reports=[("--html", args.html)], out_kind="pair")
    batch_commands.check_batch_args(args)
    rows = load_items(args.input, pairs=True)  # no rows, or an id twice: exit 2
    if args.limit is not None:
        rows = rows[: args.limit]
    tally = RunTally(method=method.name)
    t0 = time.perf_counter()
    with _make_judge(args, method) as judge:
        run = run_fields(judge, mode)
        plan = _resume_plan(args, rows, pair_key, run)
        session = batch_commands.session_for(args, judge, run, _backend_options(args))

        def bad_row(row: Any) -> PairResult:
            return PairResult(image="", caption_a="", caption_b="", verdict=None, method=run["method"], backend=judge.backend_spec, model=judge.backend.model, template_hash=run["template_hash"], mode=run["mode"], status="error", error=row.error, id=row.id or str(row.line))

        def stream(pairs: list[Any]) -> Iterator[tuple[int, Any]]:
            return judge.compare_stream(pairs, mode=mode)  # type: ignore[no-any-return]

        with batch_commands.batch_run(session, args, batch_commands.planning_pass(judge, rows, plan, stream)) as outcome:
            if outcome != "ready":
                return batch_commands.pending_exit(session, outcome)
            for kept in _kept_results(plan, PairResult):
                tally.add(kept)
            for res in _run_rows(args, judge, rows, plan, stream, bad_row, f"compare with {method.name}"):
                tally.add(res)
        usage = _usage_rows(judge)
    if not args.quiet:
        con = _console(stderr=False)
        con.print(
            _summary_table(
                "capjudge compare",
                [
                    ("method", method.name),
                    ("backend", judge.backend_spec),
                    ("A better", str(tally.verdicts["A"])),
                    ("B better", str(tally.verdicts["B"])),
                    ("tie", str(tally.verdicts["tie"])),
                    *tally.position_rows(),
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
        _resume_note(con, plan)
    _html_report(args)
    return _finish(tally)


# -------------------------------------------------------------------------------------- explain
def _cmd_explain(args: argparse.Namespace) -> int:
    import json
    from contextlib import nullcontext

    from capjudge.inputcheck import load_items
    from capjudge.io import BadRow, ResultWriter
    from capjudge.summary import RunTally

    method = _method_with_template(args.method, args.template, args.template_file)
    if method.kind != "score":
        raise UsageError(f"explain needs a scoring method, not {method.name!r}")
    rows: list[Any]
    _preflight(args, inputs=[(args.input, ("image", "caption"))], out=args.out, out_kind="score")
    if args.input:
        rows = load_items(args.input, unique_ids=False)  # no rows: exit 2
    elif args.image and args.caption:
        rows = [{"image": args.image, "caption": args.caption, "references": args.reference or [], "id": "0"}]
    else:
        raise UsageError("give --image and --caption, or --input FILE")
    if args.limit is not None:
        rows = rows[: args.limit]
    con = _console(stderr=False)
    tally = RunTally(method=method.name)
    with _make_judge(args, method) as judge, (ResultWriter(args.out) if args.out else nullcontext()) as writer:
        for row in rows:
            if isinstance(row, BadRow):
                res = _bad_row_result(row, method, judge)
            else:
                res = judge.explain(row)
            tally.add(res)
            if writer is not None:
                writer.write(res)
            if args.json:
                print(json.dumps(res.to_dict(), ensure_ascii=False, default=float))
            else:
                con.print(f"[bold]{res.image}[/bold]  {res.caption!r}")
                if res.ok:
                    kind = "smoothed" if res.smoothed else "raw"
                    con.print(f"  score ({kind}): {res.score:.4g}")
                    con.print(f"  why: {res.explanation or res.details.get('explanation_error', '-')}")
                else:
                    con.print(f"  [red]error:[/red] {res.error}")
    return _finish(tally)


# ------------------------------------------------------------------------------------- methods
_PARSERS = {"rules": "capjudge rules", "first-integer": "first integer", "fleur-code": "FLEUR code digits"}


def _method_rows() -> list[dict[str, Any]]:
    from capjudge.prompts.registry import get_method, list_methods
    from capjudge.prompts.sources import SOURCES

    rows = []
    for name in list_methods():
        m = get_method(name)
        src = SOURCES[m.source]
        rows.append(
            {
                "method": name,
                "kind": m.kind,
                "scale": "verdict" if m.kind == "pairwise" else f"{m.scale[0]:g}-{m.scale[1]:g}",
                "steps": 2 if m.two_step else 1,
                "references": m.needs_references,
                "smoothing": m.smoothing,
                "parse": _PARSERS[m.parser],
                "decoding": m.decoding(),
                "options": {k: m.options[k] for k in sorted(m.options)},
                "source": src.short,
                "where": m.paper,
                "source_title": src.title,
                "source_url": src.url,
                "description": m.description,
            }
        )
    return rows


def _cmd_methods(args: argparse.Namespace) -> int:
    import json

    rows = _method_rows()
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return EXIT_OK
    # Plain lines, never shortened: full names at any terminal width, also when piped.
    width = max(len(r["method"]) for r in rows)
    for r in rows:
        what = [r["kind"], "verdict A, B or tie" if r["kind"] == "pairwise" else f"scale {r['scale']}"]
        if r["steps"] == 2:
            what.append("two steps")
        if r["references"]:
            what.append("needs references")
        if r["smoothing"]:
            what.append("smoothed")
        print(f"{r['method']:<{width}}  {', '.join(what)}")
        pad = " " * (width + 2)
        print(f"{pad}source:   {r['source']}, {r['where']}")
        print(f"{pad}decoding: {r['decoding']}; parse: {r['parse']}")
        if r["options"]:
            print(f"{pad}options:  {', '.join(f'{k}={v}' for k, v in r['options'].items())} (default)")
    print()
    print("Sources:")
    seen: dict[str, str] = {}
    for r in rows:
        if r["source_url"]:
            seen.setdefault(r["source"], f"{r['source_title']}, {r['source_url']}")
    for short, cite in seen.items():
        print(f"  {short}: {cite}")
    print("Method options: --method-option KEY=VALUE; every method also takes temperature=T.")
    return EXIT_OK


# --------------------------------------------------------------------------------------- judges
def _cmd_judges(args: argparse.Namespace) -> int:
    import json

    from capjudge.backends.presets import METHOD_SYSTEM, list_presets

    presets = list_presets()
    if args.json:
        for preset in presets:
            print(json.dumps(preset.as_row(), ensure_ascii=False))
        return EXIT_OK
    # Plain lines, never shortened (as `capjudge methods`).
    width = max(len(p.name) for p in presets)
    for p in presets:
        system = {METHOD_SYSTEM: "method's sentence", None: "model's default"}.get(p.default_system, repr(p.default_system))
        print(f"{p.name:<{width}}  {p.family}")
        pad = " " * (width + 2)
        print(f"{pad}chosen for: {p.detected_by or 'model_type ' + ', '.join(p.model_types)}; backends: {', '.join(p.backends)}")
        print(f"{pad}chat {p.chat_format}, system {p.system_policy} ({system}), images {p.image_tokens}, pad_square {str(p.pad_square).lower()}, GPU dtype {p.dtype}")
        if p.notes:
            print(f"{pad}{p.notes}")
    print()
    print("hf: models choose their preset from config.json (model_type) unless --judge names one; --backend-opt")
    print("chat_format=, system_policy=, pad_square=, dtype= override single settings. llamacpp: models choose")
    print("their prompt format from the GGUF headers; --judge sets it (prompt_format) and the system default.")
    print("API servers apply the model's own chat template: presets do not apply to them.")
    return EXIT_OK


# ----------------------------------------------------------------------------------------- demo
def _cmd_demo(args: argparse.Namespace) -> int:
    from capjudge.demo import run_demo

    return run_demo(backend=args.backend, out_dir=Path(args.out_dir), cache_dir=args.cache_dir)


# ----------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    from capjudge._version import __version__
    from capjudge.report.commands import add_html_option

    parser = argparse.ArgumentParser(
        prog="capjudge",
        description="Turn a vision-language model into a judge of image captions.",
        epilog=EXAMPLES_HELP + "\n\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"capjudge {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("score", help="score every caption of a JSONL/CSV file", epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(p)
    p.add_argument("--input", required=True, help="JSONL or CSV with image, caption[, references, id]")
    p.add_argument("--out", required=True, help="results JSONL (one record per input row)")
    _add_resume(p)
    batch_commands.add_batch_options(p)
    add_html_option(p)
    scale = p.add_argument_group("many judges at once through Ray (pip install 'capjudge[ray]'; docs/ray.md)")
    scale.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS", help="judge on Ray actors, one judge (one model) each: a running cluster's ADDRESS (auto, HOST:6379, ray://HOST:10001), or none for $RAY_ADDRESS or a local instance")
    scale.add_argument("--ray-actors", type=int, default=None, metavar="N", help="judges running at once (default: the cluster's GPUs / --ray-gpus-per-actor, else 1); an API backend's --concurrency applies to each")
    scale.add_argument("--ray-gpus-per-actor", type=float, default=None, metavar="G", help="GPUs each actor holds (default 1 for hf: and llamacpp: on a cluster with GPUs, else 0)")
    p.set_defaults(func=_cmd_score)

    p = sub.add_parser("compare", help="A/B comparison of caption pairs (dual-sided or by grading)", epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(p, method_default="gpt4v-pairwise")
    p.add_argument("--input", required=True, help="JSONL or CSV with image, caption_a, caption_b[, id]")
    p.add_argument("--out", required=True, help="results JSONL")
    p.add_argument("--mode", choices=("auto", "pairwise", "grading"), default="auto", help="pairwise: ask both orders and vote (the GPT-4V evaluator paper); grading: higher single score wins; auto: by method")
    _add_resume(p)
    batch_commands.add_batch_options(p)
    add_html_option(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("explain", help="score and ask the judge why (FLEUR's follow-up)")
    _add_common(p, method_default="fleur")
    p.add_argument("--image", default=None)
    p.add_argument("--caption", default=None)
    p.add_argument("--reference", action="append", help="reference caption (repeatable)")
    p.add_argument("--input", default=None, help="JSONL or CSV of samples instead of --image/--caption")
    p.add_argument("--out", default=None, help="also write the results JSONL here")
    p.add_argument("--json", action="store_true", help="print JSON records")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("methods", help="list the judging methods: source, decoding, parsing, options")
    p.add_argument("--json", action="store_true", help="one JSON object per method")
    p.set_defaults(func=_cmd_methods)

    p = sub.add_parser("judges", help="list the judge presets: chat format, system policy, image tokens, padding, dtype, backends")
    p.add_argument("--json", action="store_true", help="one JSON object per preset")
    p.set_defaults(func=_cmd_judges)

    p = sub.add_parser("demo", help="run the full pipeline on the bundled example images")
    p.add_argument("--backend", default=None, help="a real backend to use (default: a tiny random model built offline; its scores are meaningless)")
    p.add_argument("--out-dir", default="out/demo", help="where the demo writes its inputs and results (default out/demo)")
    p.add_argument("--cache-dir", default=None, help="response cache (default: none for the tiny model)")
    p.set_defaults(func=_cmd_demo)

    for module, func in (
        ("capjudge.metaeval.commands", "register"),
        ("capjudge.metaeval.agree_commands", "register"),
        ("capjudge.backends.cache", "register_cli"),
        ("capjudge.probes.commands", "register"),
        ("capjudge.report.commands", "register"),
        ("capjudge.arena.commands", "register"),
        ("capjudge.parity.commands", "register"),
        ("capjudge.backends.openai.batch_commands", "register"),
    ):
        _register_optional(sub, module, func)
    return parser


def _register_optional(sub: Any, module: str, func: str) -> None:
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return  # that part of capjudge is not present in this install
        raise
    register: Callable[[Any], None] = getattr(mod, func)
    register(sub)


def _logging(verbose: int) -> Callable[[], None]:
    """Send log records to stderr (warnings; -v info; -vv debug), every one of them scrubbed of
    secrets, whichever library logged it; returns the function that undoes it (``main`` may be
    called in-process, e.g. by tests)."""
    from capjudge.redact import install_scrubber

    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    install_scrubber(handler)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING - 10 * min(verbose, 2))

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(level)

    return undo


def _error(prefix: str, exc: BaseException | str) -> None:
    from capjudge.redact import scrub

    # Plain print: error messages hold paths that must not be wrapped.
    print(f"capjudge: {prefix}: {scrub(str(exc))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``capjudge`` command (exit codes: :data:`EXIT_CODES_HELP`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # batch mode keeps the command
    undo_logging = _logging(args.verbose)
    try:
        return _run(args)
    finally:
        undo_logging()


def _run(args: argparse.Namespace) -> int:
    from capjudge.backends.base import BackendError
    from capjudge.backends.registry import UnknownBackendError
    from capjudge.io import InputFormatError
    from capjudge.preflight import PreflightError
    from capjudge.prompts.registry import TemplateError, UnknownMethodError

    try:
        with contextlib.ExitStack() as held:  # what a command holds until it returns: the lock on --out
            args.held = held
            return int(args.func(args) or 0)
    except (UsageError, PreflightError, UnknownMethodError, UnknownBackendError, InputFormatError, TemplateError, FileNotFoundError) as exc:
        _error("error", exc)
        return EXIT_USAGE
    except BackendError as exc:
        _error("backend error", exc)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("capjudge: interrupted: results written so far are kept; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: still no secret in the traceback
        import traceback

        from capjudge.redact import scrub

        sys.stderr.write(scrub(traceback.format_exc()))
        _error("internal error", f"{type(exc).__name__}: {exc}")
        return EXIT_FAIL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
