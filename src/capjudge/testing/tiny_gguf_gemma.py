"""A tiny random-weight Gemma 3 in GGUF form: llama.cpp's ``gemma3`` text model (sliding-window
attention, query/key norms, post-norms, scaled embeddings) and the Gemma 3 SigLIP projector
(average-pooled patches, soft embedding norm, input projection), for tests of the llama.cpp
backend beyond LLaVA-1.5.

:func:`build_tiny_gemma3_gguf` writes, with the ``gguf`` package alone (no torch, no download):

* a ``gemma3`` text model of 2 layers, width 64, sliding window of 32 tokens, with a
  SentencePiece-style tokenizer that adds ``<bos>`` itself (no space prefix, byte fallback, digits as
  single tokens) and its own ``tokenizer.chat_template`` in Gemma's turn format, which writes
  ``{{ bos_token }}`` and folds the system message into the first user turn;
* a ``gemma3`` projector as llama.cpp's ``clip.cpp`` reads it: a SigLIP tower at 112 px (8 x 8
  patches) pooled 2 x 2 into a fixed 16 image tokens, which libmtmd wraps in
  ``<start_of_image>`` / ``<end_of_image>`` and attends to bidirectionally.

A planted bigram table (see :func:`capjudge.testing.tiny_gguf.plant_bigram`) makes greedy decoding
after ``<start_of_turn>model\\n`` print a FLEUR-style ``"0.d"`` and then ``<end_of_turn>``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capjudge.testing.tiny_gguf import (
    SPIECE_SPACE,
    TINY_WORDS,
    add_clip_vision_keys,
    add_text_dims,
    add_text_ffn,
    add_vision_block,
    finish_gguf,
    masked_linear,
    plant_bigram,
    spiece_vocab,
)

__all__ = ["GEMMA_CHAT_TEMPLATE", "build_tiny_gemma3_gguf", "write_tiny_gemma3_projector", "write_tiny_gemma3_text"]

# Gemma's turn format: BOS, the system text folded into the first user turn, "model" for the assistant.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set sys = messages[0]['content'] if messages[0]['content'] is string else messages[0]['content'][0]['text'] %}"
    "{% set first_prefix = sys + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set first_prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ first_prefix if loop.first else '' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<start_of_image>{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

CONTROL_TOKENS: tuple[str, ...] = ("<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>")

_N_EMBD = 64
_N_HEAD = 4
_N_LAYER = 2


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the tiny Gemma-style SentencePiece vocabulary."""
    pieces = [SPIECE_SPACE + w for w in TINY_WORDS] + ["user", "model", "Your", "Caption", "Score", "Why"]
    tokens, types = spiece_vocab(["<pad>", "<eos>", "<bos>", "<unk>"], [3, 3, 3, 2], pieces)  # CONTROL x3, UNKNOWN
    tokens += list(CONTROL_TOKENS)
    types += [3] * len(CONTROL_TOKENS)
    # SentencePiece merges the adjacent pair whose merged token scores highest: longer is better.
    scores = [float(len(t)) if ty == 1 else 0.0 for t, ty in zip(tokens, types, strict=True)]
    return tokens, scores, types


def write_tiny_gemma3_text(path: str | Path, seed: int = 0, *, chat_template: str | None = GEMMA_CHAT_TEMPLATE) -> Path:
    """Write the tiny ``gemma3`` text model (f32) to ``path``, with ``chat_template`` as its
    ``tokenizer.chat_template`` (``None``: a model that carries no template)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    index = {t: i for i, t in enumerate(tokens)}
    d, head = _N_EMBD, _N_EMBD // _N_HEAD
    # after "model\n" (a byte token): "0", then ".", a digit, then the end of the turn
    emb, out, s = plant_bigram(
        rng, tokens, d,
        states=[["<0x0A>"], ["0"], ["."], list("123456789")],
        nexts=[["0"], ["."], list("0123456789"), ["<end_of_turn>"]],
        weaker={(2, "0"): 1.7},  # after ".", a first decimal of 0 is less likely (it would print "0.0.")
    )
    emb /= np.sqrt(d)  # gemma3 multiplies token embeddings by sqrt(width)

    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("capjudge-tiny-gemma-3")
    add_text_dims(w)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(32)
    w.add_vocab_size(len(tokens))
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_pad_token_id(index["<pad>"])
    w.add_eos_token_id(index["<eos>"])
    w.add_bos_token_id(index["<bos>"])
    w.add_unk_token_id(index["<unk>"])
    w.add_eot_token_id(index["<end_of_turn>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    w.add_tensor("token_embd.weight", emb)
    for b in range(_N_LAYER):
        # layers neither read the planted states (masked_linear)...
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{b}.attn_q.weight", masked_linear(rng, d, d, 0.5, s))
        w.add_tensor(f"blk.{b}.attn_k.weight", masked_linear(rng, d, d, 0.5, s))
        w.add_tensor(f"blk.{b}.attn_v.weight", masked_linear(rng, d, d, 0.125, s))
        w.add_tensor(f"blk.{b}.attn_q_norm.weight", np.ones(head, np.float32))
        w.add_tensor(f"blk.{b}.attn_k_norm.weight", np.ones(head, np.float32))
        o = masked_linear(rng, d, d, 0.03, s)
        o[:s, :] = 0.0  # ...nor write into them (the post-norms keep zeros at zero)
        w.add_tensor(f"blk.{b}.attn_output.weight", o)
        w.add_tensor(f"blk.{b}.post_attention_norm.weight", np.full(d, 0.1, np.float32))
        add_text_ffn(w, rng, b, s)
        w.add_tensor(f"blk.{b}.post_ffw_norm.weight", np.full(d, 0.1, np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", out)
    finish_gguf(w)
    return Path(path)


def write_tiny_gemma3_projector(path: str | Path, seed: int = 0, *, text_width: int = _N_EMBD) -> Path:
    """Write a tiny Gemma 3 SigLIP tower and projector to ``path`` (16 image tokens)."""
    import gguf

    rng = np.random.default_rng(seed + 1)
    e, ff, p, n_layer, n_head, size = 32, 48, 14, 2, 4, 112
    n_patches = (size // p) ** 2

    def r(*shape: int, scale: float = 0.1) -> np.ndarray:
        return rng.normal(0.0, scale, shape).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("capjudge-tiny-gemma-3-mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    add_clip_vision_keys(
        w, "gemma3", image_size=size, patch=p, width=e, ff=ff, text_width=text_width, n_head=n_head, eps=1e-6, n_layer=n_layer
    )
    w.add_uint32("clip.vision.projector.scale_factor", 2)  # 8 x 8 patches pooled to 4 x 4 tokens
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("general.file_type", 1)

    w.add_tensor("v.patch_embd.weight", r(e, 3, p, p, scale=0.05).astype(np.float16))
    w.add_tensor("v.patch_embd.bias", np.zeros(e, np.float32))
    w.add_tensor("v.position_embd.weight", r(n_patches, e))
    for b in range(n_layer):
        add_vision_block(w, r, b, e, ff)
    w.add_tensor("v.post_ln.weight", np.ones(e, np.float32))
    w.add_tensor("v.post_ln.bias", np.zeros(e, np.float32))
    w.add_tensor("mm.soft_emb_norm.weight", np.ones(e, np.float32))
    w.add_tensor("mm.input_projection.weight", r(e, text_width, scale=0.3))  # ggml (text_width, e)
    finish_gguf(w)
    return Path(path)


def build_tiny_gemma3_gguf(directory: str | Path, seed: int = 0, *, projector_width: int | None = None) -> tuple[Path, Path]:
    """Write ``tiny-gemma-3.gguf`` and its ``mmproj`` into ``directory``; returns both paths.

    Deterministic for a given ``seed``; ``projector_width`` makes a projector that does not fit.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = write_tiny_gemma3_text(directory / "tiny-gemma-3.gguf", seed)
    width = _N_EMBD if projector_width is None else projector_width
    suffix = "" if width == _N_EMBD else f"-w{width}"
    mmproj = write_tiny_gemma3_projector(directory / f"tiny-gemma-3-mmproj{suffix}.gguf", seed, text_width=width)
    return model, mmproj
