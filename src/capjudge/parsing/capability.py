"""CAPability's answer reading, item scores and metrics (ali-vilab/CAPability cebb82a,
``evaluation/eval.py``, Apache-2.0), as pure functions.

- :func:`read_answer`: ``call_and_parse_single_meaasge``'s reading (the text inside a ```` ```json ````
  / ```` ```python ```` / ```` ``` ```` fence, then ``ast.literal_eval``); ``None`` where the code
  gives up on the answer (and asks again).
- :func:`validate`: the ``post_validate_format_<dimension>`` checks as ``eval.py``'s ``__main__``
  runs them (``strict_match=False``): the answer normalised in place (a score ``"1"`` becomes ``1``,
  a ``pred`` string becomes a list), or :class:`AnswerFormatError` saying why the code refuses it.
  ``code=True`` keeps the code's bugs (``capability-code``); ``code=False`` fixes them
  (``capability``; docs/methods.md, "Differences from the official code").
- :func:`item_score`: ``post_process_<dimension>``: 1 / 0 / -1 (a list for
  ``dynamic_object_number``, one per object).
- :func:`dimension_metrics`, :func:`average_metrics`: ``calculate_metric`` and ``evaluate``'s means.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

TASKS: tuple[str, ...] = (
    "object_category", "object_number", "object_color", "spatial_relation", "scene", "camera_angle", "OCR", "style",
    "character_identification", "dynamic_object_number", "action", "camera_movement", "event",
)  # fmt: skip
"""The 13 dimensions in ``eval.py``'s order (``tasks="all"``)."""

MAX_RETRY_TIMES = 5
"""``eval.py --max_retry_times`` default: rounds of asking again after the first (6 asks at most)."""
MAX_ALLOW_MISSING = 5
"""``eval.py --max_allow_missing`` default: a dimension with at most this many unanswered items is
not asked again."""

CATEGORY_EXPLAINS: dict[str, tuple[str, ...]] = {
    "camera_angle": (
        "level angle: Horizontal shooting of the subject (flat shot)",
        "high angle: Shooting from above the subject (overhead shot)",
        "low angle: Shooting from below the subject (upward shot)",
        "dutch angle: The lens has a certain angle of deflection along the central axis, making the horizon crooked",
    ),
    "camera_movement": (
        "left: the camera angle swings left (pan left), or the camera moves left (track left)",
        "right: the camera angle swings right (pan right), or the camera moves right (track right)",
        "up: the camera angle swings up (tilt up), or the camera moves up (boom up)",
        "down: the camera angle swings down (tilt down), or the camera moves down (boom down)",
        "in: camera pushes toward the subject (dolly in), or enlarges the frame (zoom in)",
        "out: camera moves away the subject (dolly out), or expands the visible area, makeing the subject appear smaller (zoom out)",
        "fixed: camera is almost fixed and does not change",
    ),
    "style": (
        "realistic: Represents subjects truthfully with lifelike detail and accuracy.",
        "animated: Created using 2D images or 3D computer-generated imagery (CGI), e.g., cartoon, anime",
        "special effect: Creates illusions through practical or digital techniques to enhance visuals.",
        "old-fashioned: Emulates historical aesthetics like vintage or classical artistic styles.",
        "pixel art: Retro digital art using blocky pixels for a nostalgic, low-res look.",
        "sketch art: Rough, expressive drawings emphasizing line work and spontaneity.",
        "abstract art: Non-representational art focused on shapes, colors, and emotions over realism.",
        "impressionism art: Captures fleeting light/moments with visible brushstrokes and vibrant color dabs.",
        "cubism art: Depicts subjects through fragmented geometric planes and multiple perspectives.",
    ),
}
"""``prompt.py``'s category explanations of the classification dimensions."""
CATEGORIES: dict[str, tuple[str, ...]] = {
    t: tuple(c.split(":")[0] for c in ex) for t, ex in CATEGORY_EXPLAINS.items()
}
"""The categories (the text before ``:``)."""
CLASSIFICATION = frozenset(CATEGORIES)
PAIRS = frozenset({"object_number", "object_color", "dynamic_object_number"})
"""Dimensions whose annotation is ``{object: value}`` (dynamic: several pairs, one request each)."""


class AnswerFormatError(ValueError):
    """An answer ``eval.py`` refuses (it asks again); the message says why."""


def read_answer(text: str) -> Any | None:
    """The answer as ``call_and_parse_single_meaasge`` reads it, or ``None`` where it gives up
    (``SyntaxError`` / ``ValueError``; also the other errors ``ast.literal_eval`` raises on odd
    text, e.g. an unhashable dict key, which would stop the code's worker)."""
    if "```json" in text:
        text = text.split("```json")[-1].split("```")[0].strip()
    if "```python" in text:
        text = text.split("```python")[-1].split("```")[0].strip()
    elif "```" in text:
        text = text.split("```")[1].strip()
    try:
        return ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def _score(response: dict[str, Any]) -> None:
    if response["score"] in ["-1", "0", "1"]:
        response["score"] = int(response["score"])
    if response["score"] not in [1, 0, -1]:
        raise AnswerFormatError(f"score {response['score']!r} is not 1, 0 or -1")


def _pair_value(value: Any, code: bool) -> None:
    """The ``{object: number}`` / ``{object: color}`` echo: a string with ``:`` or a dict (the
    code calls ``.strip()`` on the dict's value, so a number there fails in ``capability-code``)."""
    if isinstance(value, str):
        if ":" not in value:
            raise AnswerFormatError(f"{value!r} has no ':'")
    elif isinstance(value, dict):
        if not value:
            raise AnswerFormatError("an empty dict")
        first = next(iter(value.values()))
        if code and not isinstance(first, str):
            raise AnswerFormatError(
                f"the dict's value {first!r} is not a string (eval.py calls .strip() on it)"
            )
    else:
        raise AnswerFormatError(f"{value!r} is neither a string nor a dict")


def _number(value: Any, code: bool) -> None:
    _pair_value(value, code)
    text = value.lstrip("{").rstrip("}").split(":") if isinstance(value, str) else None
    if text is not None and len(text) != 2:
        raise AnswerFormatError(f"{value!r} is not one 'object: number'")
    number = text[1] if text is not None else next(iter(value.values()))
    try:
        int(str(number).strip())
    except ValueError:
        raise AnswerFormatError(f"{number!r} is not a whole number") from None


def _classes(task: str, response: dict[str, Any], code: bool) -> None:
    if "pred" not in response:
        raise AnswerFormatError("no 'pred'")
    pred = response["pred"]
    if pred == "N/A" or "N/A" in pred:  # a TypeError (a number) is the caller's refusal
        response["pred"] = pred = ["N/A"]
    if isinstance(pred, str):
        try:
            response["pred"] = pred = ast.literal_eval(pred)
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            raise AnswerFormatError(f"'pred' {pred!r} is not a python list") from None
    if not isinstance(pred, list):
        raise AnswerFormatError(f"'pred' {pred!r} is not a list")
    for i in range(len(pred)):
        if pred[i] in CATEGORY_EXPLAINS[task]:
            if code and task != "style":
                # eval.py splits the list, not the item, for camera angle and movement.
                raise AnswerFormatError(
                    f"'pred' item {pred[i]!r} is a category's explanation (eval.py fails on it: 'list' object has no attribute 'split')"
                )
            pred[i] = pred[i].split(":")[0].lower()
        if not (pred[i] == "N/A" or pred[i] in CATEGORIES[task]):
            raise AnswerFormatError(
                f"'pred' item {pred[i]!r} is not one of {list(CATEGORIES[task])}"
            )


def validate(task: str, response: Any, *, code: bool = False) -> None:
    """``post_validate_format_<task>`` with ``strict_match=False``: normalises ``response`` in
    place or raises :class:`AnswerFormatError` (a missing key too, as the code's ``KeyError``)."""
    if task not in TASKS:
        raise ValueError(f"unknown CAPability dimension {task!r} (known: {', '.join(TASKS)})")
    if not isinstance(response, dict):
        raise AnswerFormatError(f"the answer is a {type(response).__name__}, not a dict")
    try:
        if task in CLASSIFICATION:
            _classes(task, response, code)
        elif task == "dynamic_object_number":
            if "response" not in response:
                raise AnswerFormatError("no 'response'")
            for r in response["response"]:
                if not isinstance(r, dict):
                    raise AnswerFormatError(f"the answer is a {type(r).__name__}, not a dict")
                if code and not isinstance(r["object_number"], str):
                    # eval.py tests the outer answer for a dict ('object_number' is not there).
                    raise AnswerFormatError(
                        "'object_number' is not a string (eval.py reads a dict from the wrong place: KeyError)"
                    )
                _number(r["object_number"], code)
                _score(r)
        else:
            if task == "object_number":
                _number(response["object_number"], code)
            elif task == "object_color":
                _pair_value(response["object_color"], code)
            _score(response)
    except KeyError as exc:
        raise AnswerFormatError(f"no key {exc}") from None
    except TypeError as exc:
        raise AnswerFormatError(f"{type(exc).__name__}: {exc}") from None


def item_score(task: str, response: Mapping[str, Any], annotation: Any) -> int | list[int]:
    """``post_process_<task>``: the dimension's item score (1 correct, 0 not mentioned, -1 wrong);
    for ``dynamic_object_number`` the list of its objects' scores; for the classification
    dimensions 0 when ``pred`` is ``["N/A"]``, 1 when the annotation is among ``pred``, else -1."""
    if task == "dynamic_object_number":
        return [r["score"] for r in response["response"]]
    if task in CLASSIFICATION:
        pred = response["pred"]
        if len(pred) == 1 and pred[0] == "N/A":
            return 0
        return 1 if annotation in pred else -1
    score: int = response["score"]
    return score


def flat_scores(scores: Iterable[int | list[int]]) -> list[int]:
    """The item scores of a dimension, a dynamic item's list spread out (``calculate_metric``)."""
    out: list[int] = []
    for s in scores:
        out += s if isinstance(s, list) else [s]
    return out


def dimension_metrics(scores: Iterable[int | list[int]]) -> dict[str, Any]:
    """``calculate_metric``: ``all`` (item scores), ``hit`` (non-zero), ``correct`` (1), and
    ``precision`` = 100 correct / hit, ``recall`` = 100 correct / all, ``hit_rate`` = 100 hit / all,
    ``f1_score`` their harmonic mean. Where the code divides by zero (no item, no hit, no correct
    item) the value is ``None`` and ``undefined`` says why (``eval.py``'s numpy division prints ``nan``)."""
    arr = np.array(flat_scores(scores))
    total, hit, correct = len(arr), int(np.count_nonzero(arr != 0)), int(np.count_nonzero(arr == 1))
    out: dict[str, Any] = {
        "all": total,
        "hit": hit,
        "correct": correct,
        "precision": None,
        "recall": None,
        "hit_rate": None,
        "f1_score": None,
    }
    if total == 0:
        return {**out, "undefined": "no item scores"}
    out["recall"] = 100 * correct / total
    out["hit_rate"] = 100 * hit / total
    if hit == 0:
        return {**out, "undefined": "no item mentioned (hit 0): precision divides by zero"}
    out["precision"] = 100 * correct / hit
    if out["precision"] + out["recall"] == 0:
        return {**out, "undefined": "no item correct: F1 divides by zero"}
    out["f1_score"] = 2 * out["precision"] * out["recall"] / (out["precision"] + out["recall"])
    return out


MEASURES = ("precision", "recall", "f1_score", "hit_rate")


def average_metrics(per_dimension: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``evaluate``'s ``Average ...``: ``np.mean`` of each measure over the dimensions (13 in a
    full run); ``None`` for a measure some dimension leaves undefined (``eval.py``: ``nan``)."""
    out: dict[str, Any] = {"dimensions": len(per_dimension)}
    for m in MEASURES:
        values = [d[m] for d in per_dimension.values()]
        out[m] = float(np.mean(values)) if values and all(v is not None for v in values) else None
    return out


def metric_line(task: str, m: Mapping[str, Any]) -> str:
    """``calculate_metric``'s printed line."""

    def f(v: Any) -> str:
        return f"{v:.1f}" if v is not None else "undefined"

    return f"[{task}] all: {m['all']}, hit: {m['hit']}, correct: {m['correct']}; precision: {f(m['precision'])}, recall: {f(m['recall'])}, f1_score: {f(m['f1_score'])}, hit_rate: {f(m['hit_rate'])}"


def average_line(avg: Mapping[str, Any]) -> str:
    """``evaluate``'s last printed line."""

    def f(v: Any) -> str:
        return f"{v:.3f}" if v is not None else "undefined"

    return f"Average precision: {f(avg['precision'])}, recall: {f(avg['recall'])}, f1_score: {f(avg['f1_score'])}, hit_rate: {f(avg['hit_rate'])}"


__all__ = [
    "CATEGORIES", "CATEGORY_EXPLAINS", "CLASSIFICATION", "MAX_ALLOW_MISSING", "MAX_RETRY_TIMES", "MEASURES", "PAIRS", "TASKS",
    "AnswerFormatError", "average_line", "average_metrics", "dimension_metrics", "flat_scores", "item_score", "metric_line",
    "read_answer", "validate",
]  # fmt: skip
