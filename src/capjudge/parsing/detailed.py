"""The official readers of the detailed-caption methods: CapArena's judgment, CapMAS's proposition
and answer lists, CLAIR's score. Each reads as its code reads; where the code would crash on an
answer, the reader says the answer has the wrong form instead (docs/methods.md, "Differences from
the official code"). Pure functions of the answer text; none raises on any string.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["A", "B", "tie"]

# CapArena vlm_as_a_judge.py: the answer is accepted when both groups are non-empty; the judgment
# then counts only as one of these strings (cal_agreement skips any other judgment). Its reason
# pattern, r"Reason:\s*(.+?)\s*Judgment:" (DOTALL), is read by _reason in linear time.
_JUDGMENT = re.compile(r"Judgment:\s*(.+)")
CAPARENA_JUDGMENTS: dict[str, Verdict] = {
    "Caption 1 is better.": "A",
    "Caption 1 is better": "A",
    "Caption 2 is better.": "B",
    "Caption 2 is better": "B",
    "Tie": "tie",
    "Tie.": "tie",
}


@dataclass(frozen=True)
class CapArenaAnswer:
    """A CapArena judge answer read: ``formatted`` (its code keeps it rather than asking again),
    the ``judgment`` text, the ``verdict`` it counts as (``None``: not one of the accepted strings)
    and ``problem``, in words, when there is no verdict."""

    formatted: bool
    reason: str | None
    judgment: str | None
    verdict: Verdict | None
    problem: str | None


def caparena_answer(text: object) -> CapArenaAnswer:
    """Read an answer as CapArena's ``mllm_judge_pairs`` and ``cal_agreement`` read it."""
    s = text if isinstance(text, str) else ""
    jm = _JUDGMENT.search(s)
    reason = _reason(s)
    judgment = jm.group(1).strip() if jm else None
    if not (reason and judgment):
        return CapArenaAnswer(False, reason, judgment, None, "no 'Reason: ... Judgment: ...' answer")
    verdict = CAPARENA_JUDGMENTS.get(judgment)
    problem = None if verdict is not None else f"judgment {judgment[:60]!r} is not 'Caption 1 is better', 'Caption 2 is better' or 'Tie' (CapArena's agreement skips it)"
    return CapArenaAnswer(True, reason, judgment, verdict, problem)


def _reason(s: str) -> str | None:
    """The stripped group of CapArena's ``Reason:\\s*(.+?)\\s*Judgment:`` (DOTALL) in ``s``, found
    without the regex, whose backtracking is quadratic in a long run of spaces or of ``Reason:``
    without a ``Judgment:``. Only the first ``Reason:`` can match: a later one has no
    ``Judgment:`` after it when the first has none at least one character after its spaces."""
    at = s.find("Reason:")
    if at < 0:
        return None
    after = at + len("Reason:")
    tail = s[after:]
    start = after + len(tail) - len(tail.lstrip())  # past \s* (str.isspace is re's \s)
    end = s.find("Judgment:", start + 1)  # (.+?) holds at least one character
    if end >= 0:
        return s[start:end].strip()
    if start > after and s.startswith("Judgment:", start):
        return ""  # "Reason:  Judgment:": \s* gives back a space for (.+?), which strips to nothing
    return None


def capmas_propositions(text: str) -> list[str] | None:
    """CapMAS ``generate_q``: the numbered lines of a decomposition (``"1. proposition"``, kept
    whole). ``None`` where the code gives up on the caption: the same proposition three times in a
    row, or a line of more than 245 words. Blank lines are passed over (the code would crash on one)."""
    atoms: list[str] = []
    last_three = ["a", "b", "c"]
    for line in text.replace("\n\n", "\n").split("\n"):
        if not line:
            continue
        if line[0].isdigit() and len(line.split(". ")) > 1:
            atoms.append(line)
            last_three.append(line.split(". ")[1])
            last_three.pop(0)
            if len(set(last_three)) == 1 or len(line.split()) > 245:
                return None
    return atoms


def proposition_text(atom: str) -> str:
    """A numbered line without its number, as CapMAS logs it (``' '.join(q.split(' ')[1:])``)."""
    return " ".join(atom.split(" ")[1:])


def capmas_answers(text: str) -> list[str] | None:
    """CapMAS factuality's ``a2l`` (``eval_factuality.py``): ``". "`` becomes a line break, each
    line is cut at ``)`` and its first word kept; every second item is an answer (``"1. True"`` ->
    ``"True"``). ``None`` where the code would crash (a line with no word). Coverage reads with its
    own ``a2l``, :func:`coverage_answers`."""
    items = text.replace("\n\n", "\n").strip().replace(". ", "\n")
    firsts: list[str] = []
    for piece in items.split("\n"):
        words = piece.split(")")[0].split()
        if not words:
            return None
        firsts.append(words[0])
    return firsts[1::2]


def coverage_answers(text: str) -> list[str]:
    """CapMAS coverage's ``a2l`` (``eval_coverage.py``, not factuality's): as :func:`capmas_answers`
    but each piece is kept whole up to ``)``, with no first word taken: ``"A Nature"``, ``"B "``
    and ``"I don't know"`` stay as they are (then compared with the key, so counted wrong), and an
    empty answer line is an empty answer, counted wrong, not asked again. Never fails."""
    items = text.replace("\n\n", "\n").strip().replace(". ", "\n")
    return [piece.split(")")[0] for piece in items.split("\n")][1::2]


def numbered_questions(questions: list[str]) -> str:
    """CapMAS coverage's question block: ``"{i}. {question}"`` from 0, joined by blank lines."""
    return "\n\n".join(f"{i}. {questions[i]}" for i in range(len(questions)))


def clair_statements(items: list[str]) -> str:
    """CLAIR's candidate or reference set: ``"- {item}\\n"`` for each, joined."""
    return "".join(f"- {c}\n" for c in items)


@dataclass(frozen=True)
class ClairAnswer:
    """A CLAIR answer read: ``score`` on 0-100 (``None``: ask again), ``reason``, ``rule`` (``json``
    or ``first-number``) or ``problem`` (``fatal``: the code would stop the run, not ask again)."""

    score: float | None
    reason: str | None
    rule: str | None
    problem: str | None = None
    fatal: bool = False


_NUMBER = re.compile(r"\d*\.?\d+")
_REASON_WORD = re.compile(r"(?i)reason.*")


def clair_answer(response: str) -> ClairAnswer:
    """Read an answer as CLAIR's code (CapMAS ``eval_clair.py``) does: the first ``{...}`` as JSON
    with ``score`` (and ``reason``, else ``'Unknown'``); failing that the first number (x100 when
    below 1) and the text after the word "reason"; else no score. A ``score`` that is not a number
    is a problem (the code stops the whole run there)."""
    try:
        parsed = response.split("{")[1]
        parsed = "{" + parsed.split("}")[0] + "}"
        data = json.loads(parsed)
        value = data["score"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return _clair_fallback(response)
    try:
        score = float(value)
    except (TypeError, ValueError):
        return ClairAnswer(None, None, None, f"the JSON score {value!r} is not a number", fatal=True)
    reason = data.get("reason", "Unknown") if isinstance(data, dict) else "Unknown"
    return ClairAnswer(score, reason if reason is None else str(reason), "json")


def _clair_fallback(response: str) -> ClairAnswer:
    numbers = _NUMBER.findall(response)
    if not numbers:
        return ClairAnswer(None, None, None, "no JSON score and no number in the answer")
    score = float(numbers[0])
    if score < 1:
        score *= 100  # the code's rule: some models give the score on 0-1
    found = _REASON_WORD.findall(response)
    reason = found[0].strip()[len("reason") :].replace(":", "").strip() if found else "Unknown"
    return ClairAnswer(score, reason, "first-number")


__all__ = [
    "CAPARENA_JUDGMENTS",
    "CapArenaAnswer",
    "ClairAnswer",
    "caparena_answer",
    "capmas_answers",
    "capmas_propositions",
    "clair_answer",
    "clair_statements",
    "coverage_answers",
    "numbered_questions",
    "proposition_text",
]
