"""Every answer reader runs in linear time on any answer (issue #30, item 10).

``boxed()`` rescanned the rest of the answer from every unbalanced ``\\boxed{`` (``"\\\\boxed{" *
8000``, 56 KB, took 20 s; a 1 MB answer hours), CapArena's ``Reason:\\s*(.+?)\\s*Judgment:``
backtracked over every ``Reason:`` without a ``Judgment:`` and over every long run of spaces, and
the verdict reader's clause split retried a run of spaces from each of its spaces (20,000 spaces:
a minute). What this proves: on 1 MB adversarial answers (repeated openers, digits, markers,
nested and unbalanced braces, long runs of spaces, a seeded random mix of the readers' own words)
every reader finishes within a generous bound (a quadratic one needs minutes to hours; an alarm
stops it there): each parser kind of ``judges.answers.PARSERS`` through its reader (with token
steps where it smooths, and ``score=expected``), ``parse_score``, ``parse_verdict``,
``parse_score_list``, the detailed-caption readers, ``split_text`` and ``boxed``; the rewritten
readers give what the old ones give (differential, on random short answers); and an answer past
``MAX_ANSWER_CHARS`` is cut before reading, saying so in ``details.answer_cut``, for scores and
verdicts.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.judges.answers import PARSERS
from capjudge.judges.prepare import Prepared
from capjudge.judges.reasoning import MAX_ANSWER_CHARS, final_answer
from capjudge.judges.records import RAW_CHARS
from capjudge.parsing import parse_score, parse_score_list, parse_verdict
from capjudge.parsing.capability import read_answer as capability_answer
from capjudge.parsing.captionqa import answer_letter as captionqa_letter
from capjudge.parsing.dcscore import read_json_answer as dcscore_answer
from capjudge.parsing.detailed import (
    caparena_answer,
    capmas_answers,
    capmas_propositions,
    clair_answer,
)
from capjudge.parsing.official import first_integer, fleur_code_number
from capjudge.parsing.reasoning import BOXED, GLM_BOX, boxed, split_text
from capjudge.parsing.verdicts import _CLAUSE_SPLIT_RE, _LEADING_END_RE
from capjudge.prompts.registry import get_method

pytestmark = pytest.mark.slow

CATS = Path(__file__).resolve().parents[1] / "examples" / "images" / "cats.jpg"
SIZE = 1_000_000
BOUND_S = 60.0
"""Per reader and answer; linear readers take well under a few seconds on 1 MB (a shared CPU),
a quadratic one minutes to hours."""

WORDS = ["\\boxed{", "{", "}", "1", "0.5", " ", "\n", "</think>", "<think>", "[[", "]]", "Score:", "Answer 1", "Answer 2", "Reason:",
         "Judgment:", "Caption 1 is better", "out of", "%", "/", "1.", "not", "better than", "tie", '{"score": ', "<|begin_of_box|>", "x"]


def repeated(unit: str, tail: str = "") -> str:
    return (unit * (SIZE // len(unit) + 1))[: SIZE - len(tail)] + tail


def mixed(seed: int) -> str:
    rnd = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < SIZE:
        parts.append(rnd.choice(WORDS))
        size += len(parts[-1])
    return "".join(parts)[:SIZE]


ANSWERS: dict[str, str] = {
    "boxed openers": repeated(BOXED),
    "open braces": repeated("{"),
    "close braces": repeated("}"),
    "nested braces": "{" * (SIZE // 2) + "}" * (SIZE // 2),
    "boxed then unbalanced": BOXED + "85}" + repeated(BOXED + "{"),
    "digits": repeated("1"),
    "spaced digits": repeated("1 "),
    "decimals": repeated("0.5 "),
    "closing markers": repeated("</think>"),
    "opening markers": repeated("<think>"),
    "double brackets": repeated("[["),
    "labels": repeated("Score: "),
    "answers": repeated("Answer 1 is better than Answer 2. "),
    "reasons": repeated("Reason: ", "Judgment: Tie"),
    "spaces in a reason": "Reason: x" + " " * SIZE + "y Judgment: Tie",
    "spaces": " " * SIZE + "0.5",
    "spaces between words": "Answer 1" + " \t" * (SIZE // 2) + "is better",
    "newlines": "Score:" + "\n" * SIZE + "5",
    "list markers": repeated("1. "),
    "json keys": repeated('{"score": '),
    "fractions": repeated("1/"),
    "glm boxes": repeated(GLM_BOX[0]),
    "mixed": mixed(1),
}


class TooSlow(Exception):
    """A reader ran past :data:`BOUND_S` (raised by the alarm, which interrupts even ``re``)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise TooSlow


def within_bound(read: Callable[[str], Any], name: str) -> None:
    """``read`` on every answer of :data:`ANSWERS`, each stopped at :data:`BOUND_S` (so that a
    quadratic reader fails in a minute rather than running for hours)."""
    slow = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for label, text in ANSWERS.items():
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, BOUND_S)
            try:
                read(text)
            except TooSlow:
                slow.append(f"{label}: stopped after {BOUND_S:.0f} s")
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            took = time.perf_counter() - start
            if took > BOUND_S:
                slow.append(f"{label}: {took:.1f} s")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not slow, f"{name} is not linear on 1 MB answers: {slow}"


READERS: dict[str, Callable[[str], Any]] = {
    "parse_score 0-100": lambda t: parse_score(t, low=0, high=100),
    "parse_score 0-1": lambda t: parse_score(t, low=0, high=1),
    "parse_score spaced": lambda t: parse_score(t, low=0, high=1, answer_form="spaced"),
    "parse_verdict": parse_verdict,
    "parse_score_list": lambda t: parse_score_list(t, n=5),
    "first_integer": first_integer,
    "fleur_code_number": fleur_code_number,
    "caparena_answer": caparena_answer,
    "capmas_propositions": capmas_propositions,
    "capmas_answers": capmas_answers,
    "clair_answer": clair_answer,
    "capability read_answer": capability_answer,
    "captionqa answer_letter": lambda t: captionqa_letter(t, 5),
    "dcscore read_json_answer": dcscore_answer,
    "split_text": split_text,
    "split_text opened": lambda t: split_text(t, opened=True),
    "boxed": boxed,
    "final_answer": lambda t: final_answer(Completion(text=t)),
}


@pytest.mark.parametrize("name", list(READERS))
def test_every_parser_is_linear_on_1mb_answers(name: str) -> None:
    within_bound(READERS[name], name)


PARSER_METHODS = {
    "rules": "fleur", "first-integer": "visce2-code", "fleur-code": "fleur-code", "caparena": "caparena", "capmas": "capmas-factuality", "clair": "clair",
    "capability": "capability", "captionqa": "captionqa", "dcscore": "dcscore",
}


def steps_of(text: str) -> list[TokenStep]:
    """Token steps over ``text`` (8 characters each), the digits with a distribution."""
    top = tuple((str(d), -2.3) for d in range(10))
    return [TokenStep(token=text[i : i + 8], logprob=-0.1, top=top) for i in range(0, len(text), 8)]


def test_parser_kinds_cover_the_table() -> None:
    assert set(PARSER_METHODS) == set(PARSERS) and all(get_method(m).parser == k for k, m in PARSER_METHODS.items())


@pytest.mark.parametrize(
    ("kind", "name", "options"),
    [*((k, m, {}) for k, m in PARSER_METHODS.items()), ("rules", "vanilla", {"score": "expected"}), ("first-integer", "visce2-code", {"score": "expected"})],
)
def test_every_parser_kind_reads_1mb_answers_in_linear_time(kind: str, name: str, options: dict[str, str]) -> None:
    method = get_method(name).configure(options)  # score=expected: the printed number's tokens
    prep = Prepared(index=0, sample=Sample(image=str(CATS), caption="two cats"))

    def record(_prep: Prepared, **fields: Any) -> Any:
        return fields

    smooths = kind in ("rules", "fleur-code") or bool(options)  # the readers that walk the token steps

    def read(text: str) -> Any:
        return PARSERS[kind].read(method, prep, Completion(text=text, steps=steps_of(text) if smooths else [], logprobs=smooths), {}, record)

    within_bound(read, f"parser kind {kind!r} {options}")


# -- the rewritten readers read as before ------------------------------------------------------


def old_boxed(answer: str) -> tuple[int, int] | None:
    """``boxed`` as it was: a scan from each ``\\boxed{`` (quadratic on unbalanced ones)."""
    start = answer.rfind(BOXED)
    while start >= 0:
        begin = start + len(BOXED)
        depth = 1
        for i in range(begin, len(answer)):
            if answer[i] == "{":
                depth += 1
            elif answer[i] == "}":
                depth -= 1
                if depth == 0:
                    return (begin, i)
        start = answer.rfind(BOXED, 0, start)
    close = answer.rfind(GLM_BOX[1])
    opening = answer.rfind(GLM_BOX[0], 0, close) if close >= 0 else -1
    return (opening + len(GLM_BOX[0]), close) if opening >= 0 else None


CAPARENA_REASON = re.compile(r"Reason:\s*(.+?)\s*Judgment:", re.DOTALL)  # the official code's pattern
OLD_CLAUSE_SPLIT = re.compile(
    r"(?<=[.!?])\s+|\n+|;|,?[ \t]+(?:but|while|whereas|however|although|though|yet|because|since|"
    r"as[ \t]+it|which|so|therefore|thus|hence)\b,?|,[ \t]+and\b",
    re.IGNORECASE,
)
OLD_LEADING_END = re.compile(
    r"[.,;!?\n(]|[ \t]+(?:because|since|as[ \t]+it|as[ \t]+the|-|\u2013|\u2014)\b|[ \t]+[\u2013\u2014-][ \t]",
    re.IGNORECASE,
)


def test_rewritten_readers_agree_with_the_old_ones_on_short_answers() -> None:
    rnd = random.Random(30)
    box_words = [BOXED, "{", "}", "x", "1", GLM_BOX[0], GLM_BOX[1], "\\boxed"]
    reason_words = ["Reason:", "Judgment:", " ", "\n", "x", "Tie", "\t", "Reason: a", "Judgment: Caption 1 is better."]
    clause_words = [" ", "\t", "\n", ",", ".", ";", "but", "because", "as it", "and", "-", "\u2014", "x", "Answer 1", "a"]
    for _ in range(20_000):
        text = "".join(rnd.choice(box_words) for _ in range(rnd.randint(0, 9)))
        assert boxed(text) == old_boxed(text), text
        text = "".join(rnd.choice(reason_words) for _ in range(rnd.randint(0, 7)))
        m = CAPARENA_REASON.search(text)
        assert caparena_answer(text).reason == (m.group(1).strip() if m else None), text
        text = "".join(rnd.choice(clause_words) for _ in range(rnd.randint(0, 9)))
        assert _CLAUSE_SPLIT_RE.split(text) == OLD_CLAUSE_SPLIT.split(text), text
        new, old = _LEADING_END_RE.search(text), OLD_LEADING_END.search(text)
        assert (new and new.span()) == (old and old.span()), text


# -- answers past the bound are cut before reading ----------------------------------------------


def test_an_answer_past_the_bound_is_cut_and_the_record_says_so() -> None:
    long = "Score: 85. " + "x" * (MAX_ANSWER_CHARS + 10)
    r = Judge("vanilla", ScriptedBackend(long)).score(CATS, "two cats")
    assert (r.status, r.score) == ("ok", 85.0), r.error
    assert r.details["answer_cut"] == {"chars": len(long), "kept": MAX_ANSWER_CHARS}
    # raw then keeps what every record keeps of an answer (judges.records.RAW_CHARS), with the cut answer's length
    assert len(r.raw or "") == RAW_CHARS and r.details["raw_chars"] == MAX_ANSWER_CHARS
    pair = Judge("gpt4v-pairwise", ScriptedBackend("Answer 1 " + "y" * (MAX_ANSWER_CHARS + 10))).compare(CATS, "two cats", "a dog")
    assert pair.details["answer_cut"] == [{"chars": MAX_ANSWER_CHARS + 19, "kept": MAX_ANSWER_CHARS}] * 2
    short = Judge("vanilla", ScriptedBackend("Score: 85.")).score(CATS, "two cats")
    assert "answer_cut" not in short.details


def test_the_cut_keeps_the_token_steps_within_it() -> None:
    text = "0.85 " + "z" * MAX_ANSWER_CHARS
    fa = final_answer(Completion(text=text, steps=steps_of(text), logprobs=True))
    assert fa.answer_chars == len(text) and len(fa.completion.text) == MAX_ANSWER_CHARS and not fa.plain
    assert sum(len(s.token) for s in fa.completion.steps) <= MAX_ANSWER_CHARS and fa.completion.steps[0].token == text[:8]
