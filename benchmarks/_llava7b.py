"""LLaVA-1.5-7B-shaped models with random weights, built in memory on the device (shared by
``bench_judge.py`` and ``bench_long.py``).

Llama text model 4096 wide, 32 layers, 32 heads (no grouped keys and values), MLP 11008,
vocabulary 32000; CLIP ViT-L/14-336 vision tower (1024 wide, 24 layers, 16 heads, 576 image
tokens). The tokenizer and processor are the tiny LLaVA's of ``capjudge.testing.tiny_llava`` (a
2000-word vocabulary gives prompt lengths like LLaVA's own tokenizer); the 7B network is handed to
``HFBackend`` in place of that folder's weights (:func:`hf_backend_on`).

The weights are initialised on the device itself in the target dtype (no 28 GB float32 copy on
the CPU): on a GPU the ~7B random parameters take a few seconds. Two kinds of answers:

* ``answers="judge"`` (``bench_judge.py``): the tiny model's hand-set judge weights on top of the
  random ones, so that answers look like FLEUR answers (``0.x...``). The few modules those weights
  are planted in (input embedding, output head, layer 0's attention, the projector) are planted on
  the CPU in float32, with the same generator as the tiny model's, and moved back.
* ``answers="endless"`` (``bench_long.py``): random weights only; the output head's rows of the
  tokenizer's special tokens (end of sequence, padding, beginning of sequence, unknown), of
  ``<image>`` and of the ids past the tokenizer's vocabulary are zero. Their logit is then exactly 0 while the ordinary tokens' random
  logits (standard deviation ~1.3 at width 4096) reach well above it, so greedy answers never end:
  every answer runs to its request's ``max_new_tokens``, its planted length.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HIDDEN, LAYERS, HEADS, MLP, VOCAB = 4096, 32, 32, 11008, 32000
VISION_LAYERS = 24


def tokenizer_folder(directory: Path, vocab: int = 2000) -> Path:
    """A tiny LLaVA's folder for its processor and tokenizer (its own one-layer weights are not used)."""
    from capjudge.testing.tiny_llava import build_tiny_llava

    return build_tiny_llava(directory, hidden_size=64, num_layers=1, num_heads=4, vocab_size=vocab)


def describe(layers: int, hidden: int, dtype: str) -> str:
    """One line for the results: the shapes built."""
    if (layers, hidden) == (LAYERS, HIDDEN):
        return f"LLaVA-1.5-7B shapes, random weights, {dtype}"
    return f"LLaVA-1.5-7B shapes at {layers} layer{'s' if layers != 1 else ''}, hidden {hidden} (smoke test), random weights, {dtype}"


def build_7b_shapes(
    tokenizer_dir: Path,
    *,
    layers: int,
    vision_layers: int,
    dtype: Any,
    device: str,
    hidden: int = HIDDEN,
    answers: str = "judge",
) -> Any:
    """A LLaVA-1.5-7B-shaped model with random weights on ``device`` in ``dtype`` (module doc);
    ``hidden`` other than 4096 (smoke tests) keeps the head size 128 and the MLP ratio."""
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    if answers not in ("judge", "endless"):
        raise ValueError(f"answers must be 'judge' or 'endless', not {answers!r}")
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    heads = max(1, hidden // (HIDDEN // HEADS))
    text = LlamaConfig(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=round(hidden * MLP / HIDDEN), num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=4096, rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False,
    )  # fmt: skip
    vision = CLIPVisionConfig(
        image_size=336,
        patch_size=14,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=vision_layers,
        num_attention_heads=16,
        projection_dim=768,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=576,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlavaForConditionalGeneration._from_config(config, dtype=dtype).eval()
    n_tok = len(tok)
    with torch.no_grad():
        if answers == "endless":
            w = model.lm_head.weight
            w[n_tok:] = 0.0
            w[sorted({int(i) for i in tok.all_special_ids} | {int(config.image_token_index)})] = 0.0
        else:
            with _planted_on_cpu(model, device, dtype):
                _plant_judge(model, tok, hidden // heads)
    return model


def _plant_judge(model: Any, tok: Any, head_dim: int) -> None:
    """The tiny model's judge weights; vocabulary rows past the tokenizer's never win the argmax."""
    from capjudge.testing import tiny_llava

    tiny_llava._make_judge_like(model, tok, head_dim, 0)
    tiny_llava.strengthen_judge_signal(model, tok)
    emb = model.model.language_model.embed_tokens.weight
    n_tok = len(tok)
    const = ((emb[:n_tok] == 1.0).all(0)).nonzero().flatten()  # the constant "bias" dimension
    w = model.lm_head.weight
    w[n_tok:] = 0.0
    if len(const):
        w[n_tok:, int(const[0])] = -8.0


@contextlib.contextmanager
def _planted_on_cpu(model: Any, device: str, dtype: Any) -> Iterator[None]:
    """The modules the judge weights are planted in, on the CPU in float32 for the duration (their
    planting draws from a CPU generator and writes CPU tensors into them); the other layers'
    writes (zeroed rows, scalings) run where the layers are."""
    import torch

    lm = model.model.language_model
    planted = [
        lm.embed_tokens,
        model.lm_head,
        lm.layers[0].self_attn,
        model.model.multi_modal_projector,
    ]
    for m in planted:
        m.to(device="cpu", dtype=torch.float32)
    try:
        yield
    finally:
        for m in planted:
            m.to(device=device, dtype=dtype)


def hf_backend_on(net: Any, folder: Path, **options: Any) -> Any:
    """An ``HFBackend`` on ``folder``'s processor and tokenizer whose network is ``net``: the
    backend's loader is handed ``net`` instead of reading the folder's weights, so everything the
    backend derives from its network (prefix reuse, slot refill, context length, end-of-sequence
    ids) is derived from ``net``. Pass the dtype ``net`` has (``dtype="float16"`` on CUDA)."""
    from unittest import mock

    import transformers

    from capjudge.backends.hf import HFBackend

    def load(*args: Any, **kwargs: Any) -> Any:
        return net

    with (
        mock.patch.object(transformers.AutoModelForImageTextToText, "from_pretrained", load),
        mock.patch.object(transformers.LlavaForConditionalGeneration, "from_pretrained", load),
    ):
        return HFBackend(str(folder), **options)
