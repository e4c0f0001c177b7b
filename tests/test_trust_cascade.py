"""capjudge.trust.cascade: Trust or Escalate's calibration, equal to the official code's steps
(tests/official_trust.py) under rule="official", each difference of rule="guaranteed" pinned, and
the guarantee checked by simulation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom

from capjudge.trust import cascade as C
from official_trust import apply_rule, torch_linspace01
from official_trust import calibrate as official_calibrate


def _judge(rng: np.random.Generator, n: int, labels: np.ndarray, bias: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic judge: confidence on [0.5, 1], right with probability confidence - bias;
    confidences rounded to float32 (the official code holds them so)."""
    conf = rng.uniform(0.5, 1.0, n).astype(np.float32).astype(np.float64)
    right = rng.random(n) < np.clip(conf - bias, 0, 1)
    return conf, np.where(right, labels, 1 - labels)


@pytest.mark.slow  # imports torch
def test_grid_is_torch_linspace() -> None:
    torch = pytest.importorskip("torch")
    for size in (5000, 1000, 7, 2):
        assert np.array_equal(C.threshold_grid(size), torch.linspace(0, 1, size).numpy().astype(np.float64))
    assert np.array_equal(C.threshold_grid(5000), torch_linspace01(5000).astype(np.float64))


def test_risk_bound_is_the_binomial_root_the_official_code_solves() -> None:
    for n in (30, 37, 100, 801):
        for k in (0, 1, n // 7, n // 2, n - 1):
            for delta in (0.05, 0.1, 0.2):
                if binom.cdf(k, n, 0.9999) > delta:  # the root lies above brentq's bracket: the official code stops
                    assert C.risk_upper_bound(k, n, delta) > 0.9999
                    continue
                root = brentq(lambda r, k=k, n=n, d=delta: binom.cdf(k, n, r) - d, 0, 0.9999)
                assert C.risk_upper_bound(k, n, delta) == pytest.approx(root, abs=1e-9)
    assert C.risk_upper_bound(40, 40, 0.1) == 1.0  # every one wrong: brentq has no root there
    assert np.isnan(C.risk_upper_bound(0, 0, 0.1))


@pytest.mark.parametrize("seed", range(6))
def test_official_rule_equals_the_official_steps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(80, 300))
    labels = rng.integers(0, 2, n)
    judges = [_judge(rng, n, labels, bias=b) for b in (float(rng.uniform(0, 0.3)), float(rng.uniform(-0.05, 0.1)))]
    alpha, delta = float(rng.choice([0.1, 0.15, 0.25])), float(rng.choice([0.05, 0.1, 0.2]))
    conf, pred = [j[0] for j in judges], [j[1] for j in judges]
    want = official_calibrate(conf, pred, labels, alpha, delta, grid=1000)
    plan = C.calibrate(conf, pred, labels, alpha, delta, rule="official", grid=1000)
    got = [j.threshold for j in plan.judges]
    assert got == pytest.approx(want, abs=1e-9)
    shares, accuracy, coverage, evaluator = apply_rule(want, conf, pred, labels)
    out = C.apply(plan, conf, pred, labels)
    assert np.array_equal(out.decided_by, evaluator)
    assert out.coverage == pytest.approx(coverage, abs=1e-12)
    if out.selective_accuracy is not None:
        assert out.selective_accuracy == pytest.approx(accuracy, abs=1e-12)
        assert list(out.shares.values()) == pytest.approx(shares, abs=1e-12)


def test_official_float32_error_count_is_one_short_where_guaranteed_counts_exactly() -> None:
    # 37 samples above every threshold, 3 of them wrong: float32(3 / 37) * 37 floors to 2
    assert np.floor(np.float32(np.float32(3) / np.float32(37)) * np.float32(37)) == 2
    conf = np.full(37, 0.9)
    pred = np.array([1] * 34 + [0] * 3)
    human = np.ones(37, dtype=int)
    official = C.calibrate_judge(conf, pred, human, 0.5, 0.1, rule="official")
    guaranteed = C.calibrate_judge(conf, pred, human, 0.5, 0.1)
    assert official.risk_bound == pytest.approx(C.risk_upper_bound(2, 37, 0.1)[()], abs=1e-12)
    assert guaranteed.risk_bound == pytest.approx(C.risk_upper_bound(3, 37, 0.1)[()], abs=1e-12)
    assert guaranteed.risk_bound > official.risk_bound


def test_guaranteed_threshold_is_fixed_sequence_testing_on_the_grid() -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 400)
    conf, pred = _judge(rng, 400, labels)
    t = C.calibrate_judge(conf, pred, labels, 0.15, 0.1, grid=1000)
    assert t.threshold is not None
    g = C.threshold_grid(1000)
    n = np.array([(conf >= lam).sum() for lam in g])
    e = np.array([((conf >= lam) & (pred != labels)).sum() for lam in g])
    ok = n >= 30
    bound = C.risk_upper_bound(e[ok], n[ok], 0.1)
    i = int(np.searchsorted(g, t.threshold))
    assert g[i] == t.threshold
    assert (bound[i:] <= 0.15).all()  # it and every candidate above it pass
    assert i == 0 or bound[i - 1] > 0.15  # the one below fails
    assert t.risk_bound == pytest.approx(bound[i]) and t.risk_bound <= 0.15


def test_a_judge_whose_top_candidate_fails_keeps_nothing_where_the_official_code_keeps_it() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 200)
    conf = rng.uniform(0.5, 1.0, 200)
    pred = np.where(rng.random(200) < 0.5, labels, 1 - labels)  # a coin, however sure it says it is
    guaranteed = C.calibrate_judge(conf, pred, labels, 0.1, 0.1, grid=1000)
    official = C.calibrate_judge(conf, pred, labels, 0.1, 0.1, rule="official", grid=1000)
    assert guaranteed.threshold is None and guaranteed.kept == 0 and "keeps nothing" in guaranteed.note
    assert official.threshold is not None and official.kept >= 30 and official.risk_bound > 0.1
    assert official.threshold == pytest.approx(official_calibrate([conf], [pred], labels, 0.1, 0.1, grid=1000)[0], abs=1e-9)


def test_too_few_samples_left_keeps_nothing_where_the_official_code_reuses_the_previous_threshold() -> None:
    labels = np.ones(100, dtype=int)
    first = (np.full(100, 0.99), labels.copy())  # right on everything: keeps all but the 20 below
    first[0][:20] = 0.6
    first[1][:20] = 0
    second = (np.linspace(0.5, 1.0, 100), labels.copy())
    conf, pred = [first[0], second[0]], [first[1], second[1]]
    guaranteed = C.calibrate(conf, pred, labels, 0.2, 0.1, grid=1000)
    official = C.calibrate(conf, pred, labels, 0.2, 0.1, rule="official", grid=1000)
    assert guaranteed.judges[1].calibration_n == 20 and guaranteed.judges[1].threshold is None
    assert official.judges[1].threshold == official.judges[0].threshold
    assert [j.threshold for j in official.judges] == pytest.approx(official_calibrate(conf, pred, labels, 0.2, 0.1, grid=1000), abs=1e-9)
    with pytest.raises(ValueError, match="fewer than 30"):
        C.calibrate_judge(np.full(10, 0.9), np.ones(10), np.ones(10), 0.2, 0.1, rule="official")


def test_ties_are_labels_like_the_others() -> None:
    # a human tie is right only for a judge's tie; a judge's tie is wrong against A or B
    human = np.array(["tie"] * 40 + ["A"] * 40)
    pred = np.array(["tie"] * 40 + ["tie"] * 40)
    conf = np.concatenate([np.full(40, 0.9), np.full(40, 0.6)])
    t = C.calibrate_judge(conf, pred, human, 0.1, 0.1)
    assert t.threshold is not None and 0.6 < t.threshold <= 0.9 and t.empirical_risk == 0.0
    out = C.apply(C.calibrate([conf], [pred], human, 0.1, 0.1), [conf], [pred], human)
    assert out.coverage == 0.5 and out.selective_accuracy == 1.0


def test_cost_per_1000_counts_what_each_judge_is_asked() -> None:
    plan = C.CascadePlan([C.JudgeThreshold("cheap", 0.8, 4, 2, 0.0, 0.5, 10), C.JudgeThreshold("strong", 0.5, 2, 2, 0.0, 0.5, 10)], 0.1, 0.1, "guaranteed", 5000, 30, 4, [0.001, 0.01])
    conf = [np.array([0.9, 0.85, 0.2, 0.7]), np.array([0.9, 0.9, 0.6, 0.4])]
    pred = [np.array(["A", "B", "A", "A"]), np.array(["A", "A", "B", "B"])]
    out = C.apply(plan, conf, pred, np.array(["A", "B", "B", "A"]))
    assert out.decided_by.tolist() == [0, 0, 1, -1]
    assert out.asked == {"cheap": 1.0, "strong": 0.5}
    assert out.cost_per_1000 == pytest.approx(1000 * (0.001 + 0.5 * 0.01))
    assert out.coverage == 0.75 and out.selective_accuracy == 1.0
    assert out.shares == pytest.approx({"cheap": 2 / 3, "strong": 1 / 3})
    assert out.verdicts == ["A", "B", "B", None]


def test_plan_file_round_trip_and_refusals(tmp_path) -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 300)
    j1, j2 = _judge(rng, 300, labels, 0.05), _judge(rng, 300, labels)
    plan = C.calibrate([j1[0], j2[0]], [j1[1], j2[1]], labels, 0.15, 0.1, names=["cheap", "strong"], cost_per_judgment=[0.0001, None])
    path = tmp_path / "plan.json"
    plan.save(path)
    assert C.CascadePlan.load(path) == plan
    data = json.loads(path.read_text())
    assert data["format"] == "capjudge-cascade-plan" and data["version"] == 1
    path.write_text(json.dumps({**data, "version": 9}))
    with pytest.raises(ValueError, match=r"plan\.json: cascade plan version 9"):
        C.CascadePlan.load(path)
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a capjudge cascade plan"):
        C.CascadePlan.load(path)


def _true_risk(lam: np.ndarray, bias: float) -> np.ndarray:
    """P(wrong | confidence >= lam) of _judge's judge: confidence ~ U(0.5, 1), wrong w.p. 1 - c + bias."""
    lo = np.maximum(lam, 0.5)
    return 1.0 + bias - (lo + 1.0) / 2.0


@pytest.mark.parametrize("bias", [0.0, 0.05])  # calibrated, and right 5 points less often than it says
def test_simulated_risk_exceeds_alpha_in_at_most_delta_of_the_runs(bias: float) -> None:
    rng = np.random.default_rng(11)
    runs, n, alpha, delta = 1000, 300, 0.2, 0.1
    labels = np.zeros(n, dtype=int)
    over = kept = 0
    for _ in range(runs):
        conf, pred = _judge(rng, n, labels, bias)
        t = C.calibrate_judge(conf, pred, labels, alpha, delta, grid=1000)
        if t.threshold is not None:
            kept += 1
            over += _true_risk(np.array(t.threshold), bias) > alpha
    assert kept > runs // 2  # the guarantee is not met by keeping nothing
    assert over / runs <= delta + 3 * np.sqrt(delta * (1 - delta) / runs)


@pytest.mark.slow  # 2,000 calibrations: about 4 s
def test_simulated_cascade_risk_exceeds_alpha_in_at_most_delta_of_the_runs() -> None:
    rng = np.random.default_rng(12)
    runs, n, alpha, delta = 1000, 400, 0.15, 0.1
    labels = np.zeros(n, dtype=int)
    biases = (0.1, 0.0)
    over = 0
    for _ in range(runs):
        judges = [_judge(rng, n, labels, b) for b in biases]
        plan = C.calibrate([j[0] for j in judges], [j[1] for j in judges], labels, alpha, delta, grid=1000)
        # population risk of the cascade (independent judges): each judge's kept mass and its risk
        mass, wrong, reach = 0.0, 0.0, 1.0
        for jt, b in zip(plan.judges, biases):
            if jt.threshold is None:
                continue
            p_keep = (1.0 - max(jt.threshold, 0.5)) / 0.5
            mass += reach * p_keep
            wrong += reach * p_keep * float(_true_risk(np.array(jt.threshold), b))
            reach *= 1.0 - p_keep
        over += mass > 0 and wrong / mass > alpha
    assert over / runs <= delta + 3 * np.sqrt(delta * (1 - delta) / runs)


def test_nothing_decided_has_no_selective_accuracy() -> None:
    plan = C.CascadePlan([C.JudgeThreshold("only", None, 50, 0, None, None, 0)], 0.1, 0.1, "guaranteed", 5000, 30, 50)
    out = C.apply(plan, [np.full(3, 0.99)], [np.array(["A", "A", "B"])], np.array(["A", "A", "B"]))
    assert out.coverage == 0.0 and out.selective_accuracy is None and out.shares == {"only": 0.0}
    assert out.decided_by.tolist() == [-1, -1, -1] and out.cost_per_1000 is None


def test_official_off_grid_step_keeps_what_its_bound_refuses() -> None:
    # two confidence levels (a dual-sided judge: both orders agree, or not): the official step
    # lambda - 1/5000 never lands below the grid's second point, so no test fails and the lowest
    # candidate, 0, is taken: the ties of confidence 0, all wrong, are kept too
    conf = np.concatenate([np.ones(200), np.zeros(50)])
    pred = np.array(["A"] * 190 + ["B"] * 10 + ["tie"] * 50)
    human = np.array(["A"] * 250)
    official = C.calibrate_judge(conf, pred, human, 0.15, 0.1, rule="official")
    guaranteed = C.calibrate_judge(conf, pred, human, 0.15, 0.1)
    assert official.threshold == 0.0 and official.kept == 250 and official.risk_bound > 0.15
    assert guaranteed.threshold == C.threshold_grid(5000)[1] and guaranteed.kept == 200 and guaranteed.risk_bound <= 0.15
