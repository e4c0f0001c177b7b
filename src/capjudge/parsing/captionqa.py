"""CaptionQA's rules (bronyayang/CaptionQA f729489, ``qa.py``), as capjudge reads them: which
questions are yes/no, the added "Cannot answer from the caption" option and its credit, the
ground truth's letter, the letter read from an answer, and the options as the prompt lists them.
Pure functions; none raises on any string (docs/methods.md, "CaptionQA").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""The option letters (``LETTER_ALPH``)."""
CANNOT_ANSWER = "Cannot answer from the caption"
"""The option added to every question that is not yes/no (``CANNOT_ANSWER_TEXT``)."""
CANNOT_ANSWER_BONUS = 0.05
"""Choosing :data:`CANNOT_ANSWER` earns ``1 / n + 0.05`` (``n``: the question's own options)."""

# The question openings that make a question yes/no whatever its options (is_yesno_question).
YESNO_STARTS = (
    "is ", "are ", "was ", "were ", "do ", "does ", "did ", "have ", "has ", "had ",
    "can ", "could ", "will ", "would ", "should ", "shall ", "may ", "might ", "must ",
)
_LETTER = re.compile(r"\b([A-Z])\b")
_NUMBER = re.compile(r"\b([1-9][0-9]?)\b")


def is_yesno(question: str, choices: Sequence[Any]) -> bool:
    """A yes/no question as CaptionQA decides it: some option contains ``yes`` and some contains
    ``no`` (substrings, case folded: ``"None"`` and ``"eyes"`` count), or the question starts with
    one of :data:`YESNO_STARTS` (case folded, leading blanks stripped)."""
    texts = [str(c).strip().lower() for c in choices]
    if any("yes" in t for t in texts) and any("no" in t for t in texts):
        return True
    return str(question).strip().lower().startswith(YESNO_STARTS)


def with_cannot_answer(question: str, choices: Sequence[Any]) -> list[Any]:
    """The options asked: ``choices``, plus :data:`CANNOT_ANSWER` last unless the question is yes/no."""
    return list(choices) if is_yesno(question, choices) else [*choices, CANNOT_ANSWER]


def answer_index(choices: Sequence[Any], answer: Any) -> int | None:
    """The index of the first option equal to ``answer`` (both stripped), ``None`` when the answer
    is not a string or matches no option (CaptionQA then skips the question)."""
    if not choices or not isinstance(answer, str):
        return None
    for i, choice in enumerate(choices):
        if answer.strip() == str(choice).strip():
            return i
    return None


def option_lines(options: Sequence[Any]) -> str:
    """The options as the prompt lists them: ``"A. first"`` and so on, one a line."""
    return "\n".join(f"{LETTERS[i]}. {choice}" for i, choice in enumerate(options))


def answer_letter(text: object, options: int) -> str | None:
    """The letter CaptionQA reads from an answer (``extract_letter``): the text after the first
    ``</think>``, then after the first ``"Answer: "``, then after the first newline; in it the
    first standalone capital letter (case folded) among the first ``options`` letters, else the
    first standalone number 1-99 among the first ``options`` (as its letter); else ``None``."""
    s = text if isinstance(text, str) else ""
    if not s:
        return None
    for mark in ("</think>", "Answer: ", "\n"):
        if mark in s:
            s = s.split(mark, 1)[1]
    limit = max(1, options)
    m = _LETTER.search(s.upper())
    if m and 0 <= LETTERS.find(m.group(1)) < limit:
        return m.group(1)
    m = _NUMBER.search(s)
    if m and 1 <= int(m.group(1)) <= limit:
        return LETTERS[int(m.group(1)) - 1]
    return None


def cannot_answer_credit(choices: int) -> float:
    """The credit of choosing :data:`CANNOT_ANSWER` on a question of ``choices`` own options."""
    return 1.0 / choices + CANNOT_ANSWER_BONUS


__all__ = [
    "CANNOT_ANSWER",
    "CANNOT_ANSWER_BONUS",
    "LETTERS",
    "YESNO_STARTS",
    "answer_index",
    "answer_letter",
    "cannot_answer_credit",
    "is_yesno",
    "option_lines",
    "with_cannot_answer",
]
