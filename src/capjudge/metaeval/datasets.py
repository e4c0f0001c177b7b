"""Loaders for the published human-judgment sets, from local files only (nothing is fetched).

Every loader returns a :class:`Benchmark`: the human side (rating rows, or caption pairs with the
human-preferred one) plus :meth:`Benchmark.samples`, the distinct (image, caption) samples a judge
has to score. Images are referred to by the path the annotation file gives; results are joined back
by image *file name* and whitespace-normalised caption (:func:`sample_key`).

Supported layouts
-----------------
``flickr8k-expert`` / ``flickr8k-cf``
    CLIPScore's ``flickr8k.json`` / ``crowdflower_flickr8k.json``: ``{image_id: {"human_judgement":
    [{"image_path", "caption", "rating"}], "ground_truth": [refs]}}``. Rows with a NaN rating are
    skipped (as in CLIPScore and FLEUR) and counted.
``composite``
    FLEUR's ``composite.json``: ``{"flickr8k"|"flickr30k"|"coco": [{"image", "caption", "human"}]}``
    (optional ``references``/``refs``).
``pascal50s``
    ``{"HC"|"HI"|"HM"|"MM": [{"image", "captions": [c0, c1], "label": 0|1, "references"}]}``;
    ``label`` is the index of the caption people preferred.
``thumb``
    THumB 1.0 ``mscoco_THumB-1.0.jsonl`` (``SYS, seg_id, hyp, image, P, R, Fl, Con, Inc``); the total
    is ``(P + R) / 2 + Fl + Con + Inc``. References come from ``mscoco_references.json`` beside it
    when present.
``foil``
    The FOIL-COCO file (``{"annotations": [{"id", "image_id", "caption", "foil"}], "images": ...}``;
    an original and its foiled caption share ``id``), or a simple list
    ``[{"image", "original", "foil"}]``. Scored as pairs: the original caption should win.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capjudge.core.errors import UsageError
from capjudge.data.io import read_jsonl
from capjudge.data.types import Sample, normalize_caption

Kind = Literal["ratings", "pairs"]

PASCAL_CATEGORIES = ("HC", "HI", "HM", "MM")

# canonical name -> accepted spellings (compared after lower-casing and mapping "_"/" " to "-")
_ALIASES: dict[str, tuple[str, ...]] = {
    "flickr8k-expert": ("flickr8k-expert", "flickr8k", "expert", "flickr8k-ex"),
    "flickr8k-cf": ("flickr8k-cf", "flickr8k-crowdflower", "crowdflower", "cf"),
    "composite": ("composite",),
    "pascal50s": ("pascal50s", "pascal-50s", "pascal", "pascal50"),
    "thumb": ("thumb", "thumb1.0", "thumb-1.0", "thumb-mscoco"),
    "foil": ("foil", "foil-coco"),
}

DATASET_NAMES: tuple[str, ...] = tuple(_ALIASES)
"""Canonical data set names accepted by :func:`load_dataset` (and ``--dataset``)."""


class DatasetError(UsageError, ValueError):
    """An annotation file is missing or not in the layout its data set expects."""


def image_name(image: Any) -> str:
    """The file name of an image path or URL (the join key's image part)."""
    s = str(image or "").replace("\\", "/").rstrip("/")
    return s.rsplit("/", 1)[-1]


def sample_key(image: Any, caption: Any) -> tuple[str, str]:
    """The key results are joined on: (image file name, whitespace-normalised caption)."""
    return (image_name(image), normalize_caption(caption))


def canonical_name(name: str) -> str:
    """Map a data set name or alias (``Pascal-50S``, ``flickr8k_expert``) to its canonical name."""
    n = re.sub(r"[\s_]+", "-", name.strip().lower())
    for canon, aliases in _ALIASES.items():
        if n in aliases:
            return canon
    raise DatasetError(f"unknown data set {name!r}; known: {', '.join(DATASET_NAMES)}")


@dataclass(frozen=True)
class HumanRating:
    """One human rating of one caption (a caption rated three times gives three rows)."""

    image: str
    caption: str
    rating: float
    references: tuple[str, ...] = ()
    group: str = ""  # sub-set (Composite source, THumB system)
    extra: dict[str, float] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str]:
        """Join key (image file name, normalised caption)."""
        return sample_key(self.image, self.caption)


@dataclass(frozen=True)
class HumanPair:
    """Two captions of one image and the index (0 or 1) of the one people preferred."""

    image: str
    captions: tuple[str, str]
    label: int
    category: str = ""
    references: tuple[str, ...] = ()

    def key(self, i: int) -> tuple[str, str]:
        """Join key of caption ``i``."""
        return sample_key(self.image, self.captions[i])


@dataclass
class Benchmark:
    """A loaded human-judgment set: rating rows or preference pairs, plus loader notes."""

    name: str
    kind: Kind
    ratings: list[HumanRating] = field(default_factory=list)
    pairs: list[HumanPair] = field(default_factory=list)
    skipped: int = 0  # rows dropped by the published protocol (NaN ratings), reported
    notes: list[str] = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return len(self.ratings) if self.kind == "ratings" else len(self.pairs)

    def samples(self, images_dir: str | Path | None = None) -> list[Sample]:
        """The distinct (image, caption) samples to score, in file order.

        With ``images_dir`` the image paths are resolved against it (see :func:`resolve_image`).
        """
        seen: set[tuple[str, str]] = set()
        out: list[Sample] = []
        resolver = _Resolver(images_dir) if images_dir is not None else None

        def add(image: str, caption: str, refs: tuple[str, ...]) -> None:
            key = sample_key(image, caption)
            if key in seen:
                return
            seen.add(key)
            path = resolver(image) if resolver else image
            out.append(Sample(path, normalize_caption(caption), refs, id=f"{key[0]}|{len(out)}"))

        if self.kind == "ratings":
            for r in self.ratings:
                add(r.image, r.caption, r.references)
        else:
            for p in self.pairs:
                add(p.image, p.captions[0], p.references)
                add(p.image, p.captions[1], p.references)
        return out

    def pair_inputs(self, images_dir: str | Path | None = None) -> list[dict[str, Any]]:
        """The pairs as ``compare`` inputs (``image``, ``caption_a``, ``caption_b``, ``references``)."""
        resolver = _Resolver(images_dir) if images_dir is not None else None
        return [
            {
                "image": resolver(p.image) if resolver else p.image,
                "caption_a": normalize_caption(p.captions[0]),
                "caption_b": normalize_caption(p.captions[1]),
                "references": list(p.references),
                "id": f"{p.category}:{i}",
            }
            for i, p in enumerate(self.pairs)
        ]


class _Resolver:
    """Find an annotation's image under a local folder: as given, by file name, then by search."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: dict[str, Path] | None = None

    def __call__(self, image: str) -> str:
        direct = self.root / image
        if direct.is_file():
            return str(direct)
        name = image_name(image)
        flat = self.root / name
        if flat.is_file():
            return str(flat)
        if self._index is None:
            self._index = {}
            if self.root.is_dir():
                for p in self.root.rglob("*"):
                    if p.is_file():
                        self._index.setdefault(p.name, p)
        found = self._index.get(name)
        # a missing image stays a path under the root: the judge turns it into an error record
        return str(found if found is not None else direct)


def resolve_image(images_dir: str | Path, image: str) -> str:
    """Path of ``image`` under ``images_dir`` (as given, by file name, or found recursively)."""
    return _Resolver(images_dir)(image)


# ---------------------------------------------------------------------------------- helpers
def _read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"annotation file not found: {p}")
    try:
        with p.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{p}: not valid JSON ({exc})") from exc


def _read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"annotation file not found: {p}")
    rows: list[dict[str, Any]] = []
    for line in read_jsonl(p):
        if line.json_error is not None:
            raise DatasetError(f"{p}:{line.number}: not valid JSON ({line.json_error})") from line.json_error
        if line.error is not None:  # not UTF-8
            raise DatasetError(f"{p}:{line.number}: {line.error}")
        rows.append(line.value)
    return rows


def _is_nan(value: Any) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def _refs(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


# ---------------------------------------------------------------------------------- loaders
def load_flickr8k(path: str | Path, *, name: str = "flickr8k-expert") -> Benchmark:
    """Flickr8k-Expert or Flickr8k-CF in CLIPScore's layout (one row per human rating)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected an object keyed by image id")
    bench = Benchmark(name=name, kind="ratings", source=str(path))
    for image_id, entry in data.items():
        if not isinstance(entry, dict) or "human_judgement" not in entry:
            raise DatasetError(f"{path}: entry {image_id!r} has no 'human_judgement'")
        refs = _refs(entry.get("ground_truth"))
        for j in entry["human_judgement"]:
            if _is_nan(j.get("rating")):
                bench.skipped += 1
                continue
            image = j.get("image_path") or entry.get("image_path") or f"{image_id}.jpg"
            bench.ratings.append(HumanRating(str(image), str(j["caption"]), float(j["rating"]), refs))
    if bench.skipped:
        bench.notes.append(f"{bench.skipped} human rows with NaN rating skipped (published protocol)")
    return bench


def load_composite(path: str | Path) -> Benchmark:
    """Composite in FLEUR's layout ``{source: [{image, caption, human}]}``."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected {{flickr8k|flickr30k|coco: [...]}}")
    bench = Benchmark(name="composite", kind="ratings", source=str(path))
    for group, rows in data.items():
        if not isinstance(rows, list):
            raise DatasetError(f"{path}: {group!r} is not a list")
        for r in rows:
            if _is_nan(r.get("human")):
                bench.skipped += 1
                continue
            refs = _refs(r.get("references", r.get("refs")))
            bench.ratings.append(HumanRating(str(r["image"]), str(r["caption"]), float(r["human"]), refs, group=str(group)))
    if bench.skipped:
        bench.notes.append(f"{bench.skipped} rows without a human score skipped")
    return bench


def load_pascal50s(path: str | Path) -> Benchmark:
    """Pascal-50S pairs ``{HC|HI|HM|MM: [{image, captions, label, references}]}``."""
    data = _read_json(path)
    if not isinstance(data, dict) or not any(c in data for c in PASCAL_CATEGORIES):
        raise DatasetError(f"{path}: expected an object with keys {', '.join(PASCAL_CATEGORIES)}")
    bench = Benchmark(name="pascal50s", kind="pairs", source=str(path))
    for cat in PASCAL_CATEGORIES:
        for i, r in enumerate(data.get(cat, [])):
            caps = r.get("captions")
            label = r.get("label")
            if not isinstance(caps, list) or len(caps) != 2 or label not in (0, 1):
                raise DatasetError(f"{path}: {cat}[{i}] needs two 'captions' and a 'label' 0 or 1")
            bench.pairs.append(HumanPair(str(r["image"]), (str(caps[0]), str(caps[1])), int(label), cat, _refs(r.get("references"))))
    return bench


THUMB_ASPECTS = ("P", "R", "total")


def thumb_total(row: dict[str, Any]) -> float:
    """THumB 1.0 total: ``(P + R) / 2 + Fl + Con + Inc`` (the last three are penalties <= 0)."""
    return (float(row["P"]) + float(row["R"])) / 2 + float(row.get("Fl", 0.0)) + float(row.get("Con", 0.0)) + float(row.get("Inc", 0.0))


def load_thumb(path: str | Path, references: str | Path | None = None) -> Benchmark:
    """THumB 1.0 (MSCOCO) rows; ``rating`` is the total, ``extra`` holds P and R, ``group`` the system."""
    rows = _read_jsonl(path)
    refs_path = Path(references) if references else Path(path).with_name("mscoco_references.json")
    refs: dict[str, tuple[str, ...]] = {}
    if refs_path.is_file():
        for r in _read_jsonl(refs_path):
            refs[str(r.get("seg_id"))] = _refs(r.get("refs"))
    bench = Benchmark(name="thumb", kind="ratings", source=str(path))
    for n, r in enumerate(rows, 1):
        try:
            total = thumb_total(r)
            bench.ratings.append(
                HumanRating(
                    str(r["image"]),
                    str(r["hyp"]),
                    total,
                    refs.get(str(r.get("seg_id")), ()),
                    group=str(r.get("SYS", "")),
                    extra={"P": float(r["P"]), "R": float(r["R"]), "total": total},
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{path}:{n}: bad THumB row ({type(exc).__name__}: {exc})") from exc
    if not refs:
        bench.notes.append("no mscoco_references.json beside the THumB file: samples carry no references")
    return bench


def load_foil(path: str | Path) -> Benchmark:
    """FOIL pairs (original caption, foiled caption); ``label`` 0 = the original (always first)."""
    data = _read_json(path)
    bench = Benchmark(name="foil", kind="pairs", source=str(path))
    if isinstance(data, dict) and "annotations" in data:
        files = {img.get("id"): img.get("file_name") for img in data.get("images", []) if isinstance(img, dict)}
        by_id: dict[Any, dict[str, Any]] = {}
        for a in data["annotations"]:
            slot = by_id.setdefault((a.get("image_id"), a.get("id")), {})
            slot["foil" if a.get("foil") in (True, "True", "true", 1) else "orig"] = a
        for (image_id, _), slot in by_id.items():
            if "orig" not in slot or "foil" not in slot:
                bench.skipped += 1
                continue
            image = files.get(image_id) or f"COCO_val2014_{int(image_id):012d}.jpg"
            bench.pairs.append(HumanPair(str(image), (str(slot["orig"]["caption"]), str(slot["foil"]["caption"])), 0, "FOIL"))
    elif isinstance(data, list):
        for i, r in enumerate(data):
            try:
                bench.pairs.append(HumanPair(str(r["image"]), (str(r["original"]), str(r["foil"])), 0, "FOIL", _refs(r.get("references"))))
            except (KeyError, TypeError) as exc:
                raise DatasetError(f"{path}: item {i} needs 'image', 'original', 'foil'") from exc
    else:
        raise DatasetError(f"{path}: expected FOIL-COCO JSON (with 'annotations') or a list of {{image, original, foil}}")
    if bench.skipped:
        bench.notes.append(f"{bench.skipped} FOIL ids without both an original and a foiled caption skipped")
    return bench


def load_dataset(name: str, path: str | Path, **options: Any) -> Benchmark:
    """Load data set ``name`` (see :data:`DATASET_NAMES`, aliases accepted) from ``path``."""
    canon = canonical_name(name)
    if canon in ("flickr8k-expert", "flickr8k-cf"):
        return load_flickr8k(path, name=canon)
    if canon == "composite":
        return load_composite(path)
    if canon == "pascal50s":
        return load_pascal50s(path)
    if canon == "thumb":
        return load_thumb(path, options.get("references"))
    return load_foil(path)


def iter_keys(bench: Benchmark) -> Iterable[tuple[str, str]]:
    """All join keys the human side needs a score for."""
    if bench.kind == "ratings":
        for r in bench.ratings:
            yield r.key
    else:
        for p in bench.pairs:
            yield p.key(0)
            yield p.key(1)
