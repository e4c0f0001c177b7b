"""CLI subcommand ``arena``: rank captioning models by pairwise battles judged by a VLM.

``register(subparsers)`` adds it to the ``capjudge`` parser; only the standard library is imported
here (``capjudge --help`` stays fast). Exit codes as ``capjudge compare``: 0 done, 1 the backend
could not start, 2 usage error (found before the backend is built: unknown baseline, fewer than
two models, a missing model file, both or neither of ``--baseline`` / ``--round-robin``, a battles
file written by another judge), 3 battles failed for backend reasons (re-run to resume), 130
interrupted. ``--protocol caparena-auto`` and ``--caparena-results`` are
:mod:`capjudge.cli.arena_caparena` (``--caparena-results``: 2 when a battle file could not be scored).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from capjudge.cli import arena_caparena as caparena
from capjudge.cli.common import (
    EXIT_CODES_HELP,
    add_common,
    add_resume,
    finish,
    make_judge,
    method_with_template,
    preflight,
    progress_of,
    summary_table,
    usage_rows,
)
from capjudge.cli.html import add_html_option
from capjudge.cli.paperjudge import use_paper_judge
from capjudge.cli.trust_common import add_human_option, check_human, human_summary
from capjudge.core.errors import UsageError

FORMATS = ("table", "json")



# The `capjudge arena` parser's help texts.
ARENA_PARSER: dict[str, Any] = dict(
    help="rank captioning models by pairwise battles judged by a VLM (Bradley-Terry, Elo, bootstrap CIs)",
    description=(
        "Battles between captioning models on the same images, each judged in both orders (or by single grading), "
        "then a leaderboard: win rate, Bradley-Terry strength with 95% bootstrap CIs over images, Elo, the share of "
        "battles whose two orders disagreed, and a caption-length check. Battles are written to --out as they "
        "complete; a re-run, or a run with one more model, asks only the battles not there yet. See docs/arena.md."
    ),
    epilog=EXIT_CODES_HELP,
    formatter_class=argparse.RawDescriptionHelpFormatter,
)


def register(subparsers: Any) -> None:
    """Add ``arena`` to an argparse subparsers object."""

    p = subparsers.add_parser("arena", **ARENA_PARSER)
    add_common(p, method_default="gpt4v-pairwise", panel=True)
    p.set_defaults(method=None)  # gpt4v-pairwise, or caparena with --protocol caparena-auto
    src = p.add_argument_group("captions (one of)")
    src.add_argument("--models", nargs="+", metavar="NAME=PATH", help="one captions file per model (JSONL/CSV: image, caption[, id])")
    src.add_argument("--input", default=None, metavar="FILE", help="one captions file with a model column (model, image, caption[, id])")
    proto = p.add_argument_group("protocol (one of)")
    proto.add_argument("--baseline", default=None, metavar="NAME", help="every model against this one (CapArena-Auto)")
    proto.add_argument("--round-robin", action="store_true", help="every pair of models")
    p.add_argument("--budget", type=int, default=None, metavar="N", help="at most N battles: whole images, in a seeded order")
    p.add_argument("--seed", type=int, default=0, help="seed of the image sample, who is shown first, the Elo order and the bootstrap (default 0)")
    p.add_argument("--mode", choices=("auto", "pairwise", "grading"), default="auto", help="pairwise: both orders asked, votes combined; grading: higher single score wins (a scoring --method); auto: by method")
    p.add_argument("--out", default=None, metavar="BATTLES.jsonl", help="battle records (written as they complete; a re-run resumes); needed unless --caparena-results")
    add_resume(p)
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default) or one JSON object on the last line")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples of the images for 95%% CIs (default 1000; 0: none)")
    p.add_argument("--ties", choices=("half", "davidson"), default="half", help="Bradley-Terry ties: half a win each (default) or Davidson's tie model")
    p.add_argument("--elo-k", type=float, default=4.0, metavar="K", help="Elo K factor (default 4)")
    p.add_argument("--length-controlled", action="store_true", help="add a length-controlled win rate (alpaca_eval style)")
    add_html_option(p)
    add_human_option(p)
    caparena.add_options(p)
    p.set_defaults(func=cmd_arena)


def _check(args: argparse.Namespace) -> tuple[Any, Any]:
    """Every usage check, before the backend is built: the method and mode, the protocol, the
    files, the captions and the plan. Returns ``(method, input)``."""
    from capjudge.arena.battles import plan_battles
    from capjudge.arena.load import (
        ArenaInputError,
        load_model_column,
        load_model_files,
        parse_model_specs,
    )
    from capjudge.run.preflight import check_input

    if args.protocol == "round-robin":
        args.round_robin = True
    elif args.protocol == "baseline" and args.baseline is None:
        raise UsageError("--protocol baseline needs --baseline NAME")
    if args.method and not (args.backend or args.panel):  # the method's paper judge, when it has one
        use_paper_judge(args, method_with_template(args.method, args.template, args.template_file))
    missing = [flag for flag, v in (("--out BATTLES.jsonl", args.out), ("--backend", args.backend or args.panel)) if not v]
    if missing:
        raise UsageError(f"arena needs {', '.join(missing)}")
    for flag in ("assignments", "caparena_out"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} goes with --protocol caparena-auto")
    args.method = args.method or "gpt4v-pairwise"
    method = method_with_template(args.method, args.template, args.template_file)
    if args.mode == "grading" and method.kind != "score":
        raise UsageError(f"comparison by grading needs a scoring method, not {method.name!r}")
    if (args.baseline is None) == (not args.round_robin):
        raise UsageError("choose one protocol: --baseline NAME (every model against it) or --round-robin (every pair)")
    if (args.models is None) == (args.input is None):
        raise UsageError("give the captions with --models NAME=PATH [NAME=PATH ...] or --input FILE (with a model column), not both")
    if args.limit is not None:
        raise UsageError("arena takes --budget N (at most N battles, whole images), not --limit")
    if args.bootstrap < 0:
        raise UsageError("--bootstrap must be 0 or more")
    check_human(args.human, args.human_alpha)
    try:
        specs = parse_model_specs(args.models) if args.models else []
        if args.models is not None and len(specs) < 2:
            raise ArenaInputError(f"an arena needs two or more models, got {len(specs)}")
        for name, path in specs:
            check_input(path, f"--models {name}: file")
        inputs = [(path, ("image", "caption")) for _, path in specs] if specs else [(args.input, ("model", "image", "caption"))]
        preflight(args, inputs=inputs, out=args.out, reports=[("--html", args.html)], out_kind="pair")
        inp = load_model_files(specs) if specs else load_model_column(args.input)
        plan_battles(inp, baseline=args.baseline, round_robin=args.round_robin, budget=args.budget, seed=args.seed)
    except ArenaInputError as exc:
        raise UsageError(str(exc)) from None
    return method, inp


def cmd_arena(args: argparse.Namespace) -> int:
    """``capjudge arena``: judge the battles, print the leaderboard."""
    if caparena.wanted(args):
        if args.human:
            raise UsageError("--human goes with the battles of --baseline or --round-robin, not with CapArena-Auto")
        return caparena.cmd(args, _print_table, _as_result)
    from capjudge.arena.run import run_arena
    from capjudge.run.outfile import ResumeConflict
    from capjudge.run.summary import RunTally

    method, inp = _check(args)
    mode = None if args.mode == "auto" else args.mode
    t0 = time.perf_counter()
    tally = RunTally(method=method.name)
    with make_judge(args, method) as judge:
        label = f"arena with {method.name}"
        try:
            result = run_arena(
                inp,
                judge=judge,
                baseline=args.baseline,
                round_robin=args.round_robin,
                mode=mode,
                out=args.out,
                budget=args.budget,
                seed=args.seed,
                bootstrap=args.bootstrap,
                ties=args.ties,
                elo_k=args.elo_k,
                length_controlled=args.length_controlled,
                overwrite=args.overwrite,
                retry_errors=args.retry_errors,
                progress=progress_of(label, args.quiet),
            )
        except ResumeConflict as exc:
            raise UsageError(str(exc)) from None
        usage = usage_rows(judge)
    for rec in result.run.asked:
        tally.add(_as_result(rec))
    if args.format == "json":
        data = result.to_dict()
        if args.human:  # the judge's numbers corrected by human labels (docs/trust.md)
            from capjudge.data.types import json_safe

            data["human_labels"] = json_safe(human_summary("arena", args.out, args.human, args.human_alpha, as_json=True))
        print(json.dumps(data, ensure_ascii=False))
    else:
        _print_table(result, usage, time.perf_counter() - t0, args)
        if args.human:
            human_summary("arena", args.out, args.human, args.human_alpha)
    if args.html:
        from capjudge.arena.report import arena_page
        from capjudge.cli.html import command_line, emit

        emit(args.html, lambda: arena_page(result, args.out, images=args.images, command=command_line()), quiet=args.quiet)
    return finish(tally)


def _as_result(rec: dict[str, Any]) -> Any:
    from capjudge.data.types import PairResult

    return PairResult.from_dict(rec)


def _print_table(result: Any, usage: list[tuple[str, str]], seconds: float, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from capjudge.arena.formats import number as _f
    from capjudge.arena.formats import percent as _pct
    from capjudge.cli.terminal import make_console

    con = make_console(highlight=False, width=max(Console().width, 110))  # model names: data, escaped
    d = result.to_dict()
    lc = any("lc_win_rate" in e for e in d["leaderboard"])
    title = f"capjudge arena: {d['protocol']}" + (f" against {d['baseline']}" if d["baseline"] else "") + f", {d['method']} ({d['mode']})"
    t = Table(title=title)
    cols = ["#", "model", "BT [95% CI]", "win rate", "Elo", "battles", "W/L/T", "flips", "words"] + (["LC win rate"] if lc else [])
    for col in cols:
        # Model names in full, whatever the width; numbers never cut (they fold).
        t.add_column(col, justify="left" if col == "model" else "right", overflow="fold", no_wrap=col == "model")
    for e in d["leaderboard"]:
        ci = e["ci"]
        row = [str(e["rank"]), e["model"], f"{_f(e['bt'])} [{_f(ci[0])}, {_f(ci[1])}]", _pct(e["win_rate"]), _f(e["elo"]), str(e["battles"]), f"{e['wins']}/{e['losses']}/{e['ties']}", _pct(e["position_flip_share"]), _f(e["mean_words"], 1)]
        if lc:
            row.append(_pct(e.get("lc_win_rate")))
        t.add_row(*row)
    t.caption = "BT: Bradley-Terry strength on the Elo scale, CI over images; W/L/T: wins / losses / ties; flips: battles whose two orders disagreed; words: mean caption length"
    con.print(t)
    length = d["length"]
    bins = ", ".join(f"{b['words']} words: {_pct(b['longer_win_rate'])} of {b['battles']}" for b in length["bins"] if b["battles"])
    con.print(f"longer caption wins {_pct(length['longer_win_rate'])} of battles with different lengths ({bins or 'none'}); {length['equal_length']} of equal length")
    fit = length.get("length_controlled")
    if fit and fit["gamma"] is not None:
        con.print(f"length-controlled fit: gamma = {fit['gamma']:.3f} per tanh unit of (words_a - words_b) / {fit['sd_words']:.1f}")
    elif fit:
        con.print("length-controlled fit: no estimate, gamma is null (the note below says why)")
    if not args.quiet:
        b = d["battles"]
        rows = [
            ("backend", d["backend"]),
            ("battles planned", str(b["planned"])),
            ("asked now", str(b["asked"])),
            ("kept from --out", str(b["kept"])),
            ("won / tied / failed", f"{b['won']} / {b['ties']} / {b['failed']}"),
            ("images", f"{d['images']['in_arena']} of {d['images']['with_two_models']}"),
            ("position flips", _pct(d["position_flip_share"])),
            ("seconds", f"{seconds:.1f}"),
            ("battles file", str(args.out)),
            *usage,
        ]
        con.print(summary_table("run", rows))
    if d.get("leaderboards_by_judge"):  # a panel: each judge's leaderboard, their rank correlation
        from capjudge.cli.panel import print_arena_panel

        print_arena_panel(con, d)
    for note in d["notes"]:
        con.print(f"[yellow]note:[/yellow] {note}")
