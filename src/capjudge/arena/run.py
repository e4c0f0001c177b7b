"""``run_arena``: captions of several models in, battles judged, leaderboard out (the Python entry
point behind ``capjudge arena``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.arena.battles import BattleRun, Plan, plan_battles, run_battles
from capjudge.arena.load import ArenaInput, load_model_files, load_rows
from capjudge.arena.ranking import ELO_K, Leaderboard, TieModel, rank


@dataclass
class ArenaResult:
    """An arena's battles (records, plan order) and its leaderboard, with how they were made."""

    battles: list[dict[str, Any]]
    leaderboard: Leaderboard
    plan: Plan
    input: ArenaInput
    run: BattleRun
    judge: dict[str, Any] = field(default_factory=dict)
    by_judge: dict[str, Leaderboard] = field(default_factory=dict)
    """A panel's judges: each judge's own leaderboard (:mod:`capjudge.arena.judges`); empty otherwise."""

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` object: ``leaderboard`` (best first: ``model``, ``win_rate``,
        ``bt``, ``ci``, ``battles`` ...), ``protocol``, battle counts, missing captions, notes."""
        out = self.leaderboard.to_dict()
        counts = {
            "planned": len(self.plan.battles),
            "asked": len(self.run.asked),
            "kept": self.run.kept,
            "outside_plan": self.run.outside_plan,
            **out["battles"],
        }
        # "decided" counts every verdict, ties included: say how many had a winner.
        counts["ties"] = sum(int(e["ties"]) for e in out["leaderboard"]) // 2  # a tie counts for both models
        counts["won"] = int(counts["decided"]) - counts["ties"]
        return {
            "leaderboard": out["leaderboard"],
            "protocol": self.plan.protocol,
            "baseline": self.plan.baseline,
            **self.judge,
            "models": list(self.input.models),
            "match_by": self.input.key,
            "images": {"in_arena": self.plan.images, "with_two_models": self.plan.images_total, "items": len(self.input.items)},
            "battles": counts,
            "missing": self.input.missing(),
            "unreadable_rows": len(self.input.bad_rows),
            "position_bias": self.position_bias(),
            **{k: v for k, v in out.items() if k not in ("leaderboard", "battles")},
            **self.panel_dict(),
        }

    def panel_dict(self) -> dict[str, Any]:
        """A panel's part of the JSON: ``leaderboards_by_judge`` (judge -> leaderboard entries) and
        ``rank_correlation`` (:func:`capjudge.arena.judges.rank_correlation`); nothing otherwise."""
        if not self.by_judge:
            return {}
        from capjudge.arena.judges import rank_correlation
        from capjudge.data.types import json_safe

        boards = {name: board.to_dict()["leaderboard"] for name, board in self.by_judge.items()}
        return {"leaderboards_by_judge": boards, "rank_correlation": json_safe(rank_correlation(self.by_judge, self.leaderboard))}


    def position_bias(self) -> dict[str, Any]:
        """The judge's position-bias figures over the decided dual-sided battles
        (:func:`capjudge.judges.voting.position_bias`: ``first_position``, ``flip_rate``, ...; in %)."""
        from capjudge.judges.voting import position_bias

        return position_bias([(r.get("verdict"), r.get("votes") or []) for r in self.battles if r.get("status") == "ok" and r.get("mode") == "pairwise"])


def summary_notes(inp: ArenaInput, plan: Plan, run: BattleRun) -> list[str]:
    """What the user must not miss about the input and the plan (before the ranking's own notes)."""
    notes: list[str] = []
    for m, n in inp.missing().items():
        if n:
            notes.append(f"model {m!r} has no caption for {n} of {len(inp.items)} images")
    notes += plan.notes
    if inp.bad_rows:
        shown = "; ".join(inp.bad_rows[:3]) + (" ..." if len(inp.bad_rows) > 3 else "")
        notes.append(f"{len(inp.bad_rows)} input row(s) could not be read and were left out: {shown}")
    if run.outside_plan:
        notes.append(f"{run.outside_plan} battle record(s) in the battles file are not in this arena's plan: kept in the file, not ranked")
    if run.kept_errors:
        notes.append(f"{run.kept_errors} failed battle(s) kept from the battles file; --retry-errors asks them again")
    return notes


def run_arena(
    models: Mapping[str, str | Path | Iterable[Mapping[str, Any]]] | ArenaInput,
    *,
    judge: Any = None,
    method: str = "gpt4v-pairwise",
    backend: Any = None,
    baseline: str | None = None,
    round_robin: bool = False,
    mode: Any = None,
    out: str | Path | None = None,
    budget: int | None = None,
    seed: int = 0,
    bootstrap: int = 1000,
    ties: TieModel = "half",
    elo_k: float = ELO_K,
    length_controlled: bool = False,
    overwrite: bool = False,
    retry_errors: bool = False,
    progress: Callable[[Iterator[Any], int, int], Iterable[Any]] | None = None,
    **judge_options: Any,
) -> ArenaResult:
    """Rank captioning models by pairwise battles judged by a VLM.

    ``models``: model name -> captions file (JSONL/CSV with ``image``, ``caption``, optional
    ``id``) or a list of such rows; or an :class:`~capjudge.arena.load.ArenaInput`. The judge is
    ``judge`` (a :class:`~capjudge.Judge`) or built from ``method`` and ``backend`` (and
    ``judge_options`` such as ``cache_dir``, ``images_root``). One protocol: ``baseline=NAME`` or
    ``round_robin=True``; ``budget`` caps the battles (whole images, seeded). ``mode``: ``None``
    (dual-sided for pairwise methods, grading for scoring methods), ``"pairwise"`` or ``"grading"``.
    With ``out`` the battles are written as they complete and a re-run asks only the missing ones.

    >>> res = run_arena({"mine": "mine.jsonl", "theirs": "theirs.jsonl"}, backend="openai:gpt-4o",
    ...                 baseline="theirs", out="battles.jsonl")             # doctest: +SKIP
    >>> [(e["model"], e["bt"], e["ci"]) for e in res.leaderboard.entries]   # doctest: +SKIP
    """
    if isinstance(models, ArenaInput):
        inp = models
    elif all(isinstance(v, (str, Path)) for v in models.values()):
        inp = load_model_files([(name, str(path)) for name, path in models.items()])  # type: ignore[misc]
    else:
        inp = load_rows({name: list(rows) for name, rows in models.items()})  # type: ignore[arg-type]
    plan = plan_battles(inp, baseline=baseline, round_robin=round_robin, budget=budget, seed=seed)
    own = judge is None
    if own:
        if backend is None:
            raise ValueError("give a judge, or a backend (and a method) to build one")
        from capjudge.judges.judge import Judge

        judge = Judge(method, backend, **judge_options)
    try:
        from capjudge.judges.pairwise import run_fields

        fields = run_fields(judge, mode)
        run = run_battles(judge, plan, mode=mode, out=out, overwrite=overwrite, retry_errors=retry_errors, progress=progress)
    finally:
        if own:
            judge.close()
    board = rank(run.records, inp.models, ties=ties, bootstrap=bootstrap, seed=seed, elo_k=elo_k, length_control=length_controlled)
    missing = inp.missing()
    for e in board.entries:
        e["missing"] = missing[e["model"]]
    board.notes = summary_notes(inp, plan, run) + board.notes
    from capjudge.arena.judges import leaderboards_by_judge

    by_judge = leaderboards_by_judge(run.records, inp.models, ties=ties, bootstrap=bootstrap, seed=seed, elo_k=elo_k)  # a panel's judges
    return ArenaResult(run.records, board, plan, inp, run, judge={"method": fields["method"], "mode": fields["mode"], "backend": fields["backend"]}, by_judge=by_judge)


def rank_file(path: str | Path, models: Sequence[str] | None = None, **options: Any) -> Leaderboard:
    """The leaderboard of an existing battles file (``options`` as :func:`~capjudge.arena.ranking.rank`)."""
    from capjudge.run.outfile import read_records

    records = read_records(path)
    if models is None:
        seen: dict[str, None] = {}
        for r in records:
            for side in ("model_a", "model_b"):
                if r.get(side) is not None:
                    seen.setdefault(str(r[side]), None)
        models = list(seen)
    return rank(records, models, **options)
