"""CLI subcommands: ``meta-eval``, ``run-benchmark`` and ``report``.

``register(subparsers)`` adds them to the ``capjudge`` argument parser; each sets ``func`` to a
handler ``(args) -> int`` (the exit code: 0 done, 1 nothing could be measured, 2 bad input).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capjudge.cli.html import add_html_option
from capjudge.cli.terminal import visible

# Only light modules at the top: building the parser (`capjudge --help`) must not import numpy or
# scipy; the handlers import the statistics when they run.
from capjudge.metaeval.datasets import DATASET_NAMES, Benchmark, DatasetError, load_dataset

if TYPE_CHECKING:
    from capjudge.metaeval.protocols import MetaEval

# The tie rules of capjudge.metaeval.stats.TIE_RULES, spelled out here so that building the parser
# does not import scipy (a test checks that the two agree).
TIE_CHOICES: tuple[str, ...] = ("wrong", "half")


def _add_eval_options(p: argparse.ArgumentParser, *, bootstrap_default: int = 0) -> None:
    p.add_argument("--dataset", required=True, help=f"benchmark: {', '.join(DATASET_NAMES)}")
    p.add_argument("--human", required=True, metavar="PATH", help="the benchmark's annotation file (local)")
    p.add_argument("--ties", choices=TIE_CHOICES, default="wrong", help="pairwise tie rule: a tie is wrong (FLEUR, default) or half right")
    p.add_argument("--bootstrap", type=int, default=bootstrap_default, metavar="N", help="bootstrap resamples for 95%% CIs (0: none)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bars on stderr")



# The `capjudge meta-eval` parser's help texts.
META_EVAL_PARSER: dict[str, Any] = dict(
    help="agreement of a judge's results with human judgments (the papers' protocols)",
    description="Join RESULTS.jsonl to a human-judgment set by image file name and caption and print the published measures.",
)


# The `capjudge run-benchmark` parser's help texts.
RUN_BENCHMARK_PARSER: dict[str, Any] = dict(
    help="judge a whole benchmark from a local image folder, then meta-evaluate",
    description="Score every caption of a benchmark (resumable through the cache) and meta-evaluate the results.",
)


# The `capjudge report` parser's help texts.
REPORT_PARSER: dict[str, Any] = dict(
    help="several results files on one benchmark in one table with bootstrap CIs",
    description="Compare judges (e.g. LLaVA-13B FLEUR vs GPT-4o FLEUR vs VisCE2) on one benchmark.",
)


def register(subparsers: Any) -> None:
    """Add ``meta-eval``, ``run-benchmark`` and ``report`` to an argparse subparsers object."""
    p = subparsers.add_parser("meta-eval", **META_EVAL_PARSER)
    _add_eval_options(p)
    p.add_argument("--scores", required=True, metavar="RESULTS.jsonl", help="results file of capjudge score/compare")
    p.add_argument("--plot", metavar="OUT.png", help="write the row-normalised heatmap of human rating vs judge score")
    add_html_option(p, images=True)
    p.set_defaults(func=cmd_meta_eval)

    p = subparsers.add_parser("run-benchmark", **RUN_BENCHMARK_PARSER)
    _add_eval_options(p)
    p.add_argument("--images", required=True, metavar="DIR", help="local folder holding the benchmark's images")
    p.add_argument("--allow-outside-images", action="store_true", help="also read annotation image paths that leave --images (../, absolute paths, symlinks pointing outside); without it such a row is an error record")
    p.add_argument("--method", required=True, help="judging method (see capjudge methods)")
    p.add_argument("--backend", required=True, metavar="SPEC", help="backend spec, e.g. hf:llava-hf/llava-1.5-7b-hf")
    p.add_argument("--judge", default=None, metavar="PRESET", help="judge preset of a local model (see capjudge judges; hf: models choose it from their config)")
    p.add_argument("--out", required=True, metavar="RESULTS.jsonl", help="where the results are written")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N rating rows / pairs (a quick look)")
    p.add_argument("--cache-dir", metavar="D", help="response cache; a re-run answers from it")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.add_argument("--plot", metavar="OUT.png", help="write the heatmap")
    add_html_option(p)
    p.set_defaults(func=cmd_run_benchmark)

    p = subparsers.add_parser("report", **REPORT_PARSER)
    _add_eval_options(p, bootstrap_default=1000)
    p.add_argument("--scores", required=True, nargs="+", metavar="RESULTS.jsonl", help="one or more results files")
    p.add_argument("--names", nargs="+", metavar="NAME", help="row names, one per results file (default: method @ backend)")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the table as Markdown")
    add_html_option(p, images=True)
    p.set_defaults(func=cmd_report)


# ------------------------------------------------------------------------------------ helpers
def _err(msg: str) -> int:
    """Print a usage error (scrubbed of secrets, as the app prints one) and give its exit code: the
    meta-eval commands return it, so that they can be called without the app."""
    from capjudge.core.redact import scrub

    print(visible(f"capjudge: error: {scrub(msg)}"), file=sys.stderr)
    return 2


def _load_bench(args: argparse.Namespace) -> Benchmark:
    return load_dataset(args.dataset, args.human)


def _evaluate_file(bench: Benchmark, path: str, args: argparse.Namespace, progress: Callable[[], None] | None = None) -> MetaEval:
    from capjudge.metaeval.join import load_results
    from capjudge.metaeval.protocols import evaluate

    return evaluate(bench, load_results(path), ties=args.ties, bootstrap=max(0, args.bootstrap), seed=args.seed, progress=progress)


@contextmanager
def _bootstrap_bars(paths: Sequence[str], resamples: int, quiet: bool) -> Iterator[Callable[[int], Callable[[], None] | None]]:
    """Progress bars on stderr, one per results file, advanced once per bootstrap resample (1,000
    resamples over a benchmark take a minute or more); yields ``bar(i)``, the callback of file
    ``i`` (``None`` when quiet or without bootstrap)."""
    if quiet or resamples <= 0:
        yield lambda _i: None
        return
    from capjudge.cli.common import progress_bar

    with progress_bar("bootstrap {task.description}") as progress:
        tasks = [progress.add_task(Path(p).name, total=resamples) for p in paths]
        yield lambda i: (lambda: progress.advance(tasks[i]))


def _emit(ev: MetaEval, args: argparse.Namespace) -> int:
    from capjudge.metaeval.report import format_table

    if getattr(args, "plot", None):
        from capjudge.metaeval.plots import plot_heatmap

        plot_heatmap(ev, args.plot)
        ev.notes.append(f"heatmap written to {args.plot}")
    if args.format == "json":
        print(json.dumps(ev.to_dict(), ensure_ascii=False))
    else:
        print(format_table(ev))
    _html(args, [ev])
    return 0 if ev.ok else 1


def _check_html(args: argparse.Namespace, inputs: Sequence[str]) -> None:
    """Before the work: ``--html``, ``--plot`` and ``--markdown`` can be written, are no input and,
    where they exist, are reports capjudge wrote (raises PreflightError)."""
    from capjudge.cli.html import check_html
    from capjudge.run.preflight import check_output

    check_html(getattr(args, "html", None), inputs)
    for flag, kind in (("--plot", "plot"), ("--markdown", "markdown")):
        path = getattr(args, flag[2:], None)
        if path:
            check_output(path, inputs=inputs, what=flag, kind=kind)


def _html(args: argparse.Namespace, evals: Sequence[MetaEval], names: Sequence[str] | None = None) -> None:
    """Write the ``--html`` report (measures, heatmaps, every results file's samples)."""
    if not getattr(args, "html", None):
        return
    from capjudge.cli.html import command_line, emit
    from capjudge.metaeval.pages import metaeval_page

    images = getattr(args, "images", None)
    emit(args.html, lambda: metaeval_page(evals, names=names, images=images, command=command_line()), quiet=getattr(args, "quiet", False))


# ------------------------------------------------------------------------------------ handlers
def cmd_meta_eval(args: argparse.Namespace) -> int:
    """``capjudge meta-eval``: print the benchmark's measures for one results file."""
    from capjudge.run.preflight import PreflightError

    try:
        _check_html(args, [args.scores, args.human])
        bench = _load_bench(args)
        with _bootstrap_bars([args.scores], args.bootstrap, args.quiet) as bar:
            ev = _evaluate_file(bench, args.scores, args, bar(0))
    except (DatasetError, FileNotFoundError, OSError, PreflightError) as exc:
        return _err(str(exc))
    return _emit(ev, args)


def _limited(bench: Benchmark, limit: int | None) -> Benchmark:
    if not limit or limit <= 0:
        return bench
    if bench.kind == "ratings":
        bench.ratings = bench.ratings[:limit]
    else:
        bench.pairs = bench.pairs[:limit]
    bench.notes.append(f"--limit {limit}: only the first {limit} {'rating rows' if bench.kind == 'ratings' else 'pairs'}")
    return bench


def _write_results(path: Path, results: Iterable[Any]) -> None:
    from capjudge.data.io import write_results

    write_results(path, results)


def cmd_run_benchmark(args: argparse.Namespace) -> int:
    """``capjudge run-benchmark``: judge every sample of a benchmark, write results, meta-evaluate."""
    try:
        bench = _limited(_load_bench(args), args.limit)
    except (DatasetError, OSError) as exc:
        return _err(str(exc))
    images = Path(args.images)
    if not images.is_dir():
        return _err(f"image folder not found: {images}")
    images = images.absolute()  # annotation paths resolve to absolute ones, which the judge keeps inside it
    from capjudge.prompts.registry import UnknownMethodError, get_method
    from capjudge.run.preflight import PreflightError, check_backend, check_output

    try:  # everything that can be checked before the model loads (minutes for a 13B model)
        kind = get_method(args.method).kind
        check_output(args.out, inputs=[args.human], kind="pair" if kind == "pairwise" else "score")
        _check_html(args, [args.human, args.out])
        check_backend(args.backend, {})
        from capjudge.cli.common import hold_out_lock

        hold_out_lock(args, args.out)
    except (PreflightError, UnknownMethodError) as exc:
        return _err(str(exc))
    if kind == "pairwise" and bench.kind != "pairs":
        return _err(f"method {args.method!r} compares pairs; {bench.name} needs scores")
    from capjudge.backends.base import BackendError
    from capjudge.judges.judge import Judge  # lazy: pulls in the backends

    try:
        from capjudge.backends.cache import default_cache_dir

        # The response cache makes a benchmark run resumable: a re-run asks only what is missing.
        judge = Judge(args.method, args.backend, cache_dir=None if args.no_cache else (args.cache_dir or default_cache_dir()), preset=args.judge,
                      images_root=images, allow_outside_images=args.allow_outside_images)  # fmt: skip
    except BackendError as exc:  # the backend could not start: exit 1, as `capjudge score`
        from capjudge.core.redact import scrub

        print(visible(f"capjudge: backend error: {scrub(str(exc))}"), file=sys.stderr)
        return 1
    except ValueError as exc:  # unknown method or backend, bad option values: a usage error
        return _err(f"cannot build the judge: {exc}")
    out = Path(args.out)
    from capjudge.backends.credentials import mask_argv
    from capjudge.cli.common import progress
    from capjudge.run.summary import RunTally

    tally = RunTally(method=args.method, smoothing=bool(getattr(judge.method, "smoothing", False)))
    shown_backend = mask_argv([args.backend])[0]  # credentials in the spec shown as ***
    try:
        if kind == "pairwise":
            pairs = bench.pair_inputs(images)
            print(visible(f"{bench.name}: comparing {len(pairs)} pairs with {args.method} on {shown_backend}"), file=sys.stderr)
            _write_results(out, _tallied(progress(judge.compare_many(pairs), len(pairs), "pairs", args.quiet), tally))
        else:
            samples = bench.samples(images)
            print(visible(f"{bench.name}: scoring {len(samples)} samples with {args.method} on {shown_backend}"), file=sys.stderr)
            _write_results(out, _tallied(progress(judge.score_many(samples), len(samples), "samples", args.quiet), tally))
    finally:
        close = getattr(judge, "close", None)
        if callable(close):
            close()
    print(visible(f"results written to {out}"), file=sys.stderr)
    from capjudge.metaeval.join import load_results
    from capjudge.metaeval.protocols import evaluate

    with _bootstrap_bars([str(out)], args.bootstrap, args.quiet) as bar:
        ev = evaluate(bench, load_results(out), ties=args.ties, bootstrap=max(0, args.bootstrap), seed=args.seed, progress=bar(0))
    code = _emit(ev, args)
    from capjudge.cli.common import finish

    # warnings, and exit 3 when samples failed for backend reasons, as `capjudge score`
    return finish(tally) or code


def _tallied(results: Iterable[Any], tally: Any) -> Iterator[Any]:
    for result in results:
        tally.add(result)
        yield result


def cmd_report(args: argparse.Namespace) -> int:
    """``capjudge report``: several results files on one benchmark, one table with CIs."""
    from capjudge.metaeval.report import comparison_markdown, format_comparison, unique_labels

    names = args.names
    if names and len(names) != len(args.scores):
        return _err(f"--names gives {len(names)} names for {len(args.scores)} results files")
    from capjudge.run.preflight import PreflightError

    try:
        _check_html(args, [*args.scores, args.human])
        bench = _load_bench(args)
        with _bootstrap_bars(args.scores, args.bootstrap, args.quiet) as bar:
            evals = [_evaluate_file(bench, path, args, bar(i)) for i, path in enumerate(args.scores)]
    except (DatasetError, FileNotFoundError, OSError, PreflightError) as exc:
        return _err(str(exc))
    labels = unique_labels(evals, names)
    if args.format == "json":
        rows = []
        for label, ev in zip(labels, evals, strict=True):
            d = ev.to_dict()
            d["judge"] = label
            rows.append(d)
        print(json.dumps({"dataset": bench.name, "results": rows}, ensure_ascii=False))
    else:
        print(format_comparison(evals, names))
        for label, ev in zip(labels, evals, strict=True):
            for note in ev.notes:
                print(visible(f"note [{label}]: {note}"))
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        from capjudge.run.outguard import MARKDOWN_MARKER

        # marked as capjudge's, so that a re-run may replace it
        Path(args.markdown).write_text(MARKDOWN_MARKER + "\n" + comparison_markdown(evals, names), encoding="utf-8")
    _html(args, evals, names)
    return 0 if any(ev.ok for ev in evals) else 1
