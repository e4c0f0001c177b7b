"""OpenAI-protocol backend (``openai:``, ``azure:``, ``openai-compatible:``): the backend
(:mod:`.backend`), its wire format (:mod:`.wire`), transport and retries (:mod:`.transport`,
:mod:`.retry`), endpoint and credentials (:mod:`.client`), cost (:mod:`.budget`), spec options
(:mod:`.options`) and the model capability table (:mod:`.caps`).

``SamplingEstimate``, ``estimate_by_sampling``, ``sampling_requests`` and ``fleur_score`` moved to
:mod:`capjudge.judges.sampling` (the judge asks the sampled requests through any backend); they
are importable from here for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from capjudge.backends.openai.backend import DETAILS, KINDS, OpenAIBackend
from capjudge.backends.openai.options import check_options, from_spec

__all__ = [
    "DETAILS",
    "KINDS",
    "OpenAIBackend",
    "check_options",
    "from_spec",
]

_MOVED_TO_JUDGES = ("SamplingEstimate", "estimate_by_sampling", "sampling_requests", "fleur_score")
_warned: set[str] = set()


def __getattr__(name: str) -> Any:
    # Deprecated re-exports (one release): a lazy import, so that backends never import judges.
    if name not in _MOVED_TO_JUDGES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"capjudge.backends.openai.{name} moved to capjudge.judges.sampling.{name}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
    return getattr(importlib.import_module("capjudge.judges.sampling"), name)
