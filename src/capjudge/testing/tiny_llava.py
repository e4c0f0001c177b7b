"""A tiny LLaVA-1.5-architecture model in HF format, built offline in seconds.

It has the real shapes that matter to the pipeline (CLIP tower at 336 px / patch 14, so 576 image
tokens; a Llama text model; a tokenizer in which 0-9 are single tokens; the ``<image>`` token; the
LLaVA-1.5 chat template) and small random weights, plus a few hand-set weights that make it behave
like a (meaningless) judge, so that every code path runs on it:

* after ``:`` (the end of ``ASSISTANT:``) it answers ``0``, then ``.``, then decimal digits, then
  stops: a FLEUR-style ``0.xy`` answer whose digits and length depend on the image and caption;
* when the prompt contains the word ``xyzzy`` (one attention head looks for it), it answers
  ``xyzzy`` instead: an answer with no number in it;
* when the prompt contains the word ``Answer`` (the pairwise prompt), it answers ``A`` or ``B``.

Its scores mean nothing. It is for tests, the offline demo and speed benchmarks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'][0]['text'] if message['content'] is not string else message['content'] }} "
    "{% elif message['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}"
    "{% if message['role'] != 'system' %}{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>\n{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'user' %} {% else %}</s>{% endif %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

TRIGGER_WORD = "xyzzy"
PAIR_WORD = "Answer"

_WORDS = ["a", "an", "the", "two", "three", "several", "many", "dog", "dogs", "cat", "cats", "man", "woman", "child", "children", "boy", "girl", "people", "person", "bird", "horse", "car", "bus", "train", "bike", "bicycle", "boat", "plane", "street", "road", "beach", "water", "grass", "field", "park", "snow", "tree", "trees", "table", "kitchen", "room", "bed", "sofa", "ball", "frisbee", "food", "pizza", "plate", "shirt", "hat", "jacket", "red", "blue", "green", "yellow", "white", "black", "brown", "orange", "pink", "gray", "small", "large", "big", "young", "old", "is", "are", "sitting", "standing", "running", "walking", "jumping", "playing", "riding", "holding", "eating", "looking", "wearing", "lying", "on", "in", "at", "with", "near", "next", "to", "of", "and", "behind", "front", "under", "over", "while", "its", "their", "his", "her", "image", "caption", "photo", "picture", "scene"]


def _corpus(seed: int) -> list[str]:
    """Training text for the tokenizer: the packaged prompts and caption-like sentences."""
    from importlib import resources

    texts = []
    tdir = resources.files("capjudge.prompts").joinpath("templates")
    for p in tdir.iterdir():
        if p.name.endswith(".j2"):
            texts.append(p.read_text(encoding="utf-8"))
    texts.append("A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the human's questions. USER: ASSISTANT:")
    rng = random.Random(seed)
    for _ in range(400):
        n = rng.randint(5, 12)
        texts.append(" ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + ".")
    texts.append(" ".join(str(i) for i in range(100)) + " 0.85 1.0 0.0 [[A]] Answer 1 Answer 2 Tie")
    return texts


def build_tokenizer(
    seed: int = 0,
    vocab_size: int = 600,
    *,
    extra_special_tokens: Sequence[str] = (),
    extra_words: Sequence[str] = (),
    eos_token: str = "</s>",
    add_bos: bool = True,
    named_tokens: Mapping[str, str] | None = None,
):
    """A BPE tokenizer (SentencePiece-style ``▁`` spaces, digits and punctuation split one by one)
    wrapped as a ``PreTrainedTokenizerFast`` with ``<s>``, ``</s>``, ``<unk>``, ``<pad>``,
    ``<image>``, the trigger word and ``Answer`` as single tokens; pads on the left.

    The keyword arguments serve other model families (:mod:`capjudge.testing.tiny_vlm`): more
    special tokens (``<|im_start|>``...) and plain words kept whole, another end-of-sequence token,
    no ``<s>`` added in front (Qwen-style), and named special tokens that processors read as
    tokenizer attributes (``{"boi_token": "<start_of_image>"}``). The defaults give the tokenizer
    of the tiny LLaVA unchanged."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    alphabet = sorted(set("".join(_corpus(seed))) | set("0123456789.:▁"))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
    tok.add_tokens([AddedToken(TRIGGER_WORD, normalized=False), AddedToken(PAIR_WORD, normalized=False)])
    extra = [t for t in dict.fromkeys([eos_token, *extra_special_tokens, *(named_tokens or {}).values()]) if tok.token_to_id(t) is None]
    if extra:
        tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in extra])
    if extra_words:
        tok.add_tokens([AddedToken(w, normalized=False) for w in extra_words])
    bos = tok.token_to_id("<s>")
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    kwargs: dict[str, Any] = {"extra_special_tokens": dict(named_tokens)} if named_tokens else {}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token=eos_token,
        unk_token="<unk>",
        pad_token="<pad>",
        padding_side="left",
        model_max_length=4096,
        **kwargs,
    )
    return fast


def build_tiny_llava(
    directory: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    vision_hidden_size: int = 32,
    vision_layers: int = 2,
    image_size: int = 336,
    patch_size: int = 14,
    vocab_size: int = 600,
    judge_like: bool = True,
    strengthen: bool | None = None,
) -> Path:
    """Write a tiny random LLaVA-1.5 model and its processor to ``directory`` and return the path.

    Load it with ``LlavaForConditionalGeneration.from_pretrained`` / ``AutoProcessor`` or through
    ``capjudge.load_backend("hf:<directory>")``. ``judge_like`` sets the few weights that make it
    answer ``0.xy`` (or ``xyzzy`` when the prompt contains that word); without it, all weights
    are random. Larger sizes (e.g. ``hidden_size=512, num_layers=8``) are for benchmarks; a larger
    ``vocab_size`` (e.g. 2000) merges more of the prompt's words, giving prompt lengths close to
    LLaVA's own tokenizer (the default 600 is for fast tests).

    At other sizes than the defaults the random weights drown the hand-set ones, so ``strengthen``
    (default: on unless hidden 64, 2 layers and vocabulary 600, the model the tests were written
    against) applies :func:`strengthen_judge_signal`; checked to give ``0.x`` answers from hidden 64
    to 768 and 2 to 12 layers.
    """
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed, vocab_size)
    vocab = len(tokenizer)
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    head_dim = hidden_size // num_heads
    text_config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    vision_config = CLIPVisionConfig(
        image_size=image_size,
        patch_size=patch_size,
        hidden_size=vision_hidden_size,
        intermediate_size=2 * vision_hidden_size,
        num_hidden_layers=vision_layers,
        num_attention_heads=2,
        projection_dim=vision_hidden_size,
    )
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=text_config,
        image_token_index=image_token_id,
        image_seq_length=(image_size // patch_size) ** 2,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    if judge_like:
        _make_judge_like(model, tokenizer, head_dim, seed)
        if strengthen or (strengthen is None and (hidden_size, num_layers, vocab_size) != (64, 2, 600)):
            strengthen_judge_signal(model, tokenizer)
    model.save_pretrained(out, safe_serialization=True)

    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
        do_resize=True,
        do_center_crop=True,
        do_normalize=True,
        do_rescale=True,
        do_convert_rgb=True,
        image_mean=list(OPENAI_CLIP_MEAN),
        image_std=list(OPENAI_CLIP_STD),
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    (out / "CAPJUDGE_TINY_MODEL.txt").write_text(
        "Random-weight test model written by capjudge.testing.tiny_llava. Its scores are meaningless.\n",
        encoding="utf-8",
    )
    return out


def strengthen_judge_signal(model, tokenizer, *, layer_scale: float = 0.1, mood_scale: float = 0.04, eos_boost: float = 0.3) -> None:
    """Make the hand-set judge behaviour hold at any size (after :func:`_make_judge_like`).

    With more or wider random layers, their residual writes and the output head's random columns
    drown the few hand-set dimensions and answers run to ``max_new_tokens``. This scales the random
    layers' residual writes down (every layer still computes: the cost per token is unchanged),
    lets the output head read only the hand-set dimensions, scales the caption/image "mood" down
    and makes the end of sequence after a decimal a little likelier. Only the answers change:
    ``0.x[y]`` like FLEUR's, ``xyzzy`` on the trigger word.
    """
    import torch

    lm = model.model.language_model
    heads = lm.config.num_attention_heads
    hd = lm.config.hidden_size // heads
    with torch.no_grad():
        emb = lm.embed_tokens.weight
        n_tok = len(tokenizer)
        special = ((emb[:n_tok] == 0) | (emb[:n_tok] == 1)).all(0)  # the hand-set dimensions
        for i, layer in enumerate(lm.layers):
            layer.mlp.down_proj.weight.mul_(layer_scale)
            o = layer.self_attn.o_proj.weight
            if i == 0:  # the first 4 heads of layer 0 are hand-set
                o[:, 4 * hd :].mul_(layer_scale)
                mood = (o[:, hd : hd + 4] != 0).any(1)
                o[mood, :] *= mood_scale
            else:
                o.mul_(layer_scale)
        model.lm_head.weight[:, ~special] = 0.0
        five = tokenizer.convert_tokens_to_ids("5")
        cols = [j for j in special.nonzero().flatten().tolist() if emb[five, j] == 1 and not bool((emb[:n_tok, j] == 1).all())]
        model.lm_head.weight[tokenizer.eos_token_id, cols] += eos_boost


def token_lookup(tokenizer: Any) -> Callable[[str], int]:
    """A function from a token of the tiny tokenizer to its id; it raises ``RuntimeError`` for a
    token the tokenizer lacks (which it would otherwise map to ``<unk>``)."""

    def tid(t: str) -> int:
        i = tokenizer.convert_tokens_to_ids(t)
        if i is None or i == tokenizer.unk_token_id:
            raise RuntimeError(f"tiny tokenizer lacks token {t!r}")
        return int(i)

    return tid


def seeded_randn(gen: Any) -> Callable[..., Any]:
    """``randn(*shape, std=1.0)``: a normal tensor of ``shape`` times ``std``, drawn from the
    ``torch.Generator`` ``gen``."""
    import torch

    def randn(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    return randn


def _make_judge_like(model, tokenizer, head_dim: int, seed: int) -> None:
    """Hand-set a few weights so that greedy answers look like FLEUR answers (see module doc).

    Reserved residual dimensions carry the state of the current token (":", "0", ".", digit,
    trigger, a constant) and a small "mood" vector that three layer-0 heads write: head 0 copies a
    "no number" flag from the trigger word, head 1 averages the last ~30 tokens (the caption), head 2
    averages everything (the image). The mood decides which digits the model prints.
    """
    import torch

    lm = model.model.language_model
    head = model.lm_head
    emb = lm.embed_tokens.weight
    h = emb.shape[1]
    n_mood = 4
    colon, zero, dot, digit, stop, trig, nflag, bias, img, ansk, pair = (h - 1 - i for i in range(11))
    mood = [h - 12 - i for i in range(n_mood)]
    reserved = [colon, zero, dot, digit, stop, trig, nflag, bias, img, ansk, pair, *mood]
    free = [i for i in range(h) if i not in reserved]
    gen = torch.Generator().manual_seed(seed + 1)

    tid, randn = token_lookup(tokenizer), seeded_randn(gen)

    ids_digits = [tid(str(d)) for d in range(10)]
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        emb.normal_(0.0, 0.02, generator=gen)
        emb[:, reserved] = 0.0
        emb[:, bias] = 1.0
        emb[tid(":"), colon] = 1.0
        emb[ids_digits[0], zero] = 1.0
        emb[tid("."), dot] = 1.0
        for i in ids_digits[1:]:
            emb[i, digit] = 1.0
        emb[tid(TRIGGER_WORD), trig] = 1.0
        emb[tid(TRIGGER_WORD), stop] = 1.0
        emb[tid(PAIR_WORD), ansk] = 1.0
        verdicts = [tid("A"), tid("B")]
        emb[verdicts, stop] = 1.0

        w = head.weight
        w.normal_(0.0, 0.4, generator=gen)
        w[:, reserved] = 0.0
        w[ids_digits[0], colon] = 1.8  # ":" -> "0"
        w[tid("."), zero] = 1.5  # "0" -> "."
        for i in ids_digits[1:]:
            w[i, dot] = 1.0  # "." -> a decimal digit (the mood decides which)
            w[i, digit] = 1.0  # digit -> another digit ...
        w[ids_digits[0], dot] = 0.8
        w[ids_digits[0], digit] = 0.8
        w[eos, digit] = 1.05  # ... or the end of the answer
        w[eos, stop] = 2.5  # "xyzzy", "A", "B" -> end
        w[tid(TRIGGER_WORD), nflag] = 3.0
        for i in [*ids_digits, eos]:
            w[i, mood] = randn(n_mood, std=0.5)
        for i in verdicts:  # pairwise prompts: ":" -> "A" or "B" (the mood decides), then the end
            w[i, pair] = 3.0
            w[i, mood] = randn(n_mood, std=0.3)

        for layer in lm.layers:  # random layers stay out of the reserved dimensions
            layer.self_attn.o_proj.weight[reserved, :] = 0.0
            layer.mlp.down_proj.weight[reserved, :] = 0.0

        attn = lm.layers[0].self_attn
        hd = head_dim
        n_heads = attn.q_proj.weight.shape[0] // hd
        designed = min(4, n_heads) * hd
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            proj.weight[:designed, :] = 0.0
        attn.o_proj.weight[:, :designed] = 0.0
        # Head 0: the last ":" attends to the trigger word, if any, and copies a "no number" flag.
        # Dimension hd/2 - 1 has the lowest RoPE frequency: the match barely depends on distance.
        low = hd // 2 - 1
        attn.q_proj.weight[low, colon] = 1.6
        attn.k_proj.weight[low, trig] = 1.6
        attn.v_proj.weight[0, trig] = 1.0
        attn.o_proj.weight[nflag, 0] = 0.55
        # Head 1: constant queries and keys on a slow RoPE pair give a Gaussian window over the last
        # ~30 tokens (cos of the distance times the frequency); it averages a random projection of
        # their embeddings (the caption's words) into the mood.
        theta = float(getattr(model.config.text_config, "rope_parameters", {}).get("rope_theta", 10000.0)) if isinstance(getattr(model.config.text_config, "rope_parameters", None), dict) else 10000.0
        freqs = [theta ** (-2 * j / hd) for j in range(hd // 2)]
        j = min(range(hd // 2), key=lambda k: abs(freqs[k] - 0.005))
        sigma = 12.0
        amp = (hd**0.5 / (sigma * freqs[j]) ** 2) ** 0.5 / (h**0.5)  # |q||k|/sqrt(hd) = 1/(sigma*f)^2
        attn.q_proj.weight[hd + j, bias] = amp
        attn.k_proj.weight[hd + j, bias] = amp
        attn.v_proj.weight[hd : hd + n_mood, free] = randn(n_mood, len(free), std=1.5)
        attn.o_proj.weight[mood, hd : hd + n_mood] = torch.eye(n_mood)
        # Head 2: uniform attention (zero queries) over everything; reads the image dimension.
        attn.v_proj.weight[2 * hd : 2 * hd + n_mood, img] = randn(n_mood, std=1.0)
        attn.o_proj.weight[mood, 2 * hd : 2 * hd + n_mood] = torch.eye(n_mood) * 0.6
        # Head 3 (like head 0): a prompt that contains "Answer" (the pairwise prompt) sets a flag.
        if n_heads >= 4:
            attn.q_proj.weight[3 * hd + low, colon] = 1.6
            attn.k_proj.weight[3 * hd + low, ansk] = 1.6
            attn.v_proj.weight[3 * hd, ansk] = 1.0
            attn.o_proj.weight[pair, 3 * hd] = 0.55

        proj = model.model.multi_modal_projector
        proj.linear_2.weight.mul_(0.5)
        proj.linear_2.weight[reserved, :] = 0.0
        proj.linear_2.bias[reserved] = 0.0
        proj.linear_2.bias[bias] = 1.0
        proj.linear_2.weight[img, :] = randn(proj.linear_2.weight.shape[1], std=0.5)


def _main() -> None:  # pragma: no cover - manual use
    import sys

    path = build_tiny_llava(sys.argv[1] if len(sys.argv) > 1 else "tiny-llava")
    print(path)


if __name__ == "__main__":  # pragma: no cover
    _main()
