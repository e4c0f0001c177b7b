"""What the commands share: the common options (backend, method, images, resume), building the
judge, the preflight checks, progress bars, the summary table and the exit code of a run.

Only the standard library is imported at module level (``capjudge --help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from capjudge.cli.panel import add_backend_option, check_panel, is_panel, make_panel, panel_args
from capjudge.cli.panel import usage_rows as panel_usage_rows
from capjudge.core.errors import EXIT_ALL_FAILED, EXIT_BACKEND, EXIT_OK, UsageError

T = TypeVar("T")

EXIT_CODES_HELP = """exit codes (score, compare, arena, explain, run-benchmark):
  0    the run completed and at least one sample succeeded; samples that failed
       on their own (a corrupt image, an answer with no score) are error records
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
  6    no sample succeeded: every record is an error (the most common causes
       are printed); 3 takes precedence when samples failed for backend reasons
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


def console(stderr: bool = True) -> Any:
    """A rich console on stderr (or stdout), no highlighting; the control characters of what it
    prints are escaped (:mod:`capjudge.cli.terminal`)."""
    from capjudge.cli.terminal import make_console

    return make_console(stderr=stderr, highlight=False)


def parse_options(items: Sequence[str] | None, flag: str = "--backend-opt") -> dict[str, Any]:
    """``--backend-opt key=value`` pairs (values stay strings; backends convert what they need)."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"{flag} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip().replace("-", "_")] = v
    return out


PROGRESS_FIXED_WIDTH = 52
"""What a progress line keeps for its bar (at least 10), counts and times: the label gets the rest
of the terminal's width (at least 12 characters), cut with an ellipsis."""


def progress_bar(label_format: str = "[bold]{task.description}") -> Any:
    """A rich progress bar on stderr (label, bar, done/total, elapsed, remaining), not yet started.
    On a narrow terminal (80 columns) the label is cut, never the bar or the counts."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    con = console()
    label = Column(no_wrap=True, overflow="ellipsis", max_width=max(12, con.width - PROGRESS_FIXED_WIDTH))
    columns = (
        TextColumn(label_format, table_column=label),
        BarColumn(bar_width=None, table_column=Column(min_width=10, ratio=1)),
        MofNCompleteColumn(table_column=Column(no_wrap=True)),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        TimeRemainingColumn(table_column=Column(no_wrap=True)),
    )
    return Progress(*columns, console=con, transient=False, expand=True)


def progress(items: Iterable[T], total: int | None, label: str, quiet: bool, done: int = 0) -> Iterator[T]:
    """``items`` unchanged, with a progress bar on stderr unless ``quiet`` (``done`` already counted)."""
    if quiet:
        yield from items
        return
    with progress_bar() as bar:
        task = bar.add_task(label, total=total, completed=done)
        for item in items:
            yield item
            bar.advance(task)


def progress_of(label: str, quiet: bool) -> Callable[[Iterator[T], int, int], Iterator[T]]:
    """A ``progress(items, total, done)`` callback for :func:`capjudge.run.runner.run_rows`: the bar of
    :func:`progress` labelled ``label``."""
    return lambda items, total, done: progress(items, total, label, quiet, done)


class CountingJudge:
    """A judge whose ``score_many`` / ``compare_many`` advance one progress bar: for features that
    call the judge several times (``probe``, ``choose-one``), the bar's total grows by each call's
    items. Every other attribute, set or read, is the judge's."""

    def __init__(self, judge: Any, bar: Any, task: Any) -> None:
        object.__setattr__(self, "_judge", judge)
        object.__setattr__(self, "_bar", bar)
        object.__setattr__(self, "_task", task)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._judge, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._judge, name, value)  # whole_lists sets the judge's batch_size

    def score_many(self, samples: Iterable[Any]) -> Iterator[Any]:
        """The judge's ``score_many``, counted."""
        return self._counted(self._judge.score_many, samples)

    def compare_many(self, pairs: Iterable[Any], **kwargs: Any) -> Iterator[Any]:
        """The judge's ``compare_many``, counted."""
        return self._counted(self._judge.compare_many, pairs, **kwargs)

    def _counted(self, call: Callable[..., Iterable[Any]], items: Iterable[Any], **kwargs: Any) -> Iterator[Any]:
        items = list(items)
        total = next(t.total for t in self._bar.tasks if t.id == self._task) or 0
        self._bar.update(self._task, total=total + len(items))
        for result in call(items, **kwargs):
            self._bar.advance(self._task)
            yield result


def counting(judges: Sequence[Any], label: str, quiet: bool) -> Any:
    """A context giving ``judges`` as :class:`CountingJudge` s sharing one progress bar on stderr
    labelled ``label`` (the judges themselves with ``quiet``)."""
    from contextlib import contextmanager

    @contextmanager
    def run() -> Iterator[list[Any]]:
        if quiet:
            yield list(judges)
            return
        with progress_bar() as bar:
            task = bar.add_task(label, total=0)
            yield [CountingJudge(j, bar, task) for j in judges]

    return run()


def method_with_template(method_name: str, template: str | None, template_file: str | None) -> Any:
    """The method ``method_name``, run with ``--template`` or ``--template-file`` when given."""
    from capjudge.prompts.registry import get_method, register_template

    method = get_method(method_name)
    if template_file:
        name = f"user:{Path(template_file).name}"
        register_template(name, path=template_file, overwrite=True)
        method = method.with_options(name=f"{method.name}+{Path(template_file).stem}", template=name)
    elif template:
        method = method.with_options(name=f"{method.name}+{template}", template=template)
    return method


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--backend-opt`` pairs plus the API flags (``--concurrency`` ...), checked for the kind."""
    options = parse_options(args.backend_opt)
    if is_panel(args):  # each judge's own: capjudge.cli.panel.member_options
        return options
    if getattr(args, "judge", None):
        from capjudge.backends.presets import UnknownPresetError, preset_options

        try:
            options = {**preset_options(args.backend.split(":", 1)[0], args.judge), **options}
        except (UnknownPresetError, ValueError) as exc:
            raise UsageError(f"--judge {args.judge}: {exc}") from None
    api_flags = {k: getattr(args, k, None) for k in ("concurrency", "max_cost", "prices", "detail")}
    api_flags = {k: v for k, v in api_flags.items() if v is not None}
    if api_flags:
        from capjudge.backends import kinds

        if not kinds.of_spec(args.backend).api:
            raise UsageError(f"{', '.join('--' + k.replace('_', '-') for k in api_flags)} apply to API backends only")
        options.update(api_flags)
    thinking = thinking_options(args, options)
    if thinking:
        from capjudge.backends import kinds

        entry = kinds.of_spec(args.backend)
        if entry.api and not entry.url_target:
            raise UsageError(f"--thinking / --thinking-budget are for open thinking models (hf:, llamacpp:, openai-compatible:); {entry.name} reasoning models take --backend-opt reasoning_effort=low|medium|high and reasoning_budget=N")
        options.update(thinking)
    return options


def preflight(
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
    an existing report of a flag in ``report_kinds`` one of that kind (:data:`capjudge.run.outguard.KINDS`).
    Raises a usage error naming the item."""
    from capjudge.run.preflight import (
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
    if getattr(args, "remote", None) is None:  # with --remote the server checked its backend
        if hasattr(args, "backends") and panel_args(args) is not None:  # a panel: every judge checked
            check_panel(args, parse_options(args.backend_opt))
        else:
            check_backend(args.backend, backend_options(args))
    # Last, so that a mistake in the options is named first: what an existing output holds.
    for flag, path in [("--out", out), *reports]:
        kind = out_kind if flag == "--out" else (report_kinds or {}).get(flag, "html" if flag == "--html" else None)
        if path is not None and kind is not None:
            check_output(path, what=flag, kind=kind)
    if out is not None:
        hold_out_lock(args, out)


def hold_out_lock(args: argparse.Namespace, out: str) -> None:
    """Lock ``out`` against other runs until the command returns (:mod:`capjudge.run.outlock`; held by
    :func:`capjudge.cli.app.run`); another run holding it is a usage error naming its pid."""
    held = getattr(args, "held", None)
    if held is not None:
        from capjudge.run.outlock import out_lock

        held.enter_context(out_lock(out))


def judge_kwargs(args: argparse.Namespace) -> dict[str, Any]:
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
        "backend_options": backend_options(args),
        "method_options": parse_options(getattr(args, "method_option", None), "--method-option"),
        **image_options(args),
    }


def image_options(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`~capjudge.judges.judge.Judge`'s image keyword arguments: ``allow_outside_images``
    (``--allow-outside-images``) and ``image_limits`` (an :class:`~capjudge.data.images.ImageLimits`
    of ``--max-image-pixels``, ``--oversize-images``, ``--max-image-bytes``, ``--image-timeout``)."""
    from capjudge.data.images import ImageLimits

    fields = {"max_image_pixels": "max_pixels", "oversize_images": "oversize", "max_image_bytes": "max_download_bytes", "image_timeout": "download_timeout"}
    options: dict[str, Any] = {}
    if getattr(args, "allow_outside_images", None) is not None:
        options["allow_outside_images"] = args.allow_outside_images
    limits = {field: getattr(args, flag) for flag, field in fields.items() if getattr(args, flag, None) is not None}
    if limits:
        try:
            options["image_limits"] = ImageLimits(**limits)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return options


def count(text: str) -> int:
    """A whole number >= 0 for argparse (``--max-image-pixels 0`` turns the limit off)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def positive(text: str) -> int:
    """A whole number >= 1 for argparse."""
    value = count(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A positive number of seconds for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def nonnegative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more, for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {text!r}")
    return value


def add_image_options(p: argparse.ArgumentParser) -> None:
    """The options that bound what an image may cost and where it may come from."""
    from capjudge.data.images import DEFAULT_LIMITS

    g = p.add_argument_group("images")
    g.add_argument("--allow-outside-images", action="store_true", default=None, help="with --images DIR: also read image paths that leave DIR (../, absolute paths, symlinks pointing outside); without it such a row is an error record")
    g.add_argument("--max-image-pixels", type=count, default=None, metavar="N", help=f"decoded pixel budget of one image (default {DEFAULT_LIMITS.max_pixels:,}; 0: none); larger images are downscaled at load, see --oversize-images")
    g.add_argument("--oversize-images", choices=("downscale", "refuse"), default=None, help="an image above --max-image-pixels is downscaled to fit (default; the record's details say from what size) or refused (an error record)")
    g.add_argument("--max-image-bytes", type=positive, default=None, metavar="B", help=f"size cap of an http(s) image a local backend downloads (default {DEFAULT_LIMITS.max_download_bytes:,})")
    g.add_argument("--image-timeout", type=seconds, default=None, metavar="S", help=f"deadline for downloading one http(s) image, the whole download (default {DEFAULT_LIMITS.download_timeout:g} s)")


def make_judge(args: argparse.Namespace, method: Any) -> Any:
    """The :class:`~capjudge.judges.judge.Judge` of the command line (bad option values: usage errors)."""
    from capjudge.backends.registry import UnknownBackendError
    from capjudge.judges.judge import Judge
    from capjudge.prompts.registry import TemplateError, UnknownMethodError

    if is_panel(args):
        return make_panel(args, method, judge_kwargs(args), parse_options(args.backend_opt))
    try:
        judge = Judge(method, args.backend, **judge_kwargs(args))
    except ValueError as exc:
        # Bad option values (a concurrency of 0, an unknown price, ...) are usage errors; the
        # subclasses that name an unknown method or backend are reported as they are.
        if isinstance(exc, (UnknownMethodError, UnknownBackendError, TemplateError)):
            raise
        raise UsageError(f"cannot build the judge: {exc}") from exc
    return judge


def usage_rows(judge: Any) -> list[tuple[str, str]]:
    """API usage and cost of the run, when the backend counts them."""
    if getattr(judge, "members", None) is not None:  # a panel: each judge's usage
        return panel_usage_rows(judge, usage_rows)
    usage = getattr(judge.backend, "usage", None)
    if usage is None or not hasattr(usage, "summary"):
        return []
    u = usage.summary()
    batch = u.get("batch_calls") or 0
    rows = [
        ("API calls", str(u["calls"])),
        ("tokens in/out", f"{u['prompt_tokens']}/{u['completion_tokens']}"),
    ]
    if u.get("reasoning_tokens"):  # hidden reasoning: part of the output tokens above, billed as output
        rows.append(("  of which reasoning", str(u["reasoning_tokens"])))
    rows.append(("cost (USD)", f"{u['cost_usd']:.4f}"))
    if batch:  # batch lines are billed at batch prices (usage.BATCH_DISCOUNT of the standard ones)
        rows.append(("  calls at batch prices", f"{batch} of {u['calls']}"))
    rows.append(("not sent (budget)", str(u["budget_refused"])))
    return rows


def add_common(p: argparse.ArgumentParser, *, method_default: str | None = None, panel: bool = False, remote: bool = False, backend_required: bool = True) -> None:
    """The options every judging command takes: backend, method, images, templates, cache, API, images;
    with ``panel``, ``--backend`` repeatable and the ``--panel*`` options (:mod:`capjudge.cli.panel`;
    the panel's checks then ask for a backend). ``remote``: also ``--remote URL`` (then ``--backend``
    and ``--method`` are optional, and the command resolves the method with
    :func:`capjudge.cli.serve.command_method`). ``backend_required=False``: the command checks
    ``--backend`` itself (``arena --caparena-results`` needs none)."""
    backend_help = (
        "backend spec, e.g. hf:llava-hf/llava-1.5-7b-hf, llamacpp:m.gguf?mmproj=p.gguf, openai:gpt-4o, "
        "scripted:TEXT[?rules=FILE] (no model; FILE: [pattern, answer] regex rules, trusted like code: a pattern "
        "such as (a+)+$ can run for minutes on a caption)"
    )
    if panel:  # score, compare, arena: a method whose paper hard-wires a judge runs on it by default
        add_backend_option(p, backend_help + "; without it, a method with a paper judge (`capjudge methods`: judge) runs on that judge")
    else:
        p.add_argument("--backend", required=backend_required and not remote, help=backend_help)
    if method_default is None:
        p.add_argument("--method", required=not remote, help="judging method (see `capjudge methods`)")
    else:
        p.add_argument("--method", default=None if remote else method_default, help=f"judging method (default: {method_default})")
    if remote:
        p.add_argument("--remote", default=None, metavar="URL", help="judge through `capjudge serve` at URL (http://HOST:PORT; token from $CAPJUDGE_TOKEN): the server's method and backend, the records a local run writes (docs/serve.md)")
        p.add_argument("--remote-wait", type=nonnegative_seconds, default=30.0, metavar="SECONDS", help="with --remote: how long to wait for a server still starting to answer (default 30; 0: ask once)")
    p.add_argument("--images", default=None, help="folder that relative image paths are resolved against; paths that leave it are refused (see --allow-outside-images)")
    p.add_argument("--template", default=None, help="run the method with another registered template")
    p.add_argument("--template-file", default=None, help="run the method with your own Jinja template file (sandboxed)")
    p.add_argument("--judge", default=None, metavar="PRESET", help="judge preset of a local model: how its family is prompted (see `capjudge judges`); hf: models choose it from their config when omitted; explicit --backend-opt settings win")
    p.add_argument("--system", default="auto", help="system turn: auto (the judge preset's: the paper's sentence for LLaVA-1.5, the model's own default otherwise), none, llava_v1, or your own sentence")
    p.add_argument("--max-new-tokens", type=int, default=None, help="override the method's answer length (tokens)")
    p.add_argument("--method-option", action="append", metavar="KEY=VALUE", help="method option, repeatable: second_decimal=official|printed (FLEUR smoothing), no_number=error|zero (VisCE2 *-code), score=plain|expected (the probability-weighted score), vqa_dir=DIR (capmas-coverage), annotations=DIR (capability), temperature=T")
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
    add_thinking_options(p)
    add_image_options(p)


def add_thinking_options(p: argparse.ArgumentParser) -> None:
    """``--thinking on|off|auto`` and ``--thinking-budget N``: open thinking models on hf:,
    llamacpp: and openai-compatible: (backend options ``thinking`` / ``thinking_budget``)."""
    g = p.add_argument_group("thinking models (hf, llamacpp, openai-compatible)")
    g.add_argument("--thinking", choices=("on", "off", "auto"), default=None, help="turn a hybrid model's thinking on or off through its chat template (enable_thinking; chat_template_kwargs on vLLM); auto (default): the template's own default")
    g.add_argument("--thinking-budget", type=int, default=None, metavar="N", help="tokens added to the method's answer length for the reasoning (default 4096 when the model thinks)")


def thinking_options(args: argparse.Namespace, options: Mapping[str, Any]) -> dict[str, Any]:
    """The backend options of ``--thinking`` / ``--thinking-budget``; the same option given both
    ways with different values is a usage error."""
    flags = {"thinking": getattr(args, "thinking", None), "thinking_budget": getattr(args, "thinking_budget", None)}
    out: dict[str, Any] = {}
    for key, value in flags.items():
        if value is None:
            continue
        if key in options and str(options[key]).strip().lower() != str(value).lower():
            raise UsageError(f"--{key.replace('_', '-')} {value} and --backend-opt {key}={options[key]} disagree: give one of them")
        out[key] = value
    return out


def add_resume(p: argparse.ArgumentParser) -> None:
    """``--overwrite`` and ``--retry-errors``: what a run does with the records already in ``--out``."""
    p.add_argument("--overwrite", action="store_true", help="start --out over instead of keeping the records already in it")
    p.add_argument("--retry-errors", action="store_true", help="ask again for the rows whose record in --out is an error, bypassing cached answers")


# ---------------------------------------------------------------------------------------- score
def summary_table(title: str, rows: list[tuple[str, str]]) -> Any:
    """The run's summary table (values scrubbed of secrets)."""
    from rich.table import Table

    from capjudge.cli.terminal import visible
    from capjudge.core.redact import scrub

    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(visible(k, newlines=False), visible(scrub(v), newlines=False))  # printed by any console
    return table


def bad_row_result(row: Any, method: Any, judge: Any) -> Any:
    """The error record of an input row that could not be read (it names the line and the cause;
    its scale is the method's, as every other record of the run)."""
    from capjudge.data.types import ScoreResult

    return ScoreResult(image="", caption="", score=None, method=method.name, backend=judge.backend_spec, model=judge.backend.model, template_hash=method.template_hash, raw=row.raw or None, status="error", error=row.error, id=row.id or str(row.line), scale=method.scale)


def finish(tally: Any) -> int:
    """Print the run's loud warnings, its failed samples' most common causes and the
    backend-failure message (on stderr, also with --quiet), and choose the exit code: 3 when
    samples failed for backend reasons (a re-run resumes: first), else 6 when no sample succeeded,
    else 0."""
    from capjudge.cli.terminal import visible
    from capjudge.core.redact import scrub

    for warning in tally.warnings():
        print(f"capjudge: {visible(warning)}", file=sys.stderr)
    failures = tally.failure_message()
    if failures is not None:
        print(f"capjudge: {visible(scrub(failures))}", file=sys.stderr)
    message = tally.backend_failure_message()
    if message is not None:
        print(f"capjudge: {visible(scrub(message))}", file=sys.stderr)
        return EXIT_BACKEND
    if tally.none_ok:
        print(f"capjudge: no sample succeeded (exit {EXIT_ALL_FAILED}): fix the cause above and run the command again", file=sys.stderr)
        return EXIT_ALL_FAILED
    return EXIT_OK


def resume_note(con: Any, plan: Any) -> None:
    """What the summary says about the records kept from ``--out``, errors and invalid ones."""
    if plan.kept:
        con.print(f"{len(plan.kept)} record(s) kept from the results file, not asked again.")
    if plan.kept_errors:
        con.print(f"[yellow]{plan.kept_errors} of them are errors; --retry-errors asks them again, bypassing cached answers.[/yellow]")
    if getattr(plan, "kept_budget", 0):
        con.print(
            f"[yellow]{plan.kept_budget} of those errors did not fit the token budget (the prompt over the model's context, or the "
            "reasoning cut off): a re-run with another --thinking-budget or --max-new-tokens (or another backend or method option) "
            "asks them again.[/yellow]"
        )
    if getattr(plan, "changed", 0):
        con.print(f"{plan.changed} error record(s) that did not fit the token budget were made with other options: asked again with these.")
    invalid = getattr(plan, "invalid", None)
    if invalid:
        from rich.markup import escape

        first = min(invalid)
        con.print(
            f"[yellow]{len(invalid)} record(s) said ok without a valid score or verdict (written by an older capjudge): "
            f"asked again, bypassing cached answers (first: row {first + 1}: {escape(invalid[first])}).[/yellow]"
        )
