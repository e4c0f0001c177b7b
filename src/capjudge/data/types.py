"""Public data types: samples to judge and the results a judge returns.

A result always says how it was made (method, backend, model, template hash, smoothed or raw) and
whether it succeeded; failures are results too (``status="error"``), never exceptions that stop a run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from capjudge.core.redact import scrub_record

if TYPE_CHECKING:
    from PIL import Image as PILImage

ImageInput = Union[str, Path, bytes, "PILImage.Image"]
"""An image: a local path, an ``http(s)://`` or ``data:`` URL, raw encoded bytes, or a PIL image."""

Status = Literal["ok", "error"]
Verdict = Literal["A", "B", "tie"]

REASONING_CUT_OFF = "reasoning_cut_off"
"""``details`` key (true) of the error record of a reasoning that the token budget cut off."""
BUDGET_FAILURES = ("context", REASONING_CUT_OFF)
"""``details`` keys of error records that other options may cure: a prompt and answer budget over
the model's context (``details.context``: the counts), a reasoning cut off by the budget."""


@dataclass(frozen=True)
class Sample:
    """One image-caption pair to judge.

    ``references`` are the human reference captions (used by reference-based methods only);
    ``id`` is a stable identifier carried into the result (defaults to the input position).
    """

    image: ImageInput
    caption: str
    references: tuple[str, ...] = ()
    id: str | None = None

    def __post_init__(self) -> None:
        refs = self.references
        if isinstance(refs, str):
            refs = (refs,)
        elif not isinstance(refs, (list, tuple)):
            raise TypeError(f"references must be a list of strings, not {type(refs).__name__}")
        object.__setattr__(self, "references", tuple(str(r) for r in refs))


def normalize_caption(text: Any) -> str:
    """Collapse every whitespace run to one space and strip (FLEUR's ``' '.join(c.split())``): the
    form a caption takes in prompts and when results are joined to human judgments."""
    return " ".join(str(text).split()) if text is not None else ""


def image_label(image: ImageInput) -> str:
    """A short printable name for an image input (path or URL as given, else a type tag)."""
    if isinstance(image, (str, Path)):
        s = str(image)
        return s if not s.startswith("data:") else s[:32] + "..."
    if isinstance(image, (bytes, bytearray)):
        return f"<{len(image)} bytes>"
    if image is None:
        return "<no image>"
    size = getattr(image, "size", None)
    if hasattr(image, "convert") and isinstance(size, tuple) and len(size) == 2:
        return f"<PIL image {size[0]}x{size[1]}>"
    return f"<{type(image).__name__}>"


def json_safe(value: Any) -> Any:
    """Make a value JSON-safe (NaN -> None, tuples -> lists, numpy scalars -> float)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return json_safe(value.item())
    return value




class _Record:
    """What both kinds of results-file record do: ``ok`` and the JSON form."""

    status: Status

    @property
    def ok(self) -> bool:
        """True when the record holds a result (a score, a verdict): ``status == "ok"``."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (the results-file record): secrets masked, error texts stable."""
        return scrub_record(json_safe(dataclasses.asdict(self)))  # type: ignore[call-overload]  # subclasses are dataclasses


@dataclass
class ScoreResult(_Record):
    """The outcome of scoring one sample.

    ``score`` is on the method's scale (0-100 for VisCE2-style prompts, 0-1 for FLEUR); ``None``
    when the sample failed. ``smoothed`` says whether the score came from digit probabilities
    (FLEUR smoothing) or is the raw number the model wrote (``raw_score``).
    """

    image: str
    caption: str
    score: float | None
    method: str
    backend: str
    model: str
    template_hash: str
    raw: str | None
    status: Status = "ok"
    error: str | None = None
    id: str | None = None
    raw_score: float | None = None
    smoothed: bool = False
    scale: tuple[float, float] = (0.0, 100.0)
    references: Sequence[str] = ()
    context: str | None = None
    explanation: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoreResult:
        """Rebuild a result from a results-file record (unknown keys go to ``details``)."""
        known = _record_fields(cls, data, ("image", "caption", "score", "method", "backend"), tuple_fields=("scale",))
        known.setdefault("raw", None)
        return cls(**known)


@dataclass
class PairResult(_Record):
    """The outcome of comparing two captions of one image.

    ``verdict`` is ``"A"`` (``caption_a`` better), ``"B"`` or ``"tie"``; ``votes`` holds the verdict of
    each order asked, already mapped back to A/B (dual-sided comparison, the GPT-4V evaluator paper), or the two scores
    when the comparison was made by single grading (``mode="grading"``).
    """

    image: str
    caption_a: str
    caption_b: str
    verdict: Verdict | None
    method: str
    backend: str
    model: str
    template_hash: str
    mode: Literal["pairwise", "grading", "single"] = "pairwise"
    votes: list[str | None] = field(default_factory=list)
    scores: tuple[float | None, float | None] | None = None
    raw: list[str | None] = field(default_factory=list)
    status: Status = "ok"
    error: str | None = None
    id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairResult:
        """Rebuild a result from a results-file record (unknown keys go to ``details``)."""
        return cls(**_record_fields(cls, data, ("image", "caption_a", "caption_b", "verdict", "method", "backend"), tuple_fields=("scores",)))


def _record_fields(cls: Any, data: dict[str, Any], required: Sequence[str], *, tuple_fields: Sequence[str] = ()) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from a results-file record: unknown keys go to ``details``,
    missing required fields are ``None``, lists become tuples where the field is a tuple."""
    names = {f.name for f in dataclasses.fields(cls)}
    known = {k: v for k, v in data.items() if k in names}
    extra = {k: v for k, v in data.items() if k not in names}
    for name in tuple_fields:
        if known.get(name) is not None:
            known[name] = tuple(known[name])
    known["details"] = {**(known.get("details") or {}), **extra}
    for name in required:
        known.setdefault(name, None)
    known.setdefault("model", "")
    known.setdefault("template_hash", "")
    return known
