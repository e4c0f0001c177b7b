"""Reading samples and pairs (JSONL or CSV) and writing results (JSONL, streamed, flushed per record).

Input rows: ``image`` (path, relative to ``--images DIR`` when given), ``caption``, optional
``references`` (a JSON list, or in CSV a JSON list or ``|``-separated text) and ``id``. Pairs:
``image``, ``caption_a``, ``caption_b`` (optional ``shown_first``, ``A`` or ``B``). A malformed row does not stop the reading: it becomes a
:class:`BadRow` that the CLI turns into an ``error`` record naming the line and the cause. Files are
read as bytes and decoded row by row (:mod:`capjudge.data.rowtext`): a byte that is not UTF-8, a lone
surrogate (``"\\ud800"``) or a caption that is not text (NaN, a boolean, an object) costs its row
only; a UTF-8 byte-order mark is dropped.
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

from capjudge.core.errors import UsageError
from capjudge.core.redact import scrub_record
from capjudge.data.rowtext import (
    BOM,
    FieldError,
    HeaderError,
    read_csv,
    read_lines,
    surrogate_field,
    text_value,
)
from capjudge.data.types import PairResult, ScoreResult


class InputFormatError(UsageError, ValueError):
    """The input file cannot be read at all (missing, unknown format)."""


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read: where it is and why; ``id``: the row's id when it could be
    read (the error record carries it; else the CLI uses the row number)."""

    line: int
    error: str
    raw: str = ""
    id: str | None = None


def _references(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [text_value(v, f"references[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
                if isinstance(parsed, list):
                    return [text_value(v, f"references[{i}]") for i, v in enumerate(parsed)]
            except json.JSONDecodeError:
                pass
        return [p.strip() for p in text.split("|") if p.strip()]
    return [text_value(value, "references")]  # raises: not text, not a list


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


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line of a JSONL file, parsed or not (:func:`read_jsonl`).

    ``value`` is the line's JSON when ``error`` is ``None``; otherwise ``error`` says why there is
    none: the line is not UTF-8 (``"not valid UTF-8 (byte 0x.. at byte N of the line); ..."``) or
    not JSON (the JSON parser's message, e.g. ``"Expecting value"``; ``json_error`` is then the
    parser's exception, with the position). ``text`` is the stripped line (undecodable bytes as
    U+FFFD); ``complete`` is false for a last line with no line end (cut short while written).
    """

    number: int
    text: str
    value: Any = None
    error: str | None = None
    json_error: json.JSONDecodeError | None = None
    complete: bool = True


def write_json_atomically(path: str | Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as indented JSON (one space), atomically (:func:`write_atomically`)."""
    text = json.dumps(value, indent=1) + "\n"

    def write(fh: IO[str]) -> None:
        fh.write(text)

    write_atomically(Path(path), write)


def load_json(text: str) -> Any:
    """``json.loads(text)``, with a value nested too deeply for Python's reader (``[[[[...``, a
    ``RecursionError``) raised as the :class:`json.JSONDecodeError` its callers already handle."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply (arrays or objects within one another beyond Python's limit)", text, 0) from None


def read_jsonl(path: str | Path) -> Iterator[JsonLine]:
    """capjudge's one JSONL reader: each non-blank line of ``path``, decoded and parsed on its own
    (a leading BOM dropped), as a :class:`JsonLine`. It never raises for a bad line: each caller
    keeps its own policy (raise naming the line, skip it with a warning, or make an error record).
    Opening errors propagate to the caller."""
    for line in read_lines(path):
        if line.error is not None:
            yield JsonLine(line.number, line.text, error=line.error, complete=line.complete)
            continue
        try:
            yield JsonLine(line.number, line.text, load_json(line.text), complete=line.complete)
        except json.JSONDecodeError as exc:
            yield JsonLine(line.number, line.text, error=exc.msg, json_error=exc, complete=line.complete)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any, str | None, str]]:
    """``(line number, value, error, text)`` for each non-blank line of a JSONL file: :func:`read_jsonl`
    as tuples (``value`` is ``None`` when ``error`` says why the line has none)."""
    for line in read_jsonl(path):
        yield line.number, line.value, line.error, line.text


def _clean_id(row: Any) -> str | None:
    """A row's ``id`` when it is usable text (for the error record of a row that cannot be used)."""
    if not isinstance(row, dict):
        return None
    try:
        rid = text_value(row.get("id"), "id", numbers=True)
    except FieldError:
        return None
    return rid if rid and surrogate_field(rid) is None and "\ufffd" not in rid else None


def _json_row(i: int, row: Any, text: str, what: str) -> dict[str, Any] | BadRow:
    """A parsed JSON row, or the :class:`BadRow` saying why it cannot be used (``what``: "line 3")."""
    if not isinstance(row, dict):
        return BadRow(i, f"{what} is not a JSON object", text[:200])
    field = surrogate_field(row)
    if field is not None:
        # Written back as UTF-8 it would stop the run: the row is reported, never echoed raw.
        named = field if field.startswith("a field name") else f"field {field!r}"
        return BadRow(i, f"{what}: {named} holds a lone surrogate (an escape such as \\ud800 that is not a character), not text", text[:200], _clean_id(row))
    return row


def read_rows(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Rows of a JSONL or CSV file (by extension; ``.json`` holding a list is accepted too)."""
    for _, row in read_numbered_rows(path):
        yield row


def read_numbered_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    """``(line, row)`` for each row of a JSONL or CSV file (``.json``: the item number): the line
    the row starts on, and the row or the :class:`BadRow` saying why it cannot be read."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(f"input file {str(p)!r} not found")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        try:
            for i, cells, problem in read_csv(p):
                if problem:
                    yield i, BadRow(i, f"line {i}: {problem}", id=_clean_id(cells))
                else:
                    yield i, (dict(cells) if cells else BadRow(i, "empty row"))
        except HeaderError as exc:
            raise InputFormatError(f"{p}: {exc}") from None
        except csv.Error as exc:
            raise InputFormatError(f"{p}: not a readable CSV file: {exc}") from None
        return
    if suffix == ".json":
        try:
            data = json.loads(p.read_bytes().removeprefix(BOM).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputFormatError(f"{p}: not valid UTF-8 (byte 0x{exc.object[exc.start:exc.start + 1].hex()} at byte {exc.start + 1}); save the file as UTF-8") from None
        except json.JSONDecodeError as exc:
            raise InputFormatError(f"{p}: not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise InputFormatError(f"{p}: a .json input must hold a list of objects (use JSONL for streams)")
        for i, row in enumerate(data, start=1):
            yield i, (_json_row(i, row, "", f"item {i}") if isinstance(row, dict) else BadRow(i, f"item {i} is not an object"))
        return
    for line in read_jsonl(p):
        i, text = line.number, line.text
        if line.error is None:
            yield i, _json_row(i, line.value, text, f"line {i}")
        elif line.json_error is None:  # not UTF-8
            yield i, BadRow(i, f"line {i} is {line.error}", text[:200], _clean_id(_loads_or_none(text)))
        else:
            yield i, BadRow(i, f"line {i} is not valid JSON: {line.error}", text[:200])


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _from_row(row: dict[str, Any], line: int, captions: tuple[str, ...]) -> dict[str, Any] | BadRow:
    """A sample (``captions`` = ``("caption",)``) or pair dict of ``row``, or what is wrong with it.

    Caption fields and references must be JSON strings; ``image`` and ``id`` may be finite numbers
    (taken as Python writes them). NaN, Infinity, booleans, objects and lists are errors naming the
    field (never the text ``"nan"`` or ``"True"``).
    """
    missing = [k for k in ("image", *captions) if k not in row or row[k] is None]
    if missing:
        return BadRow(line, f"row {line}: missing field(s) {', '.join(missing)}", json.dumps(row)[:200], _clean_id(row))
    try:
        out: dict[str, Any] = {"image": text_value(row["image"], "image", numbers=True)}
        out.update((k, text_value(row[k], k)) for k in captions)
        out["references"] = _references(row.get("references"))
        rid = row.get("id")
        out["id"] = text_value(rid, "id", numbers=True) if rid not in (None, "") else str(line)
    except FieldError as exc:
        return BadRow(line, f"row {line}: {exc}", json.dumps(row)[:200], _clean_id(row))
    return out


def sample_from_row(row: dict[str, Any], line: int) -> dict[str, Any] | BadRow:
    """Normalise one input row to a sample dict, or say what is wrong with it."""
    return _from_row(row, line, ("caption",))


def pair_from_row(row: dict[str, Any], line: int) -> dict[str, Any] | BadRow:
    """Normalise one pairs-file row, or say what is wrong with it; an optional ``shown_first``
    (``A`` or ``B``: the caption a single-order comparison shows first) is kept."""
    out = _from_row(row, line, ("caption_a", "caption_b"))
    first = row.get("shown_first")
    if isinstance(out, BadRow) or first in (None, ""):
        return out
    if first not in ("A", "B"):
        return BadRow(line, f"row {line}: shown_first must be 'A' or 'B', not {str(first)[:40]!r}", json.dumps(row)[:200], _clean_id(row))
    out["shown_first"] = first
    return out


def _numbered(row: BadRow, n: int) -> BadRow:
    """A :class:`BadRow` of the reader with the row number as its id when it has none (the id an
    unreadable row's error record takes, the one a row without an id would have had)."""
    return row if row.id is not None else BadRow(row.line, row.error, row.raw, str(n))


def read_numbered_items(path: str | Path, *, pairs: bool = False) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    """``(line, sample)`` (``pairs``: ``(line, pair)``) for each row of an input file: the line the
    row starts on, and what :func:`read_samples` (:func:`read_pairs`) yields for it."""
    normalise = pair_from_row if pairs else sample_from_row
    for n, (line, row) in enumerate(read_numbered_rows(path), start=1):
        yield line, (_numbered(row, n) if isinstance(row, BadRow) else normalise(row, n))


def read_samples(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Samples of an input file (see module doc); row numbers are the ids when none is given."""
    for _, item in read_numbered_items(path):
        yield item


def read_pairs(path: str | Path) -> Iterator[dict[str, Any] | BadRow]:
    """Pairs of a pairs file (``image``, ``caption_a``, ``caption_b``)."""
    for _, item in read_numbered_items(path, pairs=True):
        yield item


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
