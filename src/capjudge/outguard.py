"""What a run's output may replace: only a file capjudge wrote for the same command.

``--out notes.txt`` or ``--html prompt.j2`` must not silently destroy a user's file. Before a run,
:func:`replace_refusal` looks at an existing output file and says why it may not be replaced, or
``None`` when it may: an empty file, a results file whose records are of the kind the command
writes (``"score"``: score records; ``"pair"``: verdict records), or an HTML report capjudge wrote
(its ``<meta name="generator" content="capjudge ...">``). ``--overwrite`` does not lift this: it
starts a results file over, it does not replace files capjudge did not write.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

KINDS: dict[str, str] = {
    "score": "a capjudge results file of scores (capjudge score, explain, probe)",
    "pair": "a capjudge results file of pair verdicts (capjudge compare, arena)",
    "html": "an HTML report written by capjudge",
}
"""Each kind of output, as the refusal names it."""

# Fields every record of a kind carries (ScoreResult.to_dict / PairResult.to_dict).
_RECORD_FIELDS: dict[str, tuple[str, ...]] = {
    "score": ("score", "status", "method", "backend"),
    "pair": ("verdict", "status", "method", "backend"),
}
_GENERATOR = re.compile(rb"<meta\s+name=[\"']generator[\"']\s+content=[\"']capjudge[\s\"']", re.IGNORECASE)
_HEAD_BYTES = 4096  # the generator tag is in the report's <head>, within its first lines


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
        return _results_refusal(p, kind)
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"


def _html_refusal(p: Path) -> str | None:
    with p.open("rb") as fh:
        head = fh.read(_HEAD_BYTES)
    return None if _GENERATOR.search(head) else "it has no capjudge generator tag"


def _results_refusal(p: Path, kind: str) -> str | None:
    fields = _RECORD_FIELDS[kind]
    other = next(k for k in _RECORD_FIELDS if k != kind)
    records = 0
    # A line that is not a record may only be the last one, cut short by a kill (no newline).
    pending: str | None = None
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            if pending is not None:
                return pending
            try:
                record = json.loads(text.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                record = None
            if not isinstance(record, dict):
                pending = f"line {number} is not a JSON record"
                if raw.endswith(b"\n"):
                    return pending
                continue
            if all(f in record for f in _RECORD_FIELDS[other]) and not all(f in record for f in fields):
                return f"line {number} is a {other} record, not a {kind} record"
            missing = [f for f in fields if f not in record]
            if missing:
                return f"line {number} has no field(s) {', '.join(missing)}"
            records += 1
    if pending is not None and not records:
        return pending
    return None
