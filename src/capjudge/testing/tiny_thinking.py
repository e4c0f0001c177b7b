"""A tiny random-weight *thinking* vision-language model (Qwen3-VL architecture), built offline.

The model of :mod:`capjudge.testing.tiny_vlm` (``qwen3_vl``), with Qwen3's hybrid chat template
(:data:`HYBRID_TEMPLATE`: the generation prompt is ``<|im_start|>assistant\\n``, followed by
``<think>\\n\\n</think>\\n\\n`` when ``enable_thinking`` is false), ``<think>`` / ``</think>`` as
ordinary (non-special) tokens as in Qwen3's tokenizer, and one more ordinary token whose text holds
digits (:data:`REASONING_TOKEN`). Planted weights make it:

* with thinking on (the template's default): write ``<think>``, the reasoning token, ``</think>``,
  ``\\n\\n``, then the usual judge answer of the tiny models (``0.xy`` that depends on the image and
  the caption, or ``A`` / ``B`` for the pairwise prompts);
* with thinking off: answer at once (the prompt ends with ``</think>\\n\\n``).

The ``\\n\\n`` token carries the "end of prompt" state of the tiny models, so the answer after the
reasoning comes from the same weights as the answer without it; ``\\n`` (the last token of the
thinking prompt) leads to ``<think>``. A reader that took the first number of the whole text would
read 97 from the reasoning. Its scores mean nothing; it is for tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.testing.tiny_llava import build_tokenizer, token_lookup
from capjudge.testing.tiny_vlm import ARCHITECTURES, LIST_WORD, calibrate, plant_judge

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
REASONING_TOKEN = "score 97 out of 100, or 3"
"""The reasoning the tiny thinking model writes: one vocabulary token whose text holds digits."""

_CONTENT = (
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
)

HYBRID_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n" + _CONTENT + "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
"""Qwen3's hybrid chat template (its generation prompt and ``enable_thinking`` switch), with the
image as Qwen-VL writes it."""

_NO_THINKING = "{% set enable_thinking = false %}"


def build_tiny_thinking_vlm(folder: str | Path, seed: int = 0, *, head_dim: int = 16, endless: bool = False) -> Path:
    """Write the tiny thinking model (module doc) with its processor to ``folder``; returns the path.
    ``head_dim=32`` makes a text model of width 128 that vLLM's CPU attention accepts (it refuses
    a head size of 16). ``endless=True`` plants a reasoning that never closes (the reasoning token
    follows itself): every answer runs to its ``max_new_tokens``, so a caller plants each answer's
    length with its token limit (long-answer tests and ``benchmarks/bench_long.py``)."""
    import torch
    import transformers

    spec = ARCHITECTURES["qwen3_vl"]
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(
        seed, extra_special_tokens=spec.special_tokens, extra_words=(LIST_WORD, THINK_OPEN, THINK_CLOSE, REASONING_TOKEN),
        eos_token=spec.eos_token, add_bos=spec.add_bos, named_tokens=spec.named_tokens,
    )
    config, processor = spec.make(tok, seed)
    if head_dim != 16:
        _widen(config, head_dim)
    tok = processor.tokenizer
    tid = token_lookup(tok)
    newline, blank = tid("\n"), tid("\n\n")
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config).eval()
    dims = plant_judge(model, tok, [blank], seed, extra=4)
    after_reasoning = tid(REASONING_TOKEN) if endless else tid(THINK_CLOSE)
    _plant_reasoning(model, [(newline, tid(THINK_OPEN)), (tid(THINK_OPEN), tid(REASONING_TOKEN)), (tid(REASONING_TOKEN), after_reasoning), (tid(THINK_CLOSE), blank)], dims["extra"])
    processor.chat_template = _NO_THINKING + HYBRID_TEMPLATE  # the flags are sized at an answer's start
    calibrate(model, processor, dims)
    processor.chat_template = HYBRID_TEMPLATE
    tok.chat_template = HYBRID_TEMPLATE
    model.generation_config.eos_token_id = [int(tok.eos_token_id)]
    model.generation_config.pad_token_id = int(tok.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    (out / "CAPJUDGE_TINY_MODEL.txt").write_text(
        "Random-weight thinking Qwen3-VL test model written by capjudge.testing.tiny_thinking. Its scores are meaningless.\n",
        encoding="utf-8",
    )
    return out


def _widen(config: Any, head_dim: int) -> None:
    """The text model with heads of ``head_dim`` (same head count; rotary sections scaled)."""
    text = config.text_config
    width = text.num_attention_heads * head_dim
    text.hidden_size, text.head_dim, text.intermediate_size = width, head_dim, 2 * width
    rope = dict(text.rope_parameters)
    half = head_dim // 2
    rope["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]
    text.rope_parameters = rope
    config.vision_config.out_hidden_size = width


def _plant_reasoning(model: Any, chain: list[tuple[int, int]], states: list[int]) -> None:
    """Each ``(token, next)`` of ``chain``: ``token`` sets its own reserved state dimension, which
    the output head reads as a strong preference for ``next`` (a bigram on free dimensions)."""
    import torch

    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        for (token, following), dim in zip(chain, states, strict=True):
            emb[token, dim] = 1.0
            head[:, dim] = -3.0
            head[following, dim] = 8.0


__all__ = ["HYBRID_TEMPLATE", "REASONING_TOKEN", "THINK_CLOSE", "THINK_OPEN", "build_tiny_thinking_vlm"]
