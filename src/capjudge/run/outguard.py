"""What a run's output may replace: only a file capjudge wrote for the same command.

``--out notes.txt`` or ``--html prompt.j2`` must not silently destroy a user's file. Before a run,
:func:`replace_refusal` looks at an existing output file and says why it may not be replaced, or
``None`` when it may: an empty file, a results file whose records are of the kind the command
writes (``"score"``: score records; ``"pair"``: verdict records), or an HTML report capjudge wrote
(its ``<meta name="generator" content="capjudge ...">``), a JSON report of the same command (an
object with the top-level keys that report has), a Markdown report capjudge wrote (the
:data:`MARKDOWN_MARKER` comment on its first line, or, from earlier versions, a ``### `` heading and a
table within the first lines) or a plot matplotlib wrote (a PNG whose text chunks name matplotlib or
capjudge; PDF/SVG that name them). ``--overwrite`` does not lift this: it starts a results file over,
it does not replace files capjudge did not write.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from capjudge.data.io import read_jsonl

KINDS: dict[str, str] = {
    "score": "a capjudge results file of scores (capjudge score, explain, probe)",
    "pair": "a capjudge results file of pair verdicts (capjudge compare, arena)",
    "html": "an HTML report written by capjudge",
    "probe-json": "a capjudge probe report (JSON)",
    "choose-one-json": "a capjudge choose-one report (JSON)",
    "markdown": "a Markdown report written by capjudge",
    "plot": "a plot written by capjudge (matplotlib)",
    "calibration-json": "a capjudge calibration file (capjudge calibrate --save)",
    "cascade-json": "a capjudge cascade plan (capjudge cascade --save)",
}
"""Each kind of output, as the refusal names it."""

# Fields every record of a kind carries (ScoreResult.to_dict / PairResult.to_dict).
_RECORD_FIELDS: dict[str, tuple[str, ...]] = {
    "score": ("score", "status", "method", "backend"),
    "pair": ("verdict", "status", "method", "backend"),
}
_GENERATOR = re.compile(rb"<meta\s+name=[\"']generator[\"']\s+content=[\"']capjudge[\s\"']", re.IGNORECASE)
_HEAD_BYTES = 4096  # the generator tag is in the report's <head>, within its first lines

# Top-level keys every JSON report of a kind has (ProbeReport.to_dict, ChooseOneReport.to_dict).
_JSON_KEYS: dict[str, tuple[str, ...]] = {
    "probe-json": ("method", "backend", "kinds", "summaries"),
    "choose-one-json": ("method", "mode", "backend", "n_groups", "accuracy"),
    "calibration-json": ("format", "version", "method", "fitted_on"),
    "cascade-json": ("format", "version", "judges", "alpha", "delta"),
}
_JSON_MAX_BYTES = 256 * 1024 * 1024  # a report this large is not read whole to be recognised

MARKDOWN_MARKER = "<!-- generator: capjudge -->"
"""First line of every Markdown report capjudge writes (hidden when the Markdown is rendered)."""
_MARKDOWN_MARKER = re.compile(r"^\ufeff?<!--\s*generator:\s*capjudge[\s-]")
# Earlier versions wrote no marker: a "### " heading first and a table separator soon after.
_MARKDOWN_SEPARATOR = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+\s*$")
_MARKDOWN_LEGACY_LINES = 8

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
_PLOT_WRITERS = (b"matplotlib", b"capjudge")


def plot_save_options(path: str | Path) -> dict[str, Any]:
    """What a plot written to ``path`` carries to be recognised later (``savefig(path, **options)``):
    a ``Creator`` naming capjudge in PNG, PDF and SVG metadata (PNG by default), a JPEG comment
    naming capjudge (``pil_kwargs``); nothing for other formats."""
    from capjudge._version import __version__

    suffix = Path(path).suffix.lower()
    mark = f"capjudge {__version__}"
    if suffix in ("", ".png", ".pdf", ".svg"):
        return {"metadata": {"Creator": mark}}
    if suffix in (".jpg", ".jpeg"):
        return {"pil_kwargs": {"comment": mark.encode()}}  # a COM segment in the header
    return {}


def replace_refusal(path: str | Path, kind: str) -> str | None:
    """Why the existing file ``path`` may not be replaced by an output of ``kind`` (a key of
    :data:`KINDS`), or ``None`` when it may (also when it does not exist or is empty)."""
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}: one of {', '.join(KINDS)}")
    p = Path(path)
    if not p.is_file():
        return None
    try:
        if p.stat().st_size == 0:
            return None
        if kind == "html":
            return _html_refusal(p)
        if kind in _JSON_KEYS:
            return _json_refusal(p, kind)
        if kind == "markdown":
            return _markdown_refusal(p)
        if kind == "plot":
            return _plot_refusal(p)
        return _results_refusal(p, kind)
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"


def _html_refusal(p: Path) -> str | None:
    with p.open("rb") as fh:
        head = fh.read(_HEAD_BYTES)
    return None if _GENERATOR.search(head) else "it has no capjudge generator tag"


def _json_refusal(p: Path, kind: str) -> str | None:
    if p.stat().st_size > _JSON_MAX_BYTES:
        return "it is larger than any report capjudge writes"
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "it is not JSON"
    if not isinstance(data, dict):
        return "it is not a JSON object"
    missing = [k for k in _JSON_KEYS[kind] if k not in data]
    return f"it has no key(s) {', '.join(missing)}" if missing else None


def _markdown_refusal(p: Path) -> str | None:
    with p.open("rb") as fh:
        head = fh.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    lines = head.splitlines()
    if lines and _MARKDOWN_MARKER.match(lines[0]):
        return None
    first = lines[:_MARKDOWN_LEGACY_LINES]
    if first and first[0].startswith("### ") and any(_MARKDOWN_SEPARATOR.match(line) for line in first[1:]):
        return None
    return "it has no capjudge generator comment and is not shaped like a capjudge Markdown report"


def _png_texts(p: Path) -> list[bytes] | None:
    """The text chunks of a PNG before its image data, or ``None`` when ``p`` is no PNG."""
    texts: list[bytes] = []
    with p.open("rb") as fh:
        if fh.read(8) != _PNG_SIGNATURE:
            return None
        for _ in range(64):  # matplotlib writes its text chunks right after the header
            head = fh.read(8)
            if len(head) < 8:
                break
            length, name = int.from_bytes(head[:4], "big"), head[4:]
            if name in (b"IDAT", b"IEND"):
                break
            if name in _PNG_TEXT_CHUNKS and length <= 65536:
                texts.append(fh.read(length))
                fh.seek(4, 1)  # CRC
            else:
                fh.seek(length + 4, 1)
    return texts


def _plot_refusal(p: Path) -> str | None:
    texts = _png_texts(p)
    if texts is None:
        # PDF and SVG: matplotlib names itself in the header (SVG) or the Info dictionary (PDF, at the end).
        size = p.stat().st_size
        with p.open("rb") as fh:
            ends = fh.read(_HEAD_BYTES)
            if size > _HEAD_BYTES:
                fh.seek(max(_HEAD_BYTES, size - _HEAD_BYTES))
                ends += fh.read()
        named = ends.lower()
    else:
        named = b"\n".join(texts).lower()
    if any(w in named for w in _PLOT_WRITERS):
        return None
    return "it is not a PNG written by matplotlib" if texts is not None or p.suffix.lower() in ("", ".png") else "it was not written by matplotlib"


def _results_refusal(p: Path, kind: str) -> str | None:
    fields = _RECORD_FIELDS[kind]
    other = next(k for k in _RECORD_FIELDS if k != kind)
    records = 0
    # A line that is not a record may only be the last one, cut short by a kill (no newline).
    pending: str | None = None
    for line in read_jsonl(p):
        if pending is not None:
            return pending
        record = line.value if line.error is None else None
        if not isinstance(record, dict):
            pending = f"line {line.number} is not a JSON record"
            if line.complete:
                return pending
            continue
        if all(f in record for f in _RECORD_FIELDS[other]) and not all(f in record for f in fields):
            return f"line {line.number} is a {other} record, not a {kind} record"
        missing = [f for f in fields if f not in record]
        if missing:
            return f"line {line.number} has no field(s) {', '.join(missing)}"
        records += 1
    if pending is not None and not records:
        return pending
    return None
