"""Results files (JSONL of ``capjudge score`` / ``compare`` / ``probe --out``) as report sections:
a summary (method, backend, counts, mean score, smoothed vs raw) and a sample table.

Reading is stricter than :func:`capjudge.data.io.read_results`: a file that does not exist, cannot be
read, or holds no result record at all (an input file or a CSV given by mistake) is a
:class:`ReportInputError` naming the file and the cause; a few unreadable lines in an otherwise
good file are counted and quoted in the section's notes instead.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from capjudge.core.errors import UsageError
from capjudge.data.io import InputFormatError, iter_jsonl
from capjudge.report.model import Column, SampleTable, Section
from capjudge.report.thumbs import ThumbCache
from capjudge.run.summary import count_text

DEFAULT_MAX_ROWS = 5000


T = TypeVar("T")

class ReportInputError(InputFormatError, UsageError):
    """A results file the report cannot use; the message names the file and the cause (exit 2)."""


@dataclass
class ResultsFile:
    """The records of one results file, with the lines that could not be read."""

    path: str
    records: list[tuple[int, dict[str, Any]]]  # (line number, record)
    bad_lines: list[str] = field(default_factory=list)


def is_pair(record: dict[str, Any]) -> bool:
    """A pairwise record (``capjudge compare``) rather than a score record."""
    return "verdict" in record or "caption_a" in record


def _is_result(record: dict[str, Any]) -> bool:
    return is_pair(record) or "score" in record or "status" in record


def load_results_file(path: str | Path) -> ResultsFile:
    """Read a results JSONL file; raises :class:`ReportInputError` when it is missing, unreadable
    or holds no result record."""
    p = Path(path)
    if not p.exists():
        raise ReportInputError(f"results file {str(p)!r} not found")
    if not p.is_file():
        raise ReportInputError(f"results file {str(p)!r} is not a file")
    out = ResultsFile(str(p), [])
    try:
        for i, rec, error, _text in iter_jsonl(p):
            if error is not None:
                out.bad_lines.append(f"line {i}: not valid JSON ({error})")
            elif not isinstance(rec, dict):
                out.bad_lines.append(f"line {i}: not a JSON object")
            elif not _is_result(rec):
                out.bad_lines.append(f"line {i}: not a result record (no score, verdict or status)")
            else:
                out.records.append((i, rec))
    except UnicodeDecodeError as exc:
        raise ReportInputError(f"results file {str(p)!r} is not UTF-8 text (byte {exc.start}): not a JSONL results file") from None
    except OSError as exc:
        raise ReportInputError(f"results file {str(p)!r} cannot be read: {exc.strerror or exc}") from None
    if not out.records:
        why = out.bad_lines[0] if out.bad_lines else "the file is empty"
        raise ReportInputError(f"results file {str(p)!r} holds no result records ({why}): expected the JSONL written by capjudge score, compare or probe --out")
    return out


# ------------------------------------------------------------------------------------- helpers
def num(v: Any) -> float | None:
    """A finite float, or ``None``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def fmt_num(v: Any, digits: int = 4) -> str:
    """A number as written in tables (``digits`` significant digits), ``-`` when missing."""
    f = num(v)
    return "-" if f is None else f"{f:.{digits}g}"


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False)


def _status(rec: dict[str, Any], has_value: bool) -> str:
    status = rec.get("status")
    if status in ("ok", "error"):
        return str(status)
    return "ok" if has_value else "error"


def _counted(counter: Counter[str]) -> str:
    if not counter:
        return "-"
    if len(counter) == 1:
        return next(iter(counter))
    return ", ".join(f"{k} ({n})" for k, n in counter.most_common())


def reasoning_cells(details: Any) -> dict[str, Any]:
    """A record's reasoning (``details.reasoning``: text, or one per order for a pair; as stored,
    so truncated where the record truncated it) and its token count (``details.reasoning_tokens``,
    else ``details.usage.reasoning_tokens``)."""
    if not isinstance(details, dict):
        return {"reasoning": "", "reasoning_tokens": None}
    given = details.get("reasoning")
    parts = given if isinstance(given, list) else [given]
    text = "\n\n---\n\n".join(str(x) for x in parts if isinstance(x, str) and x)
    usage = details.get("usage")
    given_tokens = details.get("reasoning_tokens")
    counts = [c for c in map(_count, given_tokens if isinstance(given_tokens, list) else [given_tokens]) if c is not None]
    tokens = sum(counts) if counts else (_count(usage.get("reasoning_tokens")) if isinstance(usage, dict) else None)
    return {"reasoning": text, "reasoning_tokens": tokens}


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


REASONING_COLUMNS = [
    Column("reasoning", "reasoning", "folded", "the thinking model's reasoning before its final answer (as the record keeps it)"),
    Column("reasoning_tokens", "reasoning tokens", "num", "tokens the reasoning took (the API's count, else the token steps)"),
]


def with_reasoning(cols: list[Column], rows: Sequence[dict[str, Any]]) -> list[Column]:
    """``cols`` with the reasoning columns before ``raw`` when some row has a reasoning or its count."""
    extra = [c for c in REASONING_COLUMNS if any(r.get(c.key) not in (None, "") for r in rows)]
    if not extra:
        return cols
    at = next((i for i, c in enumerate(cols) if c.key == "raw"), len(cols))
    return cols[:at] + extra + cols[at:]


def image_cell(thumbs: ThumbCache, image: Any) -> dict[str, Any]:
    """A table cell showing an image's thumbnail (or its label and why there is none)."""
    cls, thumb = thumbs.get(str(image) if image is not None else "")
    return {"cls": cls if thumb.uri else None, "label": thumb.label, "error": thumb.error}


# ------------------------------------------------------------------------------------- scores
SCORE_COLUMNS = [
    Column("line", "#", "num", "line of the results file"),
    Column("id", "id"),
    Column("image", "image", "image"),
    Column("caption", "caption"),
    Column("score", "score", "num", "the judge's score on the method's scale (smoothed where the method smooths)"),
    Column("raw_score", "raw score", "num", "the number the judge wrote"),
    Column("smoothed", "smoothed"),
    Column("status", "status", "status"),
    Column("raw", "raw answer", "long"),
    Column("explanation", "explanation", "long"),
    Column("error", "error", "long"),
]


def score_row(line: int, rec: dict[str, Any], thumbs: ThumbCache) -> dict[str, Any]:
    """The table row of a score record."""
    score = num(rec.get("score"))
    status = _status(rec, score is not None)
    details = rec.get("details") if isinstance(rec.get("details"), dict) else {}
    probe = details.get("probe") if isinstance(details, dict) else None
    row: dict[str, Any] = {
        "_status": status,
        "line": line,
        "id": _text(rec.get("id")),
        "image": image_cell(thumbs, rec.get("image")),
        "caption": _text(rec.get("caption")),
        "score": score,
        "raw_score": num(rec.get("raw_score")),
        "smoothed": "" if score is None else ("yes" if rec.get("smoothed") else "no"),
        "status": status,
        "raw": _text(rec.get("raw")),
        "explanation": _text(rec.get("explanation")),
        "error": _text(rec.get("error")),
        "references": [str(r) for r in rec.get("references") or [] if r is not None] if isinstance(rec.get("references"), list) else [],
        "method": f"{rec.get('method') or '?'} @ {rec.get('backend') or '?'}",
        **reasoning_cells(details),
    }
    steps = step_lines(details.get("steps") if isinstance(details, dict) else None)
    if steps:
        row["steps"] = steps
    if isinstance(probe, dict):
        row["probe"] = str(probe.get("kind") or "")
        row["probe_of"] = str(probe.get("of") or "")
    return row


def score_columns(rows: Sequence[dict[str, Any]]) -> list[Column]:
    """The score table's columns: optional ones only when some row fills them."""
    cols = list(SCORE_COLUMNS)
    at = cols.index(next(c for c in cols if c.key == "caption")) + 1
    if any(r.get("references") for r in rows):
        cols.insert(at, Column("references", "references", "list"))
    if any(r.get("steps") for r in rows):
        cols.insert(cols.index(next(c for c in cols if c.key == "raw")), Column("steps", "steps", "list", "the method's intermediate steps: propositions and verdicts; questions, answers and key; retries"))
    if any("probe" in r for r in rows):
        cols[2:2] = [Column("probe_of", "probe of", title="the id of the original caption"), Column("probe", "perturbation")]
    if len({r["method"] for r in rows}) > 1:
        cols.insert(2, Column("method", "judge"))
    for key in ("explanation", "raw_score"):
        if not any(r.get(key) not in (None, "") for r in rows):
            cols = [c for c in cols if c.key != key]
    return with_reasoning(cols, rows)


def score_facts(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Summary of score records: judge, counts, mean score per scale, smoothed vs raw."""
    ok = [r for r in recs if num(r.get("score")) is not None and r.get("status", "ok") == "ok"]
    facts = [
        ("method", _counted(Counter(str(r.get("method") or "?") for r in recs))),
        ("backend", _counted(Counter(str(r.get("backend") or "?") for r in recs))),
        ("records", str(len(recs))),
        ("scored", str(len(ok))),
        ("failed", str(len(recs) - len(ok))),
    ]
    by_scale: dict[str, list[float]] = {}
    for r in ok:
        scale = r.get("scale")
        key = f"{scale[0]:g}-{scale[1]:g}" if isinstance(scale, list) and len(scale) == 2 and all(num(s) is not None for s in scale) else "?"
        by_scale.setdefault(key, []).append(float(r["score"]))
    for key, values in by_scale.items():
        label = "mean score" + (f" (scale {key})" if key != "?" else "")
        facts.append((label, f"{sum(values) / len(values):.4g}  (min {min(values):.4g}, max {max(values):.4g})"))
    smoothed = sum(bool(r.get("smoothed")) for r in ok)
    if any("smoothed" in r for r in ok):
        facts.append(("smoothed / raw scores", f"{smoothed} / {len(ok) - smoothed}"))
    cached = sum(bool((r.get("details") or {}).get("cached")) for r in recs if isinstance(r.get("details"), dict))
    facts.append(("cache hits", str(cached)))
    return facts + micro_facts(ok)


def micro_facts(ok: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The official aggregate of methods whose records carry ``details.counts`` (CapMAS: micro
    precision / recall, hits over totals of the whole set; CLAIR: scores over the captions its
    code does not skip)."""
    sums: dict[str, list[float]] = {}
    for r in ok:
        counts = (r.get("details") or {}).get("counts") if isinstance(r.get("details"), dict) else None
        hits = counts.get("hits") if isinstance(counts, dict) else None
        if isinstance(counts, dict) and isinstance(hits, (int, float)) and not isinstance(hits, bool) and isinstance(counts.get("total"), int) and counts["total"] >= 0:
            acc = sums.setdefault(str(counts.get("measure") or "micro"), [0, 0])
            acc[0] += hits
            acc[1] += counts["total"]
    return [(f"{m} (micro, official)", f"{h / t:.4g}  ({count_text(h)}/{t})") for m, (h, t) in sorted(sums.items()) if t]


def step_lines(steps: Any) -> list[str]:
    """A record's ``details.steps`` as lines: each proposition with its verdict, each question
    with the judge's answer and the key, CLAIR's score and reason, the answers asked again."""
    if not isinstance(steps, dict):
        return []
    lines: list[str] = []
    for p in steps.get("propositions") or []:
        if isinstance(p, dict):
            lines.append(f"{'+' if p.get('true') else '-'} {_text(p.get('proposition'))} -> {_text(p.get('verdict'))}")
    for q in steps.get("questions") or []:
        if isinstance(q, dict):
            first = _text(q.get("question")).split("\n", 1)[0]
            lines.append(f"{'+' if q.get('correct') else '-'} {first} -> answered {_text(q.get('answer'))}, key {_text(q.get('key'))}")
    if "clair_score" in steps:
        lines.append(f"CLAIR {_text(steps.get('clair_score'))} ({_text(steps.get('rule'))}): {_text(steps.get('reason'))}")
    lines += dcscore_lines(steps)
    for key in ("refused_verifications", "refused_answers"):
        for raw in steps.get(key) or []:
            lines.append(f"asked again after: {_text(raw)[:200]}")
    return lines


def dcscore_lines(steps: dict[str, Any]) -> list[str]:
    """DCScore's steps: the extracted facts (``R``: relevant), the means over the 3 x 3 trials and
    the tries the code would have found invalid."""
    if "f1_score_avg" not in steps and "invalid_tries" not in steps:
        return []
    lines = [f"{'R' if f.get('relevance') == 1 else '-'} {_text(f.get('fact'))}" for f in steps.get("facts") or [] if isinstance(f, dict)]
    if isinstance(steps.get("f1_score_avg"), (int, float)):
        means = ", ".join(f"{k} {steps[k + '_avg']:.4g}" for k in ("precision", "recall", "f1_score", "precision_relevant", "recall_relevant", "f1_score_relevant") if isinstance(steps.get(k + "_avg"), (int, float)))
        lines.append(f"means of {len(steps.get('trials') or [])} trials: {means}")
    for t in steps.get("invalid_tries") or []:
        if isinstance(t, dict):
            lines.append(f"invalid try: {_text(t.get('error'))[:200]}")
    return lines


# -------------------------------------------------------------------------------------- pairs
PAIR_COLUMNS = [
    Column("line", "#", "num", "line of the results file"),
    Column("id", "id"),
    Column("image", "image", "image"),
    Column("caption_a", "caption A"),
    Column("caption_b", "caption B"),
    Column("verdict", "verdict", title="A: caption A better, B: caption B better"),
    Column("votes", "votes", title="each order's verdict, mapped back to A/B"),
    Column("score_a", "score A", "num"),
    Column("score_b", "score B", "num"),
    Column("status", "status", "status"),
    Column("raw", "raw answers", "list"),
    Column("error", "error", "long"),
]


def pair_row(line: int, rec: dict[str, Any], thumbs: ThumbCache) -> dict[str, Any]:
    """The table row of a pairwise record."""
    verdict = rec.get("verdict")
    status = _status(rec, verdict is not None)
    given = rec.get("scores")
    scores: list[Any] = list(given) if isinstance(given, list) else []
    scores += [None] * (2 - len(scores))
    given_votes = rec.get("votes")
    votes: list[Any] = given_votes if isinstance(given_votes, list) else []
    raw = rec.get("raw")
    return {
        "_status": status,
        "line": line,
        "id": _text(rec.get("id")),
        "image": image_cell(thumbs, rec.get("image")),
        "caption_a": _text(rec.get("caption_a")),
        "caption_b": _text(rec.get("caption_b")),
        "verdict": _text(verdict),
        "votes": ", ".join("-" if v is None else str(v) for v in votes),
        "score_a": num(scores[0]),
        "score_b": num(scores[1]),
        "status": status,
        "raw": [_text(x) for x in raw] if isinstance(raw, list) else ([_text(raw)] if raw else []),
        "error": _text(rec.get("error")),
        "method": f"{rec.get('method') or '?'} @ {rec.get('backend') or '?'}",
        **reasoning_cells(rec.get("details")),
    }


def pair_columns(rows: Sequence[dict[str, Any]]) -> list[Column]:
    """The pair table's columns (score columns only for comparisons by grading)."""
    cols = list(PAIR_COLUMNS)
    if not any(r["score_a"] is not None or r["score_b"] is not None for r in rows):
        cols = [c for c in cols if c.key not in ("score_a", "score_b")]
    if len({r["method"] for r in rows}) > 1:
        cols.insert(2, Column("method", "judge"))
    return with_reasoning(cols, rows)


def pair_facts(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Summary of pairwise records: judge, mode, verdict counts."""
    verdicts = Counter(str(r.get("verdict")) for r in recs if r.get("verdict") is not None and r.get("status", "ok") == "ok")
    decided = sum(verdicts.values())
    return [
        ("method", _counted(Counter(str(r.get("method") or "?") for r in recs))),
        ("backend", _counted(Counter(str(r.get("backend") or "?") for r in recs))),
        ("mode", _counted(Counter(str(r.get("mode") or "?") for r in recs))),
        ("records", str(len(recs))),
        ("A better / B better / tie", f"{verdicts['A']} / {verdicts['B']} / {verdicts['tie']}"),
        ("failed", str(len(recs) - decided)),
    ]


# ------------------------------------------------------------------------------------ section
def cut(rows: list[T], max_rows: int) -> tuple[list[T], int]:
    """The first ``max_rows`` items (all when 0) and the full count when some were cut, else 0.
    Cut before rows are built: building one loads its thumbnail."""
    if max_rows and len(rows) > max_rows:
        return rows[:max_rows], len(rows)
    return rows, 0


def _common_errors(recs: Iterable[dict[str, Any]], n: int = 3) -> list[str]:
    errors = Counter(str(r.get("error")) for r in recs if r.get("error"))
    return [f"{count}x {text}" for text, count in errors.most_common(n)]


def results_section(rf: ResultsFile, thumbs: ThumbCache, *, title: str | None = None, table_id: str = "t", max_rows: int = DEFAULT_MAX_ROWS) -> Section:
    """A results file as a section: summary facts and one sample table per kind of record in it."""
    section = Section(title=title or Path(rf.path).name, facts=[("file", rf.path)])
    scores = [(i, r) for i, r in rf.records if not is_pair(r)]
    pairs = [(i, r) for i, r in rf.records if is_pair(r)]
    if scores:
        section.facts += score_facts([r for _, r in scores])
        shown, total = cut(scores, max_rows)
        rows = [score_row(i, r, thumbs) for i, r in shown]
        section.tables.append(SampleTable(f"{table_id}-scores", "scores", score_columns(rows), rows, total))
    if pairs:
        section.facts += pair_facts([r for _, r in pairs])
        shown_pairs, total = cut(pairs, max_rows)
        rows = [pair_row(i, r, thumbs) for i, r in shown_pairs]
        section.tables.append(SampleTable(f"{table_id}-pairs", "pairs", pair_columns(rows), rows, total))
    if rf.bad_lines:
        section.facts.append(("unreadable lines", str(len(rf.bad_lines))))
        section.notes.append("lines left out: " + "; ".join(rf.bad_lines[:5]) + (" ..." if len(rf.bad_lines) > 5 else ""))
    common = _common_errors(r for _, r in rf.records)
    if common:
        section.notes.append("most common errors: " + " | ".join(common))
    for t in section.tables:
        if t.total:
            t.note = f"the first {len(t.rows)} of {t.total} records are shown (--max-rows)"
    return section


def score_values(rf: ResultsFile) -> list[float]:
    """The scores of the file's successful score records (for the distribution plot)."""
    out = []
    for _, r in rf.records:
        s = num(r.get("score"))
        if s is not None and not is_pair(r) and r.get("status", "ok") == "ok":
            out.append(s)
    return out
