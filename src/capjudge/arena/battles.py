"""Which battles an arena asks, who is shown first, and asking them through the pairwise judge.

Protocols: every model against a ``baseline`` (CapArena-Auto), or every pair of models
(``round_robin``), on the images both models captioned. ``budget`` caps the number of battles:
images are taken whole (every battle of an image, so that the bootstrap over images stays
honest) in a seeded order until the next image would pass the budget.

Who is shown first: the orders are both asked (dual-sided) but the record's ``model_a`` is the
caption shown first in the first order (with ``mode="single"``, the one order asked). It is decided per battle by a seeded hash of the image and
the two model names, never by the order the models were listed in: about half the battles show
each model first, and adding a model changes no existing battle.

The battles are judged by :meth:`Judge.compare_stream` (the same machinery as ``capjudge
compare``: dual-sided votes or single grading, batches or a sliding window, the response cache).
Records go to ``out`` as they complete and a re-run asks only the battles that have no record
there (:mod:`capjudge.run.runner`, the runner of ``score`` and ``compare``), so adding a
model asks only its battles. A battle matches its record by image id, image and the two models
with their captions, whichever was shown first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.arena.load import ArenaInput, ArenaInputError
from capjudge.judges.voting import seeded_digest, seeded_first

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Battle:
    """Two models' captions of one image; ``model_a``'s caption is shown first in the first order."""

    item: str
    image: str
    model_a: str
    model_b: str
    caption_a: str
    caption_b: str
    references: tuple[str, ...] = ()  # shown to the judge (CapArena-Auto: the human caption)

    def row(self) -> dict[str, Any]:
        """The battle as a pairs row (``id`` is the image's id, or its path)."""
        row: dict[str, Any] = {"id": self.item, "image": self.image, "caption_a": self.caption_a, "caption_b": self.caption_b, "model_a": self.model_a, "model_b": self.model_b}
        if self.references:
            row["references"] = list(self.references)
        return row


def battle_key(row: dict[str, Any]) -> Key:
    """How a battle and its record are matched: id, image, and the two (model, caption) sides in
    either order (both orders are asked, so who was shown first does not change the battle)."""
    sides = sorted([(str(row.get("model_a")), str(row.get("caption_a"))), (str(row.get("model_b")), str(row.get("caption_b")))])
    return ("battle", str(row.get("id")), str(row.get("image")), tuple(sides))


def shown_first(seed: int, item: str, m1: str, m2: str) -> str:
    """Which of two models is shown first in a battle: a seeded hash of the image and the pair
    (:func:`capjudge.judges.voting.seeded_first`)."""
    return seeded_first(seed, item, m1, m2)


@dataclass
class Plan:
    """The battles of an arena, and what the protocol left out."""

    battles: list[Battle]
    protocol: str
    baseline: str | None
    images: int  # images with at least one battle
    images_total: int  # images captioned by at least two models
    budget: int | None = None
    not_asked: dict[str, int] = field(default_factory=dict)  # model -> battles lost to missing captions
    notes: list[str] = field(default_factory=list)


def plan_battles(inp: ArenaInput, *, baseline: str | None = None, round_robin: bool = False, budget: int | None = None, seed: int = 0) -> Plan:
    """The battles of ``inp`` by the protocol (exactly one of ``baseline`` or ``round_robin``)."""
    if (baseline is None) == (not round_robin):
        raise ArenaInputError("choose one protocol: a baseline model (--baseline NAME) or all pairs (--round-robin)")
    if len(inp.models) < 2:
        raise ArenaInputError(f"an arena needs two or more models, got {len(inp.models)}: {', '.join(inp.models) or 'none'}")
    if baseline is not None and baseline not in inp.models:
        raise ArenaInputError(f"--baseline {baseline!r} is not one of the models: {', '.join(inp.models)}")
    if budget is not None and budget < 1:
        raise ArenaInputError(f"--budget must be 1 or more, got {budget}")
    if baseline is not None:
        pairs = [(m, baseline) for m in inp.models if m != baseline]
    else:
        pairs = [(x, y) for i, x in enumerate(inp.models) for y in inp.models[i + 1 :]]
    by_image: dict[str, list[Battle]] = {}
    not_asked = {m: 0 for m in inp.models}
    for item in inp.items:
        for x, y in pairs:
            cx, cy = inp.captions[x].get(item), inp.captions[y].get(item)
            if cx is None or cy is None:
                if cx is not None or cy is not None:
                    not_asked[x if cx is not None else y] += 1
                continue
            first = shown_first(seed, item, x, y)
            a, b = (x, y) if first == x else (y, x)
            ca, cb = (cx, cy) if first == x else (cy, cx)
            by_image.setdefault(cx.image, []).append(Battle(item, cx.image, a, b, ca.caption, cb.caption))
    # Images in a seeded order that does not depend on the models: a budget takes a prefix of it.
    images = sorted(by_image, key=lambda im: seeded_digest("image", seed, im))
    battles: list[Battle] = []
    taken = 0
    for im in images:
        group = by_image[im]
        if budget is not None and len(battles) + len(group) > budget:
            if not battles:
                raise ArenaInputError(f"--budget {budget} is smaller than the {len(group)} battles of one image: raise it")
            break
        battles.extend(group)
        taken += 1
    plan = Plan(battles, "baseline" if baseline else "round-robin", baseline, taken, len(images), budget, {m: n for m, n in not_asked.items() if n})
    if taken < len(images):
        plan.notes.append(f"--budget {budget}: {len(battles)} battles on {taken} of {len(images)} images (sampled with seed {seed})")
    for m, n in plan.not_asked.items():
        plan.notes.append(f"model {m!r}: {n} battle(s) not asked: its opponent has no caption for those images")
    return plan


@dataclass
class BattleRun:
    """The records of a plan's battles (plan order) and how they were obtained."""

    records: list[dict[str, Any]]
    asked: list[dict[str, Any]]  # the records made by this run
    kept: int = 0
    kept_errors: int = 0
    outside_plan: int = 0  # records in --out for battles not in this plan (kept in the file, not ranked)


def battle_record(battle: Battle, result: Any) -> dict[str, Any]:
    """A battle's record: the pair record with ``model_a`` and ``model_b``."""
    rec = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    return {"model_a": battle.model_a, "model_b": battle.model_b, **rec}


def run_battles(
    judge: Any,
    plan: Plan,
    *,
    mode: Any = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    retry_errors: bool = False,
    progress: Callable[[Iterator[Any], int, int], Iterable[Any]] | None = None,
) -> BattleRun:
    """Judge the plan's battles that ``out`` does not already hold (all of them without ``out``).

    ``progress(stream, total, done)`` may wrap the stream of new records (a progress bar).
    Raises :class:`capjudge.run.outfile.ResumeConflict` when ``out`` was written by another judge.
    """
    from capjudge.judges.pairwise import Pair, run_fields
    from capjudge.run.outfile import ResumePlan
    from capjudge.run.runner import resume_plan, run_rows

    rows = [b.row() for b in plan.battles]
    resume = ResumePlan()
    if out is not None:
        resume = resume_plan(out, rows, battle_key, run_fields(judge, mode), overwrite=overwrite, retry_errors=retry_errors, unmatched="keep")
    got: dict[int, dict[str, Any]] = dict(resume.kept)
    asked: list[dict[str, Any]] = []

    # Single order: model_a, the model a seeded hash chose (shown_first), is shown first.
    first = "A" if mode == "single" else None

    def stream(battle_rows: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        battles = [Battle(r["id"], r["image"], r["model_a"], r["model_b"], r["caption_a"], r["caption_b"], tuple(r.get("references") or ())) for r in battle_rows]
        pairs = [Pair(b.image, b.caption_a, b.caption_b, b.references, b.item, first) for b in battles]
        for k, res in judge.compare_stream(pairs, mode=mode):
            yield k, battle_record(battles[k], res)

    extra = list(resume.unmatched)
    for pos, rec in run_rows(judge.backend, rows, resume, stream, out=out, progress=progress, extra=extra):
        if out is not None:
            rec = dict(rec, row=pos + 1)
        got[pos] = rec
        asked.append(rec)
    records = [got[p] for p in range(len(rows)) if p in got]
    return BattleRun(records, asked, kept=len(resume.kept), kept_errors=resume.kept_errors, outside_plan=len(extra))
