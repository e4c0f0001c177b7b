"""MiniGPT-v2's spaced answers ("0 5" for 0.5; the FLEUR paper, Sec. 5.4) through a whole judge."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.prompts.registry import MethodOptionError, get_method

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DIST = [0.0, 0.0, 0.0, 0.1, 0.2, 0.4, 0.2, 0.1, 0.0, 0.0]


def _spaced_answer(_req: object) -> Completion:
    """LLaMA-2 style steps of "0 5", with exact digit log-probabilities at each digit."""
    logd = tuple(math.log(p) if p > 0 else -1e9 for p in DIST)
    units = tuple([0.0] + [-1e9] * 9)
    steps = [TokenStep("▁", 0.0), TokenStep("0", 0.0, digits=units), TokenStep("▁", 0.0), TokenStep("5", math.log(0.4), digits=logd)]
    return Completion(text="0 5", steps=steps, logprobs=True)


def test_default_records_the_spaced_answer_as_an_error_naming_the_option() -> None:
    r = Judge("fleur", ScriptedBackend(_spaced_answer)).score(Sample(EXAMPLES / "images" / "dog.jpg", "a dog"))
    assert r.status == "error" and r.score is None
    assert r.error is not None and "answer_form=spaced" in r.error and "'0 5'" in r.error


def test_spaced_option_reads_and_smooths_the_digit_after_the_space() -> None:
    judge = Judge("fleur", ScriptedBackend(_spaced_answer), method_options={"answer_form": "spaced"})
    r = judge.score(Sample(EXAMPLES / "images" / "dog.jpg", "a dog"))
    assert r.ok and r.smoothed and r.raw_score == 0.5
    assert r.score == pytest.approx(0.1 * sum(i * p for i, p in enumerate(DIST)))
    assert r.details["method_options"] == {"second_decimal": "official", "answer_form": "spaced"}


def test_spaced_option_still_reads_decimal_answers() -> None:
    judge = Judge("ref-fleur", ScriptedBackend("0.7"), method_options={"answer_form": "spaced"})
    r = judge.score(Sample(EXAMPLES / "images" / "dog.jpg", "a dog", references=["a dog on grass"]))
    assert r.ok and r.score == pytest.approx(0.7)


def test_answer_form_belongs_to_the_rules_fleur_methods_only() -> None:
    assert "answer_form" in get_method("fleur").option_names()
    assert "answer_form" in get_method("fleur-hardened").option_names()
    with pytest.raises(MethodOptionError, match="no option 'answer_form'"):
        get_method("fleur-code").configure({"answer_form": "spaced"})
    with pytest.raises(MethodOptionError, match="decimal, spaced"):
        get_method("fleur").configure({"answer_form": "comma"})
