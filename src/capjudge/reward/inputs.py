"""What a reward call hands over, turned into samples: completions (plain text or conversational),
the image of each completion (from the dataset's ``image`` or ``images`` column), references.

TRL's reward functions get ``prompts``, ``completions`` and every other dataset column as a keyword
argument holding one value per completion. Nothing here raises for one bad completion or image:
such an item becomes a :class:`Skip` that names the cause, and its reward is ``None``.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.data.images import DEFAULT_LIMITS, REQUEST_DEADLINE_FACTOR, ImageLimits, fetch_many
from capjudge.data.imagesources import LOCAL_SOURCES, ImageSources
from capjudge.data.types import Sample

IMAGE_COLUMNS = ("image", "images")
"""The columns an image is looked for in, in this order, when no ``image_column`` is given."""

CaptionFrom = Callable[[str], "str | None"]
"""Turns a completion's text into the caption to judge (``None``: nothing to judge)."""


@dataclass(frozen=True)
class Skip:
    """A completion that cannot be judged: its reward is ``None``; ``cause`` says why."""

    cause: str


def message_text(content: Any) -> str | None:
    """The text of a chat message's ``content``: a string, or the ``text`` parts of a content list
    (joined by a space); ``None`` when it has no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text"]
        texts = [t for t in parts if isinstance(t, str)]
        return " ".join(texts) if texts else None
    return None


def completion_text(completion: Any) -> str | Skip:
    """The text of one completion as TRL hands it over: a string (standard format), or a list of
    messages (conversational format), whose last ``assistant`` message is read."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence) and not isinstance(completion, (bytes, bytearray)):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                text = message_text(message.get("content"))
                if text is None:
                    return Skip("the assistant message has no text content")
                return text
        return Skip("the conversational completion has no assistant message")
    return Skip(f"a completion must be a string or a list of messages, not {type(completion).__name__}")


def image_of(value: Any) -> Any | Skip:
    """The one image of a dataset cell: a PIL image, a path, ``http(s)``/``data:`` URL, encoded
    bytes, or the ``{"bytes": ..., "path": ...}`` dict of an undecoded ``datasets.Image`` cell;
    an ``images`` cell (a list) gives its first image."""
    if isinstance(value, (list, tuple)):
        if not value:
            return Skip("the images list is empty")
        value = value[0]
    if isinstance(value, Mapping):
        data, path = value.get("bytes"), value.get("path")
        if isinstance(data, (bytes, bytearray)) and data:
            return bytes(data)
        if isinstance(path, (str, Path)) and str(path):
            return path
        return Skip("the image cell holds neither bytes nor a path")
    if value is None:
        return Skip("the sample has no image")
    return value


def image_column_of(columns: Mapping[str, Any], image_column: str | None) -> str:
    """The column the images come from: ``image_column`` when given, else ``image`` or ``images``.
    A missing column is the caller's mistake (every reward of the batch would be lost): ``ValueError``."""
    if image_column is not None:
        if image_column not in columns:
            raise ValueError(f"the reward's image column {image_column!r} is not among the columns it was given: {sorted(columns)}")
        return image_column
    for name in IMAGE_COLUMNS:
        if name in columns:
            return name
    raise ValueError(
        f"no image column: the reward reads the dataset's 'image' or 'images' column (or image_column=...), "
        f"and was given {sorted(columns)}"
    )


def build_samples(
    completions: Sequence[Any],
    columns: Mapping[str, Any],
    *,
    image_column: str | None,
    references_column: str | None,
    caption_from: CaptionFrom | None,
    sources: ImageSources = LOCAL_SOURCES,
    limits: ImageLimits = DEFAULT_LIMITS,
) -> list[Sample | Skip]:
    """One :class:`Sample` (or :class:`Skip`) per completion, in order. An image path or URL that
    ``sources`` does not read is a :class:`Skip` naming the cause; the URLs it checks are fetched
    here (concurrently, within ``limits``) and handed on as bytes."""
    n = len(completions)
    name = image_column_of(columns, image_column)
    images = _column(columns, name, n)
    refs = _column(columns, references_column, n) if references_column and references_column in columns else None
    out: list[Sample | Skip] = []
    for i, completion in enumerate(completions):
        text = completion_text(completion)
        if not isinstance(text, Skip) and caption_from is not None:
            picked: str | Skip | None
            try:
                picked = caption_from(text)
            except Exception as exc:  # noqa: BLE001 - a user function failing on one completion
                picked = Skip(f"caption_from raised {type(exc).__name__}: {exc}")
            text = picked if isinstance(picked, (str, Skip)) else Skip("caption_from found no caption")
        image = admitted(image_of(images[i]), sources)
        if isinstance(text, Skip):
            out.append(text)
        elif isinstance(image, Skip):
            out.append(image)
        else:
            out.append(Sample(image, text, references=_references(refs[i] if refs is not None else None), id=str(i)))
    return fetched(out, sources, limits) if sources.checks_urls else out


def admitted(image: Any, sources: ImageSources) -> Any:
    """``image`` when ``sources`` reads it, else a :class:`Skip` naming the cause (paths, URLs)."""
    if isinstance(image, (str, Path)):
        refusal = sources.refusal(str(image))
        if refusal is not None:
            return Skip(refusal)
    return image


def fetched(items: list[Sample | Skip], sources: ImageSources, limits: ImageLimits) -> list[Sample | Skip]:
    """``items`` with each URL image downloaded under ``sources`` (a ``data:`` URL of its bytes,
    an inline image every judge takes, a remote one included; or a :class:`Skip` with the
    download's error), the URLs of the call fetched together."""
    urls = [s.image for s in items if isinstance(s, Sample) and isinstance(s.image, str) and s.image.startswith(("http://", "https://"))]
    if not urls:
        return items
    got = fetch_many(urls, limits, sources, deadline=REQUEST_DEADLINE_FACTOR * limits.download_timeout)
    out: list[Sample | Skip] = []
    for item in items:
        if isinstance(item, Sample) and isinstance(item.image, str) and item.image in got:
            body = got[item.image]
            out.append(dataclasses.replace(item, image=_data_url(body)) if isinstance(body, bytes) else Skip(str(body)))
        else:
            out.append(item)
    return out


def _data_url(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode("ascii")


def _column(columns: Mapping[str, Any], name: str, n: int) -> Sequence[Any]:
    values = columns[name]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != n:
        size = len(values) if isinstance(values, Sequence) else type(values).__name__
        raise ValueError(f"column {name!r} must hold one value per completion ({n}), got {size}")
    return values


def _references(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


__all__ = ["IMAGE_COLUMNS", "CaptionFrom", "Skip", "admitted", "build_samples", "completion_text", "fetched", "image_column_of", "image_of", "message_text"]
