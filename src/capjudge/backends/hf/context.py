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


def context_error(n_prompt: int, image_tokens: int | None, max_new_tokens: int, limit: int, source: str, *, thinking_budget: int = 0) -> ContextLengthError | None:
    """The error for a prompt of ``n_prompt`` tokens (``image_tokens`` of them the image's) and an
    answer budget of ``max_new_tokens`` (``thinking_budget`` of them a thinking model's reasoning
    budget) in a context of ``limit`` tokens; ``None`` when it fits. The message names the option
    to change: ``--thinking-budget`` when the reasoning budget is what does not fit."""
    if n_prompt + max_new_tokens <= limit:
        return None
    img = f" ({image_tokens} of them image tokens)" if image_tokens else ""
    answer = max_new_tokens - thinking_budget
    split = f" (the method's {answer} + the thinking budget {thinking_budget})" if thinking_budget else ""
    head = f"prompt of {n_prompt} tokens{img} + max_new_tokens={max_new_tokens}{split} = {n_prompt + max_new_tokens} tokens exceeds the model's context of {limit} tokens ({source})"
    if thinking_budget and n_prompt + answer <= limit:
        fix = f"lower the thinking budget (--thinking-budget N, backend option thinking_budget=N; at most {limit - n_prompt - answer} here)"
    elif thinking_budget:
        fix = "shorten the caption (or the other texts of the prompt), or lower the thinking budget (--thinking-budget) and max_new_tokens (--max-new-tokens)"
    else:
        fix = "shorten the caption (or the other texts of the prompt), or lower max_new_tokens (--max-new-tokens)"
    counts = {"prompt_tokens": n_prompt, "image_tokens": int(image_tokens or 0), "max_new_tokens": max_new_tokens, "limit": limit}
    if thinking_budget:
        counts["thinking_budget"] = thinking_budget
    return ContextLengthError(f"{head}: {fix}; the prompt is never cut to fit", counts=counts)


__all__ = ["CONTEXT_FIELDS", "DEFAULT_CONTEXT", "context_error", "context_limit"]
