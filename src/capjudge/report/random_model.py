"""Results of a random-weight test model (the demo's tiny LLaVA) are said to be meaningless.

The tiny models of :mod:`capjudge.testing` leave a marker file in their folder; a results file
whose records name such a folder (``model``, or the path of an ``hf:`` backend) gets a warning at
the top of its report, so that a page made from ``capjudge demo``'s results cannot be mistaken for
a real judge's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The file capjudge.testing's builders write next to a random-weight model's weights.
TINY_MODEL_MARKER = "CAPJUDGE_TINY_MODEL.txt"

RANDOM_MODEL_WARNING = (
    "RANDOM MODEL: {what} judged by a tiny random-weight test model ({model}). Its scores are MEANINGLESS: "
    "they only show that the pipeline runs. Judge with a real model (e.g. capjudge demo --backend "
    "hf:llava-hf/llava-1.5-7b-hf) before reading anything into them."
)


def is_random_model(record: dict[str, Any]) -> str | None:
    """The model folder of ``record`` when it is a random-weight test model, else ``None``."""
    candidates = [record.get("model")]
    backend = record.get("backend")
    if isinstance(backend, str) and backend.startswith("hf:"):
        candidates.append(backend[3:].split("?", 1)[0])
    for c in candidates:
        if isinstance(c, str) and c and _has_marker(c):
            return c
    return None


def _has_marker(folder: str) -> bool:
    try:
        return (Path(folder).expanduser() / TINY_MODEL_MARKER).is_file()
    except (OSError, ValueError):  # a name that is no path on this system
        return False


def random_model_warnings(files: Iterable[tuple[str, Iterable[dict[str, Any]]]]) -> list[str]:
    """One warning per random-weight test model, naming the results files ``(label, records)`` it judged."""
    judged: dict[str, list[str]] = {}  # model folder -> labels, in order
    for label, records in files:
        for r in records:
            folder = is_random_model(r)
            if folder is not None and label not in judged.setdefault(folder, []):
                judged[folder].append(label)
    return [RANDOM_MODEL_WARNING.format(what=", ".join(labels), model=folder) for folder, labels in judged.items()]
