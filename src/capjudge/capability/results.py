"""CAPability judge outputs (``evaluation/output/<model>/<dimension>.jsonl`` of ali-vilab/CAPability
cebb82a, or ``eval.py --save_root`` of one's own run) scored as ``eval.py`` scores them: each saved
answer's item score (``post_process_<dimension>`` against the annotation of its ``file_id``; the
last answer of a ``file_id`` counts, as ``eval.py``'s ``score_dict`` keeps it), then
``calculate_metric`` per dimension and the means over the dimensions.

``eval.py`` computes these numbers from the saved files without a judge call only where each
dimension misses at most ``max_allow_missing`` items (else it asks the judge for them first):
a dimension missing more is flagged (``would_ask_again``); its numbers are those of the answers
saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.core.errors import UsageError
from capjudge.data.io import read_jsonl
from capjudge.parsing.capability import (
    MAX_ALLOW_MISSING,
    TASKS,
    average_line,
    average_metrics,
    dimension_metrics,
    item_score,
    metric_line,
)


class ResultsError(UsageError, ValueError):
    """A folder or file that is not CAPability judge output (names the file, line and cause)."""


def _jsonl(path: Path, *, file_ids: bool = True) -> list[dict[str, Any]]:
    """The objects of a JSONL file (capjudge's one reader, :func:`capjudge.data.io.read_jsonl`); a line
    that is not JSON is a :class:`ResultsError` naming the file and line, and so is, with
    ``file_ids``, one without a ``file_id`` (CAPability's files); without it other lines are skipped."""
    rows = []
    for line in read_jsonl(path):
        if line.error is not None:
            raise ResultsError(f"{path} line {line.number} is not JSON: {line.error}")
        row = line.value
        if file_ids and (not isinstance(row, dict) or "file_id" not in row):
            raise ResultsError(f"{path} line {line.number} has no file_id")
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _annotations(folder: Path, task: str) -> dict[str, Any]:
    path = folder / f"{task}.jsonl"
    if not path.is_file():
        raise ResultsError(f"no annotations for {task}: {path} does not exist")
    rows = _jsonl(path)
    try:
        return {str(r["file_id"]): r["annotation"] for r in rows}
    except KeyError:
        raise ResultsError(f"{path}: a row has no annotation") from None


def model_results(
    output: Path, annotations: Path, max_allow_missing: int = MAX_ALLOW_MISSING
) -> dict[str, Any]:
    """One model's folder: per dimension ``eval.py``'s numbers and how many items it misses."""
    tasks = [t for t in TASKS if (output / f"{t}.jsonl").is_file()]
    if not tasks:
        raise ResultsError(f"{output} holds none of {', '.join(t + '.jsonl' for t in TASKS)}")
    per: dict[str, Any] = {}
    for task in tasks:
        anno = _annotations(annotations, task)
        saved = _jsonl(output / f"{task}.jsonl")
        scores: dict[str, Any] = {}
        for n, response in enumerate(saved, 1):
            fid = str(response["file_id"])
            if fid not in anno:
                raise ResultsError(
                    f"{output / (task + '.jsonl')} line {n}: file_id {fid!r} is not in {annotations / (task + '.jsonl')}"
                )
            try:
                scores[fid] = item_score(task, response, anno[fid])
            except (KeyError, TypeError, IndexError) as exc:
                raise ResultsError(
                    f"{output / (task + '.jsonl')} line {n} ({fid}): not a {task} answer eval.py saved: {type(exc).__name__}: {exc}"
                ) from None
        missing = len(anno) - len(
            saved
        )  # eval.py compares counts of saved lines, duplicates included
        per[task] = {
            **dimension_metrics(scores.values()),
            "missing": missing,
            "would_ask_again": missing > max_allow_missing,
        }
    return {"dimensions": per, "average": average_metrics(per)}


def records_results(
    path: Path, annotations: Path, max_allow_missing: int = MAX_ALLOW_MISSING
) -> dict[str, Any]:
    """A capjudge results file of method ``capability`` / ``capability-code``: its records' item
    scores (``details.capability``) by dimension, with the same numbers as a folder of eval.py's."""
    scores: dict[str, dict[str, Any]] = {}
    for n, rec in enumerate(_jsonl(path, file_ids=False), 1):
        details = rec.get("details")
        if not isinstance(details, dict) or rec.get("status", "ok") != "ok":
            continue
        for item in details.get("capability") or ():
            if isinstance(item, dict) and item.get("score") is not None:
                scores.setdefault(str(item.get("dimension")), {})[str(rec.get("id", n))] = item[
                    "score"
                ]
    if not scores:
        raise ResultsError(
            f"{path} holds no CAPability item scores (records of method capability with details.capability)"
        )
    per: dict[str, Any] = {}
    for task in [t for t in TASKS if t in scores]:
        missing = len(_annotations(annotations, task)) - len(scores[task])
        per[task] = {
            **dimension_metrics(scores[task].values()),
            "missing": missing,
            "would_ask_again": missing > max_allow_missing,
        }
    return {"dimensions": per, "average": average_metrics(per)}


def _is_model(folder: Path) -> bool:
    return any((folder / f"{t}.jsonl").is_file() for t in TASKS)


def capability_results(
    paths: list[str | Path], annotations: str | Path, max_allow_missing: int = MAX_ALLOW_MISSING
) -> dict[str, Any]:
    """``{model: model_results}`` for each path: a model's output folder, a folder of them
    (``evaluation/output/``: each sub-folder with ``<dimension>.jsonl`` files is a model), or a
    capjudge results file of method ``capability`` (named by its file name without ``.jsonl``)."""
    anno = Path(annotations)
    if not anno.is_dir():
        raise ResultsError(f"annotations folder {str(annotations)!r} does not exist")
    models: dict[str, Any] = {}
    for p in map(Path, paths):
        if p.is_file():
            models[p.stem if p.stem not in models else str(p)] = records_results(
                p, anno, max_allow_missing
            )
            continue
        if not p.is_dir():
            raise ResultsError(f"{str(p)!r} is not a folder or a results file")
        found = (
            [p] if _is_model(p) else sorted(d for d in p.iterdir() if d.is_dir() and _is_model(d))
        )
        if not found:
            raise ResultsError(
                f"{p} holds no CAPability output (<dimension>.jsonl files, or folders of them)"
            )
        for folder in found:
            models[folder.name if folder.name not in models else str(folder)] = model_results(
                folder, anno, max_allow_missing
            )
    return models


def format_results(models: dict[str, Any]) -> str:
    """eval.py's printed lines per model (its per-dimension lines and the average), a warning under
    a dimension it would ask the judge again for, then one table of F1 by dimension."""
    out: list[str] = []
    for name, res in models.items():
        out.append(f"== {name}")
        for task, m in res["dimensions"].items():
            out.append(metric_line(task, m))
            if m["would_ask_again"]:
                out.append(
                    f"  WARNING: {m['missing']} items unanswered (> max_allow_missing): eval.py would ask the judge for them before printing"
                )
        out.append(average_line(res["average"]))
        out.append("")
    tasks = [t for t in TASKS if any(t in r["dimensions"] for r in models.values())]
    width = max(len(n) for n in models)
    out.append("F1 by dimension; mean precision / recall / F1 / hit rate")
    out.append(" | ".join(["model".ljust(width), *tasks, "precision", "recall", "f1", "hit_rate"]))
    for name, res in models.items():
        cells = [
            f"{res['dimensions'][t]['f1_score']:.1f}"
            if t in res["dimensions"] and res["dimensions"][t]["f1_score"] is not None
            else "-"
            for t in tasks
        ]
        avg = [
            f"{res['average'][m]:.3f}" if res["average"][m] is not None else "-"
            for m in ("precision", "recall", "f1_score", "hit_rate")
        ]
        out.append(" | ".join([name.ljust(width), *cells, *avg]))
    return "\n".join(out)


__all__ = [
    "ResultsError",
    "capability_results",
    "format_results",
    "model_results",
    "records_results",
]
