"""The arena's length check and --length-controlled on detailed (100-300-word) captions, and the
short-caption length output as it was."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from capjudge.arena.ranking import (
    DETAILED_WORDS,
    LENGTH_BINS,
    battle_set,
    length_bins,
    length_controlled,
    quantile_bins,
    rank,
)


def caption(n: int) -> str:
    return " ".join(["word"] * n)


def detailed_battles(n: int = 1500, seed: int = 3, gamma: float = 1.5, quality: dict[str, float] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Battles of three captioners writing 100-300 words: "verbose" (250-300 words), "concise"
    (100-150) and "good" (150-200, really better); the judge's log-odds are the quality difference
    plus ``gamma * tanh(word difference / 60)``."""
    rng = np.random.default_rng(seed)
    lengths = {"verbose": (250, 300), "concise": (100, 150), "good": (150, 200)}
    q = quality or {"verbose": 0.0, "concise": 0.0, "good": 1.0}
    models = list(lengths)
    recs = []
    for k in range(n):
        a, b = rng.choice(3, size=2, replace=False)
        ma, mb = models[a], models[b]
        wa, wb = (int(rng.integers(*lengths[m], endpoint=True)) for m in (ma, mb))
        z = q[ma] - q[mb] + gamma * math.tanh((wa - wb) / 60)
        verdict = "A" if rng.random() < 1 / (1 + math.exp(-z)) else "B"
        recs.append({"model_a": ma, "model_b": mb, "verdict": verdict, "image": f"img{k % 300}", "caption_a": caption(wa), "caption_b": caption(wb)})
    return recs, models


def test_quantile_bins() -> None:
    assert quantile_bins(np.array([0, 0])) == ((1, math.inf),)
    bins = quantile_bins(np.arange(0, 101))
    assert bins == ((1, 21), (22, 41), (42, 61), (62, 81), (82, math.inf))
    assert quantile_bins(np.array([5, 5, 5, 5, 9])) == ((1, 5), (6, 6), (7, math.inf))  # coinciding quantiles merge


def test_length_check_on_detailed_captions() -> None:
    recs, models = detailed_battles(quality={"verbose": 0.0, "concise": 0.0, "good": 0.0})  # length alone decides
    bs = battle_set(recs, models)
    lb = length_bins(bs)
    assert lb["median_words"] >= DETAILED_WORDS and "quintiles" in lb["binning"]
    assert len(lb["bins"]) == 5 and lb["bins"][-1]["words"].endswith("+")
    counts = [b["battles"] for b in lb["bins"]]
    assert sum(counts) + lb["equal_length"] == bs.n and min(counts) > 0.15 * bs.n  # quintiles: every bin holds battles
    rates = [b["longer_win_rate"] for b in lb["bins"]]
    assert rates[0] == min(rates) and rates[0] < 0.7 < rates[-1]  # the bigger the gap, the more the longer one wins
    # the fixed short-caption bins would put nearly every detailed battle in the last one
    gaps = np.abs(bs.words_a - bs.words_b)
    assert (gaps > LENGTH_BINS[-1][0] - 1).mean() > 0.8


def test_length_controlled_ranking_on_detailed_captions() -> None:
    recs, models = detailed_battles()
    board = rank(recs, models, bootstrap=0, length_control=True)
    by = {e["model"]: e for e in board.entries}
    lc = board.length["length_controlled"]
    assert lc["gamma"] > 1 and lc["sd_words"] > 50  # (its unit is sd_words, not the judge's 60 words)
    # raw: verbosity pays, "verbose" beats "concise" of the same quality by far
    assert by["verbose"]["win_rate"] - by["concise"]["win_rate"] > 0.3
    # length-controlled: "verbose" and "concise" come close, "good" stays first
    assert abs(by["verbose"]["lc_win_rate"] - by["concise"]["lc_win_rate"]) < 0.1
    assert by["good"]["lc_win_rate"] == max(e["lc_win_rate"] for e in board.entries)


def test_length_controlled_without_length_bias_leaves_the_order() -> None:
    recs, models = detailed_battles(gamma=0.0, quality={"verbose": 0.0, "concise": 0.5, "good": 1.0})
    fit = length_controlled(battle_set(recs, models))
    assert abs(fit["gamma"]) < 0.3
    order = sorted(fit["lc_win_rate"], key=fit["lc_win_rate"].get, reverse=True)
    assert order == ["good", "concise", "verbose"]


def test_short_captions_keep_the_fixed_bins() -> None:
    recs = [
        {"model_a": "x", "model_b": "y", "verdict": v, "image": f"i{k}", "caption_a": caption(wa), "caption_b": caption(wb)}
        for k, (v, wa, wb) in enumerate([("A", 12, 4), ("B", 4, 30), ("tie", 9, 8), ("A", 10, 10)])
    ]
    lb = length_bins(battle_set(recs, ["x", "y"]))
    assert set(lb) == {"bins", "equal_length", "longer_win_rate"}  # no binning keys: the output as it was
    assert [b["words"] for b in lb["bins"]] == ["1-2", "3-5", "6-10", "11-20", "21+"]
    assert [b["battles"] for b in lb["bins"]] == [1, 0, 1, 0, 1]
