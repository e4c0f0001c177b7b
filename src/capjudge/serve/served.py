"""The judge a server runs: a :class:`~capjudge.judges.judge.Judge` that also reads the images
clients send in the request (:class:`~capjudge.serve.wire.InlineImage`), and what ``GET /v1/info``
says about it."""

from __future__ import annotations

import dataclasses
from typing import Any

from capjudge._version import __version__
from capjudge.data.images import ImageError, LoadedImage, load_image
from capjudge.data.imagesources import ImageSources
from capjudge.data.types import image_label
from capjudge.judges.judge import Judge
from capjudge.judges.pairwise import run_fields
from capjudge.judges.prepare import load_sample_image
from capjudge.serve.wire import InlineImage


class ServedJudge(Judge):
    """A :class:`Judge` whose samples may carry their image's bytes (or the client's error reading
    it): such an image is decoded here under the judge's image limits, and named by the name the
    client gave, so that records and error texts say what a local run of the same judge says.

    Any other image a client names is read only as ``image_sources`` allows (default: paths under
    ``images_root`` when it is given, confined to it, no URL: :meth:`ImageSources.shared`); the
    server fetches the URLs it allows before a request is queued (:mod:`capjudge.serve.fetched`).
    """

    def __init__(self, *args: Any, image_sources: ImageSources | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.image_sources = image_sources if image_sources is not None else ImageSources.shared(paths=self.images_root is not None)
        """What the server reads and fetches of the images clients name."""

    def load_image(self, image: Any) -> LoadedImage | str:
        """The image loaded, or the error text its samples get (inline images included)."""
        if not isinstance(image, InlineImage):
            return load_sample_image(image, root=self.images_root, limits=self.image_limits, confine=not self.allow_outside_images, sources=self.image_sources)
        if image.error is not None:
            return image.error
        name = image.name
        data = image.data or b""
        try:
            loaded = load_image(data, limits=self.image_limits)
        except ImageError as exc:
            # The loader names in-memory bytes by their size; the client's name is what a local run shows.
            return str(exc).replace(repr(image_label(data)), repr(name))
        except Exception as exc:  # noqa: BLE001 - any unreadable input becomes a record
            return f"image {name!r} could not be loaded: {type(exc).__name__}: {exc}"
        return dataclasses.replace(loaded, label=name)


def judge_info(judge: Judge) -> dict[str, Any]:
    """What a client needs to write the records a local run of this judge writes (``GET /v1/info``):
    the method (name, kind, scale, template hash, smoothing), the backend as records show it
    (credentials as ``***``), the model, the judge preset, and the fields each comparison mode's
    pair records carry."""
    method = judge.method
    modes: dict[str, Any] = {}
    for mode in ("pairwise", "single", "grading"):
        try:
            modes[mode] = run_fields(judge, mode)  # type: ignore[arg-type]
        except ValueError:
            continue
    return {
        "capjudge": __version__,
        "method": {
            "name": method.name,
            "kind": method.kind,
            "pairwise": method.pairwise,
            "scale": list(method.scale),
            "template_hash": method.template_hash,
            "smoothing": bool(method.smoothing),
            "options": dict(method.options),
            "reads_logprobs": bool(method.reads_logprobs),
        },
        "backend": judge.backend_spec,
        "model": judge.backend.model,
        "kind": judge.backend.kind,
        "judge_preset": judge.judge_preset,
        "compare_modes": modes,
        "default_mode": "pairwise" if method.pairwise else ("grading" if method.kind == "score" else None),
    }


__all__ = ["ServedJudge", "judge_info"]
