"""A tiny random-weight LLaVA-1.5 in GGUF form, for tests that run llama.cpp's real multimodal path.

:func:`build_tiny_llava_gguf` writes, with the ``gguf`` package alone (no torch, no download), in a
few hundredths of a second:

* a LLaMA text model (2 layers, width 64) with a SentencePiece-style ("llama") tokenizer: ``<unk>``,
  ``<s>``, ``</s>``, 256 byte-fallback tokens, ``"▁"``, every printable ASCII character (so the
  digits ``0``-``9`` and ``.`` are single tokens and no token holds two digits) and some words
  (``▁USER``, ``▁ASSISTANT``, ``▁caption``, ...) with all their prefixes, so merges work;
* a CLIP vision tower with the LLaVA-1.5 two-layer MLP projector (``mm.0``, ``mm.2``) whose output
  width matches the text model (or not, on request, to test the mismatch error).

The weights are random (seeded, so files are identical for equal seeds) with one planted
structure: a "state" subspace of the token embeddings that the output matrix reads as a bigram
table, so that greedy decoding after ``ASSISTANT:`` prints a FLEUR-style score, ``"0.d"``, then
``</s>``. At the step after ``"."`` the ten digits are the ten most likely tokens, with
probabilities that depend (through the random attention) on the image and the caption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "TINY_WORDS",
    "add_clip_vision_keys",
    "add_text_dims",
    "add_text_ffn",
    "add_vision_block",
    "build_tiny_llava_gguf",
    "finish_gguf",
    "masked_linear",
    "plant_bigram",
    "spiece_vocab",
    "write_tiny_clip_projector",
    "write_tiny_llama",
]

SPIECE_SPACE = "\u2581"

# Whole words of the judge prompts (LLaVA chat format and FLEUR/VisCE2 templates) as tokens.
TINY_WORDS: tuple[str, ...] = (
    "USER", "ASSISTANT", "A", "chat", "between", "curious", "human", "and", "an", "artificial",
    "intelligence", "assistant", "The", "gives", "helpful", "detailed", "polite", "answers", "to",
    "the", "questions", "Your", "task", "is", "evaluate", "rate", "caption", "on", "scale", "of",
    "based", "given", "Grading", "Criteria", "Caption", "Score", "image", "a", "dog", "cat", "on",
    "grass", "red", "car", "street", "Why", "Tell", "me", "reason", "rating", "candidate", "Which",
    "better", "describes", "picture",
)

_N_EMBD = 64
_N_HEAD = 4
_N_LAYER = 2
_N_FF = 96


def spiece_vocab(specials: list[str], special_types: list[int], pieces: Iterable[str]) -> tuple[list[str], list[int]]:
    """Tokens and token types of a tiny SentencePiece-style vocabulary.

    ``specials`` (with their ``gguf.TokenType`` values) come first, then the 256 byte-fallback
    tokens, ``"▁"`` and every printable ASCII character, then every prefix (of two characters or
    more) of each of ``pieces`` not already there, so that merges can build each piece.
    """
    tokens = list(specials)
    types = list(special_types)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256  # BYTE
    singles = [SPIECE_SPACE] + [chr(c) for c in range(33, 127)]
    tokens += singles
    types += [1] * len(singles)  # NORMAL
    seen = set(tokens)
    for piece in pieces:
        for k in range(2, len(piece) + 1):
            if piece[:k] not in seen:
                seen.add(piece[:k])
                tokens.append(piece[:k])
                types.append(1)
    return tokens, types


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the tiny SentencePiece-style vocabulary."""
    # gguf.TokenType: UNKNOWN, CONTROL, CONTROL
    tokens, types = spiece_vocab(["<unk>", "<s>", "</s>"], [2, 3, 3], (SPIECE_SPACE + word for word in TINY_WORDS))
    # SentencePiece merges the adjacent pair whose merged token scores highest: longer is better.
    scores = [0.0] * 3 + [0.0] * 256 + [float(len(t)) if ty == 1 else 0.0 for t, ty in zip(tokens[259:], types[259:], strict=True)]
    return tokens, scores, types


def plant_bigram(
    rng: np.random.Generator,
    tokens: list[str],
    width: int,
    states: list[list[str]],
    nexts: list[list[str]],
    weaker: dict[tuple[int, str], float] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Random token embeddings and output matrix with a planted bigram table.

    The first ``len(states) + 1`` dimensions form a "state" subspace: every token of
    ``states[k]`` has 4.0 in dimension ``k`` and the output matrix reads dimension ``k`` as a
    preference (2.0, or ``weaker[(k, token)]``) for the tokens of ``nexts[k]``; the last state
    dimension is "none". Layers that neither read nor write these dimensions keep the table, so
    greedy decoding follows it. Returns ``(embeddings, output, n_state_dims)``.
    """
    s = len(states) + 1
    index = {t: i for i, t in enumerate(tokens)}
    emb = rng.normal(0.0, 0.3, (len(tokens), width)).astype(np.float32)
    emb[:, :s] = 0.0
    for st, members in enumerate(states):
        for tok in members:
            emb[index[tok], st] = 4.0
    out = rng.normal(0.0, 0.4, (len(tokens), width)).astype(np.float32)
    out[:, :s] = 0.0
    for st, following in enumerate(nexts):
        for tok in following:
            out[index[tok], st] = 2.0
    for (st, tok), value in (weaker or {}).items():
        out[index[tok], st] = value
    return emb, out, s


def masked_linear(rng: np.random.Generator, n_out: int, n_in: int, scale: float, s: int) -> np.ndarray:
    """A random ``(n_out, n_in)`` f32 matrix that does not read the first ``s`` (state) dimensions."""
    m = rng.normal(0.0, scale, (n_out, n_in)).astype(np.float32)
    m[:, :s] = 0.0
    return m


def add_text_dims(w: Any, d: int = _N_EMBD, n_layer: int = _N_LAYER, n_ff: int = _N_FF, n_head: int = _N_HEAD) -> None:
    """Add a tiny text model's context length (4096), width, depth, feed-forward width and heads."""
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)


def add_text_ffn(w: Any, rng: np.random.Generator, b: int, s: int, d: int = _N_EMBD, n_ff: int = _N_FF) -> None:
    """Add block ``b``'s norm and SiLU-gated feed-forward, which neither read nor write the ``s``
    state dimensions of :func:`plant_bigram`."""
    w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(d, np.float32))
    w.add_tensor(f"blk.{b}.ffn_gate.weight", masked_linear(rng, n_ff, d, 0.125, s))
    w.add_tensor(f"blk.{b}.ffn_up.weight", masked_linear(rng, n_ff, d, 0.125, s))
    down = rng.normal(0.0, 0.05, (d, n_ff)).astype(np.float32)
    down[:s, :] = 0.0
    w.add_tensor(f"blk.{b}.ffn_down.weight", down)


def add_clip_vision_keys(
    w: Any, projector_type: str, *, image_size: int, patch: int, width: int, ff: int, text_width: int, n_head: int, eps: float, n_layer: int
) -> None:
    """Add the ``clip.projector_type`` and ``clip.vision.*`` sizes that every tiny projector has."""
    w.add_string("clip.projector_type", projector_type)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.embedding_length", width)
    w.add_uint32("clip.vision.feed_forward_length", ff)
    w.add_uint32("clip.vision.projection_dim", text_width)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", eps)
    w.add_uint32("clip.vision.block_count", n_layer)


def add_vision_block(
    w: Any, r: Callable[..., np.ndarray], b: int, e: int, ff: int, *, norm_bias: bool = True, gated: bool = False
) -> None:
    """Add vision block ``b``: attention (weights from ``r(rows, cols)``, zero biases), the two
    norms (with zero biases if ``norm_bias``) and the feed-forward (with a gate if ``gated``)."""
    for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
        w.add_tensor(f"v.blk.{b}.{name}.weight", r(e, e))
        w.add_tensor(f"v.blk.{b}.{name}.bias", np.zeros(e, np.float32))
    for name in ("ln1", "ln2"):
        w.add_tensor(f"v.blk.{b}.{name}.weight", np.ones(e, np.float32))
        if norm_bias:
            w.add_tensor(f"v.blk.{b}.{name}.bias", np.zeros(e, np.float32))
    for name in ("ffn_gate", "ffn_up") if gated else ("ffn_up",):
        w.add_tensor(f"v.blk.{b}.{name}.weight", r(ff, e))
        w.add_tensor(f"v.blk.{b}.{name}.bias", np.zeros(ff, np.float32))
    w.add_tensor(f"v.blk.{b}.ffn_down.weight", r(e, ff))
    w.add_tensor(f"v.blk.{b}.ffn_down.bias", np.zeros(e, np.float32))


def write_tiny_llama(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny LLaMA text model (weights in f32) to ``path``; returns the path."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    n_vocab, d = len(tokens), _N_EMBD
    # after ":", "▁", "0", ".", a digit, then "</s>" (the answer "0.d" of a FLEUR prompt)
    emb, out, s = plant_bigram(
        rng, tokens, d,
        states=[[":"], [SPIECE_SPACE], ["0"], ["."], list("123456789")],
        nexts=[[SPIECE_SPACE], ["0"], ["."], list("0123456789"), ["</s>"]],
        weaker={(3, "0"): 1.7},  # after ".", a first decimal of 0 is less likely (it would print "0.0.")
    )

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("capjudge-tiny-llava")
    add_text_dims(w)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(d // _N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)  # all f32
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)

    w.add_tensor("token_embd.weight", emb)
    for b in range(_N_LAYER):
        # layers neither read the planted states (masked_linear)...
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{b}.attn_q.weight", masked_linear(rng, d, d, 0.5, s))
        w.add_tensor(f"blk.{b}.attn_k.weight", masked_linear(rng, d, d, 0.5, s))
        w.add_tensor(f"blk.{b}.attn_v.weight", masked_linear(rng, d, d, 0.125, s))
        o = masked_linear(rng, d, d, 0.03, s)
        o[:s, :] = 0.0  # ...nor write into them, so the bigram table survives the residual stream
        w.add_tensor(f"blk.{b}.attn_output.weight", o)
        add_text_ffn(w, rng, b, s)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", out)
    finish_gguf(w)
    return Path(path)


def write_tiny_clip_projector(path: str | Path, seed: int = 0, *, text_width: int = _N_EMBD, image_size: int = 56) -> Path:
    """Write a tiny CLIP vision tower with a LLaVA-1.5 MLP projector to ``path``.

    ``text_width`` is the projector's output width: it must equal the text model's embedding size
    (64 for :func:`write_tiny_llama`); another value makes a mismatched pair for error tests.
    ``image_size`` / 14 squared is the number of image tokens (16 by default; LLaVA-1.5 has 576).
    """
    import gguf

    rng = np.random.default_rng(seed + 1)
    e, ff, p, n_layer, n_head = 32, 48, 14, 2, 4  # ff != e: clip.cpp swaps up/down when they match
    n_pos = (image_size // p) ** 2 + 1

    def r(*shape: int, scale: float = 0.1) -> np.ndarray:
        return rng.normal(0.0, scale, shape).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("capjudge-tiny-llava-mmproj")
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_llava_projector", True)
    add_clip_vision_keys(
        w, "mlp", image_size=image_size, patch=p, width=e, ff=ff, text_width=text_width, n_head=n_head, eps=1e-5, n_layer=n_layer
    )
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
    w.add_bool("clip.use_gelu", False)
    w.add_uint32("general.file_type", 1)

    w.add_tensor("v.patch_embd.weight", r(e, 3, p, p, scale=0.05).astype(np.float16))
    w.add_tensor("v.class_embd", r(e))
    w.add_tensor("v.position_embd.weight", r(n_pos, e))
    w.add_tensor("v.pre_ln.weight", np.ones(e, np.float32))
    w.add_tensor("v.pre_ln.bias", np.zeros(e, np.float32))
    for b in range(n_layer):
        add_vision_block(w, r, b, e, ff)
    w.add_tensor("mm.0.weight", r(text_width, e, scale=0.3))
    w.add_tensor("mm.0.bias", np.zeros(text_width, np.float32))
    w.add_tensor("mm.2.weight", r(text_width, text_width, scale=0.3))
    w.add_tensor("mm.2.bias", np.zeros(text_width, np.float32))
    finish_gguf(w)
    return Path(path)


def finish_gguf(w: object) -> None:
    """Write a ``gguf.GGUFWriter``'s header, metadata and tensors, and close it."""
    w.write_header_to_file()  # type: ignore[attr-defined]
    w.write_kv_data_to_file()  # type: ignore[attr-defined]
    w.write_tensors_to_file()  # type: ignore[attr-defined]
    w.close()  # type: ignore[attr-defined]


def build_tiny_llava_gguf(directory: str | Path, seed: int = 0, *, projector_width: int | None = None) -> tuple[Path, Path]:
    """Write ``tiny-llava.gguf`` and ``tiny-llava-mmproj.gguf`` into ``directory``.

    Deterministic for a given ``seed``. ``projector_width`` (default: the text model's width, 64)
    sets the projector's output width; any other value gives a projector that does not match.
    Returns ``(model_path, mmproj_path)``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = write_tiny_llama(directory / "tiny-llava.gguf", seed)
    width = _N_EMBD if projector_width is None else projector_width
    name = "tiny-llava-mmproj.gguf" if width == _N_EMBD else f"tiny-llava-mmproj-w{width}.gguf"
    mmproj = write_tiny_clip_projector(directory / name, seed, text_width=width)
    return model, mmproj
