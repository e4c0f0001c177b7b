"""Reading a single score out of a judge's free-text answer.

:func:`parse_score` returns the score on the requested ``[low, high]`` scale or ``None``;
:func:`parse_score_details` also says which rule fired and, on failure, why.

Rules, in order; the first rule that finds a candidate decides (an invalid candidate from an
explicit rule gives ``None`` rather than falling through to a weaker rule, so ``Score: 150``
followed by ``3 dogs`` is not read as 3):

1. ``json_key``: a quoted key ``"score"``, ``'rating'``, ``"Score"``, ``"final_score"``... as in
   CLAIR's ``{"score": 80, "reason": "..."}`` (also inside code fences). The last such key wins;
   a key whose value is not a number (``null``, ``"N/A"``) gives ``None``.
2. ``double_brackets``: MT-Bench's ``[[7]]`` (the last one). ``[[7]]/10``, ``[[7/10]]`` and a
   restated ``on a scale of 1 to 10`` / ``(out of 10)`` rescale it; a bare ``[[7]]`` on 0-100 is 7.
3. ``final_label``: a label or rating verb qualified by *final*, *overall*, *total*, *in
   conclusion* or *therefore* (``Final score: 85``, ``Overall, I'd rate it 80``). The last one wins.
4. ``label``: the first number right after ``score``, ``rating``, ``grade``, ``rate``, ``give``,
   ``assign``, ``deserves``, ``answer``... with only filler words between (``I would give this
   caption a score of 85``, ``Rating: 7/10``, ``The score is 85 out of 100``).
5. ``number_line``: the first line that holds nothing but a number (``85``, ``0.85``, ``**85/100**``).
6. ``trailing``: the answer ends with a number standing as its own sentence
   (``The caption mentions 5 people. 30``).
7. ``fraction``: the first ``a/b`` or ``a out of b`` with b in 1, 5, 10, 20, 100 (``7/10``).
8. ``number``: the first number in range, skipping numbers that are not scores and counts (a
   number followed by a lowercase content word: ``3 dogs``); on a fractional
   scale (``high <= 1``) a number written with a decimal point is preferred over a bare integer
   (``1 dog ... 0.4`` is 0.4). This agrees with VisCE2's "first integer after removing canonical
   phrases" on VisCE2-style answers.

Numbers that are never candidates: scale restatements (``0-100``, ``from 0 to 100``, ``between 0
and 100``, ``1 to 10 scale``, ``10-point scale``, a standalone ``(out of 10)``), other ranges
(``70-80``: a range is not one score), denominators, list markers (``1.`` when ``2.`` also starts a
line), references (``Caption 2``, ``Image 1``), dates and times, numbers glued to letters
(``GPT-4V``, ``3D``, ``1st``, ``80s``). Negative numbers are never scores.

Spaced decimals: on a fractional scale (``high <= 1``) an answer that is nothing but a digit, a
space and more digits (``0 5``, ``0 9``, ``Score: 0 85``) is how MiniGPT-v2 writes 0.5 (the FLEUR
paper, Sec. 5.4). By default (``answer_form="decimal"``) it is no score, with a reason that says
so, instead of the ``0`` a first-number rule would misread; ``answer_form="spaced"`` reads it as
the decimal it stands for (rule ``spaced``). Only the whole answer counts: a space between digits
inside a longer answer is never read as a point.

Values are mapped to the requested scale: a fraction ``a/b`` or ``a out of b`` is the ratio a/b
of the scale (7/10 on 0-100 is 70, 85/100 on 0-1 is 0.85), a percentage likewise (85% is 85 on
0-100 and 0.85 on 0-1), and a bare number is rescaled from a restated scale that differs from the
requested one (``On a scale of 1 to 10, 8`` on 0-100 is 80). Without such a hint a number outside
``[low, high]`` is no score (``85`` on a 0-1 scale is ``None``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from capjudge.parsing.numbers import NUM_RE, Scan, Token, scan, token_value
from capjudge.parsing.text import clean, coerce_text

__all__ = ["AnswerForm", "ScoreParse", "parse_score", "parse_score_details", "spaced_decimal"]

AnswerForm = Literal["decimal", "spaced"]
"""How a 0-1 score is written: ``0.5`` (``decimal``) or MiniGPT-v2's ``0 5`` (``spaced``)."""


@dataclass(frozen=True)
class ScoreParse:
    """What :func:`parse_score_details` found.

    ``value`` is the score on the requested scale (``None`` on failure); ``rule`` names the rule
    that decided (``json_key``, ``double_brackets``, ``final_label``, ``label``, ``number_line``,
    ``trailing``, ``fraction``, ``number``, ``spaced``; ``None`` when nothing matched); ``span`` and ``matched`` locate the
    number in the cleaned text (Markdown and special tokens removed); ``reason`` says why
    ``value`` is ``None`` (``"empty answer"``, ``"no number"``, ``"out of range: 150"``,
    ``"negative number: -5"``, ...).
    """

    value: float | None
    rule: str | None = None
    span: tuple[int, int] | None = None
    matched: str | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """Whether a score was found."""
        return self.value is not None


_JSON_KEY_RE = re.compile(
    r"""["'](?:(?:final|overall|total)[ _-]?)?(?:score|rating|grade)["']\s{0,20}:\s{0,20}""",
    re.IGNORECASE,
)
_JSON_NUMBER_START_RE = re.compile(r"""["']?\s{0,5}(?=-?\.?[0-9])""")
_BRACKETS_RE = re.compile(r"\[\[[ \t]{0,5}([^\[\]\n]{0,24}?)[ \t]{0,5}\]\]")
_AFTER_BRACKETS_RE = re.compile(r"\s{0,3}(?:/|out\s+of)\s{0,3}", re.IGNORECASE)
_LABEL_RE = re.compile(
    r"\b(?:scores?|scored|scoring|ratings?|rate[sd]?|grades?|graded|gives?|given|gave|giving|"
    r"assign(?:s|ed)?|awards?|awarded|deserves?|say|answer|result|verdict|evaluation|mark)\b",
    re.IGNORECASE,
)
_FINAL_BEFORE_RE = re.compile(
    r"\b(?:final|overall|total|in\s+conclusion|in\s+summary|therefore|thus|hence|so)\b[^.\n]{0,20}$",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[A-Za-z']+")
_SENTENCE_BREAK_RE = re.compile(r"[.!?;](?:\s|$)")
_NUMBER_LINE_RE = re.compile(
    r"^[ \t>#\-\[(\"']{0,8}(\.?[0-9][0-9.,]{0,30})[ \t]{0,3}"
    r"(?:%|/[ \t]{0,3}[0-9.]{1,6}|out[ \t]+of[ \t]+[0-9.]{1,6})?[ \t\])\"']{0,8}[.!]?[ \t]{0,8}$",
    re.MULTILINE | re.IGNORECASE,
)
# Words allowed between a label and its number ("I would give this caption a score of 85").
_FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "it",
        "its",
        "it's",
        "my",
        "our",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "we",
        "we'd",
        "would",
        "will",
        "should",
        "must",
        "shall",
        "can",
        "could",
        "might",
        "is",
        "are",
        "was",
        "be",
        "being",
        "been",
        "as",
        "at",
        "of",
        "for",
        "to",
        "from",
        "on",
        "in",
        "with",
        "and",
        "between",
        "scale",
        "precise",
        "out",
        "range",
        "ranging",
        "give",
        "gives",
        "given",
        "rate",
        "rated",
        "rating",
        "ratings",
        "score",
        "scores",
        "scored",
        "grade",
        "graded",
        "mark",
        "candidate",
        "caption",
        "captions",
        "description",
        "response",
        "answer",
        "image",
        "final",
        "overall",
        "total",
        "solid",
        "around",
        "about",
        "approximately",
        "roughly",
        "strong",
        "high",
        "low",
        "fair",
        "decent",
        "relatively",
        "pretty",
        "quite",
        "very",
        "deserves",
        "deserve",
        "get",
        "gets",
        "earn",
        "earns",
        "receive",
        "receives",
        "value",
        "number",
        "level",
        "point",
        "points",
        "overall",
        "say",
        "me",
        "then",
        "here",
        "so",
        "generally",
        "fairly",
        "moderately",
        "reasonable",
        "good",
    ]
)
_GAP_LIMIT = 60
# A whole answer that is a spaced decimal: "0 5", "0 85", "Score: 0 9", "**0 5**.".
_SPACED_RE = re.compile(
    r"^[\s\"'`(\[]{0,8}(?:(?:final[ \t]+)?(?:score|rating|answer)[ \t]{0,3}[:=-]?[ \t]{0,3})?"
    r"([01])[ \t]{1,3}([0-9]{1,3})[\s\"'`)\].!]{0,8}$",
    re.IGNORECASE,
)


def spaced_decimal(text: Any) -> tuple[str, float, tuple[int, int]] | None:
    """``(as printed, value, span)`` when the whole answer is a spaced decimal such as ``0 5``
    (MiniGPT-v2's way of writing 0.5), else ``None``. Never raises."""
    raw = coerce_text(text)
    if raw is None or len(raw) > 200:
        return None
    t = clean(raw)
    m = _SPACED_RE.match(t)
    if m is None:
        return None
    return t[m.start(1) : m.end(2)], float(f"{m.group(1)}.{m.group(2)}"), (m.start(1), m.end(2))


def _coerce_bounds(low: Any, high: Any) -> tuple[float, float] | None:
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError, OverflowError):
        return None
    if lo != lo or hi != hi or lo > hi:  # NaN or reversed
        return None
    return lo, hi


def parse_score(text: Any, *, low: float = 0.0, high: float = 100.0, answer_form: AnswerForm = "decimal") -> float | None:
    """The judge's score on the ``[low, high]`` scale, or ``None`` when the text holds no score.

    Never raises. See the module docstring for the rules; :func:`parse_score_details` says which
    one fired and why parsing failed. ``answer_form="spaced"`` reads a whole answer such as
    ``0 5`` as 0.5 on a fractional scale (MiniGPT-v2's form); by default it is no score.
    """
    return parse_score_details(text, low=low, high=high, answer_form=answer_form).value


def parse_score_details(text: Any, *, low: float = 0.0, high: float = 100.0, answer_form: AnswerForm = "decimal") -> ScoreParse:
    """Like :func:`parse_score`, with the rule that fired, the matched number and a failure reason."""
    try:
        return _parse(text, low, high, answer_form)
    except Exception as exc:  # pragma: no cover - a bug here must not break a batch
        return ScoreParse(None, reason=f"parser error: {type(exc).__name__}: {exc}")


def _spaced(text: Any, lo: float, hi: float, answer_form: str) -> ScoreParse | None:
    """The spaced-decimal rule (module doc), or ``None`` when the answer is not one."""
    if hi > 1.0:
        return None
    found = spaced_decimal(text)
    if found is None:
        return None
    shown, value, span = found
    if answer_form != "spaced":
        return ScoreParse(
            None,
            rule="spaced",
            span=span,
            matched=shown,
            reason=f"digits separated by a space: {shown!r} (MiniGPT-v2's way of writing {value:g}; method option answer_form=spaced reads it so)",
        )
    if not lo <= value <= hi:
        return ScoreParse(None, rule="spaced", span=span, matched=shown, reason=f"out of range: {value:g}")
    return ScoreParse(value, rule="spaced", span=span, matched=shown)


def _parse(text: Any, low: Any, high: Any, answer_form: str = "decimal") -> ScoreParse:
    bounds = _coerce_bounds(low, high)
    if bounds is None:
        return ScoreParse(None, reason=f"invalid scale: low={low!r}, high={high!r}")
    lo, hi = bounds
    spaced = _spaced(text, lo, hi, answer_form)
    if spaced is not None:
        return spaced
    raw = coerce_text(text)
    if raw is None:
        return ScoreParse(None, reason=f"not text: {type(text).__name__}")
    t = clean(raw)
    if not t.strip():
        return ScoreParse(None, reason="empty answer")
    sc = scan(t)

    for rule in (
        _json_key,
        _double_brackets,
        _final_label,
        _label,
        _number_line,
        _trailing,
        _fraction,
    ):
        found = rule(t, sc)
        if found is None:
            continue
        name, tok, reason = found
        if tok is None:
            return ScoreParse(None, rule=name, reason=reason)
        return _decide(name, tok, sc, lo, hi)
    return _first_number(sc, lo, hi)


def _decide(rule: str, tok: Token, sc: Scan, low: float, high: float) -> ScoreParse:
    value, reason = token_value(tok, sc, low, high)
    return ScoreParse(value, rule=rule, span=(tok.start, tok.end), matched=tok.shown, reason=reason)


_Found = tuple[str, Token | None, str | None]


def _json_key(t: str, sc: Scan) -> _Found | None:
    last = None
    for m in _JSON_KEY_RE.finditer(t):
        last = m
    if last is None:
        return None
    n = _JSON_NUMBER_START_RE.match(t, last.end())
    if n is not None:
        i = sc.index_at(n.end()) if t[n.end()] != "-" else sc.index_at(n.end() + 1)
        if i is not None:
            return "json_key", sc.tokens[i], None
    shown = t[last.end() : last.end() + 20].split(",")[0].split("}")[0].strip()
    return "json_key", None, f"score field holds no number: {shown!r}"


def _double_brackets(t: str, sc: Scan) -> _Found | None:
    last = None
    for m in _BRACKETS_RE.finditer(t):
        if NUM_RE.search(m.group(1)):
            last = m
    if last is None:
        return None
    i = sc.first_after(last.start(1))
    if i >= len(sc.tokens) or sc.tokens[i].start >= last.end(1):
        return None
    tok = sc.tokens[i]
    if tok.denom is None:
        after = _AFTER_BRACKETS_RE.match(t, last.end())
        if after is not None:
            j = sc.index_at(after.end())
            if j is not None:
                den = sc.tokens[j]
                if den.value > 0:
                    tok.denom = den.value
                    den.excluded = "denominator"
    return "double_brackets", tok, None


def _label_candidates(t: str, sc: Scan):
    """Yield ``(label match, token)`` for every label followed by a number through filler words."""
    for m in _LABEL_RE.finditer(t):
        i = sc.first_after(m.end())
        while i < len(sc.tokens):
            tok = sc.tokens[i]
            if tok.start - m.end() > _GAP_LIMIT:
                break
            gap = t[m.end() : tok.start]
            if _SENTENCE_BREAK_RE.search(gap):
                break
            if any(w.lower().removesuffix("'s") not in _FILLER for w in _WORD_RE.findall(gap)):
                break
            if tok.excluded is None:
                yield m, tok
                break
            i += 1


def _final_label(t: str, sc: Scan) -> _Found | None:
    last = None
    for m, tok in _label_candidates(t, sc):
        if _FINAL_BEFORE_RE.search(t[max(0, m.start() - 40) : m.start()]):
            last = tok
    return ("final_label", last, None) if last is not None else None


def _label(t: str, sc: Scan) -> _Found | None:
    for _m, tok in _label_candidates(t, sc):
        return "label", tok, None
    return None


def _number_line(t: str, sc: Scan) -> _Found | None:
    for m in _NUMBER_LINE_RE.finditer(t):
        i = sc.index_at(m.start(1))
        if i is not None and sc.tokens[i].excluded is None:
            return "number_line", sc.tokens[i], None
    return None


_TRAILING_BEFORE_RE = re.compile(r"(?:[.!?:]|\n)[ \t>\-\[(\"']{0,6}$")
_TRAILING_AFTER_RE = re.compile(r"[ \t.!)\]\"'\n]*$")


def _trailing(t: str, sc: Scan) -> _Found | None:
    """The answer ends with a number that stands as its own sentence: ``... mentions 5. 30``."""
    if not sc.tokens:
        return None
    tok = sc.tokens[-1]
    if tok.excluded is not None and tok.excluded != "denominator":
        return None
    if tok.excluded == "denominator":  # "... so 7/10": the numerator is the score
        if len(sc.tokens) < 2 or sc.tokens[-2].denom is None:
            return None
        tok = sc.tokens[-2]
    end = sc.tokens[-1].end
    if not _TRAILING_AFTER_RE.fullmatch(t, end) or not _TRAILING_BEFORE_RE.search(
        t[max(0, tok.start - 8) : tok.start]
    ):
        return None
    return "trailing", tok, None


def _fraction(t: str, sc: Scan) -> _Found | None:
    for tok in sc.tokens:
        if tok.denom is not None and tok.excluded is None:
            return "fraction", tok, None
    return None


def _first_number(sc: Scan, low: float, high: float) -> ScoreParse:
    first_bad: str | None = None
    first_int: ScoreParse | None = None
    fractional = high <= 1.0
    for tok in sc.tokens:
        if tok.excluded is not None:
            continue
        if tok.count and not (tok.percent or tok.denom is not None):
            continue
        value, reason = token_value(tok, sc, low, high)
        if value is None:
            first_bad = first_bad or reason
            continue
        found = ScoreParse(value, rule="number", span=(tok.start, tok.end), matched=tok.shown)
        if not fractional or tok.decimal or tok.percent or tok.denom is not None:
            return found
        first_int = first_int or found
    if first_int is not None:
        return first_int
    if first_bad is not None:
        return ScoreParse(None, rule="number", reason=first_bad)
    if sc.tokens:
        kinds = sorted({tok.excluded or ("count" if tok.count else "") for tok in sc.tokens} - {""})
        return ScoreParse(None, reason=f"no score among the numbers ({', '.join(kinds)})")
    return ScoreParse(None, reason="no number")
