"""OpenAI-protocol backend (``openai:``, ``azure:``, ``openai-compatible:``): the backend
(:mod:`.backend`), its wire format (:mod:`.wire`), transport and retries (:mod:`.transport`,
:mod:`.retry`), endpoint and credentials (:mod:`.client`), cost (:mod:`.budget`), spec options
(:mod:`.options`) and the model capability table (:mod:`.caps`).

``SamplingEstimate``, ``estimate_by_sampling``, ``sampling_requests`` and ``fleur_score`` moved to
:mod:`capjudge.judges.sampling` (the judge asks the sampled requests through any backend); they
are importable from here for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from capjudge.backends.openai.backend import DETAILS, KINDS, OpenAIBackend
from capjudge.backends.openai.options import check_options, from_spec
from capjudge.core.lazyexport import moved_names

__all__ = [
    "DETAILS",
    "KINDS",
    "OpenAIBackend",
    "check_options",
    "from_spec",
]

# Deprecated re-exports (one release), imported lazily: backends never import judges.
__getattr__ = moved_names(__name__, {name: "capjudge.judges.sampling" for name in ("SamplingEstimate", "estimate_by_sampling", "sampling_requests", "fleur_score")})
