"""Panels of judges on the command line: ``--backend`` given several times, or ``--panel FILE``, on
``score``, ``compare`` and ``arena``; the judges' agreement printed after the run.

``--panel FILE`` is JSON: a list of judges, or ``{"judges": [...], "aggregate": "mean"|"median",
"quorum": K}``; a judge is ``{"backend": SPEC, "judge": PRESET, "backend_options": {...}, "name":
NAME}`` (only ``backend`` required). Every mistake is a usage error (exit 2) naming the entry.
The command line's ``--backend-opt`` and ``--judge`` apply to every judge (an entry's own settings
win), the API flags (``--concurrency``, ``--max-cost``, ``--prices``, ``--detail``) to each judge
on an API backend. Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.cli.tiny import resolve_tiny
from capjudge.core.errors import UsageError

ENTRY_KEYS = ("backend", "judge", "backend_options", "name")
API_FLAGS = ("concurrency", "max_cost", "prices", "detail")


class BackendSpecs(argparse.Action):
    """``--backend SPEC``, repeatable on the commands that take a panel: the first spec is
    ``args.backend`` (as a single ``--backend`` always was), every spec is in ``args.backends``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        specs = [*(getattr(namespace, "backends", None) or []), values]
        namespace.backends = specs
        if len(specs) == 1:
            namespace.backend = values


def add_backend_option(p: argparse.ArgumentParser, help_text: str) -> None:
    """``--backend`` (repeatable: a panel of judges) and the ``--panel*`` options."""
    p.add_argument("--backend", action=BackendSpecs, default=None, help=help_text + "; give it several times for a panel of judges (or --panel FILE)")
    p.set_defaults(backends=None)
    g = p.add_argument_group("panel of judges (several judges as one; docs/panels.md)")
    g.add_argument("--panel", default=None, metavar="FILE", help='JSON list of judges, each {"backend": SPEC, "judge": PRESET, "backend_options": {...}, "name": NAME}, or {"judges": [...], "aggregate": ..., "quorum": K}')
    g.add_argument("--panel-aggregate", choices=("mean", "median"), default=None, help="how the judges' scores become the panel's (default mean); verdicts go by majority")
    g.add_argument("--panel-quorum", type=int, default=None, metavar="K", help="judges that must answer for the panel's record to be ok (default: more than half)")


@dataclass
class Entry:
    """One judge of a panel as the command line gave it."""

    backend: str
    where: str  # how an error names it: "--backend 2" or "--panel FILE entry 2"
    judge: str | None = None
    name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class PanelArgs:
    """The panel of a command line: its judges, aggregate and quorum."""

    entries: list[Entry]
    aggregate: str = "mean"
    quorum: int | None = None


def is_panel(args: argparse.Namespace) -> bool:
    """Whether the command line asks for a panel (``--backend`` twice or more, or ``--panel``)."""
    return len(getattr(args, "backends", None) or []) > 1 or getattr(args, "panel", None) is not None


def _masked(spec: str) -> str:
    from capjudge.backends.credentials import mask_argv

    return mask_argv([spec])[0]


def _load_file(path: str) -> tuple[list[Any], dict[str, Any]]:
    from capjudge.data.io import load_json
    from capjudge.run.preflight import check_input

    check_input(path, "--panel")
    try:
        data = load_json(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--panel {path}: not a JSON file ({exc})") from None
    if isinstance(data, list):
        return data, {}
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"judges", "aggregate", "quorum"})
        if unknown:
            raise UsageError(f"--panel {path}: unknown key(s) {', '.join(map(repr, unknown))}; a panel file has 'judges' and optionally 'aggregate', 'quorum'")
        if not isinstance(data.get("judges"), list):
            raise UsageError(f"--panel {path}: 'judges' must be a list of judges")
        return data["judges"], {k: data[k] for k in ("aggregate", "quorum") if k in data}
    raise UsageError(f"--panel {path}: expected a JSON list of judges or an object with 'judges', got {type(data).__name__}")


def _entry(path: str, k: int, item: Any) -> Entry:
    where = f"--panel {path}: entry {k}"
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected an object with 'backend', got {type(item).__name__}")
    spec = item.get("backend")
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"{where}: 'backend' (a backend spec string) is required")
    where = f"{where} ({_masked(spec)})"
    unknown = sorted(set(item) - set(ENTRY_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; an entry has {', '.join(ENTRY_KEYS)}")
    for key in ("judge", "name"):
        if item.get(key) is not None and not (isinstance(item[key], str) and item[key].strip()):
            raise UsageError(f"{where}: {key!r} must be a non-empty string")
    options = item.get("backend_options") or {}
    if not isinstance(options, dict) or any(isinstance(v, (dict, list)) or v is None for v in options.values()):
        raise UsageError(f"{where}: 'backend_options' must be an object of option -> value (strings, numbers, true/false)")
    options = {str(key).strip().replace("-", "_"): (str(v).lower() if isinstance(v, bool) else v) for key, v in options.items()}
    return Entry(resolve_tiny(spec, where), where, item.get("judge"), item.get("name"), options)


def panel_args(args: argparse.Namespace) -> PanelArgs | None:
    """The panel of the command line, read and checked once (``None``: one judge). Usage errors
    name the entry: a file that is not JSON, an entry without a backend, an unknown key, a name
    twice, fewer than two judges, ``--panel`` with ``--backend``."""
    cached = getattr(args, "panel_args", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    specs = getattr(args, "backends", None) or []
    path = getattr(args, "panel", None)
    if path is not None and specs:
        raise UsageError("give the judges with --backend (several times) or with --panel FILE, not both")
    if not is_panel(args):
        if getattr(args, "panel_aggregate", None) is not None or getattr(args, "panel_quorum", None) is not None:
            raise UsageError("--panel-aggregate and --panel-quorum apply to a panel: --backend given several times, or --panel FILE")
        if not specs:
            raise UsageError("give a backend: --backend SPEC (several times for a panel of judges), or --panel FILE")
        return None
    settings: dict[str, Any] = {}
    if path is not None:
        items, settings = _load_file(path)
        entries = [_entry(path, k, item) for k, item in enumerate(items, start=1)]
        where = f"--panel {path}"
    else:
        entries = [Entry(s, f"--backend {k} ({_masked(s)})") for k, s in enumerate(specs, start=1)]
        where = "--backend"
    if len(entries) < 2:
        raise UsageError(f"{where}: a panel needs two or more judges, got {len(entries)}")
    names = [e.name for e in entries if e.name]
    if len(set(names)) < len(names):
        raise UsageError(f"{where}: judge names must differ: {names}")
    aggregate = args.panel_aggregate or settings.get("aggregate") or "mean"
    if aggregate not in ("mean", "median"):
        raise UsageError(f"{where}: aggregate must be mean or median, not {aggregate!r}")
    quorum = args.panel_quorum if args.panel_quorum is not None else settings.get("quorum")
    if quorum is not None and (isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= len(entries)):
        raise UsageError(f"{where}: the quorum must be a whole number from 1 to {len(entries)} (the judges), not {quorum!r}")
    for flag, wanted in (("--batch", _wants_batch(args)), ("--ray", getattr(args, "ray", None) is not None)):
        if wanted:
            raise UsageError(f"{flag} runs one judge: run each judge of the panel on its own, or the panel without {flag}")
    out = PanelArgs(entries, aggregate, quorum)
    args.panel_args = out
    return out


def _wants_batch(args: argparse.Namespace) -> bool:
    # as capjudge.cli.batch.wants_batch, not imported: batch imports the app, the app this module
    return bool(getattr(args, "batch", False) or getattr(args, "batch_export", None) or getattr(args, "batch_import", None))


def member_options(args: argparse.Namespace, entry: Entry, common: dict[str, Any]) -> dict[str, Any]:
    """One judge's backend options: the command line's ``--backend-opt`` under the entry's own, its
    judge preset (the entry's, else ``--judge``) under both, the API flags when its backend is an API."""
    from capjudge.backends import kinds
    from capjudge.backends.presets import UnknownPresetError, preset_options

    options = {**common, **entry.options}
    preset = entry.judge or getattr(args, "judge", None)
    if preset:
        try:
            options = {**preset_options(entry.backend.split(":", 1)[0], preset), **options}
        except (UnknownPresetError, ValueError) as exc:
            raise UsageError(f"{entry.where}: judge preset {preset!r}: {exc}") from None
    try:
        api = kinds.of_spec(entry.backend).api
    except ValueError as exc:
        raise UsageError(f"{entry.where}: {exc}") from None
    if api:
        options.update({k: getattr(args, k) for k in API_FLAGS if getattr(args, k, None) is not None})
    return options


def check_panel(args: argparse.Namespace, common: dict[str, Any]) -> None:
    """Every judge's backend spec and options, checked before any is built (usage errors naming the
    entry); the API flags need one judge on an API backend."""
    from capjudge.backends import kinds
    from capjudge.run.preflight import PreflightError, check_backend

    panel = panel_args(args)
    assert panel is not None
    for entry in panel.entries:
        try:
            check_backend(entry.backend, member_options(args, entry, common))
        except UsageError as exc:
            text = str(exc).split(": ", 1)[-1] if isinstance(exc, PreflightError) else str(exc)  # "--backend SPEC: " said by where
            raise UsageError(f"{entry.where}: {text}") from None
    flags = [k for k in API_FLAGS if getattr(args, k, None) is not None]
    if flags and not any(kinds.of_spec(e.backend).api for e in panel.entries):
        raise UsageError(f"{', '.join('--' + k.replace('_', '-') for k in flags)} apply to API backends only, and no judge of the panel is on one")


def make_panel(args: argparse.Namespace, method: Any, judge_kwargs: dict[str, Any], common: dict[str, Any]) -> Any:
    """The :class:`~capjudge.judges.panel.Panel` of the command line (a judge that cannot be built
    is a usage error naming its entry; the judges built before it are closed)."""
    from capjudge.judges.judge import Judge
    from capjudge.judges.panel import Panel

    panel = panel_args(args)
    assert panel is not None
    judges: list[Any] = []
    try:
        for entry in panel.entries:
            try:
                judges.append(Judge(method, entry.backend, **{**judge_kwargs, "backend_options": member_options(args, entry, common)}))
            except UsageError as exc:  # an unknown option found as the backend is built
                raise UsageError(f"{entry.where}: {exc}") from None
            except ValueError as exc:
                raise UsageError(f"{entry.where}: cannot build the judge: {exc}") from exc
        return Panel(judges, aggregate=panel.aggregate, quorum=panel.quorum, names=[e.name for e in panel.entries])  # type: ignore[arg-type]
    except BaseException:
        for j in judges:
            j.close()
        raise


def usage_rows(judge: Any, rows_of: Any) -> list[tuple[str, str]]:
    """Each judge's API usage rows (``rows_of(judge)``), prefixed with its name."""
    return [(f"{name}: {k}", v) for name, member in zip(judge.names, judge.members, strict=True) for k, v in rows_of(member)]


# ------------------------------------------------------------------------------ after the run
def member_results(out: str) -> dict[str, list[dict[str, Any]]]:
    """Each judge's records in the panel's results file (kept records included)."""
    from capjudge.judges.panel import member_records
    from capjudge.run.outfile import read_records

    return member_records(read_records(out))


def agreement(members: dict[str, list[dict[str, Any]]]) -> Any:
    """:func:`capjudge.agree` on the judges' own records (point estimates: no bootstrap), or ``None``
    when fewer than two judges have records."""
    from capjudge.metaeval.agree import AgreeInputError, agree

    if len(members) < 2:
        return None
    try:
        return agree(list(members.values()), list(members), bootstrap=0)
    except AgreeInputError:
        return None


def print_panel(con: Any, judge: Any, out: str) -> None:
    """The judges of the panel (answered, failed, mean score or verdicts) and their agreement
    (Kendall tau-b, Spearman, Pearson for scores; Cohen's kappa and agreement for verdicts; x100)."""
    from rich.markup import escape
    from rich.table import Table

    from capjudge.core.redact import scrub

    members = member_results(out)
    t = Table(title=f"the panel's judges ({judge.aggregate} of scores, majority of verdicts, quorum {judge.quorum})")
    for col in ("judge", "answered", "failed", "mean score / A-B-tie"):
        t.add_column(col, justify="left" if col == "judge" else "right")
    for name in judge.names:
        recs = members.get(name, [])
        ok = [r for r in recs if r.get("status") == "ok"]
        if ok and "verdict" in ok[0]:
            shown = "/".join(str(sum(r.get("verdict") == v for r in ok)) for v in ("A", "B", "tie"))
        else:
            scores = [float(r["score"]) for r in ok if isinstance(r.get("score"), (int, float))]
            shown = f"{sum(scores) / len(scores):.4g}" if scores else "-"
        t.add_row(escape(scrub(name)), str(len(ok)), str(len(recs) - len(ok)), shown)
    con.print(t)
    report = agreement(members)
    if report is None:
        return
    a = Table(title="the judges' agreement (x100; capjudge.agree on each judge's records)")
    pairwise = report.kind == "pairwise"
    cols = ("judge A", "judge B", "n") + (("Cohen's kappa", "agreement %") if pairwise else ("Kendall tau-b", "Spearman", "Pearson"))
    for col in cols:
        a.add_column(col, justify="left" if col.startswith("judge") else "right")
    keys = ("cohen_kappa", "agreement") if pairwise else ("kendall_tau_b", "spearman", "pearson")
    for pc in report.pairs:
        a.add_row(escape(scrub(pc.a)), escape(scrub(pc.b)), str(pc.n), *(_num(pc.measures.get(k)) for k in keys))
    con.print(a)
    reasons = sorted({why for pc in report.pairs for why in pc.undefined.values()})
    if not pairwise and any(_num(pc.measures.get(k)) == "-" for pc in report.pairs for k in keys):
        reasons.append("-: no correlation, as a judge gave every sample one score (or fewer than two samples were scored by both)")
    for why in reasons[:3]:
        con.print(f"[yellow]note:[/yellow] {escape(scrub(why))}")
    if pairwise and report.overall.get("fleiss_kappa") is not None:
        con.print(f"Fleiss' kappa over the {len(members)} judges: {_num(report.overall['fleiss_kappa'])}")


def _num(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) or v != v else f"{v:.1f}"


def print_arena_panel(con: Any, d: dict[str, Any]) -> None:
    """Each judge's own leaderboard (rank and Bradley-Terry) beside the panel's, and the rank
    correlation (Kendall tau-b, x100) between the judges' leaderboards: a judge that ranks its own
    family's model higher than the others do shows here."""
    from rich.markup import escape
    from rich.table import Table

    from capjudge.core.redact import scrub

    by_judge: dict[str, list[dict[str, Any]]] = d.get("leaderboards_by_judge") or {}
    if not by_judge:
        return
    t = Table(title="leaderboards by judge: rank (Bradley-Terry)")
    t.add_column("model")
    t.add_column("panel", justify="right")
    for name in by_judge:
        t.add_column(escape(scrub(name)), justify="right", overflow="fold")
    own = {name: {e["model"]: e for e in board} for name, board in by_judge.items()}
    for e in d["leaderboard"]:
        row = [escape(e["model"]), _rank(e)]
        row += [_rank(own[name].get(e["model"])) for name in by_judge]
        t.add_row(*row)
    con.print(t)
    rc = d.get("rank_correlation") or {}
    for p in rc.get("pairs", []):
        con.print(f"rank correlation {escape(scrub(p['a']))} vs {escape(scrub(p['b']))}: Kendall tau-b {_num(p['kendall_tau_b'])} over {p['models']} models")


def _rank(e: dict[str, Any] | None) -> str:
    if not e or e.get("bt") is None:
        return "-"
    return f"{e['rank']} ({e['bt']:.0f})"
