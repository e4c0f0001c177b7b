"""The score readers of the official code, for the ``*-code`` methods that reproduce released runs.

* :func:`first_integer`: the VisCE2 code (``src/data/capeval_dataset.py``, ``get_digit_scores``)
  takes the first ``[0-9]+`` of the answer: ``Rating: 7/10`` is 7, ``85.5`` is 85, ``0.85`` is 0.
  Its answer without any digit scores 0; here that is ``None`` and the caller decides (an error
  record by default, or the code's 0 on request, said in the record).
* :func:`fleur_code_number`: the FLEUR code (``fleur.py``, ``reffleur.py``) drops the last four
  characters of the decoded answer (the ``</s>`` that ends it), keeps every digit and dot of what
  is left, strips dots at both ends and reads the rest as one float: ``Score: 0.85`` is 0.85, but
  ``0.8 (out of 1.0)`` is ``0.81.0``, which is no number.

capjudge's own reader (:mod:`capjudge.parsing.scores`) is the default of the paper methods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from capjudge.parsing.text import coerce_text

_FIRST_INTEGER = re.compile(r"[0-9]+")
_NOT_DIGIT_OR_DOT = re.compile(r"[^\d.]")


def first_integer(text: object) -> float | None:
    """The first run of ASCII digits in the answer as a number, or ``None`` when there is none."""
    s = coerce_text(text)
    if s is None:
        return None
    m = _FIRST_INTEGER.search(s)
    return float(m.group(0)) if m else None


@dataclass(frozen=True)
class FleurCodeParse:
    """What the FLEUR code reads from an answer: ``value`` (``None`` when ``float()`` fails) and
    ``digits``, the digits-and-dots string it tried to read."""

    value: float | None
    digits: str


def fleur_code_number(text: object, finish_reason: str | None = "stop") -> FleurCodeParse:
    """The FLEUR code's reading of an answer.

    Its decoded answer ends with ``</s>`` when the model stopped by itself, and the code cuts the
    last four characters off unconditionally. capjudge's answers carry no ``</s>``, so the cut is
    applied only where the code would have cut real text: an answer that ran out of new tokens
    (``finish_reason == "length"``).
    """
    s = (coerce_text(text) or "").strip()
    if finish_reason == "length":
        s = s[:-4]
    # \d in FLEUR's pattern is Python's Unicode digit class; float() reads those digits too.
    digits = _NOT_DIGIT_OR_DOT.sub("", s)
    number = digits.lstrip(".").rstrip(".")
    try:
        return FleurCodeParse(float(number), digits)
    except ValueError:
        return FleurCodeParse(None, digits)
