"""CaptionQA's question set and its option shuffles, planned once for a whole run.

``qa.py`` (bronyayang/CaptionQA f729489) walks the dataset in order, skips the images without a
caption, the questions with fewer than two options and those whose answer matches no option, adds
"Cannot answer from the caption" to every question that is not yes/no, and shuffles each kept
question's options with one ``random.Random(0)``: a question's shuffle depends on every kept
question before it. capjudge scores one caption at a time and resumes from its results file, so
:func:`question_plan` replays that walk over the whole question set at load, before any sample
runs, and each sample reads its own questions' shuffles from the plan (docs/methods.md, "CaptionQA").

The images that have a caption: those of the run's input file (``captioned``), as ``qa.py`` sees
the keys of its caption file; none given, every image of the set (the leaderboard run).
A sample's image in the set: the entry whose ``id`` is the sample's id, else its image file's stem.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from capjudge.data.io import read_jsonl, read_samples
from capjudge.parsing.captionqa import LETTERS, answer_index, with_cannot_answer

SEED = 0
"""``qa.py --seed`` (its default): the shuffles' ``random.Random`` seed."""
SUFFIXES = (".json", ".jsonl", ".parquet")
"""Question-set files read (a folder: its files of these suffixes, in name order)."""


@dataclass(frozen=True)
class PlannedQuestion:
    """One question as ``qa.py`` asks it: ``position`` among the asked questions (dataset order),
    its image (``image``, the entry id) and index there (``q_idx``), its text, own ``choices``,
    ground truth (``answer``, its index ``truth``), ``category``, the ``options`` asked before the
    shuffle (the choices and, unless yes/no, "Cannot answer from the caption"), ``perm`` (shown
    option ``i`` is ``options[perm[i]]``)."""

    position: int
    image: str
    q_idx: int
    question: str
    choices: tuple[Any, ...]
    answer: str
    truth: int
    category: str
    options: tuple[Any, ...]
    perm: tuple[int, ...]

    @property
    def shown(self) -> list[Any]:
        """The options in the order the prompt lists them."""
        return [self.options[i] for i in self.perm]


@dataclass(frozen=True)
class QuestionPlan:
    """The question set planned: ``by_image`` (entry id -> its asked questions, dataset order),
    ``ids`` (every entry id of the set), ``captioned`` (the ids planned as having a caption;
    ``None``: all), ``skipped_no_caption`` and ``skipped_no_choices`` (``qa.py``'s counts)."""

    source: str
    by_image: Mapping[str, tuple[PlannedQuestion, ...]]
    ids: frozenset[str]
    captioned: frozenset[str] | None
    skipped_no_caption: int
    skipped_no_choices: int


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
        if not files:
            raise ValueError(f"question folder {str(path)!r} holds no {', '.join(SUFFIXES)} file")
        return files
    if not path.is_file():
        raise ValueError(f"question set {str(path)!r} does not exist")
    return [path]


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"question file {path}: reading Parquet needs pyarrow (pip install pyarrow), or give the set as JSON / JSONL") from None
    wanted = ["id", "questions", "question", "choices", "answer", "category"]
    names = [n for n in pq.read_schema(path).names if n in wanted]  # not the image column
    return list(pq.read_table(path, columns=names).to_pylist())


def read_entries(path: str | Path) -> list[Any]:
    """The dataset's entries in order: a JSON list, JSONL (one entry a line) or Parquet file (the
    Hugging Face ``Borise/CaptionQA`` files), or a folder of such files read in name order.
    Raises ``ValueError`` naming the file and the cause."""
    entries: list[Any] = []
    for file in _files(Path(path)):
        suffix = file.suffix.lower()
        try:
            if suffix == ".parquet":
                entries.extend(_read_parquet(file))
            elif suffix == ".jsonl":
                for line in read_jsonl(file):
                    if line.error is not None:
                        raise ValueError(f"line {line.number}: {line.error}")
                    entries.append(line.value)
            else:
                data = json.loads(file.read_text(encoding="utf-8"))
                if not isinstance(data, list):
                    raise ValueError("a JSON question file holds a list of entries")
                entries.extend(data)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"question file {file} cannot be read: {exc}") from None
    return entries


def entry_key(sample_id: str | None, image: Any, ids: frozenset[str]) -> str | None:
    """The set's entry of a sample: its id when the set has it, else its image file's stem."""
    if sample_id is not None and str(sample_id) in ids:
        return str(sample_id)
    if isinstance(image, (str, Path)) and str(image):
        return Path(str(image)).stem
    return None


def _category(value: Any) -> str:
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return "" if value is None else str(value)


def _questions(entry: Mapping[str, Any]) -> list[Any]:
    questions = entry.get("questions", [])
    if questions:
        return list(questions)
    if "question" in entry:  # one question per row
        return [{"question": entry["question"], "choices": entry.get("choices", []), "answer": entry.get("answer"), "category": _category(entry.get("category", []))}]
    return []


def plan(entries: list[Any], captioned: frozenset[str] | None, source: str = "") -> QuestionPlan:
    """Walk ``entries`` as ``qa.py``'s preparation loop does (one ``random.Random(SEED)`` over the
    kept questions in order) and keep each question's shuffle. Raises ``ValueError`` naming the
    entry for an entry or question that is not an object, and for a question of more than 26
    options (``qa.py`` stops on it: no letter to show)."""
    rng = random.Random(SEED)
    by_image: dict[str, list[PlannedQuestion]] = {}
    ids: set[str] = set()
    no_caption = no_choices = position = 0
    for n, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{source}: entry {n} is not an object")
        if entry.get("id") is None:
            continue
        key = str(entry["id"])
        ids.add(key)
        if captioned is not None and key not in captioned:
            no_caption += 1
            continue
        for q_idx, q in enumerate(_questions(entry)):
            if not isinstance(q, Mapping):
                raise ValueError(f"{source}: entry {key!r} question {q_idx} is not an object")
            text = q.get("question", "")
            choices = q.get("choices", [])
            if not choices or len(choices) < 2:
                no_choices += 1
                continue
            truth = answer_index(choices, q.get("answer"))
            if truth is None:
                continue
            options = with_cannot_answer(str(text), choices)
            if len(options) > len(LETTERS):
                raise ValueError(f"{source}: entry {key!r} question {q_idx} has {len(options)} options, more than the 26 letters")
            perm = list(range(len(options)))
            rng.shuffle(perm)
            item = PlannedQuestion(position, key, q_idx, str(text), tuple(choices), str(q.get("answer")), truth, _category(q.get("category", [])), tuple(options), tuple(perm))
            by_image.setdefault(key, []).append(item)
            position += 1
    return QuestionPlan(source, {k: tuple(v) for k, v in by_image.items()}, frozenset(ids), captioned, no_caption, no_choices)


def captioned_keys(path: str | Path, ids: frozenset[str]) -> frozenset[str]:
    """The set's ids that the rows of an input file (JSONL / CSV, :func:`capjudge.data.io.read_samples`)
    give a caption, found as :func:`entry_key` finds a sample's (rows that cannot be read: none)."""
    keys = set()
    for row in read_samples(path):
        if isinstance(row, dict):
            key = entry_key(row.get("id"), row.get("image"), ids)
            if key is not None:
                keys.add(key)
    return frozenset(keys)


def _stamp(path: str) -> tuple[str, int, int]:
    p = Path(path)
    files = _files(p) if p.exists() else []
    stats = [f.stat() for f in files]
    return (str(p.resolve()) if p.exists() else path, sum(s.st_mtime_ns for s in stats), sum(s.st_size for s in stats))


@lru_cache(maxsize=4)
def _cached_plan(questions: tuple[str, int, int], captioned: tuple[str, int, int] | None) -> QuestionPlan:
    entries = read_entries(questions[0])
    ids = frozenset(str(e["id"]) for e in entries if isinstance(e, Mapping) and e.get("id") is not None)
    keys = captioned_keys(captioned[0], ids) if captioned is not None else None
    return plan(entries, keys, source=questions[0])


def question_plan(questions: str, captioned: str = "") -> QuestionPlan:
    """The plan of question set ``questions`` (file or folder) with the images of input file
    ``captioned`` captioned (``""``: every image), read once per run (cached on the files' paths,
    sizes and times). Raises ``ValueError`` naming the file and the cause."""
    if captioned and not Path(captioned).is_file():
        raise ValueError(f"captioned input file {captioned!r} does not exist")
    return _cached_plan(_stamp(questions), _stamp(captioned) if captioned else None)


__all__ = ["SEED", "SUFFIXES", "PlannedQuestion", "QuestionPlan", "captioned_keys", "entry_key", "plan", "question_plan", "read_entries"]
