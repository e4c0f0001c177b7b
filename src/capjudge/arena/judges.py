"""An arena judged by a panel: each judge's own leaderboard and how far the judges' rankings agree.

Self-preference (a judge favouring captions of its own model family) shows when one judge ranks a
model higher than the others do. Each judge's battles are its own verdicts, kept in the panel's
battle records (``details.panel``, split by :func:`capjudge.judges.panel.member_records`), ranked
as the panel's are (:func:`capjudge.arena.ranking.rank`). The rank correlation between two
leaderboards is Kendall tau-b (x100) between the judges' Bradley-Terry strengths over the models
both ranked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from capjudge.arena.ranking import Leaderboard, rank


def leaderboards_by_judge(records: Iterable[dict[str, Any]], models: Sequence[str], **options: Any) -> dict[str, Leaderboard]:
    """Judge name -> its leaderboard of ``models`` from panel battle records (empty when the
    records are not a panel's); ``options`` as :func:`~capjudge.arena.ranking.rank`."""
    from capjudge.judges.panel import member_records

    return {name: rank(recs, models, **options) for name, recs in member_records(records).items()}


def _strengths(board: Leaderboard) -> dict[str, float]:
    return {e["model"]: float(e["bt"]) for e in board.entries if e.get("bt") is not None}


def _tau(a: Leaderboard, b: Leaderboard) -> tuple[float | None, int]:
    from capjudge.metaeval.stats import kendall_tau_b

    sa, sb = _strengths(a), _strengths(b)
    common = [m for m in sa if m in sb]
    if len(common) < 2:
        return None, len(common)
    tau = kendall_tau_b([sa[m] for m in common], [sb[m] for m in common])
    return (None if tau != tau else 100.0 * tau), len(common)


def rank_correlation(boards: dict[str, Leaderboard], panel: Leaderboard | None = None) -> dict[str, Any]:
    """Kendall tau-b (x100) between every two judges' leaderboards (``pairs``: ``a``, ``b``,
    ``kendall_tau_b``, ``models``) and between each judge's and the panel's (``with_panel``)."""
    names = list(boards)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            tau, n = _tau(boards[a], boards[b])
            pairs.append({"a": a, "b": b, "kendall_tau_b": tau, "models": n})
    out: dict[str, Any] = {"measure": "kendall_tau_b", "unit": "x100", "over": "Bradley-Terry strengths of the models both leaderboards rank", "pairs": pairs}
    if panel is not None:
        with_panel = []
        for name in names:
            tau, n = _tau(boards[name], panel)
            with_panel.append({"judge": name, "kendall_tau_b": tau, "models": n})
        out["with_panel"] = with_panel
    return out


__all__ = ["leaderboards_by_judge", "rank_correlation"]
