"""Results files as pandas DataFrames, in one call: ``capjudge.results_frame("out/fleur.jsonl")``.

One row per record, the record's own fields as columns, and the ``details`` most analyses need
flattened beside them: ``cached``, ``prompt_tokens`` / ``completion_tokens``, ``reasoning_tokens``
(a thinking model's reasoning: ``details.reasoning_tokens``, else ``details.usage.reasoning_tokens``;
summed over a pair's two orders; ``None`` / NaN when absent), ``smoothing`` (why a
smoothing method returned a raw score), ``option_<name>`` for each method option, ``scale_low`` /
``scale_high``; pairwise records also get ``vote_1`` / ``vote_2`` and ``score_a`` / ``score_b``. The
full ``details`` dict stays in its own column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reasoning_tokens(details: Mapping[str, Any], usage: Any) -> int | None:
    """``details.reasoning_tokens`` (a list for a pair: summed), else ``details.usage.reasoning_tokens``."""
    given = details.get("reasoning_tokens")
    counts = [c for c in map(_count, given if isinstance(given, list) else [given]) if c is not None]
    if counts:
        return sum(counts)
    return _count(usage.get("reasoning_tokens")) if isinstance(usage, dict) else None


def _flat(record: Mapping[str, Any]) -> dict[str, Any]:
    row = dict(record)
    details = row.get("details") or {}
    if not isinstance(details, dict):
        details = {}
    row["cached"] = bool(details.get("cached", False))
    usage = details.get("usage") or {}
    if isinstance(usage, dict):
        row["prompt_tokens"] = usage.get("prompt_tokens")
        row["completion_tokens"] = usage.get("completion_tokens")
    row["reasoning_tokens"] = _reasoning_tokens(details, usage)
    if "smoothing" in details:
        row["smoothing"] = details["smoothing"]
    for name, value in (details.get("method_options") or {}).items():
        row[f"option_{name}"] = value
    scale = row.pop("scale", None)
    if isinstance(scale, (list, tuple)) and len(scale) == 2:
        row["scale_low"], row["scale_high"] = scale
    votes = row.get("votes")
    if isinstance(votes, list):
        for i, v in enumerate(votes[:2], start=1):
            row[f"vote_{i}"] = v
    scores = row.get("scores")
    if isinstance(scores, (list, tuple)) and len(scores) == 2:
        row["score_a"], row["score_b"] = scores
    return row


def results_frame(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """The records of one or several results files (JSONL) as one DataFrame.

    With several files a ``file`` column says where each row came from. Lines that are not JSON
    objects are skipped, as :func:`capjudge.data.io.read_results` does.
    """
    import pandas as pd

    from capjudge.data.io import read_results

    many = not isinstance(paths, (str, Path))
    files = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    rows: list[dict[str, Any]] = []
    for f in files:
        for record in read_results(f):
            row = _flat(record)
            if many:
                row["file"] = str(f)
            rows.append(row)
    return pd.DataFrame(rows)
