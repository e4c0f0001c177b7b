"""CapArena-Auto's battle files and leaderboard, as the official ``caparena_auto_scores.py`` computes it.

A battle file is one JSON list per model, ``DIR/<model>.json`` (the file name, less ``.json``, is
the model's name), each entry ``img``, ``source1``, ``source2``, ``caption1``, ``caption2``,
``ref``, ``ref_model`` and, once judged, ``judge`` (the text after ``Judgment:``). Per model, as
the official script does:

* the caption length of every entry, judged or not: ``len(caption.split(' '))`` of ``caption1``
  when the model is ``source1``, else of ``caption2``; ``Length_Avg`` is their mean;
* an entry without ``judge`` is not counted; a ``judge`` other than ``Caption 1 is better[.]``,
  ``Caption 2 is better[.]`` or ``Tie[.]`` is invalid and dropped;
* per baseline (the entry's ``ref_model``: ``GPT-4o-0806``, ``CogVLM2-llama3-chat-19B``,
  ``MiniCPM-V2.6-8B``): ``(wins - losses) / 2``, a tie 0; ``Score_Avg`` is the mean of the three;
* best ``Score_Avg`` first (equal scores keep the files' name order).

Where the official script stops at the first bad file (not JSON, an entry without a key it reads,
a ``ref_model`` outside the three), here that file's model is left out with an error naming the
file and the entry, and every other model is still scored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.data.rowtext import describe

BASELINES: tuple[str, ...] = ("GPT-4o-0806", "CogVLM2-llama3-chat-19B", "MiniCPM-V2.6-8B")
"""CapArena-Auto's three baselines, in the order of the official leaderboard's columns."""

SHORT = {"GPT-4o-0806": "Score_gpt", "CogVLM2-llama3-chat-19B": "Score_cog", "MiniCPM-V2.6-8B": "Score_cpm"}

VALID_JUDGMENTS: tuple[str, ...] = ("Caption 1 is better.", "Caption 1 is better", "Caption 2 is better.", "Caption 2 is better", "Tie", "Tie.")
"""The judgments ``caparena_auto_scores.py`` counts; any other is invalid and dropped."""

FIELDS: tuple[str, ...] = ("img", "source1", "source2", "caption1", "caption2", "ref", "ref_model")
"""The fields of a battle entry as ``caparena_auto_eval.py`` writes it (``judge`` and
``judge_reason`` are added once judged)."""

READ_KEYS: tuple[str, ...] = ("source1", "source2", "caption1", "caption2", "ref_model")
"""The fields the official scores read (an entry without one is an error here)."""

ASSIGNMENTS_NAME = "caparena_auto_600.json"


class CapArenaFileError(ValueError):
    """A battle file that cannot be scored; the message names the file and the entry."""


@dataclass
class ModelScore:
    """One model's CapArena-Auto numbers (``scores``: per baseline ``(wins - losses) / 2``)."""

    model: str
    scores: dict[str, float]
    judged: dict[str, int]
    score_avg: float
    length_avg: float
    battles: int
    invalid: int
    unjudged: int
    file: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``model``, ``Score_Avg``, ``Score_gpt`` / ``Score_cog`` / ``Score_cpm``, ``Length_Avg``,
        ``scores`` and ``judged`` by baseline name, ``battles``, ``invalid``, ``unjudged``, ``file``."""
        return {
            "model": self.model,
            "Score_Avg": self.score_avg,
            **{SHORT[b]: self.scores[b] for b in BASELINES},
            "Length_Avg": self.length_avg,
            "scores": dict(self.scores),
            "judged": dict(self.judged),
            "battles": self.battles,
            "invalid": self.invalid,
            "unjudged": self.unjudged,
            "file": self.file,
        }


@dataclass
class CapArenaBoard:
    """The CapArena-Auto leaderboard (best ``Score_Avg`` first) and the files that could not be scored."""

    entries: list[ModelScore]
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``leaderboard`` (:meth:`ModelScore.to_dict` each), ``errors``, ``notes``."""
        return {"leaderboard": [e.to_dict() for e in self.entries], "errors": list(self.errors), "notes": list(self.notes)}


def winner_of(entry: Mapping[str, Any]) -> str | None:
    """The entry's winner as the official script reads it: ``source1``, ``source2``, ``"Tie"``, or
    ``None`` when unjudged or the judgment is invalid."""
    judge = entry.get("judge")
    if "judge" not in entry or judge not in VALID_JUDGMENTS:
        return None
    assert isinstance(judge, str)
    # The official test is a substring test on the judgment ("Caption 1 is better" in "Caption 1 is better.").
    if judge in "Caption 1 is better.":
        return str(entry["source1"])
    if judge in "Caption 2 is better.":
        return str(entry["source2"])
    return "Tie"


def score_model(model: str, entries: Sequence[Any], where: str = "") -> ModelScore:
    """``model``'s numbers from its battle entries; :class:`CapArenaFileError` names the first
    entry the official script could not read (the file is ``where``)."""
    label = where or model
    if not isinstance(entries, list):
        raise CapArenaFileError(f"{label}: a battle file holds a JSON list of battles, not {type(entries).__name__}")
    if not entries:
        raise CapArenaFileError(f"{label}: no battles (the official script divides by their number)")
    score = {b: [0, 0] for b in BASELINES}
    lengths: list[int] = []
    invalid = unjudged = 0
    for k, entry in enumerate(entries):
        at = f"{label}: entry {k}"
        if not isinstance(entry, dict):
            raise CapArenaFileError(f"{at}: not a JSON object")
        missing = [key for key in READ_KEYS if key not in entry]
        if missing:
            raise CapArenaFileError(f"{at} (img {entry.get('img')!r}): missing key(s) {', '.join(missing)}")
        wrong = [key for key in READ_KEYS if not isinstance(entry[key], str)]
        if wrong:
            raise CapArenaFileError(f"{at} (img {entry.get('img')!r}): field {wrong[0]!r} must be text, not {'null' if entry[wrong[0]] is None else describe(entry[wrong[0]])}")
        caption = entry["caption1"] if model == entry["source1"] else entry["caption2"]
        if not isinstance(caption, str):
            raise CapArenaFileError(f"{at} (img {entry.get('img')!r}): the caption of {model!r} is not text")
        lengths.append(len(caption.split(" ")))
        if "judge" not in entry:
            unjudged += 1
            continue
        winner = winner_of(entry)
        if winner is None:
            invalid += 1
            continue
        ref = entry["ref_model"]
        if ref not in score:
            raise CapArenaFileError(f"{at} (img {entry.get('img')!r}): ref_model {ref!r} is not one of the baselines {', '.join(BASELINES)}")
        score[ref][0] += 1
        if winner == "Tie":
            pass
        elif winner == model:
            score[ref][1] += 1
        else:
            score[ref][1] -= 1
    per = {b: score[b][1] / 2 for b in BASELINES}
    avg = 0.0
    for b in BASELINES:
        avg += per[b]
    return ModelScore(model, per, {b: score[b][0] for b in BASELINES}, avg / 3, sum(lengths) / len(lengths), len(entries), invalid, unjudged, where)


def leaderboard(scored: Iterable[ModelScore], errors: Sequence[str] = (), notes: Sequence[str] = ()) -> CapArenaBoard:
    """Best ``Score_Avg`` first; a stable sort, as the official script's."""
    return CapArenaBoard(sorted(scored, key=lambda e: e.score_avg, reverse=True), list(errors), list(notes))


def read_results(directory: str | Path, models: Sequence[str] | None = None) -> tuple[CapArenaBoard, dict[str, list[dict[str, Any]]]]:
    """Every battle file of ``directory`` (or only ``models``' files), scored: the leaderboard and
    each model's entries. A file that cannot be read or scored is an error of the board naming the
    file and the entry; the other models are scored. The assignments file
    (``caparena_auto_600.json``, a JSON object) is not a battle file and is passed over."""
    from capjudge.data.io import load_json

    root = Path(directory)
    if not root.is_dir():
        raise CapArenaFileError(f"{root}: not a folder of CapArena battle files")
    if models is None:
        paths = sorted(p for p in root.glob("*.json") if p.is_file() and p.name != ASSIGNMENTS_NAME)
    else:
        paths = [root / f"{m}.json" for m in models]
    scored: list[ModelScore] = []
    errors: list[str] = []
    notes: list[str] = []
    battles: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        model = path.name[: -len(".json")]
        try:
            data = load_json(path.read_bytes().decode("utf-8-sig"))
        except FileNotFoundError:
            errors.append(f"{path}: no battle file for model {model!r}")
            continue
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            errors.append(f"{path}: not a readable JSON file: {exc}")
            continue
        if isinstance(data, dict) and models is None:
            notes.append(f"{path}: a JSON object, not a battle list (an assignments file?): passed over")
            continue
        try:
            scored.append(score_model(model, data, str(path)))
        except CapArenaFileError as exc:
            errors.append(str(exc))
            continue
        battles[model] = data
        n_invalid = scored[-1].invalid
        if n_invalid:
            notes.append(f"{model}: {n_invalid} judgment(s) not 1 or 2 or tie, dropped (as the official script)")
    if not paths:
        notes.append(f"{root}: no battle files (*.json)")
    return leaderboard(scored, errors, notes), battles


def table_lines(board: CapArenaBoard) -> list[str]:
    """The leaderboard as ``caparena_auto_scores.py`` prints it, line for line."""
    lines = ["CapArena-Auto Leaderboard:"]
    lines.append(f"{'Model':<30} | {'Score_avg':<8} | {'Score_gpt':<10} | {'Score_cog':<10} | {'Score_cpm':<10} | {'Length_Avg':<10} |")
    lines.append("-" * 85)
    for e in board.entries:
        g, c, m = (e.scores[b] for b in BASELINES)
        lines.append(f"{e.model:<30} | {e.score_avg:<8.2f} | {g:<10.2f} | {c:<10.2f} | {m:<10.2f} | {e.length_avg:<10.2f} |")
    return lines


def battle_records(battles: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """CapArena battle entries as capjudge battle records (``model_a`` = ``source1``, shown first;
    verdict ``A`` / ``B`` / ``tie``; an invalid or missing judgment a failed record), for the
    Bradley-Terry / Elo view beside the official numbers."""
    out: list[dict[str, Any]] = []
    for model, entries in battles.items():
        for k, e in enumerate(entries):
            w = winner_of(e)
            verdict = None if w is None else ("tie" if w == "Tie" else ("A" if w == e["source1"] else "B"))
            out.append(
                {
                    "id": str(e.get("img")),
                    "image": str(e.get("img")),
                    "model_a": str(e["source1"]),
                    "model_b": str(e["source2"]),
                    "caption_a": e["caption1"],
                    "caption_b": e["caption2"],
                    "verdict": verdict,
                    "mode": "single",
                    "status": "ok" if verdict is not None else "error",
                    "error": None if verdict is not None else f"{model} entry {k}: no valid judgment",
                }
            )
    return out
