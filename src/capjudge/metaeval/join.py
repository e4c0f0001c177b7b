"""Read a results file and join it to the human side of a benchmark.

Results are matched to human rows by image *file name* and whitespace-normalised caption (so a
results file written with absolute image paths joins an annotation file with relative ones).
Nothing is dropped silently: human rows without a result are *unmatched*, rows whose result failed
(``status="error"`` or a null score) are *failed*, results no human row asked for are *extra*, and
undecodable lines are *bad lines*; all are counted and reported.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.metaeval.datasets import image_name, normalize_caption, sample_key

Key = tuple[str, str]
PairKey = tuple[str, str, str]


@dataclass
class LoadedResults:
    """The scores and verdicts of one results file, keyed for joining."""

    path: str
    scores: dict[Key, float] = field(default_factory=dict)
    failed: dict[Key, str] = field(default_factory=dict)  # key -> error message
    verdicts: dict[PairKey, str] = field(default_factory=dict)  # (image, caption_a, caption_b) -> A/B/tie
    failed_pairs: dict[PairKey, str] = field(default_factory=dict)
    records: int = 0
    bad_lines: list[str] = field(default_factory=list)
    conflicts: int = 0  # the same key scored twice with different scores (the first is kept)
    scale: tuple[float, float] | None = None
    methods: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    smoothed: int = 0  # scores used, by how they were made (records without "smoothed": neither)
    raw: int = 0

    @property
    def scores_kind(self) -> str:
        """How the scores were made: ``smoothed``, ``raw``, ``mixed (n smoothed, m raw)``,
        ``verdicts`` (pairwise records only) or ``-`` (the records do not say)."""
        if self.smoothed and self.raw:
            return f"mixed ({self.smoothed} smoothed, {self.raw} raw)"
        if self.smoothed:
            return "smoothed"
        if self.raw:
            return "raw"
        return "verdicts" if self.verdicts and not self.scores else "-"

    @property
    def label(self) -> str:
        """A short name for tables: the most common method @ backend, else the file stem."""
        if self.methods:
            m = self.methods.most_common(1)[0][0]
            b = self.backends.most_common(1)[0][0] if self.backends else "?"
            return f"{m} @ {b}"
        return Path(self.path).stem


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _add_record(res: LoadedResults, rec: dict[str, Any], scales: Counter[tuple[float, float]]) -> None:
    res.records += 1
    if rec.get("method"):
        res.methods[str(rec["method"])] += 1
    if rec.get("backend"):
        res.backends[str(rec["backend"])] += 1
    ok = rec.get("status", "ok") == "ok"
    err = str(rec.get("error") or "no score")
    if "caption_a" in rec and "caption_b" in rec:
        pk = (image_name(rec.get("image")), normalize_caption(rec["caption_a"]), normalize_caption(rec["caption_b"]))
        verdict = rec.get("verdict")
        if ok and verdict in ("A", "B", "tie"):
            res.verdicts.setdefault(pk, verdict)
            res.failed_pairs.pop(pk, None)
        elif pk not in res.verdicts:
            res.failed_pairs[pk] = err if not ok else f"no verdict ({verdict!r})"
        return
    key = sample_key(rec.get("image"), rec.get("caption"))
    score = _finite(rec.get("score"))
    scale = rec.get("scale")
    if isinstance(scale, (list, tuple)) and len(scale) == 2:
        lo, hi = _finite(scale[0]), _finite(scale[1])
        if lo is not None and hi is not None and hi > lo:
            scales[(lo, hi)] += 1
    if ok and score is not None:
        if key in res.scores:
            if res.scores[key] != score:
                res.conflicts += 1
            return
        res.scores[key] = score
        res.failed.pop(key, None)  # a later successful re-run wins over an earlier failure
        if isinstance(rec.get("smoothed"), bool):
            if rec["smoothed"]:
                res.smoothed += 1
            else:
                res.raw += 1
    elif key not in res.scores:
        res.failed[key] = err if not ok else "null score"


def load_results(path: str | Path) -> LoadedResults:
    """Read a JSONL results file (score records and/or ``compare`` verdict records).

    Raises ``FileNotFoundError`` when the file is missing; bad lines are counted, never fatal.
    """
    from capjudge.data.io import BadRow, read_rows

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"results file {str(p)!r} not found")
    res = LoadedResults(path=str(p))
    scales: Counter[tuple[float, float]] = Counter()
    for row in read_rows(p):
        if isinstance(row, BadRow):
            res.bad_lines.append(row.error)
        else:
            _add_record(res, row, scales)
    if scales:
        res.scale = scales.most_common(1)[0][0]
    return res


def results_from_records(records: list[dict[str, Any]], name: str = "<memory>") -> LoadedResults:
    """Like :func:`load_results` for records already in memory (``ScoreResult.to_dict()`` dicts)."""
    res = LoadedResults(path=name)
    scales: Counter[tuple[float, float]] = Counter()
    for rec in records:
        _add_record(res, rec, scales)
    if scales:
        res.scale = scales.most_common(1)[0][0]
    return res
