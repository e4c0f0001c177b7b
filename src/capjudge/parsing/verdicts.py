"""Reading a pairwise verdict (``"A"``, ``"B"`` or ``"tie"``) out of a judge's answer.

``"A"`` is the caption shown first (``Answer 1``, ``Caption A``, ``Output (a)``, ``the first
caption``, ``the former``, MT-Bench's ``[[A]]``), ``"B"`` the one shown second, and ``"tie"`` a
draw (``Tie``, MT-Bench's ``[[C]]``, ``both are equally good``, ``neither is better``).

Rules, in order; the first that decides wins:

1. ``bare``: the whole answer is just a label, perhaps with Markdown, quotes, brackets or an
   ``Answer:`` / ``Verdict:`` prefix: ``A``, ``1``, ``**Answer 1**``, ``Caption B.``, ``Tie``.
2. ``brackets``: the last MT-Bench ``[[A]]`` / ``[[B]]`` / ``[[C]]`` (also ``[[1]]``, ``[[Tie]]``).
3. ``final``: the last explicit decision, ``Final verdict: Answer 2``, ``My choice is the second
   caption``, ``Verdict - Tie``, ``The better caption is Caption A``, ``Therefore, Answer 1.``
4. ``leading``: the answer opens with a bare label and then explains (``Answer 2, because ...``).
5. ``statements``: sentence by sentence, preference statements are read. Strong ones (``better``,
   ``prefer``, ``choose``, ``superior``, ``wins``, tie phrases) decide by the *last* sentence that
   holds one; if that sentence contradicts itself, there is no verdict. Without strong statements,
   weak ones (``more accurate``, ``less detailed``, ``is wrong``) decide only when they all agree:
   ``Answer 1 is more detailed, but Answer 2 is more accurate.`` gives ``None``. Comparisons with
   *than* credit the subject (``Caption 2 is worse than Caption 1`` is A).
6. ``only_one``: the answer names only one of the two, and no tie phrase.

Labels in single brackets, as LLaVA-Critic writes them (``The better response: [2].``, ``the
[first] response is better``), are read as the bare label first.

Otherwise ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from capjudge.parsing.text import clean, coerce_text

__all__ = ["Verdict", "VerdictParse", "parse_verdict", "parse_verdict_details"]

Verdict = Literal["A", "B", "tie"]

_NOUNS = (
    r"answer|caption|response|output|option|candidate|description|sentence|choice|text|"
    r"assistant|model|summary|result"
)
# Words that may follow a letter label ("Caption A describes ..."), so that a caption quoted
# after the noun ("the caption A dog on a couch") is not read as a label.
_LABEL_FOLLOWERS = (
    r"is|was|has|had|seems|wins|won|does|doesn't|isn't|provides|describes|captures|and|or|over|"
    r"than|because|since|as|correctly|accurately|incorrectly|mentions|better|worse|also|only|"
    r"fails|misses|includes|contains|gives|offers|identifies|focuses|lacks|says|states|adds|omits|"
    r"uses|shows|depicts|would|should|could|clearly|more|less|by|in|with|for|to|vs|versus"
)
# "Answer 1", "Caption B", "Output (a)", "caption #2", "Answer-1". Letter labels must be followed
# by punctuation, the end, "'s" or one of the words above.
_MENTION_RE = re.compile(
    rf"\b(?:{_NOUNS})s?[ \t]{{0,3}}[#:-]?[ \t]{{0,3}}"
    r"(?:\((?P<p>[12abAB])\)|(?P<d>[12])(?![0-9]|\.[0-9])|(?P<u>(?-i:[ABab]))(?=['\u2019]s\b|[ \t]{0,3}(?:[.,;:!?)\]]|$|\n|(?:"
    + _LABEL_FOLLOWERS
    + r")\b)))"
    rf"|\b(?:the[ \t]+)?(?P<o>first|second|former|latter|1st|2nd)[ \t]+(?:one|{_NOUNS})s?\b"
    r"|\bthe[ \t]+(?P<o2>first|second|former|latter)\b(?=[ \t]{0,3}(?:[.,;:!?)]|$|\n|(?:is|was|seems|one)\b))",
    re.IGNORECASE,
)
_TIE_RE = re.compile(
    r"\b(?:ties?|tied|a[ \t]+draw|equally|equal(?:[ \t]+(?:quality|in[ \t]+quality|merit))?|"
    r"(?:the[ \t]+)?same[ \t]+(?:quality|level)|neither(?:[ \t]+\w+){0,3}[ \t]+(?:is|are)[ \t]+(?:better|worse|superior|preferable)|"
    r"no[ \t]+(?:clear[ \t]+)?(?:winner|difference|preference)|on[ \t]+par|comparable|indistinguishable|"
    r"both[ \t]+(?:are|captions[ \t]+are|answers[ \t]+are)[ \t]+(?:equally|just[ \t]+as|as)|equivalent|similar[ \t]+quality)\b",
    re.IGNORECASE,
)
_STRONG_POS_RE = re.compile(
    r"\b(?:better|best|superior|prefer(?:red|able|s)?|choose|chose|chosen|pick(?:ed)?|select(?:ed)?|"
    r"winner|wins?|outperforms?|go(?:ing)?[ \t]+with|opt[ \t]+for|favou?r(?:ed)?|recommend(?:ed)?)\b",
    re.IGNORECASE,
)
_STRONG_NEG_RE = re.compile(r"\b(?:worse|worst|inferior|loses?|loser)\b", re.IGNORECASE)
_WEAK_POS_RE = re.compile(
    r"\b(?:more[ \t]+\w+|most[ \t]+\w+|\w{3,}er[ \t]+than|accurate(?:ly)?|correct(?:ly)?|precise(?:ly)?|"
    r"detailed|captures|comprehensive|appropriate|faithful)\b",
    re.IGNORECASE,
)
_WEAK_NEG_RE = re.compile(
    r"\b(?:less[ \t]+\w+|least[ \t]+\w+|lacks?|fails?|wrong(?:ly)?|incorrect(?:ly)?|inaccurate(?:ly)?|"
    r"misses|missing|hallucinat\w*|mistakes?|errors?)\b",
    re.IGNORECASE,
)
_NEGATION_RE = re.compile(r"\b(?:not|n't|never|no)\b[ \t]+(?:\w+[ \t]+)?$", re.IGNORECASE)
_THAN_RE = re.compile(r"\bthan\b", re.IGNORECASE)
# A run of spaces is only tried from its start ((?<![ \t])): from every space of it, each retry
# rescans the rest of the run (quadratic in a long one); a match from inside it would need the same
# word at its end, so the splits are the same.
_CLAUSE_SPLIT_RE = re.compile(
    r"(?<=[.!?])\s+|\n+|;|,?(?<![ \t])[ \t]+(?:but|while|whereas|however|although|though|yet|because|since|"
    r"as[ \t]+it|which|so|therefore|thus|hence)\b,?|,[ \t]+and\b",
    re.IGNORECASE,
)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_FINAL_RE = re.compile(
    r"\b(?:final[ \t]+(?:verdict|answer|decision|choice|judg(?:e)?ment|output|result)|verdict|decision|"
    r"conclusion|my[ \t]+(?:choice|answer|preference|pick|vote)|answer|choice|preference|winner|result|"
    rf"(?:the[ \t]+)?(?:better|best|preferred|winning|superior)[ \t]+(?:one|{_NOUNS}))"
    r"[ \t]{0,3}(?:is|would[ \t]+be|:|-|=)[ \t]{0,3}(?::[ \t]{0,3})?",
    re.IGNORECASE,
)
_BRACKETS_RE = re.compile(r"\[\[[ \t]{0,3}(A|B|C|1|2|tie|draw)[ \t]{0,3}\]\]", re.IGNORECASE)
_BARE_PREFIX_RE = re.compile(
    r"^(?:(?:final[ \t]+)?(?:verdict|answer|output|choice|decision|winner|result|better(?:[ \t]+caption)?)[ \t]*[:=-][ \t]*)+",
    re.IGNORECASE,
)
_BARE_LABEL_RE = re.compile(
    rf"^(?:(?:{_NOUNS})[ \t]*[#:-]?[ \t]*)?\(?(?P<x>[12ab]|c)\)?$"
    r"|^(?:the[ \t]+)?(?P<o>first|second|former|latter)(?:[ \t]+(?:one|" + _NOUNS + r"))?$"
    r"|^(?P<t>tie|tied|draw|it'?s[ \t]+a[ \t]+tie|equal|equally[ \t]+good|both|neither|same|both[ \t]+are[ \t]+equally[ \t]+good)$",
    re.IGNORECASE,
)
# LLaVA-Critic writes its labels in single brackets: "The better response: [1].", "the [second]
# response is better"; unwrapped they read as any label (MT-Bench's [[1]] keeps its double brackets).
_SINGLE_BRACKET_RE = re.compile(r"(?<!\[)\[[ \t]{0,2}(1|2|first|second)[ \t]{0,2}\](?!\])", re.IGNORECASE)
_STRIP_CHARS = " \t\r\n\"'`[](){}<>.,;:!?#-_"
_LEADING_END_RE = re.compile(  # runs of spaces tried from their start, as _CLAUSE_SPLIT_RE
    r"[.,;!?\n(]|(?<![ \t])[ \t]+(?:because|since|as[ \t]+it|as[ \t]+the|-|\u2013|\u2014)\b|(?<![ \t])[ \t]+[\u2013\u2014-][ \t]",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class VerdictParse:
    """What :func:`parse_verdict_details` found: the verdict and the rule that decided.

    ``rule`` is one of ``bare``, ``brackets``, ``final``, ``leading``, ``statements``,
    ``only_one``, or ``None`` when there is no verdict.
    """

    verdict: Verdict | None
    rule: str | None = None


def _side_of_mention(m: re.Match[str]) -> Verdict:
    for key in ("p", "d", "u"):
        v = m.group(key)
        if v:
            return "A" if v.lower() in ("1", "a") else "B"
    o = (m.group("o") or m.group("o2") or "").lower()
    return "A" if o in ("first", "former", "1st") else "B"


def _label_from_token(x: str) -> Verdict | None:
    x = x.lower()
    if x in ("1", "a"):
        return "A"
    if x in ("2", "b"):
        return "B"
    if x in ("c", "tie", "draw"):
        return "tie"
    return None


def parse_verdict(text: Any) -> Verdict | None:
    """The judge's verdict: ``"A"`` (caption shown first), ``"B"``, ``"tie"``, or ``None``.

    Never raises. See the module docstring for the rules.
    """
    return parse_verdict_details(text).verdict


def parse_verdict_details(text: Any) -> VerdictParse:
    """Like :func:`parse_verdict`, with the name of the rule that decided."""
    try:
        return _parse(text)
    except Exception:  # pragma: no cover - a bug here must not break a batch
        return VerdictParse(None, None)


def _bare(s: str) -> Verdict | None:
    s = s.strip(_STRIP_CHARS)
    s = _BARE_PREFIX_RE.sub("", s).strip(_STRIP_CHARS)
    if len(s) > 40:
        return None
    s = " ".join(s.split())
    m = _BARE_LABEL_RE.match(s)
    if m is None:
        return None
    if m.group("x"):
        x = m.group("x")
        if x == "c":  # lowercase c alone is too weak to read as MT-Bench's tie
            return None
        return _label_from_token(x)
    if m.group("o"):
        return "A" if m.group("o").lower() in ("first", "former") else "B"
    return "tie"


def _parse(text: Any) -> VerdictParse:
    raw = coerce_text(text)
    if raw is None:
        return VerdictParse(None, None)
    t = _SINGLE_BRACKET_RE.sub(r"\1", clean(raw))
    if not t.strip():
        return VerdictParse(None, None)

    v = _bare(t)
    if v is not None:
        return VerdictParse(v, "bare")

    last = None
    for m in _BRACKETS_RE.finditer(t):
        last = m
    if last is not None:
        return VerdictParse(_label_from_token(last.group(1)), "brackets")

    v = _final(t) or _conclusion(t)
    if v is not None:
        return VerdictParse(v, "final")

    lead = _LEADING_END_RE.search(t.lstrip(), 0)
    head = t.lstrip()[: lead.start()] if lead else t
    if lead is not None:
        v = _bare(head)
        if v is not None:
            return VerdictParse(v, "leading")

    v = _statements(t)
    if v is not None:
        return VerdictParse(v, "statements")

    sides = {_side_of_mention(m) for m in _MENTION_RE.finditer(t)}
    if len(sides) == 1 and not _TIE_RE.search(t):
        return VerdictParse(sides.pop(), "only_one")
    return VerdictParse(None, None)


def _final(t: str) -> Verdict | None:
    found: Verdict | None = None
    for m in _FINAL_RE.finditer(t):
        rest = t[m.end() : m.end() + 60]
        end = _LEADING_END_RE.search(rest)
        head = rest[: end.start()] if end else rest
        v = _bare(head)
        if v is None:
            mm = _MENTION_RE.match(rest)
            if mm is not None:
                v = _side_of_mention(mm)
            elif _TIE_RE.match(rest) or re.match(r"(?:a|it'?s a)[ \t]+tie\b", rest, re.IGNORECASE):
                v = "tie"
        if v is not None:
            found = v
    return found


_CONCLUSION_RE = re.compile(
    r"\b(?:therefore|thus|hence|so|overall|in[ \t]+conclusion|in[ \t]+summary|to[ \t]+conclude)[ \t]*[,:]?[ \t]*",
    re.IGNORECASE,
)


def _conclusion(t: str) -> Verdict | None:
    """The last ``Therefore, Answer 1.`` / ``In conclusion: tie`` (a bare label after the word)."""
    found: Verdict | None = None
    for m in _CONCLUSION_RE.finditer(t):
        rest = t[m.end() : m.end() + 60]
        end = _LEADING_END_RE.search(rest)
        v = _bare(rest[: end.start()] if end else rest)
        if v is not None:
            found = v
    return found


def _polarity(clause: str, rx: re.Pattern[str]) -> int:
    """+1 for each match of ``rx`` not negated, -1 for each negated one (``not better``)."""
    total = 0
    for m in rx.finditer(clause):
        neg = _NEGATION_RE.search(clause[max(0, m.start() - 20) : m.start()])
        total += -1 if neg else 1
    return total


def _clause_vote(clause: str) -> tuple[Verdict | None, bool]:
    """The side a clause favours and whether the statement is strong."""
    mentions = [(_side_of_mention(m), m.start()) for m in _MENTION_RE.finditer(clause)]
    sides = {s for s, _ in mentions}
    strong = _polarity(clause, _STRONG_POS_RE) - _polarity(clause, _STRONG_NEG_RE)
    # "less accurate" must not also count as "accurate": read the negative phrases first.
    weak = _polarity(_WEAK_NEG_RE.sub(" ", clause), _WEAK_POS_RE) - _polarity(clause, _WEAK_NEG_RE)
    tie = _TIE_RE.search(clause)
    if tie and (not sides or not strong or re.search(r"\b(?:tie|tied)\b", clause, re.IGNORECASE)):
        return "tie", True
    if not sides:
        return None, False
    polarity, is_strong = (strong, True) if strong else (weak, False)
    if polarity == 0:
        return None, False
    if len(sides) == 2:
        than = _THAN_RE.search(clause)
        if than is None:
            return None, False
        before = [s for s, pos in mentions if pos < than.start()]
        if not before:
            return None, False
        subject = before[0]
    else:
        subject = next(iter(sides))
    if polarity > 0:
        return subject, is_strong
    return ("B" if subject == "A" else "A"), is_strong


def _statements(t: str) -> Verdict | None:
    strong_by_sentence: list[set[Verdict]] = []
    weak: set[Verdict] = set()
    for sentence in _SENTENCE_SPLIT_RE.split(t):
        strong_here: set[Verdict] = set()
        for clause in _CLAUSE_SPLIT_RE.split(sentence):
            if not clause or not clause.strip():
                continue
            v, is_strong = _clause_vote(clause)
            if v is None:
                continue
            if is_strong:
                strong_here.add(v)
            else:
                weak.add(v)
        if strong_here:
            strong_by_sentence.append(strong_here)
    if strong_by_sentence:
        last = strong_by_sentence[-1]
        return next(iter(last)) if len(last) == 1 else None
    if len(weak) == 1:
        return next(iter(weak))
    return None
