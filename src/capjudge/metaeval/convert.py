"""Convert FLEUR's released per-sample results (``results/fleur_*.txt``) into capjudge results.

FLEUR (Lee et al., ACL 2024) publishes one text file per benchmark, blocks separated by blank lines::

    image file : Flickr8k_Dataset/1056338697_4f7d7ce270.jpg
    caption : A young child is wearing blue goggles ...
    model score : 0.0          <- the number LLaVA wrote (raw)
    our score : 0.0075149...   <- the smoothed FLEUR score

Composite files add ``<source> dataset`` section lines; Pascal-50S files (one per category) give
``image file`` and ``label`` once per pair followed by two caption blocks and end with
``true count``/``tie count``. Both are read by :func:`parse_fleur_results`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLEUR_MODEL = "liuhaotian/llava-v1.5-13b"
FLEUR_BACKEND = f"hf:{FLEUR_MODEL}"

_FIELD = re.compile(r"^(image file|image|label|caption|model score|our score|explanation|true count|tie count) : ?(.*)$")
_SECTION = re.compile(r"^(\w+) dataset$")
_PASCAL_FILE = re.compile(r"(HC|HI|HM|MM)", re.IGNORECASE)


@dataclass
class FleurRecord:
    """One scored caption from a FLEUR results file."""

    image: str
    caption: str
    raw_score: float | None
    score: float | None
    group: str = ""  # composite source or Pascal category
    label: int | None = None  # Pascal: index of the human-preferred caption (as FLEUR ran it)
    position: int | None = None  # Pascal: 0 or 1 within its pair
    explanation: str | None = None


@dataclass
class FleurFile:
    """A parsed FLEUR results file."""

    path: str
    records: list[FleurRecord] = field(default_factory=list)
    footer: dict[str, int] = field(default_factory=dict)  # Pascal: true count, tie count
    problems: list[str] = field(default_factory=list)


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_fleur_results(path: str | Path, *, group: str | None = None) -> FleurFile:
    """Parse one FLEUR results file; lines it cannot place are listed in ``problems``.

    ``group`` names the Pascal-50S category (taken from the file name when not given).
    """
    p = Path(path)
    out = FleurFile(path=str(p))
    if group is None:
        m = _PASCAL_FILE.search(p.stem.split("pascal", 1)[-1]) if "pascal" in p.stem.lower() else None
        group = m.group(1).upper() if m else ""
    section = group
    image = ""
    label: int | None = None
    position = 0
    current: FleurRecord | None = None
    last_field = ""
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = _FIELD.match(line)
            if m is None:
                sec = _SECTION.match(line.strip())
                if sec and not group:
                    section = sec.group(1)
                elif line.strip() and current is not None and last_field in ("caption", "explanation"):
                    # a caption/explanation that itself spans lines
                    if last_field == "caption":
                        current.caption += "\n" + line
                    else:
                        current.explanation = (current.explanation or "") + "\n" + line
                elif line.strip():
                    out.problems.append(f"line {n}: unexpected {line[:60]!r}")
                continue
            name, value = m.group(1), m.group(2)
            last_field = name
            if name in ("image file", "image"):
                image, label, position = value.strip(), None, 0
            elif name == "label":
                label = int(value) if value.strip() in ("0", "1") else None
            elif name == "caption":
                current = FleurRecord(image=image, caption=value, raw_score=None, score=None, group=section, label=label, position=position if label is not None else None)
                out.records.append(current)
                position += 1
            elif name in ("model score", "our score"):
                if current is None:
                    out.problems.append(f"line {n}: score before any caption")
                    continue
                if name == "model score":
                    current.raw_score = _num(value)
                else:
                    current.score = _num(value)
            elif name == "explanation" and current is not None:
                current.explanation = value
            elif name in ("true count", "tie count"):
                out.footer[name.replace(" ", "_")] = int(value) if value.strip().isdigit() else -1
    return out


def fleur_records(paths: str | Path | list[str | Path], *, smoothed: bool = True) -> list[dict[str, Any]]:
    """FLEUR's released results as capjudge result records (``ScoreResult`` dicts).

    ``smoothed=True`` uses FLEUR's smoothed score ("our score"); ``False`` the raw number the model
    wrote ("model score"). The other is kept as ``raw_score``/``details``.
    """
    from capjudge.data.types import ScoreResult

    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[dict[str, Any]] = []
    for path in paths:
        parsed = parse_fleur_results(path)
        for i, r in enumerate(parsed.records):
            score = r.score if smoothed else r.raw_score
            details: dict[str, Any] = {"source": Path(path).name, "smoothed_score": r.score, "model_score": r.raw_score}
            if r.group:
                details["group"] = r.group
            if r.label is not None:
                details["label"] = r.label
                details["position"] = r.position
            result = ScoreResult(
                image=r.image,
                caption=r.caption,
                score=score,
                method="fleur",
                backend=FLEUR_BACKEND,
                model=FLEUR_MODEL,
                template_hash="",
                raw=None if r.raw_score is None else f"{r.raw_score}",
                status="ok" if score is not None else "error",
                error=None if score is not None else "no score in FLEUR results file",
                id=f"{Path(path).stem}:{i}",
                raw_score=r.raw_score,
                smoothed=smoothed,
                scale=(0.0, 1.0),
                explanation=r.explanation,
                details=details,
            )
            out.append(result.to_dict())
    return out


def fleur_results_to_jsonl(paths: str | Path | list[str | Path], out: str | Path, *, smoothed: bool = True) -> int:
    """Write FLEUR's released results as a capjudge results file (JSONL); returns the record count.

    >>> fleur_results_to_jsonl("FLEUR/results/fleur_flickr8k_expert.txt", "fleur_f8k.jsonl")  # doctest: +SKIP
    5664
    """
    from capjudge.data.io import write_results

    return write_results(out, fleur_records(paths, smoothed=smoothed))


def fleur_pascal_annotations(paths: list[str | Path], out: str | Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Rebuild a ``pascal_50s.json``-layout file from FLEUR's Pascal results, with the labels FLEUR ran with.

    The released ``pascal_50s.json`` and the labels printed in FLEUR's results files disagree on a
    few pairs (Pascal-50S labels are the majority of 48 votes, and 24-24 ties are broken at random
    when the label file is built, so two builds differ). These labels reproduce FLEUR's published
    accuracies exactly. References are not in the results files and are left empty.
    """
    data: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        parsed = parse_fleur_results(path)
        items: list[dict[str, Any]] = []
        for r in parsed.records:
            if r.position == 0:
                items.append({"image": r.image, "captions": [r.caption], "label": r.label, "references": []})
            elif r.position == 1 and items:
                items[-1]["captions"].append(r.caption)
        data.setdefault(parsed.records[0].group if parsed.records else Path(path).stem, []).extend(items)
    if out is not None:
        Path(out).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return data
