"""OpenAI-protocol backend (``openai:``, ``azure:``, ``openai-compatible:``): the backend
(:mod:`.backend`), the model capability table (:mod:`.caps`) and the retry policy (:mod:`.retry`)."""

from capjudge.backends.openai.backend import (
    DETAILS,
    KINDS,
    OpenAIBackend,
    SamplingEstimate,
    check_options,
    estimate_by_sampling,
    fleur_score,
    from_spec,
    sampling_requests,
)

__all__ = [
    "DETAILS",
    "KINDS",
    "OpenAIBackend",
    "SamplingEstimate",
    "check_options",
    "estimate_by_sampling",
    "fleur_score",
    "from_spec",
    "sampling_requests",
]
