"""Ranking captioning models from their battles: win rate, Bradley-Terry, Elo, bootstrap CIs over
images, the position-flip share and a caption-length check.

A *battle* is one image, two models' captions, one verdict (``A``, ``B`` or ``tie``; ``A`` is
``model_a``). The outcome for ``model_a`` is ``s = 1`` (win), ``0.5`` (tie) or ``0`` (loss).

- **Win rate**: ``(wins + ties / 2) / battles`` over a model's decided battles.
- **Bradley-Terry** (``ties="half"``, the default): ``P(i beats j) = sigmoid(theta_i - theta_j)``,
  fitted by maximum likelihood with each tie counted as half a win for both sides (Chatbot Arena's
  convention), by Newton's method. ``ties="davidson"`` fits Davidson's (1970) model instead, where a
  tie is its own outcome: ``P(i wins) = pi_i / D``, ``P(tie) = nu * sqrt(pi_i pi_j) / D``, ``D = pi_i
  + pi_j + nu * sqrt(pi_i pi_j)``, ``pi = exp(theta)``. Strengths are centred (mean ``theta`` 0) and
  shown on the Elo scale: ``bt = 1000 + 400 * theta / ln(10)`` (a 400-point gap is 10:1 odds). When the
  maximum-likelihood estimate does not exist (a model won, or lost, every battle: the "beats or
  ties" graph is not strongly connected), a weak Gaussian prior (``PRIOR * sum(theta^2)`` added to the
  negative log-likelihood) keeps it finite and the leaderboard says so.
- **Elo**: the battles in a seeded shuffled order, ``R_a += K (s - E_a)``, ``E_a = 1 / (1 + 10^((R_b -
  R_a) / 400))``, every model starting at 1000, fixed ``K`` (default 4, Chatbot Arena's). Shown for
  comparison: it depends on the order, Bradley-Terry does not.
- **CIs**: percentile bootstrap over images (the images are resampled with replacement, every
  battle on a drawn image comes with it, and Bradley-Terry is refitted), 95% by default.
- **Position flips**: the share of dual-sided battles whose two orders gave different verdicts.
- **Length**: the longer caption's win rate by bins of the word-count difference (fixed bins,
  :data:`LENGTH_BINS`, for short captions; for detailed captions, a median caption of
  :data:`DETAILED_WORDS` words or more, bins from the quintiles of the differences, since a few
  words more or less is no difference between 200-word captions); and, as an option, an alpaca_eval-style length-controlled win rate: ``logit P(a beats b) = theta_a - theta_b
  + gamma * tanh((words_a - words_b) / sd)`` (``sd``: the standard deviation of the differences),
  fitted by maximum likelihood (ties as half); a model's LC win rate is the mean over its battles of
  ``sigmoid(theta_m - theta_opponent)``, the win rate predicted at zero length difference. Where
  that likelihood has no maximum (separated battles, or a length difference that moves with the
  strengths: :mod:`capjudge.arena.identify`), ``gamma`` is null with the reason, never the point
  where an optimizer stopped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

TieModel = Literal["half", "davidson"]
TIE_MODELS: tuple[str, ...] = ("half", "davidson")

ELO_INIT = 1000.0
ELO_SCALE = 400.0
ELO_K = 4.0
PRIOR = 0.01
"""Weight of the Gaussian prior used only when the maximum-likelihood strengths do not exist."""

LENGTH_BINS: tuple[tuple[int, float], ...] = ((1, 2), (3, 5), (6, 10), (11, 20), (21, math.inf))
"""Bins of the absolute word-count difference between the two captions of a battle (short captions)."""

DETAILED_WORDS = 50
"""Battles whose median caption has at least this many words (detailed captions) get length bins
from the quantiles of the word-count differences (:func:`quantile_bins`) instead of :data:`LENGTH_BINS`."""

OUTCOME = {"A": 1.0, "B": 0.0, "tie": 0.5}


def decided(record: dict[str, Any]) -> bool:
    """A battle that reached a verdict (the others are failed battles: counted, never ranked)."""
    return record.get("status", "ok") == "ok" and record.get("verdict") in OUTCOME


def to_elo_scale(theta: np.ndarray) -> np.ndarray:
    """Bradley-Terry log-strengths on the Elo scale: ``1000 + 400 * theta / ln(10)``."""
    return ELO_INIT + ELO_SCALE * np.asarray(theta, dtype=float) / math.log(10.0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return np.asarray(expit(x), dtype=float)


# --------------------------------------------------------------------------------------- data
@dataclass
class BattleSet:
    """Decided battles as arrays: model indices ``a``, ``b``; outcome ``s`` for ``a``; ``unit``, the
    index of the battle's image (what the bootstrap resamples); ``flip``: 1.0 when the two orders
    disagreed, 0.0 when they agreed, NaN when not dual-sided; caption lengths in words."""

    models: list[str]
    a: np.ndarray
    b: np.ndarray
    s: np.ndarray
    unit: np.ndarray
    flip: np.ndarray
    words_a: np.ndarray
    words_b: np.ndarray
    n_units: int

    @property
    def n(self) -> int:
        """Number of decided battles."""
        return int(self.a.size)


def battle_set(records: Iterable[dict[str, Any]], models: Sequence[str]) -> BattleSet:
    """The decided battles of ``records`` (battle records: ``model_a``, ``model_b``, ``verdict``,
    ``status``, ``votes``, ``mode``, ``image``, ``caption_a``, ``caption_b``) between ``models``."""
    index = {m: k for k, m in enumerate(models)}
    units: dict[str, int] = {}
    cols: dict[str, list[float]] = {k: [] for k in ("a", "b", "s", "unit", "flip", "wa", "wb")}
    for r in records:
        ma, mb, v = r.get("model_a"), r.get("model_b"), r.get("verdict")
        if not decided(r) or ma not in index or mb not in index:
            continue
        votes = r.get("votes") or []
        dual = r.get("mode", "pairwise") == "pairwise" and len(votes) == 2
        cols["a"].append(index[ma])
        cols["b"].append(index[mb])
        cols["s"].append(OUTCOME[str(v)])
        cols["unit"].append(units.setdefault(str(r.get("image")), len(units)))
        cols["flip"].append(float(votes[0] != votes[1]) if dual else math.nan)
        cols["wa"].append(len(str(r.get("caption_a") or "").split()))
        cols["wb"].append(len(str(r.get("caption_b") or "").split()))
    arr = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    return BattleSet(
        list(models), arr["a"].astype(int), arr["b"].astype(int), arr["s"], arr["unit"].astype(int), arr["flip"], arr["wa"], arr["wb"], len(units)
    )


def pair_counts(a: np.ndarray, b: np.ndarray, s: np.ndarray, n_models: int, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``W[i, j]``: what ``i`` scored against ``j`` (wins + ties / 2), ``N[i, j]``: battles between them."""
    w = np.ones(a.size) if weights is None else np.asarray(weights, dtype=float)
    m = n_models
    W = np.bincount(a * m + b, weights=w * s, minlength=m * m) + np.bincount(b * m + a, weights=w * (1.0 - s), minlength=m * m)
    N = np.bincount(a * m + b, weights=w, minlength=m * m) + np.bincount(b * m + a, weights=w, minlength=m * m)
    return W.reshape(m, m), N.reshape(m, m)


def strongly_connected(W: np.ndarray, active: np.ndarray) -> bool:
    """Whether the "scored against" graph of the active models (``i -> j`` when ``W[i, j] > 0``) is
    strongly connected: the condition for finite maximum-likelihood Bradley-Terry strengths."""
    idx = np.flatnonzero(active)
    if idx.size <= 1:
        return True
    from scipy.sparse.csgraph import connected_components

    n, _ = connected_components((W[np.ix_(idx, idx)] > 0).astype(float), directed=True, connection="strong")
    return bool(n == 1)


# ------------------------------------------------------------------------------ Bradley-Terry
def _bt_nll(theta: np.ndarray, W: np.ndarray, prior: float) -> float:
    d = theta[:, None] - theta[None, :]
    return float(-np.sum(W * -np.logaddexp(0.0, -d)) + prior * np.sum(theta**2))


def fit_bt_counts(W: np.ndarray, N: np.ndarray, *, prior: float = 0.0, tol: float = 1e-10, max_iter: int = 200) -> np.ndarray:
    """Bradley-Terry log-strengths from pair counts by Newton's method (ties already counted as
    half wins in ``W``); mean 0 over the models that have battles, NaN for the others.

    Negative log-likelihood ``-sum_ij W_ij log sigmoid(theta_i - theta_j) + prior * sum theta^2``;
    gradient ``sum_j N_ij p_ij - W_ij (+ 2 prior theta_i)``. Without a prior ``theta`` of the first
    active model is held at 0 during the fit (the likelihood only sees differences).
    """
    m = W.shape[0]
    active = N.sum(axis=1) > 0
    idx = np.flatnonzero(active)
    theta = np.full(m, math.nan)
    if idx.size == 0:
        return theta
    if idx.size == 1:
        theta[idx] = 0.0
        return theta
    Wa, Na = W[np.ix_(idx, idx)], N[np.ix_(idx, idx)]
    t = np.zeros(idx.size)
    free = slice(0, None) if prior > 0 else slice(1, None)
    scale = 1.0 + float(Na.sum())
    f = _bt_nll(t, Wa, prior)
    for _ in range(max_iter):
        P = _sigmoid(t[:, None] - t[None, :])
        grad = (Na * P).sum(axis=1) - Wa.sum(axis=1) + 2 * prior * t
        if np.max(np.abs(grad[free])) < tol * scale:
            break
        V = Na * P * P.T
        H = np.diag(V.sum(axis=1)) - V + 2 * prior * np.eye(idx.size)
        step = np.zeros_like(t)
        try:
            step[free] = np.linalg.solve(H[free, free], -grad[free])
        except np.linalg.LinAlgError:
            step[free] = -np.linalg.lstsq(H[free, free], grad[free], rcond=None)[0]
        # Backtracking: the likelihood is concave, so a full step almost always decreases f.
        k = 1.0
        while k > 1e-8:
            f_new = _bt_nll(t + k * step, Wa, prior)
            if f_new <= f + 1e-12 * abs(f):
                break
            k /= 2
        t = t + k * step
        f = f_new
    theta[idx] = t - t.mean()
    return theta


def fit_davidson_counts(W: np.ndarray, T: np.ndarray, *, prior: float = 0.0) -> tuple[np.ndarray, float]:
    """Davidson's model with ties as their own outcome: ``W[i, j]`` strict wins of ``i`` over
    ``j``, ``T[i, j]`` (symmetric) ties. Returns the centred log-strengths (NaN for models without
    battles) and the tie parameter ``nu``."""
    from scipy.optimize import minimize

    m = W.shape[0]
    N = W + W.T + T
    active = N.sum(axis=1) > 0
    idx = np.flatnonzero(active)
    theta = np.full(m, math.nan)
    if idx.size < 2:
        theta[idx] = 0.0
        return theta, math.nan
    Wa, Ta = W[np.ix_(idx, idx)], T[np.ix_(idx, idx)]
    iu = np.triu_indices(idx.size, 1)
    wij, wji, tij = Wa[iu], Wa.T[iu], Ta[iu]
    keep = (wij + wji + tij) > 0
    i, j, wij, wji, tij = iu[0][keep], iu[1][keep], wij[keep], wji[keep], tij[keep]
    n = wij + wji + tij
    k = idx.size

    def nll(x: np.ndarray) -> tuple[float, np.ndarray]:
        t = np.concatenate([[0.0], x[: k - 1]])
        kappa = x[k - 1]
        nu = math.exp(kappa)
        d = t[i] - t[j]
        e_pos, e_neg = np.exp(d / 2), np.exp(-d / 2)
        Z = e_pos + e_neg + nu
        ll = np.sum(wij * (d / 2) + wji * (-d / 2) + tij * kappa - n * np.log(Z))
        dd = (wij - wji) / 2 - n * (e_pos - e_neg) / (2 * Z)
        g = np.zeros(k)
        np.add.at(g, i, dd)
        np.add.at(g, j, -dd)
        dk = float(np.sum(tij - n * nu / Z))
        f = -float(ll) + prior * float(np.sum(t**2))
        g = -g + 2 * prior * t
        return f, np.concatenate([g[1:], [-dk]])

    x0 = np.zeros(k)
    x0[k - 1] = math.log(max(float(tij.sum()), 0.5) / max(float(n.sum()), 1.0)) if tij.sum() else -5.0
    res = minimize(nll, x0, jac=True, method="BFGS", options={"gtol": 1e-9, "maxiter": 10_000})
    t = np.concatenate([[0.0], res.x[: k - 1]])
    theta[idx] = t - t.mean()
    return theta, float(math.exp(res.x[k - 1]))


def _resolved_prior(W: np.ndarray, N: np.ndarray, prior: float | None) -> float:
    """``prior`` as given, else none when the likelihood has a maximum and :data:`PRIOR` when not."""
    if prior is not None:
        return prior
    return 0.0 if strongly_connected(W, N.sum(axis=1) > 0) else PRIOR


def fit_bradley_terry(
    a: Sequence[int] | np.ndarray,
    b: Sequence[int] | np.ndarray,
    s: Sequence[float] | np.ndarray,
    n_models: int,
    *,
    weights: np.ndarray | None = None,
    ties: TieModel = "half",
    prior: float | None = None,
) -> np.ndarray:
    """Bradley-Terry log-strengths (mean 0; NaN for a model with no battle) of battles ``a`` vs
    ``b`` with outcomes ``s`` for ``a`` (1 win, 0.5 tie, 0 loss). ``prior=None``: maximum likelihood,
    or the weak prior :data:`PRIOR` when the likelihood has no maximum (see the module doc)."""
    a_, b_, s_ = np.asarray(a, dtype=int), np.asarray(b, dtype=int), np.asarray(s, dtype=float)
    W, N = pair_counts(a_, b_, s_, n_models, weights)
    prior = _resolved_prior(W, N, prior)
    if ties == "half":
        return fit_bt_counts(W, N, prior=prior)
    if ties != "davidson":
        raise ValueError(f"ties must be one of {TIE_MODELS}, not {ties!r}")
    w = np.ones(a_.size) if weights is None else np.asarray(weights, dtype=float)
    strict = s_ != 0.5
    winner = np.where(s_ == 1.0, a_, b_)[strict]
    loser = np.where(s_ == 1.0, b_, a_)[strict]
    m = n_models
    Wd = np.bincount(winner * m + loser, weights=w[strict], minlength=m * m).reshape(m, m)
    tie_a, tie_b, tw = a_[~strict], b_[~strict], w[~strict]
    T = (np.bincount(tie_a * m + tie_b, weights=tw, minlength=m * m) + np.bincount(tie_b * m + tie_a, weights=tw, minlength=m * m)).reshape(m, m)
    return fit_davidson_counts(Wd, T, prior=prior)[0]


# ---------------------------------------------------------------------------------------- Elo
def elo_ratings(
    a: Sequence[int] | np.ndarray,
    b: Sequence[int] | np.ndarray,
    s: Sequence[float] | np.ndarray,
    n_models: int,
    *,
    k: float = ELO_K,
    seed: int | None = 0,
    init: float = ELO_INIT,
) -> np.ndarray:
    """Online Elo over the battles, in a shuffled order (``numpy.random.default_rng(seed)
    .permutation``; ``seed=None`` keeps the given order): ``R_a += k (s - E_a)``, ``R_b -= k (s -
    E_a)``, ``E_a = 1 / (1 + 10^((R_b - R_a) / 400))``."""
    a_, b_, s_ = np.asarray(a, dtype=int), np.asarray(b, dtype=int), np.asarray(s, dtype=float)
    order = np.arange(a_.size) if seed is None else np.random.default_rng(seed).permutation(a_.size)
    r = np.full(n_models, float(init))
    for n in order:
        i, j = a_[n], b_[n]
        expected = 1.0 / (1.0 + 10.0 ** ((r[j] - r[i]) / ELO_SCALE))
        delta = k * (s_[n] - expected)
        r[i] += delta
        r[j] -= delta
    return r


# ---------------------------------------------------------------------------------- bootstrap
def bootstrap_strengths(bs: BattleSet, *, n_resamples: int = 1000, seed: int = 0, ties: TieModel = "half", prior: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per resample of the images (with replacement): Bradley-Terry strengths and win rates,
    each ``(n_resamples, n_models)`` (NaN where a model has no battle in the resample).
    Deterministic for a given ``seed`` (the resamples of :mod:`capjudge.metaeval.stats`)."""
    from capjudge.metaeval.stats import resample_counts, resample_index_chunks

    m = len(bs.models)
    thetas: list[np.ndarray] = []
    rates: list[np.ndarray] = []
    if bs.n == 0 or n_resamples < 1:
        return np.empty((0, m)), np.empty((0, m))
    for idx in resample_index_chunks(bs.n_units, n_resamples, seed=seed):
        counts = resample_counts(idx, bs.n_units)
        for row in counts:
            w = row[bs.unit]
            W, N = pair_counts(bs.a, bs.b, bs.s, m, w)
            if ties == "half":  # the counts serve the fit and the win rates alike
                thetas.append(fit_bt_counts(W, N, prior=_resolved_prior(W, N, prior)))
            else:
                thetas.append(fit_bradley_terry(bs.a, bs.b, bs.s, m, weights=w, ties=ties, prior=prior))
            with np.errstate(invalid="ignore", divide="ignore"):
                rates.append(W.sum(axis=1) / N.sum(axis=1))
    return np.vstack(thetas), np.vstack(rates)


# ------------------------------------------------------------------------------------ length
def quantile_bins(gaps: np.ndarray, n: int = 5) -> tuple[tuple[int, float], ...]:
    """Bins ``(lo, hi)`` of whole words (the last one open) cut at the ``n``-quantiles of the
    non-zero word-count differences ``gaps``; fewer bins where quantiles coincide."""
    nonzero = gaps[gaps > 0]
    if nonzero.size == 0:
        return ((1, math.inf),)
    edges = sorted({int(math.ceil(q)) for q in np.quantile(nonzero, np.arange(1, n) / n)})
    bins: list[tuple[int, float]] = []
    lo = 1
    for e in edges:
        if e >= lo:
            bins.append((lo, float(e)))
            lo = e + 1
    bins.append((lo, math.inf))
    return tuple(bins)


def length_bins(bs: BattleSet) -> dict[str, Any]:
    """The longer caption's win rate (ties as half) by bins of the word-count difference, over
    decided battles whose captions differ in length; ``equal_length``: battles of equal length.
    Detailed captions (a median caption of :data:`DETAILED_WORDS` words or more) are binned by
    :func:`quantile_bins` and say so (``binning``, ``median_words``)."""
    diff = bs.words_a - bs.words_b
    longer_score = np.where(diff > 0, bs.s, 1.0 - bs.s)
    gap = np.abs(diff)
    out: list[dict[str, Any]] = []
    median_words = float(np.median(np.concatenate([bs.words_a, bs.words_b]))) if bs.n else 0.0
    detailed = median_words >= DETAILED_WORDS
    for lo, hi in quantile_bins(gap) if detailed else LENGTH_BINS:
        sel = (gap >= lo) & (gap <= hi)
        n = int(sel.sum())
        out.append({"words": f"{lo}-{int(hi)}" if math.isfinite(hi) else f"{lo}+", "battles": n, "longer_win_rate": float(longer_score[sel].mean()) if n else None})
    differ = gap > 0
    found: dict[str, Any] = {
        "bins": out,
        "equal_length": int((~differ).sum()),
        "longer_win_rate": float(longer_score[differ].mean()) if differ.any() else None,
    }
    if detailed:  # short captions' output stays as it was
        found.update(binning="quintiles of the word-count difference (detailed captions)", median_words=median_words)
    return found


def length_controlled(bs: BattleSet, *, prior: float | None = None) -> dict[str, Any]:
    """The alpaca_eval-style length-controlled fit (module doc): per model its LC win rate, and
    ``gamma`` (log-odds per tanh unit of the length difference) and ``sd`` (words). When ``gamma``
    has no estimate, ``gamma`` is ``None`` and ``reason`` says why: no variation in length (the LC
    win rates are then the plain Bradley-Terry predictions), or the battles separated or the length
    collinear with the strengths (:mod:`capjudge.arena.identify`; no LC win rates either)."""
    from scipy.optimize import minimize

    m = len(bs.models)
    diff = bs.words_a - bs.words_b
    sd = float(np.std(diff)) if bs.n else 0.0
    x = np.tanh(diff / sd) if sd > 0 else np.zeros(bs.n)
    W, N = pair_counts(bs.a, bs.b, bs.s, m)
    active = N.sum(axis=1) > 0
    if prior is None:
        prior = 0.0 if strongly_connected(W, active) else PRIOR
    idx = np.flatnonzero(active)
    pos = np.full(m, -1)
    pos[idx] = np.arange(idx.size)
    k = idx.size
    if k < 2:
        return {"gamma": None, "sd": sd, "lc_win_rate": {}, "reason": "fewer than two models with decided battles"}
    ia, ib = pos[bs.a], pos[bs.b]
    reason = None if sd > 0 else "the word-count differences do not vary (sd 0): no length effect to fit"
    if sd > 0:
        from capjudge.arena.identify import length_effect_problem

        strengths = np.zeros((bs.n, k))
        np.add.at(strengths, (np.arange(bs.n), ia), 1.0)
        np.add.at(strengths, (np.arange(bs.n), ib), -1.0)
        reason = length_effect_problem(strengths[:, 1:], x, bs.s, penalized=prior > 0)
        if reason is not None:  # no estimate exists: report none rather than where the optimizer stopped
            return {"gamma": None, "sd": sd, "lc_win_rate": {}, "reason": reason}

    def nll(p: np.ndarray) -> tuple[float, np.ndarray]:
        t = np.concatenate([[0.0], p[: k - 1]])
        gamma = p[k - 1]
        z = t[ia] - t[ib] + gamma * x
        f = float(np.sum(bs.s * np.logaddexp(0.0, -z) + (1.0 - bs.s) * np.logaddexp(0.0, z))) + prior * float(np.sum(t**2))
        r = _sigmoid(z) - bs.s  # d f / d z
        g = np.zeros(k)
        np.add.at(g, ia, r)
        np.add.at(g, ib, -r)
        g += 2 * prior * t
        return f, np.concatenate([g[1:], [float(np.sum(r * x))]])

    res = minimize(nll, np.zeros(k), jac=True, method="BFGS", options={"gtol": 1e-9, "maxiter": 10_000})
    t = np.concatenate([[0.0], res.x[: k - 1]])
    theta = np.full(m, math.nan)
    theta[idx] = t - t.mean()
    lc: dict[str, float] = {}
    for mi in idx:
        mine = bs.a == mi
        theirs = bs.b == mi
        opp = np.concatenate([bs.b[mine], bs.a[theirs]])
        lc[bs.models[mi]] = float(np.mean(_sigmoid(theta[mi] - theta[opp])))
    found: dict[str, Any] = {"gamma": float(res.x[k - 1]) if sd > 0 else None, "sd": sd, "lc_win_rate": lc}
    if reason is not None:
        found["reason"] = reason
    return found


# ------------------------------------------------------------------------------- leaderboard
@dataclass
class Leaderboard:
    """The ranking of the models, best first (``entries``: one dict per model with ``model``,
    ``win_rate``, ``bt``, ``ci`` (95% CI of ``bt``), ``battles`` and more), with how it was made."""

    entries: list[dict[str, Any]]
    ties: str = "half"
    bootstrap: int = 0
    seed: int = 0
    elo_k: float = ELO_K
    battles: dict[str, int] = field(default_factory=dict)
    position_flip_share: float | None = None
    length: dict[str, Any] = field(default_factory=dict)
    prior_used: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (NaN -> null)."""
        from capjudge.data.types import json_safe

        return json_safe(
            {
                "leaderboard": self.entries,
                "battles": dict(self.battles),
                "position_flip_share": self.position_flip_share,
                "length": self.length,
                "bradley_terry": {"ties": self.ties, "scale": "1000 + 400 * theta / ln(10)", "prior": PRIOR if self.prior_used else 0.0},
                "elo": {"k": self.elo_k, "init": ELO_INIT, "scale": ELO_SCALE, "order": f"shuffled, seed {self.seed}"},
                "bootstrap": {"resamples": self.bootstrap, "seed": self.seed, "unit": "image", "confidence": 0.95},
                "notes": list(self.notes),
            }
        )


def _mean(values: np.ndarray) -> float | None:
    v = values[~np.isnan(values)]
    return float(v.mean()) if v.size else None


def rank(
    records: Iterable[dict[str, Any]],
    models: Sequence[str],
    *,
    ties: TieModel = "half",
    bootstrap: int = 1000,
    seed: int = 0,
    elo_k: float = ELO_K,
    length_control: bool = False,
    confidence: float = 0.95,
) -> Leaderboard:
    """The leaderboard of ``models`` from battle records (failed battles are counted, not ranked)."""
    if ties not in TIE_MODELS:
        raise ValueError(f"ties must be one of {TIE_MODELS}, not {ties!r}")
    records = list(records)
    bs = battle_set(records, models)
    m = len(models)
    failed = np.zeros(m, dtype=int)
    index = {name: k for k, name in enumerate(models)}
    n_failed = 0
    for r in records:
        if not decided(r):
            n_failed += 1
            for side in ("model_a", "model_b"):
                if r.get(side) in index:
                    failed[index[r[side]]] += 1
    W, N = pair_counts(bs.a, bs.b, bs.s, m)
    active = N.sum(axis=1) > 0
    connected = strongly_connected(W, active)
    prior = 0.0 if connected else PRIOR
    theta = fit_bradley_terry(bs.a, bs.b, bs.s, m, ties=ties, prior=prior)
    bt = to_elo_scale(theta)
    elo = elo_ratings(bs.a, bs.b, bs.s, m, k=elo_k, seed=seed)
    from capjudge.metaeval.stats import percentile_cis

    # Each resample decides on its own whether it needs the prior (a resample may lose a model's only loss).
    boot_theta, boot_rate = bootstrap_strengths(bs, n_resamples=bootstrap, seed=seed, ties=ties)
    cis = percentile_cis({f"bt{i}": to_elo_scale(boot_theta[:, i]) for i in range(m)} | {f"wr{i}": boot_rate[:, i] for i in range(m)}, confidence) if boot_theta.size else {}
    lc = length_controlled(bs, prior=prior) if length_control else None
    wins = np.bincount(bs.a, weights=(bs.s == 1.0), minlength=m) + np.bincount(bs.b, weights=(bs.s == 0.0), minlength=m)
    losses = np.bincount(bs.a, weights=(bs.s == 0.0), minlength=m) + np.bincount(bs.b, weights=(bs.s == 1.0), minlength=m)
    tie_n = np.bincount(bs.a, weights=(bs.s == 0.5), minlength=m) + np.bincount(bs.b, weights=(bs.s == 0.5), minlength=m)
    entries: list[dict[str, Any]] = []
    for i, name in enumerate(models):
        mine = (bs.a == i) | (bs.b == i)
        words = np.concatenate([bs.words_a[bs.a == i], bs.words_b[bs.b == i]])
        n_i = int(N[i].sum())
        entry: dict[str, Any] = {
            "model": name,
            "win_rate": float(W[i].sum() / n_i) if n_i else None,
            "bt": float(bt[i]) if active[i] else None,
            "ci": list(cis.get(f"bt{i}", (math.nan, math.nan))),
            "battles": n_i,
            "wins": int(wins[i]),
            "losses": int(losses[i]),
            "ties": int(tie_n[i]),
            "failed": int(failed[i]),
            "win_rate_ci": list(cis.get(f"wr{i}", (math.nan, math.nan))),
            "elo": float(elo[i]) if active[i] else None,
            "position_flip_share": _mean(bs.flip[mine]) if n_i else None,
            "mean_words": float(words.mean()) if words.size else None,
        }
        if lc is not None:
            entry["lc_win_rate"] = lc["lc_win_rate"].get(name)
        entries.append(entry)
    entries.sort(key=lambda e: (e["bt"] is None, -(e["bt"] or 0.0), e["model"]))
    for pos, e in enumerate(entries, start=1):
        e["rank"] = pos
    board = Leaderboard(entries, ties=ties, bootstrap=bootstrap if bs.n_units >= 2 else 0, seed=seed, elo_k=elo_k, prior_used=not connected)
    board.battles = {"decided": bs.n, "failed": n_failed, "images": bs.n_units}
    board.position_flip_share = _mean(bs.flip)
    board.length = length_bins(bs)
    if lc is not None:
        board.length["length_controlled"] = {"gamma": lc["gamma"], "sd_words": lc["sd"], "formula": "logit P(a beats b) = theta_a - theta_b + gamma * tanh((words_a - words_b) / sd)"}
        if "reason" in lc:
            board.length["length_controlled"]["reason"] = lc["reason"]
    if n_failed:
        board.notes.append(f"{n_failed} battle(s) failed (no verdict): counted per model as 'failed', not ranked")
    if bs.n == 0:
        board.notes.append("no battle was decided: nothing to rank")
    elif not connected:
        board.notes.append(
            f"some model won (or lost) every battle it had against the others: maximum-likelihood Bradley-Terry strengths do not exist; "
            f"a weak Gaussian prior ({PRIOR} * sum(theta^2)) keeps them finite, so the gaps are lower bounds"
        )
    if bs.n_units < 2 and bootstrap:
        board.notes.append("fewer than two images: no bootstrap intervals")
    if lc is not None and "reason" in lc:
        board.notes.append(f"no length-controlled fit: {lc['reason']}")
    return board
