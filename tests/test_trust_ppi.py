"""capjudge.trust.ppi and ppi_bt: equal to ppi_py's estimators on the same arrays, clustered
intervals, and coverage by simulation (synthetic judges of planted bias and noise)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from capjudge.trust import ppi as P
from capjudge.trust import ppi_bt as B


def _ppi_py():
    """ppi_py, or a skip with the reason outside CI (CI installs the dev extra: never skipped there)."""
    try:
        import ppi_py
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("ppi_py (the dev extra's ppi-python) is not installed")
    return ppi_py


def _data(seed: int, n: int = 150, N: int = 1500, bias: float = 0.3, noise: float = 0.5):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n)
    return y, y + bias + rng.normal(0, noise, n), rng.normal(size=N) + bias + rng.normal(0, noise, N)


@pytest.mark.parametrize("lam", [None, 1.0, 0.0, 0.35])
def test_mean_equals_ppi_py(lam: float | None) -> None:
    ppi_py = _ppi_py()
    for seed in range(3):
        y, yh, yu = _data(seed)
        got = P.ppi_mean(y, yh, yu, alpha=0.1, lam=lam)
        low, high = ppi_py.ppi_mean_ci(y, yh, yu, alpha=0.1, lam=lam)
        assert [got.low, got.high] == pytest.approx([float(low[0]), float(high[0])], abs=1e-9)
        assert got.estimate == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(y, yh, yu, lam=lam))), abs=1e-9)


def test_classical_equals_ppi_py() -> None:
    ppi_py = _ppi_py()
    y, _, _ = _data(4)
    for alpha in (0.05, 0.1):
        got = P.classical_mean(y, alpha=alpha)
        assert [got.low, got.high] == pytest.approx(list(map(float, ppi_py.classical_mean_ci(y, alpha=alpha))), abs=1e-9)


def test_one_row_per_cluster_is_the_unclustered_interval() -> None:
    y, yh, yu = _data(5)
    plain = P.ppi_mean(y, yh, yu, lam=1.0)
    clustered = P.ppi_mean(y, yh, yu, lam=1.0, clusters=np.arange(y.size), clusters_unlabeled=np.arange(yu.size))
    assert (clustered.low, clustered.high) == pytest.approx((plain.low, plain.high), abs=1e-12)


def test_clustered_interval_widens_when_rows_of_an_image_are_duplicated() -> None:
    y, yh, yu = _data(6)
    dup = 3  # each image's row three times, as three captions of one image that say the same
    rows, rows_u = np.repeat(np.arange(y.size), dup), np.repeat(np.arange(yu.size), dup)
    original = P.ppi_mean(y, yh, yu, lam=1.0)
    naive = P.ppi_mean(y[rows], yh[rows], yu[rows_u], lam=1.0)
    clustered = P.ppi_mean(y[rows], yh[rows], yu[rows_u], lam=1.0, clusters=rows, clusters_unlabeled=rows_u)
    assert naive.high - naive.low == pytest.approx((original.high - original.low) / np.sqrt(dup), rel=1e-9)
    assert clustered.high - clustered.low > 1.5 * (naive.high - naive.low)
    # duplicates add nothing: the clustered interval is the original one
    assert (clustered.low, clustered.high) == pytest.approx((original.low, original.high), abs=1e-12)


def test_simulated_coverage_of_ppi_and_not_of_the_judge_alone() -> None:
    rng = np.random.default_rng(2024)
    runs, n, N, alpha, truth = 1000, 250, 2000, 0.1, 0.0
    hits = {"ppi": 0, "ppi++": 0, "classical": 0, "naive": 0}
    for _ in range(runs):
        y = rng.normal(truth, 1.0, n)
        yh = 0.8 * y + 0.25 + rng.normal(0, 0.4, n)  # a judge with planted bias and noise
        yu_true = rng.normal(truth, 1.0, N)
        yu = 0.8 * yu_true + 0.25 + rng.normal(0, 0.4, N)
        for name, est in P.estimate_all(y, yh, yu, alpha=alpha).items():
            hits[name] += est.low <= truth <= est.high
    cover = {k: v / runs for k, v in hits.items()}
    for name in ("ppi", "ppi++", "classical"):
        assert cover[name] >= 1 - alpha - 0.02, cover
    assert cover["naive"] < 0.5, cover


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="must pair up"):
        P.ppi_mean([1.0, 2.0], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        P.ppi_mean([1.0, float("nan")], [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="one key per row"):
        P.ppi_mean([1.0, 2.0], [1.0, 2.0], [1.0, 2.0], clusters=[1])


def _battles(seed: int, n: int, N: int):
    rng = np.random.default_rng(seed)
    models = ["m0", "m1", "m2", "m3"]
    strength = {"m0": 0.0, "m1": 0.6, "m2": -0.4, "m3": 1.0}
    def one():
        a, b = rng.choice(models, 2, replace=False)
        human = "A" if rng.random() < 1 / (1 + np.exp(-(strength[a] - strength[b]))) else "B"
        judge = human if rng.random() < 0.8 else ("B" if human == "A" else "A")
        return str(a), str(b), judge, human
    lab = [one() for _ in range(n)]
    unl = [one()[:3] for _ in range(N)]
    return lab, unl


def test_bradley_terry_by_ppi_orders_the_models() -> None:
    lab, unl = _battles(1, 300, 3000)
    bt = B.bradley_terry(lab, unl, alpha=0.1)
    order = [m["model"] for m in bt.to_dict()["models"]]
    assert order == ["m3", "m1", "m0", "m2"]
    for m in bt.to_dict()["models"]:
        assert m["ci"][0] <= m["strength"] <= m["ci"][1]


@pytest.mark.slow  # ppi_py's logistic statistics are numba-compiled on first use
@pytest.mark.parametrize("lam", [None, 1.0, 0.5])
def test_logistic_equals_ppi_py(lam: float | None) -> None:
    ppi_py = _ppi_py()
    lab, unl = _battles(2, 200, 1500)
    models = sorted({r[0] for r in lab + unl} | {r[1] for r in lab + unl})
    x, _ = B.battle_design([r[0] for r in lab], [r[1] for r in lab], models)
    xu, _ = B.battle_design([r[0] for r in unl], [r[1] for r in unl], models)
    y = np.array([B.OUTCOME[r[3]] for r in lab])
    yh = np.array([B.OUTCOME[r[2]] for r in lab])
    yu = np.array([B.OUTCOME[r[2]] for r in unl])
    got = B.ppi_logistic(x, y, yh, xu, yu, alpha=0.1, lam=lam)
    low, high = ppi_py.ppi_logistic_ci(x, y, yh, xu, yu, alpha=0.1, lam=lam)
    # ppi_py stops L-BFGS-B at ftol = gtol = 1e-15 from scikit-learn's start; Newton here: 1e-8
    assert got.low == pytest.approx(low, abs=1e-8)
    assert got.high == pytest.approx(high, abs=1e-8)


def test_logistic_clusters_of_one_row_change_nothing() -> None:
    lab, unl = _battles(3, 150, 600)
    models = sorted({r[0] for r in lab + unl} | {r[1] for r in lab + unl})
    x, _ = B.battle_design([r[0] for r in lab], [r[1] for r in lab], models)
    xu, _ = B.battle_design([r[0] for r in unl], [r[1] for r in unl], models)
    args = (x, np.array([B.OUTCOME[r[3]] for r in lab]), np.array([B.OUTCOME[r[2]] for r in lab]), xu, np.array([B.OUTCOME[r[2]] for r in unl]))
    plain = B.ppi_logistic(*args, lam=1.0)
    clustered = B.ppi_logistic(*args, lam=1.0, clusters=np.arange(len(lab)), clusters_unlabeled=np.arange(len(unl)))
    assert clustered.se == pytest.approx(plain.se, abs=1e-12)
    rows = np.repeat(np.arange(len(lab)), 2)
    dup = B.ppi_logistic(x[rows], args[1][rows], args[2][rows], xu, args[4], lam=1.0)
    dup_clustered = B.ppi_logistic(x[rows], args[1][rows], args[2][rows], xu, args[4], lam=1.0, clusters=rows)
    assert (dup_clustered.se > dup.se).all()


def test_a_constant_judge_gives_the_labels_alone() -> None:
    y = np.array([1.0, 2.0, 4.0, 5.0])
    est = P.ppi_mean(y, np.full(4, 3.0), np.full(10, 3.0))
    classical = P.classical_mean(y)
    assert est.lam == 0.0 and (est.low, est.estimate, est.high) == pytest.approx((classical.low, classical.estimate, classical.high))
