"""``capjudge arena`` for CapArena-Auto: ``--protocol caparena-auto`` (judge the benchmark's
battles) and ``--caparena-results DIR`` (score CapArena battle files, no judge). See docs/arena.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capjudge.cli.terminal import visible
from capjudge.core.errors import UsageError

PROTOCOLS = ("baseline", "round-robin", "caparena-auto")


def add_options(p: argparse.ArgumentParser) -> None:
    """The CapArena-Auto options of ``capjudge arena``."""
    g = p.add_argument_group("CapArena-Auto (see docs/arena.md)")
    g.add_argument("--protocol", choices=PROTOCOLS, default=None, help="caparena-auto: every model against each image's baseline from --assignments, one order per battle (default method: caparena); baseline / round-robin: as --baseline / --round-robin")
    g.add_argument("--assignments", default=None, metavar="FILE", help="CapArena-Auto's caparena_auto_600.json (image -> ref_model, captions with the human reference)")
    g.add_argument("--caparena-out", default=None, metavar="DIR", help="where the battles are written in CapArena's format, DIR/<model>.json (default: beside --out, battles.jsonl -> battles.caparena/)")
    g.add_argument("--caparena-results", default=None, metavar="DIR", help="no judging: score CapArena battle files (one JSON list per model, DIR/<model>.json) as caparena_auto_scores.py does, with the Bradley-Terry / Elo view beside")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command line asks for CapArena-Auto (either form)."""
    return args.caparena_results is not None or args.protocol == "caparena-auto"


def cmd(args: argparse.Namespace, print_table: Callable[..., None], as_result: Callable[[dict[str, Any]], Any]) -> int:
    """Run the CapArena-Auto form the command line asks for."""
    if args.caparena_results is not None:
        return cmd_results(args)
    return cmd_auto(args, print_table, as_result)


# ---------------------------------------------------------------------------- --caparena-results
def cmd_results(args: argparse.Namespace) -> int:
    """``--caparena-results DIR``: the official leaderboard and capjudge's Bradley-Terry view."""
    from capjudge.arena.caparena_files import CapArenaFileError, battle_records, read_results
    from capjudge.arena.ranking import rank

    clash = [flag for flag, v in (("--protocol", args.protocol), ("--models", args.models), ("--input", args.input), ("--baseline", args.baseline), ("--out", args.out), ("--assignments", args.assignments)) if v]
    if clash:
        raise UsageError(f"--caparena-results scores battle files already judged: it does not take {', '.join(clash)}")
    try:
        board, battles = read_results(args.caparena_results)
    except CapArenaFileError as exc:
        raise UsageError(str(exc)) from None
    models = list(battles)
    for entries in battles.values():
        for e in entries:
            for side in ("source1", "source2"):
                if str(e[side]) not in models:
                    models.append(str(e[side]))
    view = rank(battle_records(battles), models, ties=args.ties, bootstrap=args.bootstrap, seed=args.seed, elo_k=args.elo_k) if models else None
    if args.format == "json":
        out = {"caparena": board.to_dict(), "leaderboard": view.to_dict()["leaderboard"] if view else [], "directory": args.caparena_results}
        print(json.dumps(out, ensure_ascii=False))
    else:
        print("\n".join(_official_lines(board)))
        if view is not None and not args.quiet:
            _print_view(view.to_dict()["leaderboard"])
        for note in board.notes:
            print(f"note: {visible(note)}")
    for err in board.errors:
        print(f"capjudge: error: {visible(err)}", file=sys.stderr)
    return 2 if board.errors else 0


def _official_lines(board: Any) -> list[str]:
    from capjudge.arena.caparena_files import table_lines

    return [visible(line, newlines=False) for line in table_lines(board)]  # model names are file names: data


def _print_view(entries: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from capjudge.arena.formats import number as _f
    from capjudge.arena.formats import percent as _pct
    from capjudge.cli.terminal import make_console

    t = Table(title="capjudge view of the same battles (Bradley-Terry, Elo, 95% CI over images)")
    for col in ("#", "model", "BT [95% CI]", "win rate", "Elo", "battles", "W/L/T"):
        t.add_column(col, justify="left" if col == "model" else "right", overflow="fold", no_wrap=col == "model")
    for e in entries:
        ci = e["ci"]
        t.add_row(str(e["rank"]), e["model"], f"{_f(e['bt'])} [{_f(ci[0])}, {_f(ci[1])}]", _pct(e["win_rate"]), _f(e["elo"]), str(e["battles"]), f"{e['wins']}/{e['losses']}/{e['ties']}")
    make_console(highlight=False, width=max(Console().width, 110)).print(t)


# ---------------------------------------------------------------------------- --protocol caparena-auto
def _check_auto(args: argparse.Namespace) -> tuple[Any, Any, Any, Path]:
    """Every usage check before the judge is built: ``(method, input, assignments, caparena dir)``."""
    from capjudge.arena.caparena import (
        DEFAULT_METHOD,
        caparena_dir,
        load_assignments,
        plan_caparena,
    )
    from capjudge.arena.load import (
        ArenaInputError,
        caption_map,
        load_model_files,
        parse_model_specs,
    )
    from capjudge.cli.common import method_with_template, preflight
    from capjudge.run.preflight import check_input

    for flag, bad in (("--baseline", args.baseline), ("--round-robin", args.round_robin), ("--input", args.input), ("--budget", args.budget is not None), ("--limit", args.limit is not None)):
        if bad:
            raise UsageError(f"--protocol caparena-auto takes its battles from --assignments: it does not take {flag}")
    if args.mode == "grading":
        raise UsageError("--protocol caparena-auto asks one order of a pairwise comparison: it does not go with --mode grading")
    if not (args.backend or args.panel):  # the method's paper judge (caparena's: CapArena's gpt-4o-2024-08-06)
        from capjudge.cli.paperjudge import use_paper_judge

        use_paper_judge(args, method_with_template(args.method or DEFAULT_METHOD, args.template, args.template_file))
    missing = [flag for flag, v in (("--assignments FILE", args.assignments), ("--models NAME=captions.json", args.models), ("--out BATTLES.jsonl", args.out), ("--backend", args.backend or args.panel)) if not v]
    if missing:
        raise UsageError(f"--protocol caparena-auto needs {', '.join(missing)}")
    try:
        method = method_with_template(args.method or DEFAULT_METHOD, args.template, args.template_file)
    except UsageError as exc:  # the caparena method is resolved at run time
        if args.method:
            raise
        raise UsageError(f"{exc} (--protocol caparena-auto runs {DEFAULT_METHOD!r} unless --method names another pairwise method)") from None
    if method.kind == "score":
        raise UsageError(f"--protocol caparena-auto needs a pairwise method, not the scoring method {method.name!r}")
    try:
        specs = parse_model_specs(args.models)
        for name, path in specs:
            if "/" in name or "\\" in name or name in (".", ".."):
                raise ArenaInputError(f"--models {name}: a CapArena-Auto model name is a file name (DIR/{name}.json): no path separators")
            check_input(path, f"--models {name}: file")
        inputs = [(path, () if caption_map(path) is not None else ("image", "caption")) for _, path in specs]
        check_input(args.assignments, "--assignments")
        preflight(args, inputs=[*inputs, (args.assignments, ())], out=args.out, reports=[("--html", args.html)], out_kind="pair")
        inp = load_model_files(specs)
        assignments = load_assignments(args.assignments)
        plan_caparena(inp, assignments, seed=args.seed)
    except ArenaInputError as exc:
        raise UsageError(str(exc)) from None
    target = Path(args.caparena_out) if args.caparena_out else caparena_dir(args.out)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--caparena-out {target}: not a folder")
    for name, _ in specs:
        _check_replaceable(target / f"{name}.json")
    return method, inp, assignments, target


def _check_replaceable(path: Path) -> None:
    """A CapArena battle file may replace only a JSON list (an earlier battle file)."""
    if not path.exists():
        return
    try:
        ok = isinstance(json.loads(path.read_bytes().decode("utf-8")), list)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise UsageError(f"{path} exists and is not a CapArena battle file (a JSON list): move it, or choose another --caparena-out")


def cmd_auto(args: argparse.Namespace, print_table: Callable[..., None], as_result: Callable[[dict[str, Any]], Any]) -> int:
    """``--protocol caparena-auto``: judge the battles, write CapArena's files, print both leaderboards."""
    from capjudge.arena.caparena import run_caparena
    from capjudge.cli.common import finish, make_judge, progress_of, usage_rows
    from capjudge.run.outfile import ResumeConflict
    from capjudge.run.summary import RunTally

    method, inp, assignments, target = _check_auto(args)
    t0 = time.perf_counter()
    tally = RunTally(method=method.name)
    with make_judge(args, method) as judge:
        try:
            result = run_caparena(
                inp,
                assignments,
                judge,
                out=args.out,
                caparena_out=target,
                seed=args.seed,
                bootstrap=args.bootstrap,
                ties=args.ties,
                elo_k=args.elo_k,
                overwrite=args.overwrite,
                retry_errors=args.retry_errors,
                progress=progress_of(f"CapArena-Auto with {method.name}", args.quiet),
            )
        except ResumeConflict as exc:
            raise UsageError(str(exc)) from None
        usage = usage_rows(judge)
    for rec in result.arena.run.asked:
        tally.add(as_result(rec))
    if args.format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        print("\n".join(_official_lines(result.caparena)))
        for err in result.caparena.errors:
            print(f"note: {visible(err)}")
        print(visible(f"CapArena battle files: {', '.join(result.files.values())}"))
        print_table(result.arena, usage, time.perf_counter() - t0, args)
    if args.html:
        from capjudge.arena.report import arena_page
        from capjudge.cli.html import command_line, emit

        emit(args.html, lambda: arena_page(result.arena, args.out, images=args.images, command=command_line()), quiet=args.quiet)
    return finish(tally)
