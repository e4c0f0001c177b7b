"""A tiny random-weight Qwen2.5-VL in GGUF form: llama.cpp's M-RoPE text model and the Qwen2.5-VL
vision merger, for tests of the llama.cpp backend beyond LLaVA-1.5.

:func:`build_tiny_qwen25vl_gguf` writes, with the ``gguf`` package alone (no torch, no download):

* a ``qwen2vl`` text model (llama.cpp's architecture for Qwen2-VL and Qwen2.5-VL: multimodal
  rotary positions, ``rope.dimension_sections``) of 2 layers, width 64, with a byte-level BPE
  tokenizer (``gpt2`` model, ``qwen2`` pre-tokenizer: digits are always single tokens), ChatML
  special tokens and its own ``tokenizer.chat_template`` (ChatML, images as
  ``<|vision_start|><|image_pad|><|vision_end|>``, a default system turn as Qwen's has);
* a ``qwen2.5vl_merger`` projector as llama.cpp's ``clip.cpp`` reads it: two-frame patch embedding
  (``v.patch_embd.weight`` and ``.weight.1``), RMS-normed blocks with a SiLU-gated feed-forward,
  window attention (``clip.vision.n_wa_pattern``), the 2x2 patch merger ``mm.0`` / ``mm.2``. Its
  number of image tokens depends on the image's size (dynamic resolution, at least 8).

As in :mod:`capjudge.testing.tiny_gguf`, a planted bigram table makes greedy decoding after
``<|im_start|>assistant\\n`` print a FLEUR-style ``"0.d"`` and then ``<|im_end|>``; at the step
after ``"."`` the ten digits are the ten most likely tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capjudge.testing.tiny_gguf import (
    TINY_WORDS,
    add_clip_vision_keys,
    add_text_dims,
    add_text_ffn,
    add_vision_block,
    finish_gguf,
    masked_linear,
    plant_bigram,
)

__all__ = [
    "QWEN_CHAT_TEMPLATE",
    "REASONING_TOKEN",
    "THINKING_CHAT_TEMPLATE",
    "build_tiny_qwen25vl_gguf",
    "build_tiny_thinking_gguf",
    "write_tiny_qwen2vl_text",
    "write_tiny_qwen25vl_projector",
]

# ChatML as Qwen2-VL / Qwen2.5-VL use it: a default system turn, images inside the user turn.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

THINKING_CHAT_TEMPLATE = QWEN_CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}",
)
"""Qwen3's hybrid generation prompt (``enable_thinking``) on the ChatML template above."""

REASONING_TOKEN = "score 97 out of 100, or 3"
"""The reasoning of the thinking variant: one user-defined token whose text holds digits."""

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
)
_EXTRA_WORDS: tuple[str, ...] = ("system", "user", "assistant", "You", "are", "helpful")

_N_EMBD = 64
_N_HEAD = 4
_N_LAYER = 2


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _vocab(thinking: bool = False) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of the tiny byte-level BPE vocabulary (``thinking``: with
    ``\n\n`` as one token and ``<think>``, ``</think>`` and the reasoning token user-defined)."""
    b2u = _bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    seen = set(tokens)
    merges: list[str] = []
    space = b2u[ord(" ")]
    for word in (*TINY_WORDS, *_EXTRA_WORDS):
        for piece in (space + word, word):
            for k in range(2, len(piece) + 1):
                if piece[:k] not in seen:
                    seen.add(piece[:k])
                    tokens.append(piece[:k])
                    merges.append(f"{piece[: k - 1]} {piece[k - 1]}")
    types = [1] * len(tokens) + [3] * len(SPECIAL_TOKENS)  # NORMAL, then CONTROL
    tokens = tokens + list(SPECIAL_TOKENS)
    if thinking:
        newline = b2u[ord("\n")]
        merges.append(f"{newline} {newline}")
        tokens += [newline * 2, "<think>", "</think>", REASONING_TOKEN]
        types += [1, 4, 4, 4]  # NORMAL, then USER_DEFINED (as Qwen3's <think> is)
    return tokens, types, merges


def write_tiny_qwen2vl_text(path: str | Path, seed: int = 0, *, chat_template: str | None = QWEN_CHAT_TEMPLATE, thinking: bool = False, verdicts: bool = False) -> Path:
    """Write the tiny ``qwen2vl`` text model (f32) to ``path``, with ``chat_template`` as its
    ``tokenizer.chat_template`` (``None``: a model that carries no template).

    ``thinking``: after ``assistant\n`` it writes ``<think>``, :data:`REASONING_TOKEN`,
    ``</think>``, ``\n\n`` and then its answer; after ``\n\n`` (the end of a prompt whose template
    closed the reasoning, ``enable_thinking=False``) it answers at once. ``verdicts``: the answer is
    ``A`` or ``B`` instead of ``0.d`` (pairwise prompts)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, types, merges = _vocab(thinking)
    index = {t: i for i, t in enumerate(tokens)}
    newline = _bytes_to_unicode()[ord("\n")]
    d = _N_EMBD
    answer_states: list[list[str]] = [["0"], ["."], list("123456789")]
    answer_nexts: list[list[str]] = [["."], list("0123456789"), ["<|im_end|>"]]
    if verdicts:
        answer_states, answer_nexts = [["A", "B"]], [["<|im_end|>"]]
    first = ["A", "B"] if verdicts else ["0"]
    lead_states = [[newline]]
    lead_nexts = [first]
    if thinking:  # "\n" -> <think> -> reasoning -> </think> -> "\n\n" -> the answer
        lead_states = [[newline], ["<think>"], [REASONING_TOKEN], ["</think>"], [newline * 2]]
        lead_nexts = [["<think>"], [REASONING_TOKEN], ["</think>"], [newline * 2], first]
    # after "assistant\n": "0", then ".", a digit, then the end of the turn
    emb, out, s = plant_bigram(
        rng, tokens, d,
        states=lead_states + answer_states,
        nexts=lead_nexts + answer_nexts,
        # after ".", a first decimal of 0 is less likely (it would print "0.0.")
        weaker={} if verdicts else {(len(lead_states) + 1, "0"): 1.7},
    )

    w = gguf.GGUFWriter(str(path), "qwen2vl")
    w.add_name("capjudge-tiny-qwen2.5-vl" + ("-thinking" if thinking else ""))
    add_text_dims(w)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(d // _N_HEAD)
    w.add_rope_dimension_sections([2, 3, 3, 0])  # temporal, height, width: half the head width
    w.add_vocab_size(len(tokens))
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(index["<|endoftext|>"])
    w.add_eos_token_id(index["<|im_end|>"])
    w.add_pad_token_id(index["<|endoftext|>"])
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    w.add_tensor("token_embd.weight", emb)
    for b in range(_N_LAYER):
        # layers neither read the planted states (masked_linear)...
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(d, np.float32))
        for name, scale in (("attn_q", 0.5), ("attn_k", 0.5), ("attn_v", 0.125)):
            w.add_tensor(f"blk.{b}.{name}.weight", masked_linear(rng, d, d, scale, s))
            w.add_tensor(f"blk.{b}.{name}.bias", rng.normal(0.0, 0.05, d).astype(np.float32))
        o = masked_linear(rng, d, d, 0.03, s)
        o[:s, :] = 0.0  # ...nor write into them, so the bigram table survives the residual stream
        w.add_tensor(f"blk.{b}.attn_output.weight", o)
        add_text_ffn(w, rng, b, s)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", out)
    finish_gguf(w)
    return Path(path)


def write_tiny_qwen25vl_projector(path: str | Path, seed: int = 0, *, text_width: int = _N_EMBD, projector_type: str = "qwen2.5vl_merger") -> Path:
    """Write a tiny Qwen2.5-VL vision tower and merger to ``path``.

    ``text_width`` is the merger's output width (the text model's is 64); ``projector_type`` is
    written as ``clip.projector_type`` (another value makes a file llama.cpp cannot load).
    """
    import gguf

    rng = np.random.default_rng(seed + 1)
    e, ff, p, n_layer, n_head = 32, 48, 14, 2, 4  # ff != e: clip.cpp swaps up/down when they match

    def r(*shape: int, scale: float = 0.1) -> np.ndarray:
        return rng.normal(0.0, scale, shape).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("capjudge-tiny-qwen2.5-vl-mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    add_clip_vision_keys(
        w, projector_type, image_size=56, patch=p, width=e, ff=ff, text_width=text_width, n_head=n_head, eps=1e-6, n_layer=n_layer
    )
    w.add_uint32("clip.vision.n_wa_pattern", 2)  # block 1 attends to the whole image, block 0 to windows
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
    w.add_bool("clip.use_silu", True)
    w.add_uint32("general.file_type", 1)

    w.add_tensor("v.patch_embd.weight", r(e, 3, p, p, scale=0.05).astype(np.float16))
    w.add_tensor("v.patch_embd.weight.1", r(e, 3, p, p, scale=0.05).astype(np.float16))
    for b in range(n_layer):
        add_vision_block(w, r, b, e, ff, norm_bias=False, gated=True)  # RMS norms, SiLU-gated feed-forward
    w.add_tensor("v.post_ln.weight", np.ones(e, np.float32))
    w.add_tensor("mm.0.weight", r(4 * e, 4 * e, scale=0.2))
    w.add_tensor("mm.0.bias", np.zeros(4 * e, np.float32))
    w.add_tensor("mm.2.weight", r(text_width, 4 * e, scale=0.3))
    w.add_tensor("mm.2.bias", np.zeros(text_width, np.float32))
    finish_gguf(w)
    return Path(path)


def build_tiny_qwen25vl_gguf(
    directory: str | Path,
    seed: int = 0,
    *,
    projector_width: int | None = None,
    projector_type: str = "qwen2.5vl_merger",
    chat_template: str | None = QWEN_CHAT_TEMPLATE,
) -> tuple[Path, Path]:
    """Write ``tiny-qwen2.5-vl.gguf`` and its ``mmproj`` into ``directory``; returns both paths.

    Deterministic for a given ``seed``. ``projector_width`` / ``projector_type`` make projectors
    that do not fit the model or that llama.cpp does not know, ``chat_template=None`` a model
    without a template, for error tests.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = "tiny-qwen2.5-vl.gguf" if chat_template == QWEN_CHAT_TEMPLATE else "tiny-qwen2.5-vl-other-template.gguf"
    model = write_tiny_qwen2vl_text(directory / name, seed, chat_template=chat_template)
    width = _N_EMBD if projector_width is None else projector_width
    suffix = ("" if width == _N_EMBD else f"-w{width}") + ("" if projector_type == "qwen2.5vl_merger" else f"-{projector_type}")
    mmproj = write_tiny_qwen25vl_projector(directory / f"tiny-qwen2.5-vl-mmproj{suffix}.gguf", seed, text_width=width, projector_type=projector_type)
    return model, mmproj


def build_tiny_thinking_gguf(directory: str | Path, seed: int = 0, *, verdicts: bool = False) -> tuple[Path, Path]:
    """The thinking variant (:func:`write_tiny_qwen2vl_text` with ``thinking``) with
    :data:`THINKING_CHAT_TEMPLATE` and the tiny projector, in ``directory``; ``verdicts``: the
    model answers ``A`` / ``B`` after its reasoning. Returns the model and projector paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = "tiny-thinking-verdicts.gguf" if verdicts else "tiny-thinking.gguf"
    model = write_tiny_qwen2vl_text(directory / name, seed, chat_template=THINKING_CHAT_TEMPLATE, thinking=True, verdicts=verdicts)
    mmproj = write_tiny_qwen25vl_projector(directory / "tiny-thinking-mmproj.gguf", seed)
    return model, mmproj
