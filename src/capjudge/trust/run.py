"""The trust tools on files: what ``capjudge calibrate`` and ``capjudge cascade`` compute.

:func:`calibration_report` joins a judge's results to human labels by id and measures how the
judge's numbers match people's (:mod:`.calibration`): for score records, the judge's score and the
human score each put on ``[0, 1]`` by their scales, a monotone map from the judge's score to the
human one, and the mean human score estimated four ways (:mod:`.ppi`: the judge alone, the labels
alone, PPI, PPI++; rows of the results file without a human label are the unlabelled ones,
clustered by image); for pair records, the confidence against agreement with the human verdict.

:func:`cascade_report` calibrates a cascade of judges (:mod:`.cascade`) on the ids that every
judge answered and people labelled, and applies it to them and to the ids without a label; and
its coverage-risk curve (:mod:`.curves`: the cascade calibrated again at each risk target).

Each report also keeps, for its HTML page (:mod:`.page`), the joined rows (``detail["rows"]``:
one per id, the judge's and the human's values) and, for a cascade, each judge's own
coverage-risk curve (``detail["judge_curves"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from capjudge.trust import calibration as cal
from capjudge.trust import cascade as csc
from capjudge.trust import curves
from capjudge.trust.inputs import (
    HumanLabels,
    JudgeResults,
    TrustInputError,
    read_human,
    read_results,
)
from capjudge.trust.ppi import estimate_all


@dataclass
class Report:
    """A report's JSON-safe ``data``, the bad rows of its inputs (``problems``), the fitted
    object to save (a calibration map or a cascade plan), and what only the HTML page shows
    (``detail``: the joined rows, the judges' own curves)."""

    data: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    saved: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


def _norm(values: np.ndarray, scale: tuple[float, float]) -> np.ndarray:
    lo, hi = scale
    return (values - lo) / (hi - lo)


def calibration_report(results: str, human: str, *, bins: int = 10, alpha: float = 0.1, human_scale: tuple[float, float] | None = None) -> Report:
    """Measure one judge against people (module docstring)."""
    res = read_results(results)
    hum = read_human(human)
    problems = res.problems + hum.problems
    ids = [i for i in res.rows if i in hum.labels]
    base: dict[str, Any] = {"results": results, "human": human, "kind": res.kind, "method": _top(res.methods), "backend": _top(res.backends), "records": len(res.rows) + len(res.failed), "failed": len(res.failed), "labelled": len(ids), "bad_rows": len(problems)}
    if len(ids) < 2:
        raise TrustInputError(f"{results} and {human}: {len(ids)} ids in common with an ok record and a label; at least 2 are needed")
    if res.kind == "pair":
        return _pair_calibration(res, hum, ids, base, bins, problems)
    return _score_calibration(res, hum, ids, base, bins, alpha, human_scale, problems)


def _top(counter: Any) -> str | None:
    return counter.most_common(1)[0][0] if counter else None


def _score_calibration(res: JudgeResults, hum: HumanLabels, ids: list[str], base: dict[str, Any], bins: int, alpha: float, human_scale: tuple[float, float] | None, problems: list[str]) -> Report:
    wrong = [i for i in ids if isinstance(hum.labels[i].value, str)]
    if wrong:
        raise TrustInputError(f"{hum.path}: id {wrong[0]!r} has a verdict label, but {res.path} holds score records")
    scale = res.scale or (0.0, 100.0)
    hscale = human_scale or scale
    s = np.array([float(res.rows[i].value) for i in ids])
    h = np.array([float(hum.labels[i].value) for i in ids])
    sv, hv = _norm(s, scale), _norm(h, hscale)
    fmap = cal.IsotonicMap.fit(s, h, fitted_on={"method": base["method"], "backend": base["backend"], "results": res.path, "human": hum.path, "scale": list(scale), "human_scale": list(hscale)})
    calibrated = _norm(fmap(s), hscale)
    unl = [i for i in res.rows if i not in hum.labels]
    data = {
        **base,
        "scale": list(scale),
        "human_scale": list(hscale),
        "reliability": cal.reliability(sv, hv, bins=bins).to_dict()["bins"],
        "ece": cal.ece(sv, hv, bins=bins),
        "brier": cal.brier(sv, hv),
        "after_calibration": {"ece": cal.ece(calibrated, hv, bins=bins), "brier": cal.brier(calibrated, hv), "in_sample": True},
        "calibration_map": {"x": fmap.x, "y": fmap.y},
        "unlabelled": len(unl),
    }
    if unl:
        yu = _norm(np.array([float(res.rows[i].value) for i in unl]), scale) * (hscale[1] - hscale[0]) + hscale[0]
        yh = _norm(s, scale) * (hscale[1] - hscale[0]) + hscale[0]
        est = estimate_all(h, yh, yu, alpha=alpha, clusters=[res.rows[i].image for i in ids], clusters_unlabeled=[res.rows[i].image for i in unl])
        data["mean_human_score"] = {k: v.to_dict() for k, v in est.items()}
    rows = [
        {"id": i, "image": res.rows[i].image, "judge": float(v), "human": float(hv_), "annotators": len(hum.labels[i].votes), "calibrated": float(c), "gap": abs(float(a) - float(b))}
        for i, v, hv_, c, a, b in zip(ids, s, h, fmap(s), sv, hv)
    ]
    return Report(data, problems, fmap, {"rows": rows})


def _pair_calibration(res: JudgeResults, hum: HumanLabels, ids: list[str], base: dict[str, Any], bins: int, problems: list[str]) -> Report:
    wrong = [i for i in ids if not isinstance(hum.labels[i].value, str)]
    if wrong:
        raise TrustInputError(f"{hum.path}: id {wrong[0]!r} has a score label, but {res.path} holds pair records")
    conf = np.array([float(res.rows[i].confidence or 0.0) for i in ids])
    right = np.array([float(res.rows[i].value == hum.labels[i].value) for i in ids])
    fmap = cal.IsotonicMap.fit(conf, right, fitted_on={"method": base["method"], "backend": base["backend"], "results": res.path, "human": hum.path, "confidence_rule": res.confidence_rule, "target": "agreement with the human verdict"})
    data = {
        **base,
        "confidence_rule": res.confidence_rule,
        "agreement": float(right.mean()),
        "reliability": cal.reliability(conf, right, bins=bins).to_dict()["bins"],
        "ece": cal.ece(conf, right, bins=bins),
        "brier": cal.brier(conf, right),
        "calibration_map": {"x": fmap.x, "y": fmap.y},
    }
    rows = [
        {"id": i, "image": res.rows[i].image, "verdict": res.rows[i].value, "confidence": float(c), "human": hum.labels[i].value, "annotators": len(hum.labels[i].votes), "agrees": bool(r), "calibrated": float(p)}
        for i, c, r, p in zip(ids, conf, right, fmap(conf))
    ]
    return Report(data, problems, fmap, {"rows": rows})


def cascade_report(judges: Sequence[str], human: str, *, alpha: float, delta: float, rule: csc.Rule = "guaranteed", min_samples: int = 30, grid: int = 5000) -> Report:
    """Calibrate a cascade of judges (cheapest first) on people's pair verdicts and apply it
    (module docstring)."""
    files = [read_results(p) for p in judges]
    hum = read_human(human)
    problems = [p for f in files for p in f.problems] + hum.problems
    for f in files:
        if f.kind != "pair":
            raise TrustInputError(f"{f.path}: a cascade needs pair records (verdicts), not {f.kind} records")
    common = [i for i in files[0].rows if all(i in f.rows for f in files[1:])]
    labelled = [i for i in common if i in hum.labels]
    if any(not isinstance(hum.labels[i].value, str) for i in labelled):
        raise TrustInputError(f"{human}: a cascade needs verdict labels (A, B, tie), not scores")
    if not labelled:
        raise TrustInputError(f"{human}: no id that every judge answered has a human label")
    names = _names(files)
    costs = [f.cost_per_judgment() for f in files]
    conf = [np.array([float(f.rows[i].confidence or 0.0) for i in labelled]) for f in files]
    pred = [np.array([str(f.rows[i].value) for i in labelled]) for f in files]
    labels = np.array([str(hum.labels[i].value) for i in labelled])
    try:
        plan = csc.calibrate(conf, pred, labels, alpha, delta, names=names, rule=rule, grid=grid, min_samples=min_samples, cost_per_judgment=costs)
    except ValueError as exc:  # the official rule stops where too few samples reach the first judge
        raise TrustInputError(f"{human}: {len(labelled)} labelled ids: {exc}") from None
    plan = replace(plan, runs=[f.run() for f in files])
    out = csc.apply(plan, conf, pred, labels)
    data: dict[str, Any] = {
        "human": human,
        "alpha": alpha,
        "delta": delta,
        "rule": rule,
        "calibration_n": len(labelled),
        "judges": [
            {**j.__dict__, "results": f.path, "backend": _top(f.backends), "confidence_rule": f.confidence_rule, "cost_per_judgment": c, "tokens_per_judgment": f.tokens_per_judgment(), "failed": len(f.failed)}
            for j, f, c in zip(plan.judges, files, costs)
        ],
        "calibration": out.to_dict(),
        "guaranteed_risk": curves.guaranteed_risk(plan),
        "official_commit": csc.OFFICIAL_COMMIT,
        "bad_rows": len(problems),
    }
    rows = _cascade_rows(files, names, labelled, out, hum)
    unl = [i for i in common if i not in hum.labels]
    if unl:
        uc = [np.array([float(f.rows[i].confidence or 0.0) for i in unl]) for f in files]
        up = [np.array([str(f.rows[i].value) for i in unl]) for f in files]
        unl_out = csc.apply(plan, uc, up)
        data["unlabelled"] = unl_out.to_dict()
        rows += _cascade_rows(files, names, unl, unl_out, None)
    # the same cascade calibrated at other risk targets: what each target keeps (the report's curve)
    targets = sorted({*curves.DEFAULT_TARGETS, alpha})
    data["coverage_risk"] = [p.to_dict() for p in curves.cascade_curve(conf, pred, labels, delta, targets=targets, names=names, rule=rule, grid=grid, min_samples=min_samples, cost_per_judgment=costs)]
    judge_curves = {n: curves.selective_curve(c, p == labels) for n, c, p in zip(names, conf, pred)}
    return Report(data, problems, plan, {"rows": rows, "judge_curves": judge_curves})


def _cascade_rows(files: Sequence[JudgeResults], names: list[str], ids: list[str], out: csc.CascadeOutcome, hum: HumanLabels | None) -> list[dict[str, Any]]:
    """One row per id: each judge's verdict and confidence, the human label, who decided."""
    rows = []
    for k, i in enumerate(ids):
        by = int(out.decided_by[k])
        human = hum.labels[i].value if hum is not None else None
        if by < 0:
            status = "abstained"
        elif human is None:
            status = "unlabelled"
        else:
            status = "agrees" if out.verdicts[k] == human else "disagrees"
        row: dict[str, Any] = {"id": i, "image": files[0].rows[i].image, "human": human, "decided_by": names[by] if by >= 0 else None, "verdict": out.verdicts[k], "status": status}
        for j, f in enumerate(files):
            row[f"verdict{j}"] = f.rows[i].value
            row[f"confidence{j}"] = f.rows[i].confidence
        rows.append(row)
    return rows


def _names(files: Sequence[JudgeResults]) -> list[str]:
    names = [f.name for f in files]
    return [f"{n}#{k + 1}" if names.count(n) > 1 else n for k, n in enumerate(names)]
