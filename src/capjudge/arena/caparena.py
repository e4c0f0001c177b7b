"""CapArena-Auto, as the official ``caparena_auto_eval.py`` runs it (``capjudge arena --protocol caparena-auto``).

CapArena: Benchmarking and Analyzing Detailed Image Captioning in the LLM Era
(https://arxiv.org/abs/2503.12329; code https://github.com/njucckevin/CapArena).

The assignments file (``caparena_auto_600.json``) is a JSON object keyed by image file name, each
``{"ref_model": NAME, "captions": {"human": ..., NAME: ..., ...}}``. For every image, in the file's
order, and every model under test: the model battles the image's baseline (``ref_model``, one of
:data:`~capjudge.arena.caparena_files.BASELINES`) once, its caption against
``captions[ref_model]``, with ``captions["human"]`` as the reference; an image whose baseline is
the model itself is skipped. One order per battle: the official code draws it with
``random.randint(0, 1)``; here a seeded hash of the image and the two model names
(:func:`~capjudge.arena.battles.shown_first`), so a re-run asks the same battles.

Battles are judged through the arena's resumable runner (records in ``--out``), then written per
model in CapArena's format (``DIR/<model>.json``: ``img``, ``source1``, ``source2``, ``caption1``,
``caption2``, ``ref``, ``ref_model``, and ``judge`` / ``judge_reason`` for judged battles) and
scored as ``caparena_auto_scores.py`` scores them (:mod:`~capjudge.arena.caparena_files`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.arena.battles import Battle, BattleRun, Plan, battle_key, run_battles, shown_first
from capjudge.arena.caparena_files import (
    BASELINES,
    VALID_JUDGMENTS,
    CapArenaBoard,
    CapArenaFileError,
    leaderboard,
    score_model,
)
from capjudge.arena.load import ArenaInput, ArenaInputError
from capjudge.arena.ranking import ELO_K, TieModel, rank
from capjudge.arena.run import ArenaResult, summary_notes

PROTOCOL = "caparena-auto"
DEFAULT_METHOD = "caparena"
"""The judging method ``--protocol caparena-auto`` runs unless ``--method`` names another."""

JUDGMENT = re.compile(r"Judgment:\s*(.+)")  # vlm_as_a_judge.py's reader of the judgment line
SHOWN_JUDGMENT = {"A": "Caption 1 is better", "B": "Caption 2 is better", "tie": "Tie"}


@dataclass(frozen=True)
class Assignment:
    """One image of the assignments file: its baseline, the baseline's caption, the human caption."""

    img: str
    ref_model: str
    caption: str
    human: str


@dataclass
class Assignments:
    """The assignments file's images (file order) and the entries that could not be used."""

    path: str
    items: dict[str, Assignment]
    bad: list[str] = field(default_factory=list)


def load_assignments(path: str | Path) -> Assignments:
    """Read ``caparena_auto_600.json``. An entry the official code could not use (no
    ``ref_model`` among the baselines, no caption of it, no human caption) is named in
    :attr:`Assignments.bad` and left out; a file that is not a JSON object is an error."""
    from capjudge.data.io import load_json

    p = Path(path)
    try:
        data = load_json(p.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArenaInputError(f"--assignments {p}: cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise ArenaInputError(f"--assignments {p}: a JSON object of image -> {{ref_model, captions}} is expected, not a {type(data).__name__}")
    items: dict[str, Assignment] = {}
    bad: list[str] = []
    for img, entry in data.items():
        at = f"{p}: image {img!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("captions"), dict):
            bad.append(f"{at}: no captions object")
            continue
        ref, captions = entry.get("ref_model"), entry["captions"]
        if ref not in BASELINES:
            bad.append(f"{at}: ref_model {ref!r} is not one of {', '.join(BASELINES)}")
            continue
        cap, human = captions.get(ref), captions.get("human")
        if not isinstance(cap, str) or not isinstance(human, str):
            bad.append(f"{at}: no {'caption of ' + repr(ref) if not isinstance(cap, str) else 'human caption'} in captions")
            continue
        items[str(img)] = Assignment(str(img), str(ref), cap, human)
    if not items:
        raise ArenaInputError(f"--assignments {p}: no usable image" + (f" ({bad[0]})" if bad else ""))
    return Assignments(str(p), items, bad)


def plan_caparena(inp: ArenaInput, assignments: Assignments, *, seed: int = 0) -> Plan:
    """Each model against each image's baseline, as ``caparena_auto_eval.py`` pairs them; the
    captions are matched to the assignments by id (or image), which must be the image file name."""
    if not inp.models:
        raise ArenaInputError("--protocol caparena-auto needs one or more models under test (--models NAME=captions.json)")
    battles: list[Battle] = []
    own = {m: 0 for m in inp.models}
    not_asked = {m: 0 for m in inp.models}
    images: set[str] = set()
    for img, a in assignments.items.items():
        for m in inp.models:
            if m == a.ref_model:
                own[m] += 1
                continue
            c = inp.captions[m].get(img)
            if c is None:
                not_asked[m] += 1
                continue
            images.add(img)
            if shown_first(seed, img, m, a.ref_model) == m:
                battles.append(Battle(img, c.image, m, a.ref_model, c.caption, a.caption, (a.human,)))
            else:
                battles.append(Battle(img, c.image, a.ref_model, m, a.caption, c.caption, (a.human,)))
    plan = Plan(battles, PROTOCOL, None, len(images), len(assignments.items), None, {m: n for m, n in not_asked.items() if n})
    for m, n in own.items():
        if n:
            plan.notes.append(f"model {m!r}: {n} image(s) skipped: {m} is their baseline (as caparena_auto_eval.py)")
    for m, n in plan.not_asked.items():
        plan.notes.append(f"model {m!r} has no caption for {n} assigned image(s): those battles are not asked (matched by file name, e.g. {next(iter(assignments.items))!r})")
    for m in inp.models:
        extra = sum(1 for k in inp.captions[m] if k not in assignments.items)
        if extra:
            plan.notes.append(f"model {m!r}: {extra} caption(s) for images not in the assignments file: not used")
    if assignments.bad:
        plan.notes.append(f"{len(assignments.bad)} assignment(s) could not be used and were left out: " + "; ".join(assignments.bad[:3]) + (" ..." if len(assignments.bad) > 3 else ""))
    return plan


def judgment(record: Mapping[str, Any]) -> str | None:
    """The ``judge`` field of a battle record: the text after ``Judgment:`` in the answer (as
    ``vlm_as_a_judge.py`` reads it) when it says what the record's verdict says, else the verdict
    in CapArena's words (``Caption 1 is better``, ``Caption 2 is better``, ``Tie``, caption 1 the
    one shown first); ``None`` for a failed battle (no ``judge``, as after five failed tries)."""
    verdict = record.get("verdict")
    if record.get("status", "ok") != "ok" or verdict not in SHOWN_JUDGMENT:
        return None
    first = (record.get("details") or {}).get("shown_first", "A")
    shown = verdict if first == "A" or verdict == "tie" else {"A": "B", "B": "A"}[verdict]
    words = SHOWN_JUDGMENT[shown]
    raw = record.get("raw") or []
    match = JUDGMENT.search(raw[0]) if raw and isinstance(raw[0], str) else None
    if match is not None and match.group(1).strip().rstrip(".") == words:
        return match.group(1).strip()
    return words


def as_counted(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as ``caparena_auto_scores.py`` counts the ``judge`` written for it: an ok battle
    whose written judgment the official scorer drops as invalid (``Caption 1 is better..``, which
    another method's reader takes for caption 1) is a failed battle here too, so capjudge's
    Bradley-Terry view counts the battles the official leaderboard counts."""
    said = judgment(record)
    if said is None or said in VALID_JUDGMENTS:
        return dict(record)
    return {**record, "status": "error", "verdict": None, "error": f"the judgment written, {said[:60]!r}, is not one caparena_auto_scores.py counts (dropped as invalid)"}


def caparena_entries(plan: Plan, records: Iterable[Mapping[str, Any]], assignments: Assignments) -> dict[str, list[dict[str, Any]]]:
    """Per model under test, its battles in CapArena's format (plan order)."""
    by_key = {battle_key(dict(r)): r for r in records}
    out: dict[str, list[dict[str, Any]]] = {}
    for b in plan.battles:
        a = assignments.items[b.item]
        model = b.model_b if b.model_a == a.ref_model else b.model_a
        entry: dict[str, Any] = {
            "img": b.item,
            "source1": b.model_a,
            "source2": b.model_b,
            "caption1": b.caption_a,
            "caption2": b.caption_b,
            "ref": a.human,
            "ref_model": a.ref_model,
        }
        rec = by_key.get(battle_key(b.row()))
        said = judgment(rec) if rec is not None else None
        if rec is not None and said is not None:
            entry["judge"] = said
            raw = rec.get("raw") or []
            if raw and isinstance(raw[0], str):
                entry["judge_reason"] = raw[0]
        out.setdefault(model, []).append(entry)
    return out


def caparena_dir(out: str | Path) -> Path:
    """Where the CapArena battle files go without ``--caparena-out``: beside ``--out``,
    ``battles.jsonl`` -> ``battles.caparena/``."""
    p = Path(out)
    return p.with_name(p.stem + ".caparena")


def write_entries(directory: str | Path, entries: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """``DIR/<model>.json`` per model (``json.dump`` as the official code writes it); the paths."""
    from capjudge.data.io import write_atomically

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for model, items in entries.items():
        path = root / f"{model}.json"
        write_atomically(path, lambda fh, items=items: json.dump(list(items), fh))  # type: ignore[misc]
        paths[model] = str(path)
    return paths


@dataclass
class CapArenaResult:
    """A CapArena-Auto run: the official leaderboard, the files written, and capjudge's view
    (:class:`~capjudge.arena.run.ArenaResult`: Bradley-Terry, Elo, CIs) of the same battles."""

    caparena: CapArenaBoard
    arena: ArenaResult
    files: dict[str, str]
    assignments: str

    def to_dict(self) -> dict[str, Any]:
        """The arena's object (``leaderboard`` ...) with ``caparena`` (the official leaderboard),
        ``caparena_files`` and ``assignments`` added."""
        return {**self.arena.to_dict(), "caparena": self.caparena.to_dict(), "caparena_files": dict(self.files), "assignments": self.assignments}


def run_caparena(
    models: ArenaInput | Mapping[str, str | Path],
    assignments: Assignments | str | Path,
    judge: Any,
    *,
    out: str | Path | None = None,
    caparena_out: str | Path | None = None,
    seed: int = 0,
    bootstrap: int = 1000,
    ties: TieModel = "half",
    elo_k: float = ELO_K,
    overwrite: bool = False,
    retry_errors: bool = False,
    progress: Callable[[Iterator[Any], int, int], Iterable[Any]] | None = None,
) -> CapArenaResult:
    """Judge CapArena-Auto's battles of ``inp``'s models with ``judge`` (single order; records in
    ``out``, resumable), write them in CapArena's format to ``caparena_out`` (default: beside
    ``out``, :func:`caparena_dir`; none without either) and score them. ``models``: name ->
    captions file (CapArena's ``{"test_00001.jpg": caption}`` or an arena captions file), or an
    :class:`~capjudge.arena.load.ArenaInput`; ``assignments``: the file or :func:`load_assignments`'s result.

    >>> res = run_caparena({"MyModel": "my_results.json"}, "caparena_auto_600.json",
    ...                    Judge("caparena", "openai:gpt-4o-2024-08-06", images_root="all_images"),
    ...                    out="battles.jsonl")                                     # doctest: +SKIP
    >>> [(e.model, e.score_avg) for e in res.caparena.entries]                    # doctest: +SKIP
    """
    from capjudge.arena.load import load_model_files
    from capjudge.judges.pairwise import run_fields

    inp = models if isinstance(models, ArenaInput) else load_model_files([(name, str(path)) for name, path in models.items()])
    if not isinstance(assignments, Assignments):
        assignments = load_assignments(assignments)
    plan = plan_caparena(inp, assignments, seed=seed)
    fields = run_fields(judge, "single")
    run: BattleRun = run_battles(judge, plan, mode="single", out=out, overwrite=overwrite, retry_errors=retry_errors, progress=progress)
    entries = caparena_entries(plan, run.records, assignments)
    scored, errors = [], []
    for m in inp.models:
        try:
            scored.append(score_model(m, entries.get(m, [])))
        except CapArenaFileError as exc:
            errors.append(str(exc))
    target = caparena_out if caparena_out is not None else (caparena_dir(out) if out is not None else None)
    files = write_entries(target, entries) if target is not None else {}
    ranked = list(inp.models) + [b for b in BASELINES if b not in inp.models and any(a.ref_model == b for a in assignments.items.values())]
    counted = [as_counted(r) for r in run.records]  # one reading of a judgment: the official scorer's
    board = rank(counted, ranked, ties=ties, bootstrap=bootstrap, seed=seed, elo_k=elo_k)
    for e in board.entries:
        e["missing"] = plan.not_asked.get(e["model"], 0)
    dropped = sum(r.get("status", "ok") == "ok" and c.get("status") == "error" for r, c in zip(run.records, counted))
    board.notes = summary_notes(inp, plan, run) + board.notes
    if dropped:
        board.notes.append(f"{dropped} battle(s) judged with a judgment caparena_auto_scores.py drops as invalid (e.g. 'Caption 1 is better..'): failed here too, out of both leaderboards")
    result = ArenaResult(counted, board, plan, inp, run, judge={"method": fields["method"], "mode": fields["mode"], "backend": fields["backend"]})
    return CapArenaResult(leaderboard(scored, errors), result, files, assignments.path)
