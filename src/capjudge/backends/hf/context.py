"""The context window of an HF model and the check a prompt passes before it is decoded.

A prompt (its image tokens included, as the processor expands them) plus the answer budget
(``max_new_tokens``) must fit the model's context; one that does not is a
:class:`~capjudge.backends.base.ContextLengthError` with the counts for that request alone, never a
prompt cut to fit and never a crash of the batch (the other requests are answered).
"""

from __future__ import annotations

from typing import Any

from capjudge.backends.base import ContextLengthError

CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""Config fields that give a model's context in tokens, in the order they are read (the text
config's, for a vision-language model, before the top-level config's)."""

DEFAULT_CONTEXT = 4096
"""The context assumed when the config names none of :data:`CONTEXT_FIELDS`."""


def context_limit(config: Any) -> tuple[int, str]:
    """The model's context in tokens and where it was read (``"text_config.max_position_embeddings"``)."""
    text_cfg = getattr(config, "text_config", None)
    for where, cfg in (("text_config.", text_cfg), ("", config)):
        if cfg is None:
            continue
        for name in CONTEXT_FIELDS:
            value = getattr(cfg, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, where + name
    return DEFAULT_CONTEXT, f"no context length in the config; {DEFAULT_CONTEXT} assumed"


def context_error(n_prompt: int, image_tokens: int | None, max_new_tokens: int, limit: int, source: str) -> ContextLengthError | None:
    """The error for a prompt of ``n_prompt`` tokens (``image_tokens`` of them the image's) and an
    answer budget of ``max_new_tokens`` in a context of ``limit`` tokens; ``None`` when it fits."""
    if n_prompt + max_new_tokens <= limit:
        return None
    img = f" ({image_tokens} of them image tokens)" if image_tokens else ""
    return ContextLengthError(
        f"prompt of {n_prompt} tokens{img} + max_new_tokens={max_new_tokens} = {n_prompt + max_new_tokens} tokens "
        f"exceeds the model's context of {limit} tokens ({source}): shorten the caption (or the other texts "
        f"of the prompt), or lower max_new_tokens (--max-new-tokens); the prompt is never cut to fit",
        counts={"prompt_tokens": n_prompt, "image_tokens": int(image_tokens or 0), "max_new_tokens": max_new_tokens, "limit": limit},
    )


__all__ = ["CONTEXT_FIELDS", "DEFAULT_CONTEXT", "context_error", "context_limit"]
