"""Splitting a caption into sentences, for the probes of detailed captions (:mod:`.detailed`).

A small rule-based splitter, so that no language-model dependency is needed: a sentence ends at
``.``, ``!``, ``?`` or ``…`` (a run of them, then closing quotes or brackets) followed by white
space and a capital letter, a digit or an opening quote or bracket, or at a blank line. It does
not end

* after a known abbreviation (``Mr.``, ``Dr.``, ``St.``, ``e.g.``, ``approx.``, ``vs.``, ...:
  :data:`ABBREVIATIONS`), a single capital initial (``J. R. R. Tolkien``) or a dotted acronym
  (``U.S.``, ``a.m.``);
* inside a number (``3.5 metres``, ``v1.2``): no white space follows the point;
* before a lower-case word (``... approx. two metres``).

Each :class:`Sentence` keeps its character offsets in the caption, so that a perturbation edits
the caption in place and leaves the rest of it byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ABBREVIATIONS: frozenset[str] = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "no", "nos", "vs", "etc", "approx",
        "appr", "ca", "cf", "fig", "figs", "e.g", "i.e", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr",
        "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "ave", "rd", "blvd", "dept", "est", "gen",
        "gov", "lt", "col", "capt", "sgt", "rev", "vol", "min", "max", "incl", "resp",
    }
)  # fmt: skip
"""Lower-case words (without their final point) after which a point does not end a sentence
when a capital letter follows (``Dr. Smith``, ``St. Peter's Square``). ``etc.`` is listed: a
caption that ends a sentence with it and starts the next with a capital is kept as one sentence,
the safer error for the probes (a sentence is never cut in two)."""

# End punctuation, then closing quotes/brackets, then white space; the next sentence's first
# character must be a capital, a digit or an opening quote/bracket.
_BOUNDARY = re.compile(r"""([.!?…]+)(["'”’)\]]*)(\s+)(?=["'“‘(\[]?[A-Z0-9])""")
_BLANK_LINE = re.compile(r"\n[ \t]*\n\s*")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")


@dataclass(frozen=True)
class Sentence:
    """One sentence of a text: ``text`` is ``source[start:end]`` (no surrounding white space)."""

    start: int
    end: int
    text: str


def _ends_sentence(text: str, punct_start: int, punct: str) -> bool:
    if punct != ".":
        return True  # "!", "?", "...", "?!" always end one
    m = _WORD_BEFORE.search(text, 0, punct_start)
    if m is None:
        return True  # "3. The ..." or a point after a bracket
    word = m.group(1)
    if word.lower().rstrip(".") in ABBREVIATIONS:
        return False
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. Smith"
    return "." not in word  # a dotted acronym: "U.S.", "a.m."


def _cuts(text: str) -> list[tuple[int, int]]:
    """``(end of a sentence, start of the next)`` for every boundary, in order."""
    cuts: dict[int, int] = {}
    for m in _BOUNDARY.finditer(text):
        if _ends_sentence(text, m.start(1), m.group(1)):
            cuts[m.end(2)] = m.end(3)
    for m in _BLANK_LINE.finditer(text):
        end = m.start()
        while end > 0 and text[end - 1] in " \t":
            end -= 1
        cuts.setdefault(end, m.end())
    return sorted(cuts.items())


def split_sentences(text: str) -> list[Sentence]:
    """The sentences of ``text`` in order, each with its offsets (none empty; white space between
    them belongs to none)."""
    out: list[Sentence] = []
    pos = 0
    for end, nxt in [*_cuts(text), (len(text), len(text))]:
        if end < pos:
            continue
        chunk = text[pos:end]
        lead = len(chunk) - len(chunk.lstrip())
        body = chunk.strip()
        if body:
            start = pos + lead
            out.append(Sentence(start, start + len(body), body))
        pos = nxt
    return out


__all__ = ["ABBREVIATIONS", "Sentence", "split_sentences"]
