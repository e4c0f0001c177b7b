"""Preparing a sample: the caption checked, its image loaded, or the error that stops it.

:class:`~capjudge.judges.judge.Judge` prepares every sample here (``Judge.prepare_sample``) before
any request is built; a sample that cannot be judged carries its error text in
:attr:`Prepared.error` and becomes an error record, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.core.errors import SampleFailure
from capjudge.data.images import ImageError, ImageLimits, LoadedImage, load_image
from capjudge.data.imagesources import LOCAL_SOURCES, ImageSources
from capjudge.data.rowtext import surrogate_field
from capjudge.data.types import Sample, image_label
from capjudge.prompts.registry import Method


class SampleError(SampleFailure, ValueError):
    """A sample cannot be judged (empty caption, missing references, ...)."""


@dataclass
class Prepared:
    """A sample ready to judge, or the error that stops it."""

    index: int
    sample: Sample
    image: LoadedImage | None = None
    error: str | None = None
    context: str | None = None
    cause: BaseException | None = None  # the backend failure behind ``error``, if any


Loader = Callable[[Any], "LoadedImage | str"]


def sample_id(sample: Sample, index: int) -> str:
    """The id a result carries: the sample's own, else its input position."""
    return sample.id if sample.id is not None else str(index)


def image_key(image: Any) -> Any:
    """A cheap grouping key for an image input before it is loaded (path text, bytes, object id).
    A ``str`` subclass (a server's inline image, keyed by its content) is keyed by its type too, so
    that no plain string equal to its text shares its load."""
    if type(image) is str or isinstance(image, Path):
        return ("path", str(image))
    if isinstance(image, str):
        return (type(image), str(image))
    if isinstance(image, (bytes, bytearray)):
        return ("bytes", bytes(image))  # exact: the key also memoises the decoded image
    if isinstance(image, LoadedImage):
        return ("sha", image.sha256)
    return ("object", id(image)) if image is not None else None


def load_sample_image(image: Any, *, root: str | Path | None, limits: ImageLimits, confine: bool, sources: ImageSources = LOCAL_SOURCES) -> LoadedImage | str:
    """The image loaded (read, hashed, decoded) as ``sources`` allows, or the error text its samples get."""
    try:
        return load_image(image, root=root, limits=limits, confine=confine, sources=sources)
    except ImageError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any unreadable input becomes a record
        return f"image {image_label(image)!r} could not be loaded: {type(exc).__name__}: {exc}"


def as_sample(index: int, sample: Any) -> Sample | Prepared:
    """``sample`` as a :class:`Sample` (a dict is converted), or the :class:`Prepared` error of a
    malformed one."""
    if isinstance(sample, dict):
        try:
            return Sample(image=sample["image"], caption=sample["caption"], references=sample.get("references") or (), id=sample.get("id"))
        except KeyError as exc:
            return Prepared(index, Sample(image="<missing>", caption=""), error=f"sample {index}: missing field {exc}")
        except (TypeError, ValueError) as exc:
            return Prepared(index, Sample(image="<invalid>", caption=""), error=f"sample {index}: malformed sample: {exc}")
    if not isinstance(sample, Sample):
        return Prepared(index, Sample(image="<invalid>", caption=""), error=f"sample {index}: not a Sample or a dict ({type(sample).__name__})")
    return sample


def prepare(index: int, sample: Sample | dict[str, Any], method: Method, load: Loader, images: dict[Any, LoadedImage | str] | None = None) -> Prepared:
    """Check a sample for ``method`` and load its image with ``load`` (``images`` memoises loads
    within a batch: the captions of one image read and hash it once)."""
    checked = as_sample(index, sample)
    if isinstance(checked, Prepared):
        return checked
    sample = checked
    prep = Prepared(index, sample)
    where = f"sample {sample_id(sample, index)}"
    if not isinstance(sample.caption, str) or not sample.caption.strip():
        prep.error = f"{where}: empty caption"
        return prep
    if method.needs_references and not [r for r in sample.references if str(r).strip()]:
        prep.error = f"{where}: method {method.name!r} needs reference captions and the sample has none"
        return prep
    bad = surrogate_field({"caption": sample.caption, "references": [r for r in sample.references if isinstance(r, str)]})
    if bad is not None:
        # A lone UTF-16 surrogate ("\ud800") is no text: a tokenizer refuses the whole batch
        # ("TextEncodeInput must be Union[...]"), a server the request; this sample alone fails.
        prep.error = f"{where}: the {bad} holds a lone surrogate (a character from U+D800 to U+DFFF, half of a UTF-16 pair), which is not text: no tokenizer or server can read it"
        return prep
    if not method.needs_image:
        return prep  # a text-only method (CAPability): the image is never read
    key = image_key(sample.image)
    loaded = images.get(key) if images is not None and key is not None else None
    if loaded is None:
        loaded = load(sample.image)
        if images is not None and key is not None:
            images[key] = loaded
    if isinstance(loaded, str):
        prep.error = f"{where}: {loaded}"
    else:
        prep.image = loaded
    return prep


__all__ = ["Loader", "Prepared", "SampleError", "as_sample", "image_key", "load_sample_image", "prepare", "sample_id"]
