"""Each statistic against a small case worked out by hand (ties included)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from capjudge.metaeval import stats

# judge scores (x) and human ratings (y) with ties in both and two discordant pairs
X = [0.1, 0.4, 0.4, 0.8, 0.9, 0.9]
Y = [2, 1, 1, 3, 4, 3]


def _pair_counts(x, y):
    """Concordant, discordant and tie counts by enumerating all pairs (no scipy)."""
    c = d = tx = ty = txy = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            txy += 1
        elif dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif (dx > 0) == (dy > 0):
            c += 1
        else:
            d += 1
    return c, d, tx, ty, txy


def test_pair_counts_of_the_hand_case():
    # Worked out on paper: of the 15 pairs, (0,1) and (0,2) are discordant, (1,2) is tied in both,
    # (4,5) only in x, (3,5) only in y, the other 10 are concordant.
    assert _pair_counts(X, Y) == (10, 2, 1, 1, 1)


def test_kendall_tau_b_hand_case():
    c, d, tx, ty, txy = _pair_counts(X, Y)
    n0 = len(X) * (len(X) - 1) // 2  # 15
    n1, n2 = tx + txy, ty + txy  # pairs tied in x (2), tied in y (2)
    expected = (c - d) / math.sqrt((n0 - n1) * (n0 - n2))  # 8 / 13
    assert expected == pytest.approx(8 / 13)
    assert stats.kendall_tau_b(X, Y) == pytest.approx(expected, abs=1e-12)


def test_kendall_tau_c_hand_case():
    c, d, *_ = _pair_counts(X, Y)
    n = len(X)
    m = min(len(set(X)), len(set(Y)))  # 4 distinct values each
    expected = 2 * m * (c - d) / (n**2 * (m - 1))  # 64 / 108
    assert expected == pytest.approx(64 / 108)
    assert stats.kendall_tau_c(X, Y) == pytest.approx(expected, abs=1e-12)


def test_tau_c_with_unequal_levels_and_repeats():
    # the Flickr8k-Expert shape: each score repeated for three ratings; m = distinct human levels
    x = [0.2, 0.2, 0.2, 0.7, 0.7, 0.7, 0.5, 0.5, 0.5]
    y = [1, 1, 2, 3, 4, 3, 2, 2, 1]
    c, d, *_ = _pair_counts(x, y)
    m = min(len(set(x)), len(set(y)))  # 3 score levels < 4 rating levels
    assert m == 3
    assert stats.kendall_tau_c(x, y) == pytest.approx(2 * m * (c - d) / (len(x) ** 2 * (m - 1)))


def test_pearson_hand_case():
    # x - mean = [-1.5, -.5, .5, 1.5], y - mean = [-3, -1, 0, 4]: r = 11 / sqrt(5 * 26)
    assert stats.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))


def test_spearman_with_ties_uses_average_ranks():
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]: rho = 4.5 / sqrt(4.5 * 5)
    assert stats.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


@pytest.mark.parametrize("fn", [stats.kendall_tau_b, stats.kendall_tau_c, stats.pearson, stats.spearman])
def test_undefined_correlations_are_nan(fn):
    assert math.isnan(fn([], []))
    assert math.isnan(fn([1.0], [2.0]))
    assert math.isnan(fn([0.5, 0.5, 0.5], [1, 2, 3]))  # constant judge


def test_length_mismatch_raises():
    with pytest.raises(ValueError):
        stats.pearson([1, 2, 3], [1, 2])


def test_pair_outcomes_and_accuracy_tie_rules():
    out = stats.pair_outcomes([0.9, 0.8, 0.5, 0.2, 0.4], [0.1, 0.3, 0.5, 0.6, 0.4])
    assert out.tolist() == [1, 1, 0, -1, 0]
    assert stats.pairwise_accuracy(out) == pytest.approx(2 / 5)  # ties are wrong by default
    assert stats.pairwise_accuracy(out, "wrong") == pytest.approx(2 / 5)
    assert stats.pairwise_accuracy(out, "half") == pytest.approx(3 / 5)  # 2 + 0.5 + 0.5
    assert math.isnan(stats.pairwise_accuracy([]))
    with pytest.raises(ValueError):
        stats.pairwise_accuracy(out, "coin")  # type: ignore[arg-type]


def test_pick_one_accuracy_by_hand():
    groups = [
        ([0.9, 0.1, 0.2], 0),  # hit
        ([0.5, 0.5, 0.1], 0),  # correct caption tied at the top with one other
        ([0.1, 0.7, 0.3], 0),  # miss
        ([0.3, 0.3, 0.3], 2),  # three-way tie
    ]
    assert stats.pick_one_accuracy(groups) == pytest.approx(1 / 4)
    assert stats.pick_one_accuracy(groups, "half") == pytest.approx((1 + 1 / 2 + 0 + 1 / 3) / 4)
    assert math.isnan(stats.pick_one_accuracy([]))


def test_pick_one_with_several_correct_captions():
    groups = [
        ([0.9, 0.9, 0.2], [0, 1]),  # two correct tied at the top: a hit only with "half" (2/2)
        ([0.5, 0.5, 0.5, 0.1], {0, 3}),  # one of three tied is correct
        ([0.2, 0.8], [0]),  # a flawed caption wins
    ]
    assert stats.pick_one_credit(*groups[0], "half") == 1.0 and stats.pick_one_credit(*groups[0]) == 0.0
    assert stats.pick_one_credit(*groups[1], "half") == pytest.approx(1 / 3)
    assert stats.pick_one_accuracy(groups, "half") == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert stats.pick_one_accuracy(groups) == 0.0
    with pytest.raises(ValueError, match="tie rule"):
        stats.pick_one_credit([1.0], 0, "coin")  # type: ignore[arg-type]


def test_bootstrap_ci_is_deterministic_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    values = rng.normal(10.0, 2.0, size=200)
    stat = lambda idx: float(values[idx].mean())  # noqa: E731
    lo, hi = stats.bootstrap_ci(stat, len(values), n_resamples=300, seed=7)
    assert (lo, hi) == stats.bootstrap_ci(stat, len(values), n_resamples=300, seed=7)
    assert lo < values.mean() < hi
    # the half-width is about 1.96 standard errors (2 / sqrt(200) = 0.14)
    assert 0.15 < hi - lo < 0.9
    assert stats.bootstrap_ci(stat, 1) == (pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True))


def test_bootstrap_cis_several_measures_and_nan_resamples():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 6.0])
    cis = stats.bootstrap_cis(lambda i: {"r": stats.pearson(x[i], y[i]), "never": math.nan}, 6, n_resamples=200, seed=0)
    lo, hi = cis["r"]
    assert -1.0 <= lo <= stats.pearson(x, y) <= hi <= 1.0
    assert all(math.isnan(v) for v in cis["never"])
