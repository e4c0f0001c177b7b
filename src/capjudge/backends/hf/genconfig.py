"""Generation-config fields that change greedy decoding from what the HF fast paths (prefix reuse,
slot refill) reproduce."""

from __future__ import annotations

from typing import Any

# Generation-config fields that leave greedy decoding as the fast path does it (no logits
# processor, stop at an end-of-sequence id or ``max_new_tokens``); the backend's greedy call sets
# do_sample, num_beams and the sampling knobs itself. Any other field that differs from its default
# (a repetition penalty, a length penalty, stop strings, bad words, a watermark, ...) sends the
# request through ``generate``.
_NEUTRAL_GENERATION_FIELDS = frozenset(
    {
        "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
        "max_length", "max_new_tokens", "do_sample", "num_beams", "num_return_sequences",
        "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
        "use_cache", "cache_implementation", "output_scores", "output_logits", "return_dict_in_generate",
        "output_attentions", "output_hidden_states", "transformers_version", "_from_model_config",
    }
)  # fmt: skip


def generation_config_change(net: Any) -> str | None:
    """The fields of ``net``'s generation config (read at every call: it may be changed) that change
    greedy decoding from what the fast paths do; None when there are none."""
    gc = getattr(net, "generation_config", None)
    if gc is None:
        return None
    try:
        changed = set(gc.to_diff_dict())
    except Exception:  # noqa: BLE001 - an unreadable config is not worth the risk
        return "the model's generation config could not be read"
    odd = sorted(changed - _NEUTRAL_GENERATION_FIELDS)
    return f"the model's generation config sets {', '.join(odd)}" if odd else None
