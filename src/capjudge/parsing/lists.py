"""Reading listwise answers: one score per numbered candidate (the Cobra-effect paper, Fig. 4).

The prompt asks for ``{1: score, 2: score, ...}``; models answer with that, with quoted keys,
as JSON, one ``1: 0.8`` / ``1. 0.8`` / ``Sentence 1: 0.8`` per line, with text around it, or as
a plain list ``[0.8, 0.3, 0.5]``.

Rules:

* Keyed entries ``K: V`` (also ``"K": V``, ``K = V``, ``K. V``, ``K) V``, ``K - V``,
  ``Sentence K: V``, ``"K": {"score": V}``). When a ``{...}`` block holds keyed entries, the last
  such block is used (models often restate their scores as a final dictionary); otherwise the
  whole text, first entry per key. Keys run 1..n; keys 0..n-1 are shifted when no key n appears.
* Without keyed entries, a positional list: the numbers of the last ``[...]`` block, or a text
  made only of numbers and separators.
* Each value is read like a score (``0.8``, ``80%``, ``8/10``) and must lie in ``[low, high]``;
  missing, non-numeric (``score``, ``null``), negative or out-of-range entries are ``None``.

The result always has exactly ``n`` entries.
"""

from __future__ import annotations

import re
from typing import Any

from capjudge.parsing.scores import parse_score_details
from capjudge.parsing.text import clean, coerce_text

__all__ = ["parse_score_list"]

_VALUE = r"""(?P<v>-?(?:[0-9]{1,15}(?:\.[0-9]{1,12})?|\.[0-9]{1,12})(?:[ \t]{0,3}(?:%|/[ \t]{0,3}[0-9]{1,3}(?:\.[0-9]{1,3})?))?|null|none|n/?a|score)"""
_ENTRY_RE = re.compile(
    r"""(?<![A-Za-z0-9_.])["']?(?:(?:sentence|caption|description|candidate|answer|item|no\.?|#)[ \t]{0,3}#?[ \t]{0,3})?"""
    r"""(?P<k>[0-9]{1,4})["']?[ \t]{0,3}(?:[:=)\-]|\.(?=[ \t])|\u2192|->)[ \t]{0,3}"""
    r"""(?:\{[ \t]{0,3}["']?(?:score|rating)["']?[ \t]{0,3}:[ \t]{0,3})?["']?"""
    + _VALUE
    + r"""(?![0-9A-Za-z])""",
    re.IGNORECASE,
)
_LINE_RE = re.compile(
    r"^[ \t>#\-]{0,8}(?:(?:sentence|caption|description|candidate|answer|item)[ \t]{0,3}#?[ \t]{0,3})?"
    r"(?P<k>[0-9]{1,4})[ \t]{0,3}[.):\-][ \t]{1,8}(?P<rest>[^\n]{1,2000})$",
    re.MULTILINE | re.IGNORECASE,
)
_BRACE_RE = re.compile(r"\{[^{}]{0,100000}\}")
_BRACKET_RE = re.compile(r"\[([^\[\]]{0,100000})\]")
_PLAIN_RE = re.compile(r"[\s,;\[\]()0-9.%/\-]*")
_PLAIN_VALUE_RE = re.compile(
    r"(?<![0-9.])-?(?:[0-9]{1,15}(?:\.[0-9]{1,12})?|\.[0-9]{1,12})(?:[ \t]{0,3}(?:%|/[ \t]{0,3}[0-9]{1,3}))?"
)


def _value(raw: str, low: float, high: float) -> float | None:
    if raw.startswith("-"):
        return None
    return parse_score_details(raw, low=low, high=high).value


def _entries(segment: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for m in _ENTRY_RE.finditer(segment):
        key = int(m.group("k"))
        found.setdefault(key, m.group("v"))
    return found


def _fill(out: list[float | None], by_key: dict[int, float | None]) -> None:
    """Put keyed values into ``out`` (keys 1..n; 0..n-1 when 0 is used and n is not)."""
    n = len(out)
    shift = 1 if (0 in by_key and n not in by_key) else 0
    for key, value in by_key.items():
        idx = key + shift - 1
        if 0 <= idx < n:
            out[idx] = value


def parse_score_list(
    text: Any, n: Any, *, low: float = 0.0, high: float = 1.0
) -> list[float | None]:
    """Scores of ``n`` numbered candidates from a listwise answer, ``None`` where missing.

    Never raises; always returns ``n`` entries (``n`` below zero or not an integer gives ``[]``).
    """
    try:
        count = int(n)
    except (TypeError, ValueError, OverflowError):
        return []
    if count <= 0 or isinstance(n, bool):
        return []
    try:
        return _parse(text, count, low, high)
    except Exception:  # pragma: no cover - a bug here must not break a batch
        return [None] * count


def _parse(text: Any, n: int, low: float, high: float) -> list[float | None]:
    out: list[float | None] = [None] * n
    raw = coerce_text(text)
    if raw is None:
        return out
    t = clean(raw)

    entries: dict[int, str] = {}
    for block in _BRACE_RE.finditer(t):
        found = _entries(block.group())
        if found:
            entries = found
    if not entries:
        entries = _entries(t)
    if entries:
        _fill(out, {k: _value(v, low, high) for k, v in entries.items()})
        return out

    # "1. A dog on a couch - score: 0.8": one numbered line per candidate, score somewhere in it.
    lines: dict[int, float | None] = {}
    for m in _LINE_RE.finditer(t):
        lines.setdefault(
            int(m.group("k")), parse_score_details(m.group("rest"), low=low, high=high).value
        )
    if any(v is not None for v in lines.values()):
        _fill(out, lines)
        return out

    values: list[str] = []
    last_block = None
    for b in _BRACKET_RE.finditer(t):
        if _PLAIN_VALUE_RE.search(b.group(1)):
            last_block = b
    if last_block is not None:
        values = _PLAIN_VALUE_RE.findall(last_block.group(1))
    elif _PLAIN_RE.fullmatch(t.strip()):
        values = _PLAIN_VALUE_RE.findall(t)
    for i, value in enumerate(values[:n]):
        out[i] = _value(value, low, high)
    return out
