"""Input files read as bytes and decoded row by row, so that one bad byte costs one row.

- JSONL: each line is decoded on its own (strict UTF-8); a line that is not UTF-8 is reported with
  its line number and the first offending byte, and the other lines are read as usual.
- CSV: decoded with ``surrogateescape`` so that the reader never stops; a row holding an undecodable
  byte is reported (line, column, byte) and the other rows are read as usual. A header that is not
  UTF-8 makes the whole file unreadable (its column names are unknown).
- A UTF-8 byte-order mark at the start of a file (Excel's "CSV UTF-8" default) is a BOM, not part
  of the first column name or the first line.
- JSON text can spell a lone UTF-16 surrogate (``"\\ud800"``), which is not text: it cannot be written
  back as UTF-8. :func:`surrogate_field` finds such a string in a parsed row.
- :func:`text_value` checks that a field meant to hold text holds text (not NaN, a boolean, an
  object or a list), naming the field.

Only the standard library; nothing here knows what a sample is.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.core.errors import CapjudgeError, SampleFailure

BOM = b"\xef\xbb\xbf"


class FieldError(SampleFailure):
    """A field of a row holds a value of the wrong kind (the message names the field)."""


class HeaderError(CapjudgeError, ValueError):
    """A CSV file's header line cannot be read as UTF-8 (its columns are unknown)."""


@dataclass(frozen=True)
class Line:
    """One non-blank line of a text file: ``text`` (stripped; undecodable bytes replaced by U+FFFD)
    and ``error`` (``None``, or why the line is not UTF-8)."""

    number: int
    text: str
    error: str | None = None
    complete: bool = True
    """False for a last line with no line end (a file cut short while it was written)."""


def _byte_problem(exc: UnicodeDecodeError) -> str:
    bad = exc.object[exc.start : exc.start + 1]
    return f"not valid UTF-8 (byte 0x{bad.hex()} at byte {exc.start + 1} of the line); save the file as UTF-8"


def read_lines(path: str | Path) -> Iterator[Line]:
    """The non-blank lines of a text file, each decoded on its own (a leading BOM is dropped).

    Opening errors propagate to the caller; decoding errors never do (see :class:`Line`).
    """
    i = 0
    with Path(path).open("rb") as fh:
        for chunk in fh:
            if i == 0 and chunk.startswith(BOM):
                chunk = chunk[len(BOM) :]
            # Lines end at \n, \r\n or a lone \r, as a file opened in text mode splits them.
            parts = chunk.rstrip(b"\n").removesuffix(b"\r").split(b"\r")
            ended = chunk.endswith((b"\n", b"\r"))
            for j, raw in enumerate(parts):
                i += 1
                complete = ended or j < len(parts) - 1
                try:
                    text = raw.decode("utf-8").strip()
                except UnicodeDecodeError as exc:
                    yield Line(i, raw.decode("utf-8", errors="replace").strip(), _byte_problem(exc), complete)
                    continue
                if text:
                    yield Line(i, text, complete=complete)


def _escaped_byte(text: str) -> int | None:
    """The byte behind the first ``surrogateescape`` character of ``text`` (None when there is none)."""
    for ch in text:
        if "\udc80" <= ch <= "\udcff":
            return ord(ch) - 0xDC00
    return None


def _shown(text: str) -> str:
    """``text`` read with ``surrogateescape``, with its undecodable bytes shown as ``\\xNN``."""
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="backslashreplace")


def read_csv(path: str | Path) -> Iterator[tuple[int, dict[str, str | None] | None, str]]:
    """``(line, row, error)`` for each non-blank data row of a CSV file (header first line).

    ``line`` is the physical line the row starts on. ``row`` maps the stripped column names to the
    cells (``None`` for cells missing from a short row; cells beyond the header are dropped).
    ``error`` is empty, or says why the row cannot be used: a byte that is not UTF-8 (``row`` then
    holds only the cells that decoded) or a row the csv module cannot parse (a field over its size
    limit; ``row`` is ``None``). A BOM is dropped. Raises :class:`HeaderError` when the header is
    not UTF-8.
    """
    with Path(path).open("rb") as raw:
        fh = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for h in header:
            byte = _escaped_byte(h)
            if byte is not None:
                raise HeaderError(f"the header (line 1) is not valid UTF-8 (byte 0x{byte:02x} in column {_shown(h)!r}); save the file as UTF-8")
        last = reader.line_num
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:  # e.g. a field over csv.field_size_limit(): this row only
                start, last = last + 1, reader.line_num
                yield start, None, f"not a readable CSV row: {exc}"
                continue
            start, last = last + 1, reader.line_num
            if not cells:
                continue  # a blank line, as csv.DictReader skips it
            row: dict[str, str | None] = dict(zip(header, cells, strict=False))
            for name in header[len(cells) :]:
                row.setdefault(name, None)
            for k, cell in enumerate(cells):
                byte = _escaped_byte(cell)
                if byte is not None:
                    column = header[k] if k < len(header) else f"#{k + 1}"
                    clean = {h: v for h, v in row.items() if v is None or _escaped_byte(v) is None}
                    yield start, clean, f"column {column!r} is not valid UTF-8 (byte 0x{byte:02x}); save the file as UTF-8: {_shown(cell)[:80]!r}"
                    break
            else:
                yield start, row, ""


def csv_header(path: str | Path) -> list[str]:
    """The stripped column names of a CSV file (BOM dropped); raises :class:`HeaderError`."""
    with Path(path).open("rb") as raw:
        fh = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        header = [h.strip() for h in next(csv.reader(fh), [])]
    for h in header:
        byte = _escaped_byte(h)
        if byte is not None:
            raise HeaderError(f"the header (line 1) is not valid UTF-8 (byte 0x{byte:02x} in column {_shown(h)!r}); save the file as UTF-8")
    return header


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def surrogate_field(value: Any, where: str = "") -> str | None:
    """The name of the first field of a parsed JSON value (``caption``, ``references[1]``) whose
    key or text holds a lone surrogate, or ``None``."""
    if isinstance(value, str):
        return (where or "value") if _has_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            name = f"{where}.{k}" if where else str(k)
            if _has_surrogate(str(k)):
                return f"a field name ({_visible(str(k))!r})"
            found = surrogate_field(v, name)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = surrogate_field(v, f"{where}[{i}]")
            if found:
                return found
    return None


def _visible(text: str) -> str:
    """``text`` with its lone surrogates written as JSON escapes (printable and encodable)."""
    return "".join(f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def describe(value: Any) -> str:
    """What a JSON value is, for a message: ``NaN``, ``a boolean (true)``, ``an object`` ..."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def text_value(value: Any, field: str, *, numbers: bool = False) -> str:
    """``value`` as the text of ``field``: a string as it is; with ``numbers``, a finite number as
    Python writes it (``7`` -> ``"7"``, as ids and image names always were). Anything else (NaN,
    Infinity, a boolean, an object, a list, or a number where ``numbers`` is false) raises
    :class:`FieldError` naming the field."""
    if isinstance(value, str):
        return value
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    hint = ": write it as a JSON string" if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else ""
    raise FieldError(f"field {field!r} is {describe(value)}, not text{hint}")
