"""What the trust options share: ``calibrate`` / ``cascade``'s ``--save`` check and bad rows on
stderr; ``score`` / ``compare``'s ``--calibration FILE`` (checked before any request); ``score`` /
``arena``'s ``--human LABELS`` summary (docs/trust.md, "In the running commands")."""

from __future__ import annotations

import sys
from typing import Any


def check_save(path: str | None, kind: str) -> None:
    """A usage error when ``--save`` would replace a file that is not a capjudge file of ``kind``."""
    if not path:
        return
    from capjudge.core.errors import UsageError
    from capjudge.run.outguard import replace_refusal

    why = replace_refusal(path, kind)
    if why:
        raise UsageError(f"--save {path}: will not replace it: {why}")


def print_problems(problems: list[str], limit: int = 20) -> None:
    """Each bad row of the inputs on stderr (the first ``limit``, then a count), scrubbed."""
    from capjudge.core.redact import scrub

    for p in problems[:limit]:
        print(f"capjudge: bad row: {scrub(p)}", file=sys.stderr)
    if len(problems) > limit:
        print(f"capjudge: ... and {len(problems) - limit} more bad rows", file=sys.stderr)


def finish_report(report: Any, args: Any, text: Any, page: Any) -> int:
    """The end of ``calibrate`` / ``cascade``: bad rows on stderr, ``--save``, the report as
    ``--format`` says (``text(data)`` for text), ``--html`` through ``page(report, images=,
    command=)``; exit 0."""
    import json

    from capjudge.cli.html import command_line, emit
    from capjudge.data.types import json_safe

    print_problems(report.problems)
    if args.save:
        report.saved.save(args.save)
        report.data["saved"] = args.save
    if args.format == "json":
        print(json.dumps(json_safe(report.data), ensure_ascii=False))
    else:
        text(report.data)
    if args.html:
        emit(args.html, lambda: page(report, images=args.images, command=command_line()))
    return 0


def add_calibration_option(p: object) -> None:
    """``--calibration FILE`` on ``score`` and ``compare``."""
    p.add_argument(  # type: ignore[attr-defined]
        "--calibration",
        default=None,
        metavar="FILE",
        help="a calibration file of `capjudge calibrate --save`: each record gets details.calibration (the raw value beside the calibrated one, the file's digest, what it was fitted on); exit 2 when it was fitted on another method or scale",
    )


def load_calibration(path: str | None, method: object, kind: str) -> object:
    """The ``--calibration`` file checked against the run's ``method`` and record ``kind``
    (``score`` / ``pair``); ``None`` without one; a usage error (exit 2) when it cannot be read or
    does not fit."""
    if not path:
        return None
    from capjudge.core.errors import UsageError
    from capjudge.trust.apply import RecordCalibration

    try:
        cal = RecordCalibration.load(path)
        cal.check(method=str(getattr(method, "name", "")), kind=kind, scale=getattr(method, "scale", None) if kind == "score" else None)
    except ValueError as exc:
        raise UsageError(f"--calibration {path}: {exc}") from None
    return cal


def add_human_option(p: object) -> None:
    """``--human LABELS`` and ``--human-alpha`` on ``score`` and ``arena``: the run's numbers
    corrected by a few human labels (prediction-powered inference, docs/trust.md)."""
    p.add_argument(  # type: ignore[attr-defined]
        "--human",
        default=None,
        metavar="LABELS.jsonl",
        help="human labels of a random subset of the records (id, human): the summary adds the PPI++ estimate and interval beside the judge-only and human-only ones, clustered by image (docs/trust.md)",
    )
    p.add_argument("--human-alpha", type=float, default=0.1, metavar="ALPHA", help="with --human: 1 - the intervals' confidence level (default 0.1: 90%%)")  # type: ignore[attr-defined]


def check_human(path: str | None, alpha: float) -> None:
    """``--human``'s file exists and ``--human-alpha`` lies in (0, 1): usage errors before the run."""
    from capjudge.core.errors import UsageError

    if path is None:
        return
    from pathlib import Path

    if not Path(path).is_file():
        raise UsageError(f"--human {path}: no such file")
    if not 0 < alpha < 1:
        raise UsageError("--human-alpha must lie in (0, 1)")


def human_summary(kind: str, results: str, human: str, alpha: float, *, as_json: bool = False) -> dict[str, Any] | None:
    """The run's numbers corrected by the human labels (:mod:`capjudge.trust.system`): printed as
    a table (or returned for ``--format json``); bad rows on stderr. A file that cannot be used
    (too few labels) is named on stderr, the run's results kept: ``None``."""
    from capjudge.trust.inputs import TrustInputError
    from capjudge.trust.system import arena_summary, score_summary

    try:
        data, problems = (score_summary(results, human, alpha=alpha) if kind == "score" else arena_summary(results, human, alpha=alpha))
    except (TrustInputError, ValueError) as exc:
        print(f"capjudge: --human: {exc}", file=sys.stderr)
        return None
    print_problems(problems)
    if not as_json:
        _print_human(kind, data)
    return data


def _iv(e: dict[str, Any] | None) -> str:
    if not e:
        return "-"
    return f"{e['estimate']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def _ess(e: dict[str, Any]) -> str:
    v = e["effective_n"]["ppi++"]
    return "-" if v is None else f"{v:.1f} ({v - e['effective_n']['labels']:+.1f})"


def _print_human(kind: str, d: dict[str, Any]) -> None:
    out = sys.stdout
    level = f"{100 * (1 - d['alpha']):g}%"
    out.write(f"with {d['labelled']} human labels ({d['unlabelled']} records without): {level} intervals, clustered by {'image' if kind == 'score' else 'item (image)'}\n")
    if kind == "score":
        m = d["mean_human_score"]
        out.write(f"mean human score ({d['judge_values']}):\n")
        for name in ("naive", "classical", "ppi", "ppi++"):
            out.write(f"  {_LABEL[name]:<22} {_iv(m[name])}\n")
        out.write(f"  effective labels (PPI++): {_ess(m)}\n")
        return
    out.write(f"win rate            {'judge only':<24} {'human only':<24} {'PPI++':<24} effective labels\n")
    for model, e in d["win_rate"].items():
        if e is None:
            out.write(f"{model[:18]:<19} too few labelled battles\n")
            continue
        out.write(f"{model[:18]:<19} {_iv(e['naive']):<24} {_iv(e['classical']):<24} {_iv(e['ppi++']):<24} {_ess(e)}\n")
    bt = d["bradley_terry"]
    out.write(f"Bradley-Terry strength ({bt['unit']}: {bt['reference']}); columns as above\n")
    for name, why in bt["errors"].items():
        out.write(f"  {_LABEL[name]}: {why}\n")
    for model, e in bt["models"].items():
        cells = ["-" if e[k] is None else f"{e[k]['strength']:.3f} [{e[k]['ci'][0]:.3f}, {e[k]['ci'][1]:.3f}]" for k in ("naive", "classical", "ppi++")]
        out.write(f"{model[:18]:<19} {cells[0]:<24} {cells[1]:<24} {cells[2]:<24} {_ess(e)}\n")


_LABEL = {"naive": "judge only", "classical": "human labels only", "ppi": "PPI", "ppi++": "PPI++"}


def warn_backend(calibration: Any, backend: str) -> None:
    """A warning on stderr when the ``--calibration`` file was fitted on another backend."""
    note = calibration.backend_note(backend) if calibration is not None else None
    if note:
        from capjudge.core.redact import scrub

        print(f"capjudge: warning: {scrub(note)}", file=sys.stderr)
