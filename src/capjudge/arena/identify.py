"""Whether a logistic battle model can be estimated on the battles at hand.

A model ``logit P(a beats b) = X[n] @ beta`` fitted by maximum likelihood, ties counted as half a
win (outcome ``s`` in ``{0, 0.5, 1}``), has no finite maximum-likelihood estimate when the battles
are *separated*: some direction ``d`` changes no battle's likelihood for the worse and improves
some, so the optimizer walks along ``d`` for ever and stops wherever its tolerance says (a
length-control coefficient of -396 is such a walk, and its last digits differ between machines).
Along ``d`` a won battle's log-odds must not fall (``X[n] @ d >= 0``), a lost one's must not rise
(``<= 0``), and a tie's must stay (``= 0``: half a win and half a loss is best at log-odds 0);
some battle's log-odds must move. Whether such a ``d`` exists is a linear programme (Konis, 2007;
the R package ``detectseparation``), solved here with scipy's HiGHS.

A coefficient is also not estimable when its column is a combination of the others (a flat
likelihood: e.g. the length difference moving in lockstep with which model is shown).

For Bradley-Terry strengths alone, separation is exactly the "beats or ties" graph not being
strongly connected (:func:`capjudge.arena.ranking.strongly_connected`, the cheaper test the
ranking uses; the tests check the two agree).
"""

from __future__ import annotations

import numpy as np

SEPARATION_TOL = 1e-7
"""A direction counts only when it moves the summed log-odds of decided battles by more than this
(with ``|d| <= 1`` per coordinate and design entries in ``[-1, 1]``; solver noise is ~1e-9)."""

COLLINEAR_TOL = 1e-9
"""A column is a combination of the others when its least-squares residual on them is below this
fraction of its norm."""


def separating_direction(X: np.ndarray, s: np.ndarray) -> np.ndarray | None:
    """A direction ``d`` (each coordinate in ``[-1, 1]``) along which the likelihood of outcomes
    ``s`` (``1`` won, ``0`` lost, anything else a tie) never decreases and strictly increases in the
    limit, or ``None`` when there is none (module doc). ``X``: ``(battles, coefficients)``."""
    from scipy.optimize import linprog

    X = np.asarray(X, dtype=float)
    s = np.asarray(s, dtype=float)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        return None
    won, lost = s == 1.0, s == 0.0
    decided = won | lost
    if not decided.any():
        return None  # only ties: each pins its log-odds at 0, nothing can walk off
    signed = (np.where(won, 1.0, -1.0)[:, None] * X)[decided]
    tied = X[~decided]
    res = linprog(
        -signed.sum(axis=0),
        A_ub=-signed,
        b_ub=np.zeros(signed.shape[0]),
        A_eq=tied if tied.shape[0] else None,
        b_eq=np.zeros(tied.shape[0]) if tied.shape[0] else None,
        bounds=[(-1.0, 1.0)] * X.shape[1],
        method="highs",
    )
    if res.status != 0 or res.x is None:  # d = 0 is always feasible and the box bounds it: not expected
        return None
    return np.asarray(res.x, dtype=float) if -float(res.fun) > SEPARATION_TOL else None


def collinear(column: np.ndarray, others: np.ndarray) -> bool:
    """Whether ``column`` is (numerically) a linear combination of the columns of ``others``
    (``(battles, k)``, ``k`` may be 0): a zero column always is."""
    column = np.asarray(column, dtype=float)
    norm = float(np.linalg.norm(column))
    if norm == 0.0:
        return True
    if others.size == 0:
        return False
    coef = np.linalg.lstsq(others, column, rcond=None)[0]
    return float(np.linalg.norm(column - others @ coef)) <= COLLINEAR_TOL * norm


def length_effect_problem(strengths: np.ndarray, x: np.ndarray, s: np.ndarray, *, penalized: bool) -> str | None:
    """Why the length coefficient of ``logit = strengths @ theta + gamma * x`` has no estimate on
    battles with outcomes ``s``, or ``None`` when it has one. ``strengths``: the design of the free
    model strengths (``+1`` for model a, ``-1`` for model b, one model held at 0); ``penalized``:
    the strengths carry a Gaussian prior (then only a walk along ``gamma`` alone can run off)."""
    if collinear(x, strengths):
        return (
            "the length difference is not separable from the models' strengths on these battles "
            "(it is zero, or moves in lockstep with which models meet): gamma is not identified"
        )
    X = x[:, None] if penalized else np.column_stack([strengths, x])
    if separating_direction(X, s) is not None:
        return (
            "the battles are separated: pushing the strengths and gamma without bound in some direction makes "
            "no decided battle less likely and some more likely (e.g. the longer caption lost every battle with "
            "a large length difference and won those with a small one), so the likelihood has no maximum; "
            "more battles with mixed outcomes are needed"
        )
    return None
