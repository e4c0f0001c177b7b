"""capjudge.trust.calibration: reliability data, ECE, Brier, the isotonic map and its file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capjudge.trust import calibration as K


def test_reliability_bins_counts_and_means() -> None:
    values = [0.05, 0.15, 0.15, 0.95, 1.0]
    outcomes = [0, 1, 0, 1, 1]
    r = K.reliability(values, outcomes, bins=10)
    assert r.count == [1, 2, 0, 0, 0, 0, 0, 0, 0, 2]  # 1.0 lands in the last, closed bin
    assert r.mean_value[1] == pytest.approx(0.15) and r.mean_outcome[1] == 0.5
    assert r.mean_value[2] is None and r.mean_outcome[2] is None
    assert r.edges[0] == 0.0 and r.edges[-1] == 1.0 and len(r.edges) == 11


def test_ece_and_brier_by_hand() -> None:
    values = [0.9, 0.9, 0.6, 0.6]
    outcomes = [1, 0, 1, 1]
    # bins: 0.9 -> gap |0.9 - 0.5| = 0.4 (2 samples); 0.6 -> |0.6 - 1| = 0.4 (2 samples)
    assert K.ece(values, outcomes) == pytest.approx(0.4)
    assert K.brier(values, outcomes) == pytest.approx((0.01 + 0.81 + 0.16 + 0.16) / 4)
    with pytest.raises(ValueError, match="one length"):
        K.brier([0.1], [1, 0])


def test_pava_equals_scipy_isotonic_regression() -> None:
    scipy_opt = pytest.importorskip("scipy.optimize")
    if not hasattr(scipy_opt, "isotonic_regression"):
        pytest.skip("scipy < 1.12 has no isotonic_regression")
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = rng.normal(size=int(rng.integers(1, 40)))
        w = rng.uniform(0.1, 3.0, v.size)
        assert K.pava(v, w) == pytest.approx(scipy_opt.isotonic_regression(v, weights=w).x, abs=1e-12)


def test_isotonic_map_is_monotone_pools_ties_and_keeps_raw_values() -> None:
    scores = [10, 20, 20, 30, 40]
    human = [1.0, 3.0, 1.0, 1.5, 5.0]  # 20 -> mean 2.0, then 30 -> 1.5 violates: pooled to 1.75
    m = K.IsotonicMap.fit(scores, human, fitted_on={"method": "fleur"})
    assert m.x == [10.0, 20.0, 30.0, 40.0]
    assert m.y == pytest.approx([1.0, (2 * 2.0 + 1.5) / 3, (2 * 2.0 + 1.5) / 3, 5.0])
    assert m.fitted_on == {"n": 5, "method": "fleur"}
    out = m.apply([5, 35, 50])
    assert [o.raw for o in out] == [5.0, 35.0, 50.0]
    assert [o.calibrated for o in out] == pytest.approx([1.0, (m.y[2] + 5.0) / 2, 5.0])  # flat outside, linear between
    assert (np.diff(m(np.linspace(0, 60, 200))) >= 0).all()


def test_calibration_file_round_trip_and_refusals(tmp_path) -> None:
    m = K.IsotonicMap.fit([0.1, 0.5, 0.9], [0.0, 1.0, 1.0], fitted_on={"method": "m", "backend": "b"})
    path = tmp_path / "cal.json"
    m.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "capjudge-calibration" and data["version"] == 1 and data["method"] == "isotonic"
    assert data["fitted_on"] == {"n": 3, "method": "m", "backend": "b"}
    assert K.IsotonicMap.load(path) == m
    for bad, why in (({**data, "version": 2}, "version 2"), ({**data, "x": [1, 0, 2]}, "rise strictly"), ({**data, "y": [1]}, "one non-zero length"), ([1], "not a capjudge calibration file")):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=why):
            K.IsotonicMap.load(path)
    with pytest.raises(ValueError, match="nothing.json"):
        K.IsotonicMap.load(tmp_path / "nothing.json")
