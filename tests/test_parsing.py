"""Tests for capjudge.parsing: a corpus of real-looking judge answers plus robustness checks."""

from __future__ import annotations

import json
import math
import random
import re
import string
import time
from pathlib import Path
from typing import Any

import pytest

from capjudge.parsing import (
    ScoreParse,
    VerdictParse,
    parse_score,
    parse_score_details,
    parse_score_list,
    parse_verdict,
    parse_verdict_details,
)

CORPUS_PATH = Path(__file__).parent / "data" / "parsing_corpus.jsonl"
CORPUS: list[dict[str, Any]] = [
    json.loads(line)
    for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def _case_id(i: int, row: dict[str, Any]) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "_", row["text"]).strip("_")[:40] or "empty"
    return f"{i:03d}-{row['kind']}-{row.get('source', 'x')}-{words}"


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_corpus_is_large_and_mixed() -> None:
    kinds = {row["kind"] for row in CORPUS}
    sources = {row.get("source") for row in CORPUS}
    assert len(CORPUS) >= 100
    assert kinds == {"score", "verdict", "list"}
    assert {"visce2", "fleur", "clair", "mtbench", "llava", "gpt4v", "vicuna", "minigpt", "llava-critic"} <= sources


@pytest.mark.parametrize("row", CORPUS, ids=[_case_id(i, r) for i, r in enumerate(CORPUS)])
def test_corpus(row: dict[str, Any]) -> None:
    kind, text, expected = row["kind"], row["text"], row["expected"]
    if kind == "score":
        form = row.get("answer_form", "decimal")
        details = parse_score_details(text, low=row["low"], high=row["high"], answer_form=form)
        assert _close(details.value, expected), details
        assert _close(parse_score(text, low=row["low"], high=row["high"], answer_form=form), expected)
        if expected is None:
            assert details.reason, "a failed parse must say why"
        else:
            assert details.rule and details.matched and details.reason is None
    elif kind == "verdict":
        assert parse_verdict(text) == expected, parse_verdict_details(text)
    else:
        got = parse_score_list(text, row["n"], low=row["low"], high=row["high"])
        assert len(got) == row["n"]
        assert all(_close(g, e) for g, e in zip(got, expected, strict=True)), got


# ---------------------------------------------------------------- scores: targeted behaviour


@pytest.mark.parametrize(
    ("text", "low", "high", "expected"),
    [
        ("7/10", 0, 100, 70),
        ("8 out of 10", 0, 100, 80),
        ("85/100", 0, 1, 0.85),
        ("85%", 0, 100, 85),
        ("85%", 0, 1, 0.85),
        ("85", 0, 1, None),
        ("150", 0, 100, None),
        ("-5", 0, 100, None),
        ("4/5", 0, 100, 80),
        ("12/10", 0, 100, None),
        ("120%", 0, 100, None),
        ("2/3 of the objects are right", 0, 100, None),
        ("Score: 70-80", 0, 100, None),
        ("12/25/2023 85", 0, 100, 85),
        ("Written on 2023-05-01. Score: 70", 0, 100, 70),
        ("GPT-4V thinks 80", 0, 100, 80),
        ("Score: 8 (on a 10-point scale)", 0, 100, 80),
        ("On a 1-5 scale: 4", 0, 100, 80),
        ("On a scale of 1 to 10, I'd rate it 8", 0, 1, 0.8),
        ("Score: 5", 1, 5, 5),
        ("Score: 85", 50, 100, 85),
        ("Score: 40", 50, 100, None),
    ],
)
def test_score_rules(text: str, low: float, high: float, expected: float | None) -> None:
    assert _close(parse_score(text, low=low, high=high), expected)


def test_score_details_name_the_rule_and_reason() -> None:
    d = parse_score_details(
        '{"score": 80, "reason": "a score of 20 would be harsh"}', low=0, high=100
    )
    assert isinstance(d, ScoreParse) and d.ok
    assert (d.value, d.rule, d.matched) == (80, "json_key", "80")
    assert d.span is not None

    d = parse_score_details("Score: 150", low=0, high=100)
    assert d.value is None and d.reason == "out of range: 150" and d.rule == "label"

    d = parse_score_details("no number here", low=0, high=100)
    assert d.value is None and d.reason == "no number" and not d.ok

    d = parse_score_details("Score: -5")
    assert d.value is None and d.reason is not None and d.reason.startswith("negative")

    d = parse_score_details('{"score": "N/A"}')
    assert d.value is None and d.reason is not None and "no number" in d.reason

    assert parse_score_details("", low=0, high=100).reason == "empty answer"
    assert parse_score_details(None).reason == "not text: NoneType"


def test_labelled_score_beats_earlier_numbers() -> None:
    text = "The caption mentions 3 dogs, but there are 2 dogs and 1 cat. I would rate it 40."
    assert parse_score_details(text).rule == "label"
    assert parse_score(text) == 40


def test_final_label_beats_first_label() -> None:
    text = "Object score: 9/10. Attribute score: 6/10. Overall score: 75/100"
    assert parse_score(text) == 75


def test_scale_restatement_is_not_the_score() -> None:
    assert parse_score("On a scale of 0 to 100, I'd give 75") == 75
    assert parse_score("Between 0 and 100, my rating is 33") == 33
    assert parse_score("On a scale of 0 to 100.") is None
    assert parse_score("0-100") is None


def test_visce2_first_integer_agreement() -> None:
    # VisCE2's own rule: the first integer after removing canonical phrases.
    for text, expected in [
        ("85", 85),
        ("The score is 85 out of 100", 85),
        ("60. The caption is fine.", 60),
        ("73\n", 73),
    ]:
        assert parse_score(text) == expected


# ---------------------------------------------------------------- verdicts: targeted behaviour


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[A]]", "A"),
        ("[[B]]", "B"),
        ("[[C]]", "tie"),
        ("Final verdict: [[A]] (Assistant A is better)", "A"),
        ("C", "tie"),
        ("Caption (a)", "A"),
        ("the former", "A"),
        ("The latter is better.", "B"),
        ("Answer 2 is not better than Answer 1.", "A"),
        ("Caption 1 is better. Caption 2 is better.", "B"),
        ("Caption 1 is better at colours, but Caption 2 is better at counting.", None),
        ("Caption 1 describes a dog. Caption 2 describes a cat.", None),
    ],
)
def test_verdict_rules(text: str, expected: str | None) -> None:
    assert parse_verdict(text) == expected


def test_verdict_details() -> None:
    d = parse_verdict_details(
        "Answer 1 is more detailed, but Answer 2 is more accurate. Final verdict: Answer 2"
    )
    assert isinstance(d, VerdictParse) and d.verdict == "B" and d.rule == "final"
    assert parse_verdict_details("Tie").rule == "bare"
    assert parse_verdict_details("hmm") == VerdictParse(None, None)


# ---------------------------------------------------------------- lists


def test_list_always_has_n_entries() -> None:
    assert parse_score_list("{1: 0.8}", 3) == [0.8, None, None]
    assert parse_score_list("{1: 0.8, 2: 0.2, 3: 0.1}", 1) == [0.8]
    assert parse_score_list("", 2) == [None, None]
    assert parse_score_list(None, 2) == [None, None]
    assert parse_score_list("{1: 0.8}", 0) == []
    assert parse_score_list("{1: 0.8}", -3) == []
    assert parse_score_list("{1: 0.8}", "2") == [0.8, None]
    assert parse_score_list("{1: 0.8}", None) == []


def test_list_zero_based_keys_and_fractions() -> None:
    assert parse_score_list("{0: 0.5, 1: 0.7}", 2) == [0.5, 0.7]
    assert parse_score_list("{1: 80%, 2: 7/10}", 2) == [0.8, 0.7]
    assert parse_score_list('{"1": {"score": 0.7}, "2": {"score": 0.9}}', 2) == [0.7, 0.9]


# ---------------------------------------------------------------- robustness

_NON_TEXT: list[Any] = [
    None,
    85,
    0.5,
    True,
    False,
    float("nan"),
    float("inf"),
    10**400,
    [],
    {},
    {"score": 80},
    object(),
    b"85",
    bytearray(b"0.7"),
    b"\xff\xfe\x00",
    memoryview(b"Answer 1"),
]


@pytest.mark.parametrize(
    "value", _NON_TEXT, ids=[type(v).__name__ + str(i) for i, v in enumerate(_NON_TEXT)]
)
def test_non_text_input_never_raises(value: Any) -> None:
    score = parse_score(value)
    assert score is None or isinstance(score, float)
    assert isinstance(parse_score_details(value, low=0, high=1), ScoreParse)
    assert parse_verdict(value) in (None, "A", "B", "tie")
    assert len(parse_score_list(value, 2)) == 2


def test_sensible_non_text_values() -> None:
    assert parse_score(85) == 85
    assert parse_score(0.5, low=0, high=1) == 0.5
    assert parse_score(b"85") == 85
    assert parse_score(bytearray(b"Score: 0.7"), low=0, high=1) == 0.7
    assert parse_score(True) is None
    assert parse_score(float("nan")) is None
    assert parse_verdict(b"Answer 2") == "B"
    assert parse_verdict(1) == "A"
    assert parse_score_list(b"{1: 0.8, 2: 0.3}", 2) == [0.8, 0.3]


@pytest.mark.parametrize(("low", "high"), [(None, 100), ("a", "b"), (100, 0), (float("nan"), 1)])
def test_bad_scale_bounds_give_none(low: Any, high: Any) -> None:
    d = parse_score_details("85", low=low, high=high)
    assert d.value is None and d.reason is not None and d.reason.startswith("invalid scale")


def _random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = (
        string.printable
        + "0123456789" * 3
        + "[]{}:/%-.,*\"'"
        + "\u00bd\u2212\u2013\uff18\uff15\u0663\u00b2\u200b\U0001f600"
    )
    words = [
        "score",
        "Score:",
        "rating",
        "[[",
        "]]",
        "out of",
        "/10",
        "/100",
        "%",
        "Answer 1",
        "Caption B",
        "tie",
        "better",
        "{1:",
        "}",
        "0-100",
        "-",
        "\n",
        "**",
        "0.85",
        "between",
        "and",
        "than",
        "[[C]]",
    ]
    out = []
    for _ in range(count):
        mode = rng.random()
        if mode < 0.35:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))))
        elif mode < 0.7:
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 25))))
        elif mode < 0.85:
            out.append(
                bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 60))).decode(
                    "utf-8", errors="replace"
                )
            )
        else:
            out.append(
                "".join(
                    chr(rng.randint(0, 0x10FFFF))
                    for _ in range(rng.randint(0, 40))
                    if not 0xD800 <= rng.randint(0, 0x10FFFF) < 0xE000
                )
                .encode("utf-8", "replace")
                .decode("utf-8", "replace")
            )
    return out


@pytest.mark.parametrize("seed", range(5))
def test_fuzz_never_raises_and_respects_contracts(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for text in _random_texts(seed, 400):
        low, high = rng.choice([(0.0, 100.0), (0.0, 1.0), (1.0, 10.0)])
        value = parse_score(text, low=low, high=high)
        assert value is None or (low <= value <= high and math.isfinite(value)), (text, value)
        d = parse_score_details(text, low=low, high=high)
        assert (d.value is None) == (d.reason is not None), (text, d)
        assert parse_verdict(text) in (None, "A", "B", "tie")
        n = rng.randint(1, 6)
        got = parse_score_list(text, n)
        assert len(got) == n and all(g is None or 0.0 <= g <= 1.0 for g in got), (text, got)


def test_byte_junk_decoded() -> None:
    rng = random.Random(7)
    for _ in range(200):
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        parse_score(junk)
        parse_verdict(junk)
        parse_score_list(junk, 3)


_BIG = 1_000_000
_HUGE_INPUTS = {
    "digits": "9" * _BIG,
    "digit_runs": ("1" * 5000 + " ") * (_BIG // 5001),
    "spaced_numbers": "1 " * (_BIG // 2),
    "out_of_range": "150 " * (_BIG // 4),
    "open_braces": "{" * _BIG,
    "nested_braces": "{1: {" * (_BIG // 5),
    "open_brackets": "[[" * (_BIG // 2),
    "fractions": "1/" * (_BIG // 2),
    "dashes": "1-" * (_BIG // 2),
    "labels": "score: " * (_BIG // 7),
    "verdict_talk": "Answer 1 is better than Answer 2, but " * (_BIG // 38),
    "whitespace": " " * _BIG,
    "decimals": "0." * (_BIG // 2),
    "lines": "1.\n" * (_BIG // 3),
}


@pytest.mark.parametrize("name", list(_HUGE_INPUTS))
def test_megabyte_inputs_finish_fast(name: str) -> None:
    text = _HUGE_INPUTS[name]
    assert len(text) >= _BIG * 0.95
    start = time.perf_counter()
    parse_score_details(text, low=0, high=100)
    parse_score(text, low=0, high=1)
    parse_verdict(text)
    parse_score_list(text, 5)
    # Generous bound: catastrophic backtracking would take minutes, linear work well under a second.
    assert time.perf_counter() - start < 10.0


def test_long_answer_keeps_head_and_tail() -> None:
    filler = "The caption describes the scene. " * 10_000
    assert parse_score("Score: 85\n" + filler) == 85
    assert parse_score(filler + "\nFinal score: 70") == 70
    assert parse_verdict(filler + "\nFinal verdict: Answer 2") == "B"


# ---------------------------------------------------------------- MiniGPT-v2's spaced decimals


@pytest.mark.parametrize("text", ["0 5", "0 9", "1 0", "0 85", "Score: 0 7", "**0 5**."])
def test_spaced_decimal_is_never_misread_by_default(text: str) -> None:
    """FLEUR paper, Sec. 5.4: MiniGPT-v2 answers "0 5" for 0.5. A first-number rule would read 0;
    by default the answer is no score and the reason names the option that reads it."""
    d = parse_score_details(text, low=0, high=1)
    assert d.value is None and d.rule == "spaced"
    assert d.reason is not None and "answer_form=spaced" in d.reason
    spaced = parse_score_details(text, low=0, high=1, answer_form="spaced")
    assert spaced.value is not None and spaced.rule == "spaced" and spaced.reason is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5", 0.5),  # a decimal answer reads the same under both forms
        ("I see 0 5 dogs", 0.0),  # not the whole answer: never a spaced decimal
        ("Image 1 shows 2 dogs. 0.4", 0.4),
    ],
)
def test_spaced_form_leaves_other_answers_alone(text: str, expected: float) -> None:
    for form in ("decimal", "spaced"):
        assert parse_score(text, low=0, high=1, answer_form=form) == expected  # type: ignore[arg-type]


def test_spaced_rule_only_on_fractional_scales() -> None:
    assert parse_score_details("7 8", low=0, high=100).rule != "spaced"
    assert parse_score_details("0 5", low=0, high=100, answer_form="spaced").rule != "spaced"
