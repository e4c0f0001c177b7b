"""Records received from a judge server, checked as a local judge's records are checked.

A client trusts no server. The answer to a request of N rows must be a list of N records, each an
object naming its own row's ``id``, with a status of ``ok`` or ``error`` and the served judge's
method, template and backend (those a re-run checks); an ``ok`` score record has a finite score on
the method's scale (a rounding overshoot clipped, as :func:`capjudge.data.recordcheck.checked_score`
clips it where records are made; methods that read the first integer keep numbers outside the
scale), an ``ok`` pair record a verdict (:func:`capjudge.data.recordcheck.pair_problem`). A record that
breaks this is not the server's result for its row: :func:`check_records` says why, and the client
makes that row's error record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capjudge.data.recordcheck import checked_score, pair_problem
from capjudge.prompts.registry import UnknownMethodError, get_method


@dataclass(frozen=True)
class Expected:
    """What every record of the served judge carries: ``fields`` (each record's value of each key),
    and for score records the method's ``scale`` and whether numbers outside it are kept
    (``outside_ok``)."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    scale: tuple[float, float] | None = None
    outside_ok: bool = False
    pairs: bool = False


def keeps_outside_scale(method_name: str) -> bool:
    """Whether the method of this name keeps scores outside its scale (it reads the first integer,
    as the VisCE2 code does), by the client's own registry: a server's word is not taken for it."""
    try:
        return get_method(method_name).parser == "first-integer"
    except UnknownMethodError:
        return False


def _scale(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) for v in value):
        return None
    return float(value[0]), float(value[1])


def record_problem(record: Any, row: Any, expected: Expected) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)`` for a record the client may keep as ``row``'s (an overshoot by rounding
    clipped, as a local record's is), else ``(None, why)``."""
    if not isinstance(record, dict):
        return None, f"a record that is not an object ({type(record).__name__})"
    want = row.get("id") if isinstance(row, dict) else None
    if want is not None and str(record.get("id")) != str(want):
        return None, f"the record of row id {str(want)!r} names id {str(record.get('id'))[:60]!r}"
    status = record.get("status")
    if status not in ("ok", "error"):
        return None, f"status {str(status)[:40]!r}, neither 'ok' nor 'error'"
    for key, value in expected.fields.items():
        if record.get(key) != value:
            return None, f"{key} {str(record.get(key))[:80]!r}, not the served judge's {str(value)[:80]!r}"
    if status != "ok":
        return record, None
    if not isinstance(row, dict):
        return None, "an ok record of a row that is no object (a local judge makes its error record)"
    if expected.pairs:
        scores = record.get("scores")
        problem = pair_problem(record.get("verdict"), scores if isinstance(scores, (list, tuple)) else None)
        return (None, problem) if problem else (record, None)
    scale = expected.scale
    if scale is None or _scale(record.get("scale")) != scale:
        return None, f"scale {str(record.get('scale'))[:40]}, not the method's {list(scale) if scale else None}"
    given = record.get("score")
    score, problem = checked_score(given, scale, outside_ok=expected.outside_ok)
    if problem is not None:
        return None, problem
    if score != given:  # a rounding overshoot: clipped, as where a local record is made
        details = record.get("details")
        record = {**record, "score": score, "details": {**(details if isinstance(details, dict) else {}), "clipped_from": given}}
    return record, None


def check_records(results: Any, rows: list[Any], expected: Expected) -> list[tuple[dict[str, Any] | None, str | None]]:
    """One ``(record, problem)`` per row sent: the server's answer (its ``results``) checked. An
    answer that is not a list of one record per row is the problem of every row (no record can be
    matched to its row then)."""
    if not isinstance(results, list):
        return [(None, f"its answer holds no list of results ({type(results).__name__})")] * len(rows)
    if len(results) != len(rows):
        return [(None, f"it answered {len(results)} record(s) for the {len(rows)} row(s) of the request")] * len(rows)
    return [record_problem(rec, row, expected) for rec, row in zip(results, rows)]


__all__ = ["Expected", "check_records", "keeps_outside_scale", "record_problem"]
