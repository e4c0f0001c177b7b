"""Reading samples and pairs (JSONL or CSV) and writing results (JSONL, streamed, flushed per record).

Input rows: ``image`` (path, relative to ``--images DIR`` when given), ``caption``, optional
``references`` (a JSON list, or in CSV a JSON list or ``|``-separated text) and ``id``. Pairs:
``image``, ``caption_a``, ``caption_b``. A malformed row does not stop the reading: it becomes a
:class:`BadRow` that the CLI turns into an ``error`` record naming the line and the cause.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from capjudge.redact import scrub_record
from capjudge.types import PairResult, ScoreResult


class InputFormatError(ValueError):
    """The input file cannot be read at all (missing, unknown format)."""


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read: where it is and why."""

    line: int
    error: str
    raw: str = ""


def _references(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
                if isinstance(parsed, list):
                    return [str(v) for v in parsed]
            except json.JSONDecodeError:
                pass
        return [p.strip() for p in text.split("|") if p.strip()]
    return [str(value)]


def current_umask() -> int:
    """The process's umask (read without changing it where the system shows it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but brief)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permission bits a new version of ``path`` gets: the old file's, else 0666 less the umask."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666 & ~current_umask()


def write_atomically(path: Path, write: Callable[[IO[str]], None]) -> None:
    """Replace the text file ``path`` with what ``write(fh)`` writes, atomically.

    The text goes to a temporary file in ``path``'s folder, is synced to disk and renamed over
    ``path``: a reader (or a crash) sees the old file or the new one, never a part. The new file
    keeps the old one's permissions, or follows the umask as a file made by ``open`` does. On any error the
    temporary file is removed and ``path`` is left as it was.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600: give it the mode the file had, or the umask's (as open() would).
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any, str | None, str]]:
    """``(line number, value, error, text)`` for each non-blank line of a JSONL file: ``value`` is
    the parsed JSON (``None`` when the line is not JSON, and ``error`` then says why), ``text`` the
    stripped line. Opening and decoding errors propagate to the caller."""
    with Path(path).open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                yield i, json.loads(line), None, text
            except json.JSONDecodeError as exc:
                yield i, None, exc.msg, text


def read_rows(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Rows of a JSONL or CSV file (by extension; ``.json`` holding a list is accepted too)."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(f"input file {str(p)!r} not found")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        with p.open(newline="", encoding="utf-8") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=2):
                yield {k.strip(): v for k, v in row.items() if k is not None} if row else BadRow(i, "empty row")
        return
    if suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputFormatError(f"{p}: not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise InputFormatError(f"{p}: a .json input must hold a list of objects (use JSONL for streams)")
        for i, row in enumerate(data, start=1):
            yield row if isinstance(row, dict) else BadRow(i, f"item {i} is not an object")
        return
    for i, row, error, text in iter_jsonl(p):
        if error is not None:
            yield BadRow(i, f"line {i} is not valid JSON: {error}", text[:200])
        else:
            yield row if isinstance(row, dict) else BadRow(i, f"line {i} is not a JSON object", text[:200])


def sample_from_row(row: dict[str, Any], line: int) -> dict[str, Any] | BadRow:
    """Normalise one input row to a sample dict, or say what is wrong with it."""
    missing = [k for k in ("image", "caption") if k not in row or row[k] is None]
    if missing:
        return BadRow(line, f"row {line}: missing field(s) {', '.join(missing)}", json.dumps(row)[:200])
    out = {"image": str(row["image"]), "caption": str(row["caption"]), "references": _references(row.get("references"))}
    out["id"] = str(row["id"]) if row.get("id") not in (None, "") else str(line)
    return out


def pair_from_row(row: dict[str, Any], line: int) -> dict[str, Any] | BadRow:
    """Normalise one pairs-file row, or say what is wrong with it."""
    missing = [k for k in ("image", "caption_a", "caption_b") if k not in row or row[k] is None]
    if missing:
        return BadRow(line, f"row {line}: missing field(s) {', '.join(missing)}", json.dumps(row)[:200])
    out = {"image": str(row["image"]), "caption_a": str(row["caption_a"]), "caption_b": str(row["caption_b"]), "references": _references(row.get("references"))}
    out["id"] = str(row["id"]) if row.get("id") not in (None, "") else str(line)
    return out


def read_samples(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Samples of an input file (see module doc); line numbers are the ids when none is given."""
    for n, row in enumerate(read_rows(path), start=1):
        yield row if isinstance(row, BadRow) else sample_from_row(row, n)


def read_pairs(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Pairs of a pairs file (``image``, ``caption_a``, ``caption_b``)."""
    for n, row in enumerate(read_rows(path), start=1):
        yield row if isinstance(row, BadRow) else pair_from_row(row, n)


class ResultWriter:
    """Appends result records to a JSONL file, one line per record, flushed as written, so that a
    run that dies keeps every result it had."""

    def __init__(self, path: str | Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("a" if append else "w", encoding="utf-8")

    def write(self, result: ScoreResult | PairResult | dict[str, Any]) -> None:
        """Write one record."""
        record = scrub_record(result) if isinstance(result, dict) else result.to_dict()
        self._fh.write(json.dumps(record, ensure_ascii=False, default=float) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_results(path: str | Path, results: Iterable[ScoreResult | PairResult | dict[str, Any]]) -> int:
    """Write results to a JSONL file; returns how many were written."""
    n = 0
    with ResultWriter(path) as w:
        for r in results:
            w.write(r)
            n += 1
    return n


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The records of a results file (lines that are not JSON objects are skipped)."""
    records = []
    for row in read_rows(path):
        if isinstance(row, dict):
            records.append(row)
    return records
