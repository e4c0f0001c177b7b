"""Number tokens in a model answer, with what each one is doing there.

:func:`scan` finds every plain decimal number once (one linear pass of a bounded regular
expression) and then annotates it by looking only at its neighbours:

* part of a fraction ``7/10`` or ``8 out of 10`` (the numerator gets ``denom``, the denominator is
  excluded),
* a percentage ``85%``,
* one end of a range ``70-80`` / ``70 to 80``, or of a *scale restatement* ``0-100``,
  ``from 0 to 100``, ``between 0 and 100``, ``1 to 10 scale``, ``10-point scale``, ``(out of 10)``,
* a list marker (``1.`` at the start of a line when ``2.`` also starts a line),
* a reference such as ``Caption 2`` or ``Image 1``, a date ``12/05/2023`` or a time ``10:30``,
* negative (``-5``).

:func:`token_value` turns an annotated token into a value on the requested ``[low, high]`` scale:
fractions and percentages are rescaled, and a bare number is rescaled from a restated scale when
that scale differs from the requested one (``On a scale of 1 to 10, I'd say 8`` on 0-100 is 80).
Ratios are taken against the top of the stated scale (8 on a 1-10 scale is 8/10), the usual
reading of "N out of M".
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

# A plain decimal number not glued to letters or other digits: "85", "0.85", ".85", "0,85" (comma
# decimal, only after a zero). Bounded repetition of the integer part keeps a megabyte of digits
# linear: at the start of a digit run the match fails after at most 15 steps, and inside the run the
# look-behind fails. Decimals may be long ("0.66666666666666" is a model's score too).
NUM_RE = re.compile(
    r"(?<![A-Za-z0-9_.])(?<![0-9],)"
    r"(?:0,[0-9]{1,3}(?![0-9]|,[0-9])|[0-9]{1,15}(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?![A-Za-z0-9_]|\.[0-9]|,[0-9]{3}(?![0-9]))"
)

# Denominators that make "a/b" and "a out of b" read as a score (others, like 2/3, are ratios
# of objects or dates, not grades).
SCORE_DENOMINATORS = frozenset({1.0, 5.0, 10.0, 20.0, 100.0})

_REFERENCE_BEFORE_RE = re.compile(
    r"(?:\b(?:caption|image|picture|photo|sentence|answer|candidate|option|output|figure|fig|step|item|"
    r"example|reference|description|response|assistant|model|table|section|page|line|"
    r"version|top|gpt|llava|criterion)|#)[ \t]*[-#]?[ \t]*$",
    re.IGNORECASE,
)
_DETERMINER_BEFORE_RE = re.compile(r"\b(?:the|this|that|a|an|my|its|each)\s+$", re.IGNORECASE)
_SCALE_WORD_BEFORE_RE = re.compile(
    r"(?:scale|range|ranging|from|between|within)\b[^.\n]{0,12}$", re.IGNORECASE
)
_POINT_SCALE_AFTER_RE = re.compile(r"[ -]?point(?:s)?[ -]scale", re.IGNORECASE)
_SCALE_AFTER_RE = re.compile(r"\s*(?:scale|range|point scale|-point scale)\b", re.IGNORECASE)
_PERCENT_AFTER_RE = re.compile(r"\s?(?:%|percent\b|per cent\b)", re.IGNORECASE)
_RANGE_GAPS = frozenset({"-", "\u2013", "\u2014", "~", "to", "--"})
_OUT_OF_BEFORE_RE = re.compile(r"out\s+of\s*$", re.IGNORECASE)
_BETWEEN_BEFORE_RE = re.compile(r"between\s*$", re.IGNORECASE)
_COUNT_AFTER_RE = re.compile(r"[ \t]{1,3}([a-z][a-z'-]{0,30})")
# Words that may follow a score ("85 points", "70 because ...", "80 out of 100"); any other
# lowercase word right after a number makes it a count of things ("3 dogs").
_SCORE_FOLLOWERS = frozenset(
    [
        "out",
        "of",
        "points",
        "point",
        "pts",
        "percent",
        "per",
        "because",
        "as",
        "for",
        "and",
        "or",
        "but",
        "since",
        "on",
        "in",
        "at",
        "to",
        "from",
        "with",
        "given",
        "based",
        "overall",
        "which",
        "that",
        "would",
        "will",
        "seems",
        "seem",
        "reflects",
        "reflecting",
        "indicates",
        "is",
        "was",
        "this",
        "the",
        "i",
        "we",
        "it",
        "if",
        "so",
        "then",
        "than",
        "considering",
        "due",
        "are",
        "be",
        "here",
    ]
)
_LIST_MARKER_AFTER_RE = re.compile(r"[.)](?:[ \t]+[^0-9\s]|[ \t]*(?:\n|$))")


@dataclass(slots=True)
class Scale:
    """A scale the model restated, e.g. ``on a scale of 1 to 10`` -> ``Scale(pos, 1, 10)``."""

    pos: int
    low: float
    high: float


@dataclass(slots=True)
class Token:
    """One number in the text, with its role."""

    start: int
    end: int
    text: str
    value: float
    decimal: bool = False
    negative: bool = False
    percent: bool = False
    denom: float | None = None
    excluded: str | None = None  # why this number is not a candidate score (scale, range, ...)
    count: bool = False  # followed by a lowercase content word: "3 dogs", "2 people"

    @property
    def shown(self) -> str:
        """The number as written, with its sign, fraction or percent sign."""
        sign = "-" if self.negative else ""
        if self.denom is not None:
            return f"{sign}{self.text}/{_fmt(self.denom)}"
        return f"{sign}{self.text}{'%' if self.percent else ''}"


def _fmt(x: float) -> str:
    return str(int(x)) if x.is_integer() else str(x)


def _is_scale_pair(a: float, b: float) -> bool:
    return a in (0.0, 1.0) and b in (1.0, 4.0, 5.0, 7.0, 10.0, 100.0) and b > a


@dataclass(slots=True)
class Scan:
    """Result of :func:`scan`: the tokens in order and the scales the text restates."""

    tokens: list[Token]
    scales: list[Scale]

    def index_at(self, start: int) -> int | None:
        """Index of the token that starts at ``start``, if any."""
        i = bisect.bisect_left(self.tokens, start, key=lambda t: t.start)
        return i if i < len(self.tokens) and self.tokens[i].start == start else None

    def first_after(self, pos: int) -> int:
        """Index of the first token starting at or after ``pos``."""
        return bisect.bisect_left(self.tokens, pos, key=lambda t: t.start)

    def nearest_scale(self, pos: int) -> Scale | None:
        """The restated scale closest to ``pos`` (either side)."""
        if not self.scales:
            return None
        i = bisect.bisect_left(self.scales, pos, key=lambda sc: sc.pos)
        near = [self.scales[j] for j in (i - 1, i) if 0 <= j < len(self.scales)]
        return min(near, key=lambda sc: abs(sc.pos - pos))


def scan(text: str) -> Scan:
    """Find and annotate every number in ``text`` (already cleaned)."""
    tokens: list[Token] = []
    for m in NUM_RE.finditer(text):
        raw = m.group()
        try:
            value = float(raw.replace(",", "."))
        except ValueError:  # pragma: no cover - the pattern only matches valid floats
            continue
        tok = Token(m.start(), m.end(), raw, value, decimal=("." in raw or "," in raw))
        s, e = tok.start, tok.end
        before = text[max(0, s - 2) : s]
        if before.endswith("-") and (len(before) < 2 or not before[0].isalnum()):
            tok.negative = True
        after = text[e : e + 3]
        if ("%" in after or "p" in after.lower()) and _PERCENT_AFTER_RE.match(text, e):
            tok.percent = True
        ctx = text[max(0, s - 24) : s]
        # Cheap check first: a reference needs a word or "#" just before the number.
        if value <= 20 and (ctx.rstrip(" \t-#")[-1:].isalpha() or "#" in ctx[-3:]):
            ref = _REFERENCE_BEFORE_RE.search(ctx)
            # "Caption 2" names a caption; "rate the caption 9" gives it a score.
            if ref is not None and not _DETERMINER_BEFORE_RE.search(ctx[: ref.start()]):
                tok.excluded = "reference"
        if after[:1] == ":" and after[1:2].isdigit():
            tok.excluded = "time"
        if s >= 2 and text[s - 1] == ":" and text[s - 2].isdigit():
            tok.excluded = "time"
        if after[:1] in (" ", "\t"):
            w = _COUNT_AFTER_RE.match(text, e)
            tok.count = w is not None and w.group(1) not in _SCORE_FOLLOWERS
        if "p" in after.lower() and _POINT_SCALE_AFTER_RE.match(text, e):
            tok.excluded = "scale"
        tokens.append(tok)

    scales: list[Scale] = []
    for i in range(len(tokens) - 1):
        t, u = tokens[i], tokens[i + 1]
        if u.start - t.end > 12:
            continue
        gap = " ".join(text[t.end : u.start].split()).lower()
        if not gap:
            continue  # "1 2": neighbours, nothing joins them
        if gap == "/":
            date_like = (
                i + 2 < len(tokens) and text[u.end : tokens[i + 2].start].strip() == "/"
            ) or (t.start > 0 and text[t.start - 1] == "/")
            if date_like:
                t.excluded = t.excluded or "date"
                u.excluded = u.excluded or "date"
            else:
                _fraction(t, u)
        elif gap in ("out of", "outof"):
            _fraction(t, u)
        elif gap == "of" and u.value >= t.value:
            # "3 of 4 objects": a tally, not a grade.
            t.excluded = t.excluded or "ratio"
            u.excluded = u.excluded or "ratio"
        elif text[t.end : u.start] == "-" and (
            (i + 2 < len(tokens) and text[u.end : tokens[i + 2].start] == "-")
            or (i > 0 and text[tokens[i - 1].end : t.start] == "-")
        ):
            t.excluded = t.excluded or "date"  # 2023-05-01
            u.excluded = u.excluded or "date"
        elif (
            (
                gap in _RANGE_GAPS
                or (
                    gap == "and" and _BETWEEN_BEFORE_RE.search(text[max(0, t.start - 12) : t.start])
                )
            )
            and u.value > t.value
            and not t.negative
        ):
            u.negative = False  # the "-" of "0-100" is a dash, not a minus sign
            scale_words = _SCALE_WORD_BEFORE_RE.search(
                text[max(0, t.start - 24) : t.start]
            ) or _SCALE_AFTER_RE.match(text, u.end)
            if _is_scale_pair(t.value, u.value) or scale_words:
                scales.append(Scale(t.start, t.value, u.value))
                t.excluded = u.excluded = "scale"
            else:
                t.excluded = t.excluded or "range"
                u.excluded = u.excluded or "range"

    for tok in tokens:
        if tok.excluded == "scale" and _POINT_SCALE_AFTER_RE.match(text, tok.end):
            scales.append(Scale(tok.start, 1.0, tok.value))
        elif (
            tok.excluded is None
            and tok.denom is None
            and "of" in text[max(0, tok.start - 4) : tok.start].lower()
            and _OUT_OF_BEFORE_RE.search(text[max(0, tok.start - 10) : tok.start])
        ):
            # "(out of 10)" with no number right before it restates the scale.
            scales.append(Scale(tok.start, 0.0, tok.value))
            tok.excluded = "scale"

    _mark_list_markers(text, tokens)
    scales.sort(key=lambda sc: sc.pos)
    return Scan(tokens, scales)


def _fraction(num: Token, den: Token) -> None:
    den.excluded = "denominator"
    if den.value in SCORE_DENOMINATORS and not num.negative:
        num.denom = den.value
    else:
        num.excluded = num.excluded or "ratio"


def _mark_list_markers(text: str, tokens: list[Token]) -> None:
    """Exclude ``1.`` / ``2)`` at line starts when a neighbouring item number also starts a line."""
    markers: dict[float, list[Token]] = {}
    for tok in tokens:
        if tok.decimal or tok.excluded or (tok.start and text[tok.start - 1] not in "\n \t>#-"):
            continue
        nl = text.rfind("\n", max(0, tok.start - 8), tok.start)
        if nl < 0 and tok.start > 8:
            continue
        line_start = nl + 1
        prefix = text[line_start : tok.start]
        if prefix.strip(" \t>#-") or not _LIST_MARKER_AFTER_RE.match(text, tok.end):
            continue
        markers.setdefault(tok.value, []).append(tok)
    for value, toks in markers.items():
        if (value + 1) in markers or (value - 1) in markers:
            for tok in toks:
                tok.excluded = "list marker"


def token_value(
    tok: Token, scan_: Scan, low: float, high: float
) -> tuple[float | None, str | None]:
    """The value ``tok`` gives on ``[low, high]``, or ``(None, reason)`` when it is no valid score."""
    if tok.negative:
        return None, f"negative number: {tok.shown}"
    span = high - low
    if tok.percent:
        if tok.value > 100:
            return None, f"out of range: {tok.shown}"
        return low + tok.value / 100.0 * span, None
    if tok.denom is not None:
        if tok.value > tok.denom:
            return None, f"out of range: {tok.shown}"
        return low + tok.value / tok.denom * span, None
    value = tok.value
    sc = scan_.nearest_scale(tok.start)
    if (
        sc is not None
        and (sc.low, sc.high) != (low, high)
        and sc.low <= value <= sc.high
        and sc.high > 0
    ):
        # A restated scale different from the requested one: "on a scale of 1 to 10 ... 8".
        return low + value / sc.high * span, None
    if low <= value <= high:
        return value, None
    return None, f"out of range: {tok.shown}"
