"""CLI subcommand ``parity``: the same samples through two backends, and how far they part.

``register(subparsers)`` adds it to the ``capjudge`` parser (standard library only at import).
Exit codes: 0 compared (within ``--tolerance`` when one is given), 1 a backend could not start,
2 usage error (found before any model loads), 5 outside ``--tolerance`` (a score difference above
it, a verdict flip or a prompt difference: the reasons, the tolerance and the largest difference go
to stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

from capjudge.cli.common import add_image_options, image_options, parse_options
from capjudge.core.errors import EXIT_DIFFER, UsageError

EXIT_OUTSIDE_TOLERANCE = EXIT_DIFFER  # 4 is --batch "submitted, still running"



# The `capjudge parity` parser's help texts.
PARITY_PARSER: dict[str, Any] = dict(
    help="judge the same samples on two backends and compare: score differences, rank agreement, verdict flips, first differing prompt token",
    description=(
        "Runs one method on two backends (e.g. hf:DIR and openai-compatible:http://127.0.0.1:8000/v1#NAME, or hf:DIR "
        "and llamacpp:M.gguf?mmproj=P.gguf) with the same system turn, and reports the largest and mean absolute score "
        "difference, Kendall tau-b and Spearman between the two score lists, verdict flips on --pairs, and where both "
        "backends can show their prompt tokens (HF, vLLM's /tokenize) the first token where the prompts part. "
        "See docs/backends.md, 'Backend parity'."
    ),
    epilog="exit codes: 0 compared (within --tolerance if given), 1 a backend could not start, 2 usage error, 5 outside --tolerance, 130 interrupted",
)


def register(subparsers: Any) -> None:
    """Add ``parity`` to an argparse subparsers object."""
    p = subparsers.add_parser("parity", **PARITY_PARSER)
    p.add_argument("--a", required=True, metavar="SPEC", help="first backend (the reference), e.g. hf:llava-hf/llava-1.5-7b-hf")
    p.add_argument("--b", required=True, metavar="SPEC", help="second backend, e.g. openai-compatible:http://127.0.0.1:8000/v1#llava")
    p.add_argument("--a-opt", action="append", metavar="KEY=VALUE", help="option of backend a, repeatable (dtype=float32, pad_square=false, ...)")
    p.add_argument("--b-opt", action="append", metavar="KEY=VALUE", help="option of backend b, repeatable (add_special_tokens=true, ...)")
    p.add_argument("--input", required=True, metavar="FILE", help="samples (JSONL/CSV: image, caption[, references, id])")
    p.add_argument("--method", default="fleur", help="one-step scoring method (default fleur)")
    p.add_argument("--pairs", default=None, metavar="FILE", help="caption pairs (image, caption_a, caption_b[, id]) to compare verdicts too")
    p.add_argument("--pair-method", default="gpt4v-pairwise", help="pairwise method for --pairs (default gpt4v-pairwise)")
    p.add_argument("--images", default=None, help="folder that relative image paths are resolved against")
    p.add_argument("--system", default="method", help="system turn on both backends: method (the method's own, default), none, or a sentence")
    p.add_argument("--limit", type=int, default=None, help="only the first N samples (and pairs)")
    p.add_argument("--cache-dir", default=None, help="response cache (default: none, both backends answer afresh)")
    p.add_argument("--prompt-checks", type=int, default=5, metavar="N", help="compare the prompt tokens of the first N samples (default 5)")
    p.add_argument("--tolerance", type=float, default=None, metavar="T", help=f"exit {EXIT_OUTSIDE_TOLERANCE} when a score differs by more than T, a verdict flips or the prompts differ")
    p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or one JSON object on the last line")
    add_image_options(p)
    p.set_defaults(func=cmd_parity)


def _rows(path: str, reader: Any, limit: int | None) -> tuple[list[dict[str, Any]], list[str]]:
    from capjudge.data.io import BadRow

    rows, bad = [], []
    for row in reader(path):
        if isinstance(row, BadRow):
            bad.append(f"{path} line {row.line}: {row.error}")
        else:
            rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows, bad


def cmd_parity(args: argparse.Namespace) -> int:
    """``capjudge parity``: judge on both backends, print the comparison."""
    from capjudge.data.io import read_pairs, read_samples
    from capjudge.run.preflight import check_backend, check_images, check_input

    check_input(args.input, "--input")
    if args.pairs:
        check_input(args.pairs, "--pairs")
    check_images(args.images)
    opts_a, opts_b = parse_options(args.a_opt, "--a-opt"), parse_options(args.b_opt, "--b-opt")
    check_backend(args.a, opts_a)
    check_backend(args.b, opts_b)
    from capjudge.prompts.registry import get_method

    method = get_method(args.method)  # an unknown name is a usage error (exit 2)
    pair_method = get_method(args.pair_method)
    if method.kind != "score":
        raise UsageError(f"--method {method.name} is not a scoring method; use --pairs with --pair-method for pairwise ones")
    if args.pairs and not pair_method.pairwise:
        raise UsageError(f"--pair-method {pair_method.name} is not a pairwise method")
    samples, bad = _rows(args.input, read_samples, args.limit)
    pairs, bad_pairs = _rows(args.pairs, read_pairs, args.limit) if args.pairs else (None, [])
    if not samples:
        raise UsageError(f"{args.input} holds no readable samples" + (f" ({bad[0]})" if bad else ""))
    system = None if args.system == "none" else args.system

    from capjudge.parity.compare import run_parity

    # A backend that cannot start raises BackendError: the CLI exits 1.
    report = run_parity(
        samples, args.a, args.b, method=method.name, pairs=pairs, pair_method=pair_method.name, system=system,
        images_root=args.images, cache_dir=args.cache_dir, backend_options_a=opts_a, backend_options_b=opts_b,
        prompt_checks=args.prompt_checks, image_options=image_options(args),
    )  # fmt: skip
    report.notes.extend(f"unreadable row skipped: {b}" for b in bad + bad_pairs)
    labels = backend_labels(report.backend_a, report.backend_b, opts_a, opts_b)
    failures = report.tolerance_failures(args.tolerance) if args.tolerance is not None else []
    if args.format == "json":
        out = report.to_dict()
        if args.tolerance is not None:
            out.update(tolerance=args.tolerance, outside_tolerance=failures)
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print(report, labels)
    if args.tolerance is not None:
        _print_tolerance(args.tolerance, report.max_abs_diff, failures, labels)
    if failures:
        return EXIT_OUTSIDE_TOLERANCE
    return 0


def backend_labels(spec_a: str, spec_b: str, opts_a: dict[str, Any], opts_b: dict[str, Any]) -> tuple[str, str]:
    """How the report names the two backends: each spec with the options in which they differ
    (secret-looking values masked), so that two rows of one spec can be told apart."""
    from capjudge.core.redact import MASK, scrub

    differing = sorted(k for k in set(opts_a) | set(opts_b) if opts_a.get(k) != opts_b.get(k))

    def label(spec: str, opts: dict[str, Any]) -> str:
        shown = [f"{k}={MASK if _SECRET_OPTION.search(k) else opts[k]}" if k in opts else f"{k} unset" for k in differing]
        return scrub(spec + (f" [{', '.join(shown)}]" if shown else ""))

    a, b = label(spec_a, opts_a), label(spec_b, opts_b)
    if a == b:  # same spec and options: say so rather than print one row twice
        a, b = f"{a} (same as b)", f"{b} (same as a)"
    return a, b


_SECRET_OPTION = re.compile(r"key|token|secret|password|auth", re.IGNORECASE)


def _print_tolerance(tolerance: float, largest: float | None, failures: list[str], labels: tuple[str, str]) -> None:
    """The verdict on ``--tolerance`` (stderr: stdout's last line stays the JSON object)."""
    if not failures:
        print(f"capjudge parity: within --tolerance {tolerance:g} (largest score difference {_num(largest, '{:.4g}')})", file=sys.stderr)
        return
    print(
        f"capjudge parity: outside --tolerance {tolerance:g} (exit {EXIT_OUTSIDE_TOLERANCE}) between a = {labels[0]} and b = {labels[1]}: "
        + "; ".join(failures),
        file=sys.stderr,
    )


def _num(v: Any, fmt: str = "{:.3g}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v)


def _print(r: Any, labels: tuple[str, str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from capjudge.cli.terminal import make_console

    t = Table(title=f"parity: {r.method}", show_header=False)
    t.add_column("what")
    t.add_column("value")
    rows = [
        ("backend a", escape(labels[0])),
        ("backend b", escape(labels[1])),
        ("samples scored on both", f"{r.n_both} of {r.n} (errors: a {r.errors_a}, b {r.errors_b})"),
        ("smoothed scores", f"a {r.smoothed_a}, b {r.smoothed_b}"),
        ("max |score a - score b|", _num(r.max_abs_diff)),
        ("mean |score a - score b|", _num(r.mean_abs_diff)),
        ("same answer text", _num(r.same_answer, "{:.1%}")),
        ("Kendall tau-b / Spearman", f"{_num(r.kendall_tau_b, '{:.4f}')} / {_num(r.spearman, '{:.4f}')}"),
    ]
    if r.n_pairs:
        rows.append(("verdict flips", f"{r.verdict_flips} of {r.n_pairs_both} pairs"))
    if r.prompt_checked:
        rows.append(("prompts differ", f"{r.prompt_differs} of {r.prompt_checked} checked"))
    else:
        rows.append(("prompts", "not compared (a backend cannot show its prompt tokens)"))
    for k, v in rows:
        t.add_row(k, v)
    con = make_console()
    con.print(t)
    d = r.first_token_diff
    if d is not None:
        con.print(f"first differing prompt token at {d.index}: a {d.a_token!r} vs b {d.b_token!r} (lengths {d.a_length} / {d.b_length})")
        con.print(f"  a: {' '.join(d.a_context)}\n  b: {' '.join(d.b_context)}", markup=False)
        if d.hint:
            con.print(f"  {d.hint}", markup=False)
    for note in r.notes:
        con.print(f"note: {note}", markup=False)
