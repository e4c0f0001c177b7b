"""Read judges' results files for ``capjudge agree`` and join them sample by sample.

Every file must hold one kind of record: scores (``score``) or pairwise verdicts (``verdict``,
``caption_a``, ``caption_b``). Records are joined on ``id`` when every record of every file has one,
else on (image file name, whitespace-normalised caption) — for pairs (image, both captions), in
either order. A key that occurs twice in one file is an error naming the file, the key and both
lines. Error records (``status: "error"``, or no score / verdict) are counted per file and left out
of every statistic. Bad input (a line that is not a JSON object, a record of neither kind, a score
that is not a number) is an :class:`AgreeInputError` naming the file and the line.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capjudge.data.io import InputFormatError, read_jsonl
from capjudge.metaeval.datasets import image_name, normalize_caption, sample_key

Kind = Literal["score", "pairwise"]
KeyMode = Literal["id", "image+caption"]

Source = str | Path | Sequence[Any]
"""A results file, or the records themselves (dicts, ``ScoreResult`` or ``PairResult`` objects)."""


class AgreeInputError(InputFormatError):
    """A results file ``agree`` cannot use: the message names the file, the line and the cause."""


@dataclass
class Row:
    """One record of a judge, normalised for joining."""

    line: int
    id: str | None
    image: str  # the file name (folders dropped, as in meta-eval)
    content: tuple[str, ...]  # (image, caption) or (image, caption_a, caption_b), normalised
    ok: bool
    score: float | None = None
    verdict: str | None = None  # A/B/tie in the record's own caption order
    votes: list[Any] = field(default_factory=list)
    swapped: bool = False  # pairs: caption_a sorts after caption_b (see canonical_verdict)
    caption: str = ""  # as written, for the disagreement list
    error: str = ""

    def canonical_verdict(self) -> str | None:
        """The verdict with the two captions in sorted order, so that two files that showed the same
        pair in different orders compare like with like."""
        if self.verdict is None or not self.swapped:
            return self.verdict
        return {"A": "B", "B": "A"}.get(self.verdict, self.verdict)


@dataclass
class JudgeFile:
    """One judge's records and what was found in them."""

    name: str
    path: str
    kind: Kind
    rows: list[Row]
    scales: Counter[tuple[float, float]] = field(default_factory=Counter)
    methods: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    index: dict[Any, Row] = field(default_factory=dict)  # join key -> row (see index_rows)

    @property
    def label(self) -> str:
        """The most common method @ backend."""
        m = self.methods.most_common(1)[0][0] if self.methods else "?"
        b = self.backends.most_common(1)[0][0] if self.backends else "?"
        return f"{m} @ {b}"

    @property
    def scale(self) -> tuple[float, float] | None:
        """The most common ``scale`` of the score records (``None`` when no record gives one)."""
        return self.scales.most_common(1)[0][0] if self.scales else None

    @property
    def errors(self) -> list[Row]:
        """The error records (left out of every statistic)."""
        return [r for r in self.rows if not r.ok]

    def summary(self) -> dict[str, Any]:
        """Counts and provenance for the report."""
        errs = self.errors
        return {
            "name": self.name,
            "path": self.path,
            "judge": self.label,
            "kind": self.kind,
            "records": len(self.rows),
            "ok": len(self.rows) - len(errs),
            "errors": len(errs),
            "error_examples": [f"line {r.line}" + (f" (id {r.id})" if r.id else "") + f": {r.error}" for r in errs[:3]],
            "scale": list(self.scale) if self.scale else None,
            "scales": [list(s) for s in self.scales] if len(self.scales) > 1 else None,
        }


def _records(source: Source, where: str) -> list[tuple[int, Any]]:
    """(line, record) pairs of a file or an in-memory list."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.is_file():
            raise AgreeInputError(f"results file {str(p)!r} not found")
        out = []
        for line in read_jsonl(p):
            if line.error is not None:
                raise AgreeInputError(f"{where}: line {line.number} is not valid JSON ({line.error}): {line.text[:80]!r}")
            out.append((line.number, line.value))
        return out
    return list(enumerate(source, start=1))


def _as_dict(rec: Any, where: str, line: int) -> dict[str, Any]:
    if isinstance(rec, dict):
        return rec
    to_dict = getattr(rec, "to_dict", None)
    if callable(to_dict):
        d = to_dict()
        if isinstance(d, dict):
            return d
    raise AgreeInputError(f"{where}: line {line} is not a JSON object (a {type(rec).__name__})")


def _kind_of(rec: dict[str, Any]) -> Kind | None:
    if "verdict" in rec or ("caption_a" in rec and "caption_b" in rec):
        return "pairwise"
    if "score" in rec:
        return "score"
    return None


def _text(rec: dict[str, Any], key: str, where: str, line: int, ok: bool) -> str:
    value = rec.get(key)
    if value is None and ok:
        raise AgreeInputError(f"{where}: line {line}: record has no {key!r}")
    return "" if value is None else str(value)


def _row(rec: dict[str, Any], kind: Kind, where: str, line: int) -> Row:
    rid = rec.get("id")
    rid = None if rid in (None, "") else str(rid)
    status_ok = rec.get("status", "ok") == "ok"
    image = image_name(rec.get("image"))
    error = str(rec.get("error") or "")
    if kind == "score":
        caption = _text(rec, "caption", where, line, status_ok)
        raw = rec.get("score")
        score: float | None = None
        if raw is not None:
            if isinstance(raw, bool):
                raise AgreeInputError(f"{where}: line {line}: score {raw!r} is not a number")
            try:
                score = float(raw)
            except (TypeError, ValueError):
                raise AgreeInputError(f"{where}: line {line}: score {raw!r} is not a number") from None
            if not math.isfinite(score):
                score = None
        ok = status_ok and score is not None
        if status_ok and not ok:
            error = "status ok but no score"
        return Row(line, rid, image, sample_key(rec.get("image"), caption), ok, score=score, caption=caption, error=error or "error")
    ca = _text(rec, "caption_a", where, line, status_ok)
    cb = _text(rec, "caption_b", where, line, status_ok)
    na, nb = normalize_caption(ca), normalize_caption(cb)
    verdict = rec.get("verdict")
    ok = status_ok and verdict in ("A", "B", "tie")
    if status_ok and not ok:
        error = f"status ok but verdict {verdict!r} is not A, B or tie"
    votes = rec.get("votes") or []
    return Row(
        line, rid, image, (image, *sorted((na, nb))), ok,
        verdict=verdict if ok else None, votes=list(votes) if isinstance(votes, (list, tuple)) else [],
        swapped=na > nb, caption=f"A: {ca} | B: {cb}", error=error or "error",
    )


def load_judge(source: Source, name: str) -> JudgeFile:
    """Read one judge's records (a JSONL results file or a list of records)."""
    where = str(source) if isinstance(source, (str, Path)) else f"records of {name!r}"
    path = str(source) if isinstance(source, (str, Path)) else "<records>"
    kind: Kind | None = None
    first_line = 0
    jf = JudgeFile(name=name, path=path, kind="score", rows=[])
    for line, raw in _records(source, where):
        rec = _as_dict(raw, where, line)
        k = _kind_of(rec)
        if k is None:
            raise AgreeInputError(f"{where}: line {line}: neither a score record (no 'score') nor a pairwise record (no 'verdict')")
        if kind is None:
            kind, first_line = k, line
        elif k != kind:
            raise AgreeInputError(f"{where}: line {line} is a {k} record but line {first_line} is a {kind} record: one kind per file")
        row = _row(rec, k, where, line)
        jf.rows.append(row)
        if rec.get("method"):
            jf.methods[str(rec["method"])] += 1
        if rec.get("backend"):
            jf.backends[str(rec["backend"])] += 1
        scale = rec.get("scale")
        if k == "score" and row.ok and isinstance(scale, (list, tuple)) and len(scale) == 2:
            with contextlib.suppress(TypeError, ValueError):  # an unreadable scale is no scale
                jf.scales[(float(scale[0]), float(scale[1]))] += 1
    if kind is None:
        raise AgreeInputError(f"{where}: no records")
    jf.kind = kind
    return jf


def key_mode(files: Sequence[JudgeFile]) -> KeyMode:
    """``"id"`` when every record of every file has an id, else ``"image+caption"``."""
    return "id" if all(r.id is not None for f in files for r in f.rows) else "image+caption"


def index_rows(jf: JudgeFile, mode: KeyMode) -> None:
    """Fill ``jf.index`` (join key -> row); a key seen twice is an error naming both lines."""
    jf.index = {}
    what = "id" if mode == "id" else ("image and caption" if jf.kind == "score" else "image and caption pair")
    for r in jf.rows:
        key: Any = r.id if mode == "id" else r.content
        if key in jf.index:
            shown = key if mode == "id" else " / ".join(key)
            hint = "give every sample a unique id" if mode == "id" else "add a unique 'id' to every record"
            raise AgreeInputError(
                f"{jf.path if jf.path != '<records>' else 'records of ' + repr(jf.name)}: line {r.line}: duplicate {what} {shown!r} "
                f"(first at line {jf.index[key].line}); each sample must appear once per file: {hint}"
            )
        jf.index[key] = r


@dataclass
class Joined:
    """Two judges' rows on the samples both judged successfully, in the first file's order."""

    a: list[Row]
    b: list[Row]
    counts: dict[str, int]
    mismatch_examples: list[str]


def join(fa: JudgeFile, fb: JudgeFile, mode: KeyMode) -> Joined:
    """Join two indexed files. ``counts``: ``joined`` (ok in both), ``only_a`` / ``only_b`` (keys
    the other file lacks), ``excluded_errors`` (in both, an error record in at least one), and for
    an id join ``content_mismatch`` (joined ids whose image or caption(s) differ)."""
    a_rows, b_rows = [], []
    excluded = mismatch = 0
    examples: list[str] = []
    for key, ra in fa.index.items():
        rb = fb.index.get(key)
        if rb is None:
            continue
        if not (ra.ok and rb.ok):
            excluded += 1
            continue
        if mode == "id" and ra.content != rb.content:
            mismatch += 1
            if len(examples) < 3:
                examples.append(f"id {key}: {' / '.join(ra.content)!r} vs {' / '.join(rb.content)!r}")
        a_rows.append(ra)
        b_rows.append(rb)
    both = len(a_rows) + excluded
    counts = {
        "joined": len(a_rows),
        "only_a": len(fa.index) - both,
        "only_b": len(fb.index) - both,
        "excluded_errors": excluded,
    }
    if mode == "id":
        counts["content_mismatch"] = mismatch
    return Joined(a_rows, b_rows, counts, examples)
