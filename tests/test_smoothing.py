"""FLEUR score smoothing (seed 004, Sec. 3.2, Appendix B) and the dual-sided vote (seed 003)."""

from __future__ import annotations

import math

import pytest

from capjudge.backends.base import TokenStep
from capjudge.judges.smoothing import (
    digit_distribution,
    expected_digit_score,
    smooth_from_steps,
    units_score,
)
from capjudge.judges.voting import dual_sided_vote, flip, verdict_from_scores

# The digit probabilities printed in seed 004, Appendix B (first and second decimal place).
APPENDIX_B_FIRST = [
    0.003021240234375, 0.00128936767578125, 0.0018758773803710938, 0.00353240966796875, 0.00827789306640625,
    0.03350830078125, 0.07672119140625, 0.2117919921875, 0.383544921875, 0.2763671875,
]
APPENDIX_B_SECOND = [
    0.0450439453125, 0.035614013671875, 0.050628662109375, 0.044342041015625, 0.0400390625,
    0.3515625, 0.048309326171875, 0.041961669921875, 0.04681396484375, 0.035888671875,
]


def test_appendix_b_worked_example() -> None:
    # The paper prints about 0.80664; its printed (rounded) probabilities give 0.80617.
    assert expected_digit_score(APPENDIX_B_FIRST, APPENDIX_B_SECOND) == pytest.approx(0.80617, abs=5e-6)


def test_expected_digit_score_by_hand() -> None:
    first = [0.0] * 10
    first[8] = 1.0
    assert expected_digit_score(first) == pytest.approx(0.8)
    second = [0.0] * 10
    second[5] = 0.5
    second[6] = 0.5
    assert expected_digit_score(first, second) == pytest.approx(0.8 + 0.055)
    with pytest.raises(ValueError):
        expected_digit_score([0.1] * 9)


def test_units_rule_for_exactly_one() -> None:
    units = [0.0] * 10
    units[0], units[1] = 0.25, 0.75
    assert units_score(units) == pytest.approx(0.9 * 0.25 + 0.75)


def _steps(tokens: list[str], dists: dict[int, list[float]]) -> list[TokenStep]:
    out = []
    for i, t in enumerate(tokens):
        d = dists.get(i)
        digits = tuple(math.log(p) if p > 0 else -1e9 for p in d) if d else None
        out.append(TokenStep(token=t, logprob=0.0, digits=digits))
    return out


def test_smooth_locates_decimals_in_sentencepiece_tokens() -> None:
    steps = _steps(["▁", "0", ".", "8", "5"], {3: APPENDIX_B_FIRST, 4: APPENDIX_B_SECOND, 1: [1.0] + [0.0] * 9})
    sm = smooth_from_steps(steps)
    assert sm is not None
    assert sm.raw_score == 0.85
    assert sm.score == pytest.approx(0.80617, abs=5e-6)


def test_smooth_one_decimal_and_repeated_digit() -> None:
    # "0.0": FLEUR's code needs its duplicate rule here; locating the decimal is unambiguous.
    first = [0.5, 0.5] + [0.0] * 8
    steps = _steps(["0", ".", "0"], {0: [0.9, 0.1] + [0.0] * 8, 2: first})
    sm = smooth_from_steps(steps)
    assert sm is not None and sm.second is None
    assert sm.score == pytest.approx(0.05)


def test_smooth_exactly_one_uses_units_digit() -> None:
    units = [0.2, 0.8] + [0.0] * 8
    steps = _steps(["Score", ":", "▁", "1", ".", "0"], {3: units, 5: [1.0] + [0.0] * 9})
    sm = smooth_from_steps(steps)
    assert sm is not None and sm.units is not None
    assert sm.score == pytest.approx(0.9 * 0.2 + 0.8)


def test_smooth_rejects_non_scores() -> None:
    assert smooth_from_steps(_steps(["I", "▁think", "▁so"], {})) is None
    assert smooth_from_steps(_steps(["1", ".", "5"], {0: [0.1] * 10, 2: [0.1] * 10})) is None  # 1.5 > 1
    assert smooth_from_steps([]) is None


def test_smooth_from_top_logprobs_with_merged_digit_tokens() -> None:
    # A GPT-style tokenizer writes "0.85" as "0", ".", "85": the first decimal's distribution comes
    # from the leading digit of each alternative, the second from the alternatives sharing that
    # digit, given that digit (their mass 0.8 is the condition).
    top = (("85", math.log(0.6)), ("80", math.log(0.2)), ("9", math.log(0.1)), ("hello", math.log(0.1)))
    steps = [TokenStep("0", 0.0, top=(("0", 0.0),)), TokenStep(".", 0.0, top=((".", 0.0),)), TokenStep("85", math.log(0.6), top=top)]
    first = digit_distribution(steps[2], 0)
    assert first is not None and first[8] == pytest.approx(0.8) and first[9] == pytest.approx(0.1)
    second = digit_distribution(steps[2], 1)
    assert second is not None and second[5] == pytest.approx(0.75) and second[0] == pytest.approx(0.25)
    sm = smooth_from_steps(steps)
    assert sm is not None
    assert sm.score == pytest.approx(0.1 * (8 * 0.8 + 9 * 0.1) + 0.01 * (5 * 0.75))


def test_merged_and_per_digit_tokenizations_of_one_joint_distribution_smooth_alike() -> None:
    """P(first = d) and P(second = x | first = d) define one joint distribution; a per-digit
    tokenizer shows it over two steps, a digit-merging one (LLaMA-3, GPT-4o) in one step of
    tokens "d" (the answer stops) and "dx". Both must give the same smoothed score."""
    import random

    rng = random.Random(7)
    first = [rng.random() for _ in range(10)]
    z = sum(first) / 0.95  # 5% of the mass on tokens that are no digit
    first = [p / z for p in first]
    cond = {}
    for d in range(10):
        row = [rng.random() for _ in range(10)] + [rng.random()]  # ten digits and "stop here"
        zz = sum(row)
        cond[d] = [p / zz for p in row]
    printed_first, printed_second = 6, 3
    per_digit = [
        TokenStep("0", 0.0, top=(("0", 0.0),)),
        TokenStep(".", 0.0, top=((".", 0.0),)),
        TokenStep(str(printed_first), math.log(first[printed_first]), top=tuple((str(d), math.log(first[d])) for d in range(10)) + (("x", math.log(0.05)),)),
        TokenStep(str(printed_second), math.log(cond[printed_first][printed_second]), top=tuple((str(x), math.log(cond[printed_first][x])) for x in range(10)) + (("</s>", math.log(cond[printed_first][10])),)),
    ]
    merged_top = [("x", math.log(0.05))]
    for d in range(10):
        merged_top.append((str(d), math.log(first[d] * cond[d][10])))
        merged_top += [(f"{d}{x}", math.log(first[d] * cond[d][x])) for x in range(10)]
    chosen = f"{printed_first}{printed_second}"
    merged = [per_digit[0], per_digit[1], TokenStep(chosen, math.log(first[printed_first] * cond[printed_first][printed_second]), top=tuple(merged_top))]
    a = smooth_from_steps(per_digit)
    b = smooth_from_steps(merged)
    assert a is not None and b is not None
    assert b.score == pytest.approx(a.score, abs=1e-12)
    assert b.first == pytest.approx(a.first, abs=1e-12) and b.second == pytest.approx(a.second, abs=1e-12)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("A", "A", "A"), ("A", "tie", "A"), ("tie", "A", "A"),
        ("B", "B", "B"), ("B", "tie", "B"), ("tie", "B", "B"),
        ("tie", "tie", "tie"), ("A", "B", "tie"), ("B", "A", "tie"),
    ],
)
def test_dual_sided_vote_rules_of_seed_003(first: str, second: str, expected: str) -> None:
    assert dual_sided_vote(first, second) == expected


def test_flip_and_grading() -> None:
    assert flip("A") == "B" and flip("B") == "A" and flip("tie") == "tie" and flip(None) is None
    assert verdict_from_scores(0.7, 0.3) == "A"
    assert verdict_from_scores(10, 80) == "B"
    assert verdict_from_scores(0.5, 0.5) == "tie"
    assert verdict_from_scores(None, 0.5) is None


# ---------------------------------------------------------------- MiniGPT-v2's spaced answers ("0 5")
def test_spaced_answer_per_digit_tokenizer() -> None:
    """LLaMA-2 (MiniGPT-v2's LLM) writes "0 5" as "▁", "0", "▁", "5": the first decimal is the
    digit token after the space token."""
    steps = _steps(["▁", "0", "▁", "5"], {1: [1.0] + [0.0] * 9, 3: APPENDIX_B_FIRST})
    assert smooth_from_steps(steps) is None  # no decimal point: not a decimal answer
    sm = smooth_from_steps(steps, expected=0.5, answer_form="spaced")
    assert sm is not None and sm.raw_score == 0.5 and sm.second is None
    assert sm.first == pytest.approx(APPENDIX_B_FIRST)
    assert sm.score == pytest.approx(expected_digit_score(APPENDIX_B_FIRST))


def test_spaced_answer_two_decimals_and_exactly_one() -> None:
    steps = _steps(["0", "▁", "8", "5"], {2: APPENDIX_B_FIRST, 3: APPENDIX_B_SECOND})
    sm = smooth_from_steps(steps, expected=0.85, answer_form="spaced")
    assert sm is not None and sm.raw_score == 0.85
    assert sm.score == pytest.approx(0.80617, abs=5e-6)
    units = [0.3, 0.7] + [0.0] * 8
    sm1 = smooth_from_steps(_steps(["1", "▁", "0"], {0: units, 2: [1.0] + [0.0] * 9}), expected=1.0, answer_form="spaced")
    assert sm1 is not None and sm1.score == pytest.approx(0.9 * 0.3 + 0.7)


def test_spaced_answer_with_the_space_merged_into_the_digit_token() -> None:
    """A tokenizer that glues the space to the digit (" 5") and one that gives the space its own
    token carry the same distribution at the digit: both smooth alike."""
    dist = [0.02, 0.03, 0.05, 0.1, 0.1, 0.4, 0.2, 0.05, 0.03, 0.02]
    top_glued = tuple((f" {d}", math.log(p)) for d, p in enumerate(dist))
    glued = [TokenStep("0", 0.0, top=(("0", 0.0),)), TokenStep(" 5", math.log(0.4), top=top_glued)]
    top_bare = tuple((str(d), math.log(p)) for d, p in enumerate(dist))
    apart = [TokenStep("0", 0.0, top=(("0", 0.0),)), TokenStep(" ", 0.0, top=((" ", 0.0),)), TokenStep("5", math.log(0.4), top=top_bare)]
    a = smooth_from_steps(glued, expected=0.5, answer_form="spaced")
    b = smooth_from_steps(apart, expected=0.5, answer_form="spaced")
    assert a is not None and b is not None
    assert a.score == pytest.approx(b.score, abs=1e-12) == pytest.approx(0.1 * sum(i * p for i, p in enumerate(dist)))


def test_spaced_answer_merged_decimals_match_per_digit() -> None:
    """"0 63" from a digit-merging tokenizer ("63" one token) and from a per-digit one smooth to
    the same score: the second decimal is read given the printed first."""
    first = [0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.3, 0.1, 0.05, 0.05]
    cond6 = [0.1, 0.1, 0.1, 0.4, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025]
    per_digit = [
        TokenStep("0", 0.0, top=(("0", 0.0),)),
        TokenStep("▁", 0.0, top=(("▁", 0.0),)),
        TokenStep("6", math.log(0.3), top=tuple((str(d), math.log(p)) for d, p in enumerate(first))),
        TokenStep("3", math.log(0.4), top=tuple((str(x), math.log(p)) for x, p in enumerate(cond6))),
    ]
    merged_top = tuple((f"6{x}", math.log(0.3 * p)) for x, p in enumerate(cond6)) + tuple((f"{d}0", math.log(p)) for d, p in enumerate(first) if d != 6)
    merged = [per_digit[0], per_digit[1], TokenStep("63", math.log(0.12), top=merged_top)]
    a = smooth_from_steps(per_digit, expected=0.63, answer_form="spaced")
    b = smooth_from_steps(merged, expected=0.63, answer_form="spaced")
    assert a is not None and b is not None
    assert b.score == pytest.approx(a.score, abs=1e-12)
