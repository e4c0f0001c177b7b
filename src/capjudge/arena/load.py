"""The captions of the models in an arena: one file per model (``NAME=PATH``), or one file with a
``model`` column; rows ``image``, ``caption``, optional ``id`` (JSONL, CSV or a JSON list), or
CapArena's captions file (a JSON object ``{"test_00001.jpg": caption}``).

Captions are matched across models by ``id`` when every row of every model has one, else by the
image path. A model that has no caption for an image the others captioned is counted, never
silently dropped (:meth:`ArenaInput.missing`). A row that cannot be read is left out and named
(file, line, cause) in :attr:`ArenaInput.bad_rows`; an ambiguous input (the same id or image twice
for one model, one id with two different images) is an :class:`ArenaInputError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capjudge.core.errors import UsageError
from capjudge.data.rowtext import FieldError, text_value

KeyMode = Literal["id", "image"]


class ArenaInputError(UsageError, ValueError):
    """The arena's input cannot be used; the message names the file, the line and the cause."""


@dataclass(frozen=True)
class Caption:
    """One model's caption of one image, and where it was read."""

    image: str
    caption: str
    where: str  # "file:line"


@dataclass
class ArenaInput:
    """Every model's captions, keyed alike (``key``: ``"id"`` or ``"image"``)."""

    models: list[str]
    captions: dict[str, dict[str, Caption]]
    key: KeyMode
    items: list[str] = field(default_factory=list)  # every key, in first-seen order
    bad_rows: list[str] = field(default_factory=list)

    def image_of(self, item: str) -> str:
        """The image of an item (the same for every model that captioned it)."""
        for m in self.models:
            c = self.captions[m].get(item)
            if c is not None:
                return c.image
        raise KeyError(item)

    def missing(self) -> dict[str, int]:
        """Per model: how many items (captioned by some model) it has no caption for."""
        return {m: sum(1 for k in self.items if k not in self.captions[m]) for m in self.models}


def parse_model_specs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``NAME=PATH`` items as ``(name, path)``; a malformed item or a repeated name is an error."""
    out: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ArenaInputError(f"--models expects NAME=PATH items, got {spec!r}")
        out.append((name.strip(), path.strip()))
    _unique([n for n, _ in out])
    return out


def _unique(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ArenaInputError(f"model name {n!r} is given twice: each model needs its own name")
        seen.add(n)


def caption_map(path: str | Path) -> dict[str, Any] | None:
    """A captions file in CapArena's format, ``{"test_00001.jpg": caption, ...}`` (a ``.json``
    file holding one object), as that object; ``None`` for any other file."""
    p = Path(path)
    if p.suffix.lower() != ".json" or not p.is_file():
        return None
    try:
        data = json.loads(p.read_bytes().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # read_rows names the problem
    return data if isinstance(data, dict) else None


def _rows(path: str | Path) -> Iterable[tuple[int, dict[str, Any] | str]]:
    """``(line, row)`` or ``(line, error text)`` for each row of an input file (a CapArena
    caption map: one row per image, ``id`` and ``image`` the file name)."""
    from capjudge.data.io import BadRow, InputFormatError, read_rows

    mapping = caption_map(path)
    if mapping is not None:
        for n, (image, caption) in enumerate(mapping.items(), start=1):
            yield n, {"id": image, "image": image, "caption": caption}
        return

    try:
        for n, row in enumerate(read_rows(path), start=1):
            if isinstance(row, BadRow):
                yield row.line, row.error
            else:
                yield n, row
    except (InputFormatError, OSError, UnicodeDecodeError) as exc:
        raise ArenaInputError(f"{path}: cannot be read: {exc}") from None


def _text(v: Any) -> str | None:
    return None if v is None or (isinstance(v, str) and not v.strip()) else str(v)


def build_input(models: Mapping[str, Iterable[tuple[str, dict[str, Any] | str]]]) -> ArenaInput:
    """An :class:`ArenaInput` from each model's ``(where, row or error)`` items (``where`` is
    ``"file:line"``)."""
    names = list(models)
    _unique(names)
    read: dict[str, list[tuple[str, dict[str, Any]]]] = {m: [] for m in names}
    bad: list[str] = []
    for m in names:
        for where, row in models[m]:
            if isinstance(row, str):
                bad.append(f"{where}: {row}")
                continue
            missing = [c for c in ("image", "caption") if _text(row.get(c)) is None]
            if missing:
                bad.append(f"{where}: missing or empty field(s) {', '.join(missing)}")
                continue
            try:  # NaN, a boolean, an object ... is not a caption (nor an image or an id)
                text_value(row["caption"], "caption")
                for name in ("image", "id"):
                    if row.get(name) is not None:
                        text_value(row[name], name, numbers=True)
            except FieldError as exc:
                bad.append(f"{where}: {exc}")
                continue
            read[m].append((where, row))
    key: KeyMode = "id" if all(_text(r.get("id")) is not None for rows in read.values() for _, r in rows) else "image"
    captions: dict[str, dict[str, Caption]] = {m: {} for m in names}
    items: dict[str, Caption] = {}
    for m in names:
        for where, row in read[m]:
            image = str(row["image"])
            k = str(row["id"]) if key == "id" else image
            if k in captions[m]:
                what = "id" if key == "id" else "image"
                hint = "give every row a unique id" if key == "id" else "add an id to every row to match by id"
                raise ArenaInputError(f"{where}: model {m!r} has {what} {k!r} twice (first at {captions[m][k].where}); one caption per image and model: {hint}")
            first = items.get(k)
            if first is not None and first.image != image:
                raise ArenaInputError(f"{where}: id {k!r} is image {image!r} here but {first.image!r} at {first.where}: an id must name the same image for every model")
            c = Caption(image, str(row["caption"]), where)
            captions[m][k] = c
            items.setdefault(k, c)
    return ArenaInput(names, captions, key, list(items), bad)


def load_model_files(specs: Sequence[tuple[str, str | Path]]) -> ArenaInput:
    """One file per model: ``[(name, path), ...]``."""
    return build_input({name: [(f"{path}:{line}", row) for line, row in _rows(path)] for name, path in specs})


def load_model_column(path: str | Path) -> ArenaInput:
    """One file whose rows name their ``model``."""
    per: dict[str, list[tuple[str, dict[str, Any] | str]]] = {}
    bad: list[str] = []
    for line, row in _rows(path):
        if isinstance(row, str):
            bad.append(f"{path}:{line}: {row}")
            continue
        name = _text(row.get("model"))
        if name is None:
            bad.append(f"{path}:{line}: missing or empty field model")
            continue
        per.setdefault(name, []).append((f"{path}:{line}", row))
    inp = build_input(per)
    inp.bad_rows = bad + inp.bad_rows
    return inp


def load_rows(models: Mapping[str, Iterable[Mapping[str, Any]]]) -> ArenaInput:
    """In Python: ``{model name: rows}`` (dicts with ``image``, ``caption``, optional ``id``)."""
    return build_input({name: [(f"{name}:{n}", dict(r)) for n, r in enumerate(rows, start=1)] for name, rows in models.items()})
