"""Making a score record: every :class:`~capjudge.data.types.ScoreResult` a judge writes is made here.

An ``ok`` record without a finite score on the method's scale becomes an error record naming the
cause (:mod:`capjudge.judges.invariants`); an error record says whether a re-run may cure it
(:func:`capjudge.backends.faults.failure_details`).
"""

from __future__ import annotations

from typing import Any

from capjudge.backends.base import Backend, Completion
from capjudge.backends.faults import failure_details
from capjudge.data.types import ScoreResult, image_label
from capjudge.judges.invariants import checked_score
from capjudge.judges.prepare import Prepared, sample_id
from capjudge.judges.reasoning import TRUNCATED
from capjudge.prompts.registry import Method


def backend_spec(backend: Backend) -> str:
    """The backend spec written into results."""
    return backend.spec or f"{backend.kind}:{backend.model}"


def short(text: str | None, n: int = 80) -> str:
    """One line of at most ``n`` characters (answers quoted in error messages)."""
    if text is None:
        return "<none>"
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


LONG_CAPTION_WORDS = 50
"""A caption of at least this many words gets ``details.caption_words`` (detailed captions);
shorter ones do not, so that the records of short captions stay as they were."""


def caption_words(*captions: object) -> int | list[int] | None:
    """``details.caption_words`` for a record of these captions: the word count
    (``len(caption.split())``, white-space separated words) of one caption, or the list of both of a
    pair; ``None`` (nothing written) when no caption has :data:`LONG_CAPTION_WORDS` words."""
    counts = [len(c.split()) if isinstance(c, str) else 0 for c in captions]
    if not counts or max(counts) < LONG_CAPTION_WORDS:
        return None
    return counts[0] if len(counts) == 1 else counts


RAW_CHARS = 50_000
"""A record's ``raw`` keeps at most this many characters of an answer (the first ones; a longer
answer ends with :data:`~capjudge.judges.reasoning.TRUNCATED` and ``details.raw_chars`` gives its
full length), as ``details.reasoning`` keeps at most ``REASONING_CHARS``."""


def bounded_raw(raw: Any) -> tuple[Any, int | None]:
    """``raw`` cut to :data:`RAW_CHARS` characters, and its full length when it was cut (else
    ``None``); anything but a string is returned as it is."""
    if not isinstance(raw, str) or len(raw) <= RAW_CHARS:
        return raw, None
    return raw[: RAW_CHARS - len(TRUNCATED)] + TRUNCATED, len(raw)


def _bounded_answers(value: Any) -> tuple[Any, Any, bool]:
    """``value`` (an answer, or lists of them) with each answer cut by :func:`bounded_raw`; the
    same shape of full lengths (``None`` for an answer kept whole); whether any was cut."""
    if isinstance(value, (list, tuple)):
        parts = [_bounded_answers(v) for v in value]
        return [p[0] for p in parts], [p[1] for p in parts], any(p[2] for p in parts)
    text, full = bounded_raw(value)
    return text, full, full is not None


def bound_raw_fields(fields: dict[str, Any]) -> None:
    """A record's ``raw`` in ``fields`` (one answer, or a list of them: a pair record's) cut by
    :func:`bounded_raw`, with ``details.raw_chars`` (the full length, or one per answer, ``None``
    for those kept whole) when any was cut; so are the refused answers of ``details.format_retries``
    (``details.format_retries_chars``, of the same shape, when any was cut)."""
    details = fields.get("details")
    if isinstance(details, dict) and details.get("format_retries"):
        kept, lengths, any_cut = _bounded_answers(details["format_retries"])
        if any_cut:
            fields["details"] = {**details, "format_retries": kept, "format_retries_chars": lengths}
    raw = fields.get("raw")
    if isinstance(raw, list):
        cut = [bounded_raw(r) for r in raw]
        if any(n is not None for _, n in cut):
            fields["raw"] = [r for r, _ in cut]
            fields["details"] = {**(fields.get("details") or {}), "raw_chars": [n for _, n in cut]}
        return
    text, full = bounded_raw(raw)
    if full is not None:
        fields["raw"] = text
        fields["details"] = {**(fields.get("details") or {}), "raw_chars": full}


def cached_note(out: Completion) -> str:
    """Said in an error that comes from an answer replayed from the response cache."""
    return " (this answer came from the response cache)" if out.cached else ""


def score_record(prep: Prepared, method: Method, backend: Backend, judge_preset: str | None, **fields: Any) -> ScoreResult:
    """The record of ``prep`` judged by ``method`` on ``backend`` (``fields``: ``score``,
    ``status``, ``raw``, ``details``, ...), checked: an ``ok`` record without a finite score on the
    method's scale becomes an error record (:mod:`.invariants`)."""
    if judge_preset is not None:
        fields["details"] = {**(fields.get("details") or {}), "judge_preset": judge_preset}
    resized = prep.image.downscale_details() if prep.image is not None else None
    if resized is not None:
        fields["details"] = {**(fields.get("details") or {}), "image_downscaled": resized}
    words = caption_words(prep.sample.caption)
    if words is not None:
        fields["details"] = {**(fields.get("details") or {}), "caption_words": words}
    bound_raw_fields(fields)
    if fields.get("status", "ok") == "ok":
        given = fields.get("score")
        score, problem = checked_score(given, method.scale, outside_ok=method.parser == "first-integer")
        if problem is not None:
            raw = fields.get("raw")
            fields.update(score=None, status="error", error=f"sample {sample_id(prep.sample, prep.index)}: {problem}; not scored (answer {short(raw)!r})")
        elif score != given:
            fields["score"] = score  # a rounding overshoot, clipped to the scale
            fields["details"] = {**(fields.get("details") or {}), "clipped_from": given}
    s = prep.sample
    return ScoreResult(
        id=sample_id(s, prep.index),
        image=image_label(s.image),
        caption=s.caption if isinstance(s.caption, str) else repr(s.caption),
        references=list(s.references),
        method=method.name,
        backend=backend_spec(backend),
        model=backend.model,
        template_hash=method.template_hash,
        scale=method.scale,
        context=prep.context,
        **fields,
    )


def error_record(prep: Prepared, method: Method, backend: Backend, judge_preset: str | None, message: str, raw: str | None = None, cause: BaseException | None = None) -> ScoreResult:
    """An error record; ``cause`` (a backend failure) says whether a re-run may cure it."""
    details = failure_details(cause) if cause is not None else {}
    return score_record(prep, method, backend, judge_preset, score=None, raw=raw, status="error", error=message, details=details)


__all__ = ["LONG_CAPTION_WORDS", "RAW_CHARS", "backend_spec", "bound_raw_fields", "bounded_raw", "cached_note", "caption_words", "error_record", "score_record", "short"]
