"""CLI subcommands ``probe`` and ``choose-one``.

``register(subparsers)`` adds them to the ``capjudge`` parser; each sets ``func`` to a handler ``(args) -> int``: 0 when the run completed (also with
per-caption errors, which are counted in the report), 2 for a usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capjudge.cli.aliases import add_alias, add_format
from capjudge.cli.common import (
    add_common,
    console,
    counting,
    image_options,
    make_judge,
    method_with_template,
    preflight,
)
from capjudge.cli.html import add_html_option
from capjudge.cli.terminal import visible
from capjudge.core.errors import EXIT_OK, UsageError

# Only light modules at the top (perturbations is the standard library only): building the parser
# (`capjudge --help`) must not import the judge, numpy or matplotlib; the handlers import them.
from capjudge.probes.perturbations import (
    DEFAULT_FLAW_KINDS,
    KINDS,
    UnknownPerturbationError,
    resolve_kinds,
)

if TYPE_CHECKING:
    from capjudge.probes.choose_one import ChoiceGroup



# The `capjudge probe` parser's help texts.
PROBE_PARSER: dict[str, Any] = dict(
    help="robustness probe: repetition, incoherence, hard negatives, injected instructions",
    description=(
        "Judge every caption and its perturbations and report, per perturbation kind, how often the judge "
        f"prefers the original. Kinds: {', '.join(KINDS)} (or the families fluency, hard-negative, injection)."
    ),
)


# The `capjudge choose-one` parser's help texts.
CHOOSE_ONE_PARSER: dict[str, Any] = dict(
    help="choose-one-of-N (the Cobra-effect paper Flaws Caption): is a true caption ranked first among flawed ones?",
    description=(
        "Per image, rank its true captions among flawed ones and report how often a true caption comes first. "
        "--method listwise asks one prompt per image (the Cobra-effect paper, Fig. 4); a scoring method scores each caption alone."
    ),
)


# What probe and choose-one print: the report rendered as tables, its Markdown text, or its JSON.
FORMATS = ("table", "markdown", "json")
FORMAT_HELP = "what is printed: table (default: the report's tables on a terminal, its Markdown text when piped), markdown, or json (one line, what --out-json writes)"


def register(subparsers: Any) -> None:
    """Add ``probe`` and ``choose-one`` to an argparse subparsers object."""
    p = subparsers.add_parser("probe", **PROBE_PARSER)
    add_common(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", metavar="FILE", help="JSONL or CSV with image, caption[, references, id]: the original (correct) captions")
    add_alias(src, "--captions", "--input", dest="input", metavar="FILE")
    p.add_argument("--kinds", default="all", help="comma-separated perturbation kinds or families (default: all)")
    p.add_argument("--seed", type=int, default=0, help="perturbation seed (default 0)")
    p.add_argument("--pairwise", action="store_true", help="also compare original vs perturbed by dual-sided pairwise comparison (the GPT-4V evaluator paper)")
    p.add_argument("--canary", default="xyzzy", help="the word inject_text asks the judge to reply with (default xyzzy)")
    p.add_argument("--target", default=None, help="the score inject_score asks for (default: top of the method's scale)")
    p.add_argument("--compare-method", default=None, metavar="METHOD", help="also probe this method on the same backend (e.g. fleur-hardened) and compare injection obedience and clean grading")
    p.add_argument("--out", default=None, metavar="RESULTS.jsonl", help="write every score record here (details.probe says which caption and kind)")
    p.add_argument("--out-json", default=None, metavar="F", help="write the report as JSON")
    p.add_argument("--markdown", default=None, metavar="F", help="write the report as a Markdown table")
    p.add_argument("--plot", default=None, metavar="F.png", help="write a bar chart")
    add_html_option(p)
    add_format(p, FORMATS, help=FORMAT_HELP)
    p.set_defaults(func=cmd_probe)

    p = subparsers.add_parser("choose-one", **CHOOSE_ONE_PARSER)
    add_common(p, method_default="listwise")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", metavar="FILE", help="JSONL/CSV rows of groups (image, true (list), flawed (list)[, id]), or of captions (image, caption[, references, id]) from which the flawed ones are made with --flaw-kinds")
    add_alias(src, "--captions", "--input", dest="input", metavar="FILE")
    p.add_argument("--n-flawed", type=int, default=5, help="flawed captions per image when --input holds captions (default 5, as the Cobra-effect paper)")
    p.add_argument("--n-true", type=int, default=5, help="at most this many true captions per image (default 5)")
    p.add_argument("--flaw-kinds", default=",".join(DEFAULT_FLAW_KINDS), help=f"perturbations that make the flawed captions (default {','.join(DEFAULT_FLAW_KINDS)})")
    p.add_argument("--no-references", action="store_true", help="when --input holds captions: do not count the references as true captions")
    p.add_argument("--seed", type=int, default=0, help="seed for the flaws and the candidate order")
    p.add_argument("--out-json", default=None, metavar="F", help="write the report as JSON")
    p.add_argument("--markdown", default=None, metavar="F", help="write the report as Markdown")
    add_format(p, FORMATS, help=FORMAT_HELP)
    p.set_defaults(func=cmd_choose_one)


def _read_captions(path: str, limit: int | None) -> tuple[list[dict[str, Any]], int]:
    from capjudge.data.io import BadRow, read_samples

    rows = list(read_samples(path))
    if limit is not None:
        rows = rows[:limit]
    good = [r for r in rows if not isinstance(r, BadRow)]
    return good, len(rows) - len(good)


def _holds_groups(path: str) -> bool:
    """Whether choose-one's ``--input`` holds groups (``true`` / ``flawed`` lists) rather than
    captions to make flawed ones from: read from its first readable row (a CSV's header)."""
    from capjudge.data.io import read_rows

    for row in read_rows(path):
        if isinstance(row, dict):
            return "true" in row or "flawed" in row
    return False


def _print_report(fmt: str, text: str, data: dict[str, Any]) -> None:
    """Print a probe report as ``--format`` says: ``table`` renders the Markdown's tables on a
    terminal (piped, it is the Markdown text, as before), ``markdown`` the text, ``json`` one line."""
    import json

    if fmt == "json":
        print(json.dumps(data, ensure_ascii=False, default=float))
        return
    out = console(stderr=False)
    if fmt == "table" and out.is_terminal:
        from rich.markdown import Markdown

        out.print(Markdown(text))
    else:
        print(visible(text))


def _kinds(text: str) -> list[str]:
    try:
        return resolve_kinds(text)
    except UnknownPerturbationError as exc:
        raise UsageError(str(exc)) from None


def _write_text(path: str, text: str) -> None:
    """Write a Markdown report, marked as capjudge's so that a re-run may replace it."""
    from capjudge.run.outguard import MARKDOWN_MARKER

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(MARKDOWN_MARKER + "\n" + text, encoding="utf-8")


def _second_plot(plot: str, method: str) -> Path:
    """Where ``--plot`` puts the chart of ``--compare-method``'s probe, beside the first."""
    p = Path(plot)
    return p.with_name(f"{p.stem}-{method}{p.suffix or '.png'}")


def cmd_probe(args: argparse.Namespace) -> int:
    """``capjudge probe``."""
    from capjudge.data.io import ResultWriter
    from capjudge.judges.judge import Judge
    from capjudge.probes.report import hardening_markdown, probe_markdown, probe_plot, write_json
    from capjudge.probes.runner import compare_hardening, run_probe
    from capjudge.prompts.registry import get_method

    kinds = _kinds(args.kinds)
    method = method_with_template(args.method, args.template, args.template_file)
    other = get_method(args.compare_method) if args.compare_method else None
    second_plot = str(_second_plot(args.plot, other.name)) if other is not None and args.plot else None
    preflight(args, inputs=[(args.input, ("image", "caption"))], out=args.out, reports=[("--out-json", args.out_json), ("--markdown", args.markdown), ("--plot", args.plot), ("--plot", second_plot), ("--html", args.html)], out_kind="score",
               report_kinds={"--out-json": "probe-json", "--markdown": "markdown", "--plot": "plot"})  # fmt: skip
    samples, bad = _read_captions(args.input, args.limit)
    if not samples:
        raise UsageError(f"{args.input}: no usable caption rows")
    judge = make_judge(args, method)
    writer = ResultWriter(args.out) if args.out else None
    con = console()
    try:
        if not args.quiet:
            con.print(f"probing {method.name} on {judge.backend_spec}: {len(samples)} captions x {len(kinds)} kinds")
        with counting([judge], f"probe {method.name} on {judge.backend_spec}", args.quiet) as (counted,):
            report = run_probe(counted, samples, kinds=kinds, seed=args.seed, pairwise=args.pairwise, canary=args.canary, target=args.target, writer=writer)
        text = probe_markdown(report)
        data = report.to_dict()
        data["bad_rows"] = bad
        second = cmp = None
        if other is not None:
            judge2 = Judge(other, judge.backend, system="auto" if args.system == "auto" else judge.system, images_root=args.images, batch_size=args.batch_size, **image_options(args))
            with counting([judge2], f"probe {other.name} on {judge.backend_spec}", args.quiet) as (counted,):
                second = run_probe(counted, samples, kinds=kinds, seed=args.seed, pairwise=args.pairwise, canary=args.canary, target=args.target, writer=writer)
            cmp = compare_hardening(report, second)
            text += "\n" + probe_markdown(second) + "\n" + hardening_markdown(cmp)
            data["compared_with"] = {"report": second.to_dict(), "comparison": cmp.to_dict()}
    finally:
        if writer is not None:
            writer.close()
        judge.close()
    if args.markdown:
        _write_text(args.markdown, text)
    if args.out_json:
        write_json(data, args.out_json)
    if args.plot:
        probe_plot(report, args.plot)
        if second is not None:
            probe_plot(second, _second_plot(args.plot, second.method))
    if args.html:
        from capjudge.cli.html import command_line, emit
        from capjudge.probes.page import probe_page

        reports = [report] if second is None else [report, second]
        emit(args.html, lambda: probe_page(reports, comparison=cmp, images=args.images, command=command_line()), quiet=args.quiet)
    if not args.quiet:
        _print_report(args.format, text, data)
        if bad:
            con.print(f"[yellow]{bad} input row(s) could not be read and were skipped.[/yellow]")
    return EXIT_OK


def cmd_choose_one(args: argparse.Namespace) -> int:
    """``capjudge choose-one``."""
    from capjudge.data.io import BadRow, read_rows
    from capjudge.probes.choose_one import build_groups, group_from_row, run_choose_one
    from capjudge.probes.report import choose_one_markdown, write_json

    method = method_with_template(args.method, args.template, args.template_file)
    preflight(args, inputs=[(args.input, ("image",))], reports=[("--out-json", args.out_json), ("--markdown", args.markdown)],
               report_kinds={"--out-json": "choose-one-json", "--markdown": "markdown"})  # fmt: skip
    bad: list[str] = []
    groups: list[ChoiceGroup] = []
    if _holds_groups(args.input):
        for n, row in enumerate(read_rows(args.input), start=1):
            g = row.error if isinstance(row, BadRow) else group_from_row(row, n)
            if isinstance(g, str):
                bad.append(g)
            else:
                groups.append(g)
    else:
        samples, nbad = _read_captions(args.input, None)
        bad += [f"{nbad} caption row(s) unreadable"] if nbad else []
        groups = build_groups(samples, n_flawed=args.n_flawed, n_true=args.n_true, kinds=_kinds(args.flaw_kinds), seed=args.seed, use_references=not args.no_references)
    if args.limit is not None:
        groups = groups[: args.limit]
    if not groups:
        raise UsageError("no usable groups" + (f" ({bad[0]})" if bad else ""))
    judge = make_judge(args, method)
    try:
        try:
            with counting([judge], f"choose-one {method.name} on {judge.backend_spec}", args.quiet) as (counted,):
                report = run_choose_one(counted, groups, seed=args.seed)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    finally:
        judge.close()
    text = choose_one_markdown(report)
    if args.markdown:
        _write_text(args.markdown, text)
    if args.out_json:
        data = report.to_dict()
        data["bad_rows"] = bad
        write_json(data, args.out_json)
    if not args.quiet:
        data = report.to_dict()
        data["bad_rows"] = bad
        _print_report(args.format, text, data)
        for b in bad[:5]:
            console().print(f"[yellow]skipped: {b}[/yellow]")
    return EXIT_OK
