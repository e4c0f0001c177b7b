"""System numbers of a run corrected by a few human labels (``score --human``, ``arena --human``).

:func:`score_summary`: the mean human score of a ``capjudge score`` run estimated four ways
(:func:`capjudge.trust.ppi.estimate_all`: the judge alone, the labels alone, PPI, PPI++), the judge's
values put on the human scale first (``details.calibration.calibrated`` when every record has it,
else the judge's score rescaled linearly from its scale to ``human_scale``), intervals clustered by
image. :func:`arena_summary`: per captioning model, the win rate (a win 1, a tie 1/2) the same four
ways, and the Bradley-Terry strengths by PPI++ logistic regression beside the judge-only and
human-only fits (:func:`capjudge.trust.ppi_bt.bradley_terry`), clustered by the battle's item (the
``id`` the models' captions share: one image).

The **effective sample size** of an estimate: the number of human labels the labels-alone
interval would need to be as narrow as the PPI++ one, ``n * (width classical / width PPI++)^2``
(Angelopoulos et al.); ``gained`` is that minus ``n``.

Arena labels are JSONL rows ``{"id", "model_a", "model_b", "human"}``: the battle of item ``id``
between the two models, ``human`` A (``model_a`` better), B, tie, or a list of them (the majority);
the models may be in either order (a label is turned to the battle record's order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from capjudge.data.io import read_jsonl
from capjudge.trust.inputs import VERDICTS, TrustInputError, majority, read_human, read_results
from capjudge.trust.ppi import MeanEstimate, estimate_all
from capjudge.trust.ppi_bt import OUTCOME, bradley_terry

FLIP = {"A": "B", "B": "A", "tie": "tie"}


def effective_n(n: int, classical_width: float, ppi_width: float) -> float | None:
    """Labels the labels-alone interval would need to be as narrow as PPI++'s (module doc)."""
    if not (ppi_width > 0 and np.isfinite(ppi_width) and np.isfinite(classical_width)):
        return None
    return float(n * (classical_width / ppi_width) ** 2)


def _with_ess(est: dict[str, MeanEstimate]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v.to_dict() for k, v in est.items()}
    c, p = est["classical"], est["ppi++"]
    ess = effective_n(c.n, c.high - c.low, p.high - p.low)
    out["effective_n"] = {"labels": c.n, "ppi++": ess, "gained": None if ess is None else ess - c.n}
    return out


def score_summary(results: str, human: str, *, alpha: float = 0.1, human_scale: tuple[float, float] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The mean human score of a score run four ways, with the effective sample size; and the bad
    rows of the inputs. :class:`TrustInputError` when fewer than 2 records have a label or none is
    without one."""
    res = read_results(results)
    hum = read_human(human)
    problems = res.problems + hum.problems
    if res.kind != "score":
        raise TrustInputError(f"{results}: --human on score needs score records, not {res.kind} records")
    ids = [i for i in res.rows if i in hum.labels]
    unl = [i for i in res.rows if i not in hum.labels]
    if any(isinstance(hum.labels[i].value, str) for i in ids):
        raise TrustInputError(f"{human}: score records need score labels, not verdicts")
    if len(ids) < 2 or not unl:
        raise TrustInputError(f"{results} and {human}: {len(ids)} records with a label and {len(unl)} without; PPI needs at least 2 with and 1 without")
    calibrated = {i: r.calibrated for i, r in res.rows.items()}
    use_cal = all(v is not None for v in calibrated.values())
    scale = res.scale or (0.0, 100.0)
    hscale = human_scale or scale

    def value(i: str) -> float:
        if use_cal:
            return float(calibrated[i])  # type: ignore[arg-type]
        lo, hi = scale
        return (float(res.rows[i].value) - lo) / (hi - lo) * (hscale[1] - hscale[0]) + hscale[0]

    y = np.array([float(hum.labels[i].value) for i in ids])
    est = estimate_all(y, [value(i) for i in ids], [value(i) for i in unl], alpha=alpha, clusters=[res.rows[i].image for i in ids], clusters_unlabeled=[res.rows[i].image for i in unl])
    data = {"human": human, "alpha": alpha, "judge_values": "details.calibration.calibrated" if use_cal else f"score rescaled from {list(scale)} to {list(hscale)}", "labelled": len(ids), "unlabelled": len(unl), "mean_human_score": _with_ess(est), "bad_rows": len(problems)}
    return data, problems


def read_battle_labels(path: str) -> tuple[dict[tuple[str, frozenset[str]], tuple[str, str, str]], list[str]]:
    """Arena labels by ``(id, {model_a, model_b})``: ``(model_a, model_b, human verdict)``."""
    out: dict[tuple[str, frozenset[str]], tuple[str, str, str]] = {}
    problems: list[str] = []
    try:
        lines = list(read_jsonl(path))
    except FileNotFoundError:
        raise TrustInputError(f"{path}: no such file") from None
    for line in lines:
        where = f"{path} line {line.number}"
        v = line.value
        if line.error is not None or not isinstance(v, dict):
            problems.append(f"{where}: {line.error or 'not a JSON object'}")
            continue
        a, b, item, h = v.get("model_a"), v.get("model_b"), v.get("id"), v.get("human")
        votes = h if isinstance(h, list) else [h]
        if not (isinstance(a, str) and isinstance(b, str) and a != b and isinstance(item, (str, int)) and not isinstance(item, bool)):
            problems.append(f"{where}: needs id, model_a and model_b (two different models)")
            continue
        if not votes or any(x not in VERDICTS for x in votes):
            problems.append(f"{where}: 'human' must be A, B, tie or a list of them, not {h!r}")
            continue
        key = (str(item), frozenset((a, b)))
        if key in out:
            problems.append(f"{where}: the battle {item!r} {a} vs {b} again: kept the first")
            continue
        out[key] = (a, b, majority([str(x) for x in votes]))
    return out, problems


def _battles(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    rows, problems = [], []
    for line in read_jsonl(path):
        v = line.value
        if line.error is not None or not isinstance(v, dict):
            problems.append(f"{path} line {line.number}: {line.error or 'not a JSON object'}")
            continue
        if v.get("status", "ok") == "ok" and v.get("verdict") in VERDICTS and isinstance(v.get("model_a"), str) and isinstance(v.get("model_b"), str):
            rows.append(v)
    return rows, problems


def arena_summary(battles: str, human: str, *, alpha: float = 0.1) -> tuple[dict[str, Any], list[str]]:
    """Per model, the win rate and the Bradley-Terry strength corrected by human labels of some
    battles (module doc), and the bad rows of the inputs."""
    recs, problems = _battles(battles)
    labels, more = read_battle_labels(human)
    problems += more
    lab: list[tuple[str, str, str, str]] = []
    unl: list[tuple[str, str, str]] = []
    cl_l: list[str] = []
    cl_u: list[str] = []
    for r in recs:
        a, b, v = r["model_a"], r["model_b"], r["verdict"]
        hit = labels.get((str(r.get("id")), frozenset((a, b))))
        if hit is not None:
            lab.append((a, b, v, hit[2] if hit[0] == a else FLIP[hit[2]]))
            cl_l.append(str(r.get("id")))
        else:
            unl.append((a, b, v))
            cl_u.append(str(r.get("id")))
    if len(lab) < 2 or not unl:
        raise TrustInputError(f"{battles} and {human}: {len(lab)} battles with a label and {len(unl)} without; PPI needs at least 2 with and 1 without")
    models = sorted({m for r in [*lab, *unl] for m in r[:2]})
    data: dict[str, Any] = {"human": human, "alpha": alpha, "labelled": len(lab), "unlabelled": len(unl), "win_rate": {}, "bradley_terry": _bt(lab, unl, cl_l, cl_u, alpha), "bad_rows": len(problems)}
    for m in models:
        data["win_rate"][m] = _win_rate(m, lab, unl, cl_l, cl_u, alpha)
    return data, problems


def _outcome(m: str, a: str, verdict: str) -> float:
    o = OUTCOME[verdict]
    return o if m == a else 1.0 - o


def _win_rate(m: str, lab: Sequence[tuple[str, str, str, str]], unl: Sequence[tuple[str, str, str]], cl_l: Sequence[str], cl_u: Sequence[str], alpha: float) -> dict[str, Any] | None:
    li = [k for k, r in enumerate(lab) if m in r[:2]]
    ui = [k for k, r in enumerate(unl) if m in r[:2]]
    if len(li) < 2 or not ui:
        return None  # too few labelled battles of this model
    y = [_outcome(m, lab[k][0], lab[k][3]) for k in li]
    yh = [_outcome(m, lab[k][0], lab[k][2]) for k in li]
    yu = [_outcome(m, unl[k][0], unl[k][2]) for k in ui]
    return _with_ess(estimate_all(y, yh, yu, alpha=alpha, clusters=[cl_l[k] for k in li], clusters_unlabeled=[cl_u[k] for k in ui]))


def _fit(lab: list[tuple[str, str, str, str]], unl: list[tuple[str, str, str]], cl_l: list[str], cl_u: list[str], alpha: float, lam: float | None) -> Any:
    try:
        return bradley_terry(lab, unl, alpha=alpha, lam=lam, clusters=cl_l, clusters_unlabeled=cl_u)
    except (ValueError, np.linalg.LinAlgError) as exc:
        return f"no fit: {exc} (too few battles, or a model that wins or loses every one)"


def _bt(lab: list[tuple[str, str, str, str]], unl: list[tuple[str, str, str]], cl_l: list[str], cl_u: list[str], alpha: float) -> dict[str, Any]:
    """PPI++, human-only (``lam=0``) and judge-only (every battle's judge verdict as its label);
    a fit that fails is named (``error``) and the others kept."""
    everything = [(a, b, v, v) for a, b, v, _ in lab] + [(a, b, v, v) for a, b, v in unl]
    fits = {"ppi++": _fit(lab, unl, cl_l, cl_u, alpha, None), "classical": _fit(lab, unl, cl_l, cl_u, alpha, 0.0), "naive": _fit(everything, unl, cl_l + cl_u, cl_u, alpha, 0.0)}
    models = sorted({m for r in [*lab, *unl] for m in r[:2]})
    out: dict[str, Any] = {"reference": models[0], "unit": "log-odds, the reference model 0", "errors": {k: v for k, v in fits.items() if isinstance(v, str)}, "models": {}}
    for k, m in enumerate(models):
        row: dict[str, Any] = {}
        for name, fit in fits.items():
            row[name] = None if isinstance(fit, str) else {"strength": fit.strength[k], "ci": [fit.low[k], fit.high[k]], "lam": fit.lam}
        ess = None
        if k and row["ppi++"] is not None and row["classical"] is not None:
            ess = effective_n(len(lab), row["classical"]["ci"][1] - row["classical"]["ci"][0], row["ppi++"]["ci"][1] - row["ppi++"]["ci"][0])
        row["effective_n"] = {"labels": len(lab), "ppi++": ess, "gained": None if ess is None else ess - len(lab)}
        out["models"][m] = row
    return out
