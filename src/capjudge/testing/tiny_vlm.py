"""Tiny random-weight vision-language models of many architectures, built offline in seconds.

One registry entry per architecture (:data:`ARCHITECTURES`): LLaVA-1.5, LLaVA-NeXT,
LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3, Idefics3 (SmolVLM), InternVL, Mistral 3
(Pixtral vision) and PaliGemma. Each entry says as data what differs: the HF config and processor
classes with their (tiny) settings, the family's special tokens and chat template, its
end-of-turn token. What is shared is built once: the tokenizer of :mod:`capjudge.testing.tiny_llava`
(digits split one by one, as in LLaMA-2, Qwen and Gemma) and a few hand-set weights that make any of
these models answer like a judge, so that every method of capjudge gets parsable answers:

* at the end of the prompt it answers ``0``, then ``.``, then decimal digits, then stops: a
  FLEUR-style ``0.xy`` whose digits depend on the image and the caption (an attention head of
  the first layer averages everything before it into a small "mood" that biases the digits);
* when the prompt contains ``Answer`` (the pairwise prompts) it answers ``A`` or ``B``;
* when the prompt contains ``numbering`` (the listwise prompt) it answers comma-separated scores
  ``0.x,0.y,...`` until its token budget ends, so every caption of the list gets a score.

The hand-set weights work on every decoder here because they only use the parts all of them
share: reserved residual dimensions that the token embeddings set and that no random layer
writes to (rows of ``o_proj`` / ``down_proj`` and of the vision projector zeroed; RMS norms keep
zeros zero), one designed attention head in the first layer (query and key norms of Qwen3 and
Gemma 3 are set so that the head still looks the same way), and the output head. Their scores mean
nothing. They are for tests and benchmarks.

Use :func:`build_tiny_vlm` (``build_tiny_vlm("qwen2_5_vl", folder)``); load the folder with
``AutoProcessor`` / ``AutoModelForImageTextToText`` or ``capjudge.load_backend("hf:<folder>")``.
Architectures whose processor includes a video processor (Qwen2/2.5/3-VL, LLaVA-OneVision, InternVL)
or is Pixtral's need torchvision to build and to load (:func:`needs_torchvision`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.testing.tiny_llava import (
    LLAVA_CHAT_TEMPLATE,
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    PAIR_WORD,
    build_tokenizer,
    seeded_randn,
    token_lookup,
)

LIST_WORD = "numbering"
"""A word of the listwise prompt only: when the prompt holds it, the model answers a list."""

TEXT = {"hidden": 64, "layers": 2, "heads": 4, "intermediate": 128}
"""Sizes of every tiny text decoder (head dimension 16)."""

VISION = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 48}
"""Sizes of every tiny vision tower (kept unlike the text width, see :func:`_judge_like`)."""


# ------------------------------------------------------------------ chat templates of the families
def _content_loop(image: str, text: str = "{{ item['text'] }}") -> str:
    """Jinja for a message's content: a string, or a list of image / text items."""
    return (
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
        "{% for item in message['content'] %}{% if item['type'] == 'image' %}" + image
        + "{% elif item['type'] == 'text' %}" + text + "{% endif %}{% endfor %}{% endif %}"
    )


CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    + _content_loop("<image>\n")
    + "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML as LLaVA-OneVision's (Qwen2) template writes it: ``<|im_start|>user <image>\\n...``."""

QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    + _content_loop("<|vision_start|><|image_pad|><|vision_end|>")
    + "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ChatML with the image between vision start and end tokens."""

INTERNVL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    + _content_loop("<IMG_CONTEXT>\n")
    + "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""InternVL (2.5/3 on a Qwen2 decoder): ChatML, ``<IMG_CONTEXT>`` that the processor expands to
``<img>`` + image tokens + ``</img>``."""

GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% set sys = '' %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set sys = (message['content'] if message['content'] is string else message['content'][0]['text']) + '\n\n' %}"
    "{% else %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
    "{% if message['role'] == 'user' %}{{ sys }}{% set sys = '' %}{% endif %}"
    + _content_loop("<start_of_image>")
    + "<end_of_turn>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""Gemma 3: ``<start_of_turn>user`` / ``model`` turns, the system text folded into the first user turn."""

IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is not string and message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    + _content_loop("<image>")
    + "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""Idefics3 / SmolVLM: ``User:<image>...<end_of_utterance>\\nAssistant:``."""

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}[SYSTEM_PROMPT]{{ message['content'] if message['content'] is string else message['content'][0]['text'] }}[/SYSTEM_PROMPT]"
    "{% elif message['role'] == 'user' %}[INST]" + _content_loop("[IMG]") + "[/INST]"
    "{% else %}" + _content_loop("") + "{{ eos_token }}{% endif %}{% endfor %}"
)
"""Mistral-Small-3.1 (Mistral 3 / Pixtral vision): ``<s>[INST][IMG]...[/INST]answer</s>``."""

LLAVA_NEXT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ message['content'] if message['content'] is string else message['content'][0]['text'] }}\n"
    "{% elif message['role'] == 'user' %}[INST] " + _content_loop("<image>\n") + " [/INST]"
    "{% else %} " + _content_loop("") + "{{ eos_token }}{% endif %}{% endfor %}"
)
"""llava-v1.6-mistral: ``[INST] <image>\\n... [/INST]``."""

PALIGEMMA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    + _content_loop("<image>")
    + "{% if not loop.last %}\n{% endif %}{% endif %}{% endfor %}"
)
"""PaliGemma has no chat format: ``<image>`` then the text; its processor puts ``<bos>`` after the
image tokens and ``\\n`` at the end (a multi-turn conversation is joined by new lines)."""


# ------------------------------------------------------------------ registry
@dataclass(frozen=True)
class TinyArch:
    """What one architecture needs (everything else is shared)."""

    name: str
    """Registry key (the HF ``model_type``)."""
    title: str
    """Family name for people (tables, test ids)."""
    model_class: str
    """``transformers`` class of the model."""
    make: Callable[[Any, int], tuple[Any, Any]]
    """``make(tokenizer, seed) -> (config, processor)``."""
    chat_template: str
    eos_token: str = "</s>"
    add_bos: bool = True
    special_tokens: tuple[str, ...] = ()
    named_tokens: Mapping[str, str] = field(default_factory=dict)
    needs_torchvision: bool = False
    chat_format: str = "template"
    """The capjudge HF backend's ``chat_format`` that gives this family's own prompt."""


def _ids(tok: Any, *tokens: str) -> list[int]:
    return [int(tok.convert_tokens_to_ids(t)) for t in tokens]


def _text_kwargs(tok: Any, **extra: Any) -> dict[str, Any]:
    """Text-decoder settings shared by every family (Llama-style names)."""
    kw: dict[str, Any] = {
        "vocab_size": len(tok),
        "hidden_size": TEXT["hidden"],
        "intermediate_size": TEXT["intermediate"],
        "num_hidden_layers": TEXT["layers"],
        "num_attention_heads": TEXT["heads"],
        "num_key_value_heads": TEXT["heads"],
        "max_position_embeddings": 4096,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "tie_word_embeddings": False,
    }
    kw.update(extra)
    return kw


def _clip(image_size: int, patch: int) -> Any:
    from transformers import CLIPVisionConfig

    return CLIPVisionConfig(image_size=image_size, patch_size=patch, hidden_size=VISION["hidden"], intermediate_size=VISION["intermediate"], num_hidden_layers=VISION["layers"], num_attention_heads=VISION["heads"], projection_dim=VISION["hidden"])


def _siglip(image_size: int, patch: int) -> Any:
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(image_size=image_size, patch_size=patch, hidden_size=VISION["hidden"], intermediate_size=VISION["intermediate"], num_hidden_layers=VISION["layers"], num_attention_heads=VISION["heads"])


def _make_llava(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlavaConfig, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    size, patch = 112, 14
    config = LlavaConfig(vision_config=_clip(size, patch), text_config=LlamaConfig(**_text_kwargs(tok)), image_token_index=_ids(tok, "<image>")[0], image_seq_length=(size // patch) ** 2, vision_feature_layer=-2, vision_feature_select_strategy="default", tie_word_embeddings=False)
    ip = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size}, image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    proc = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=patch, vision_feature_select_strategy="default", num_additional_image_tokens=1, chat_template=LLAVA_CHAT_TEMPLATE)
    return config, proc


_PINPOINTS = [[56, 112], [112, 56], [112, 112]]


def _make_llava_next(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        LlavaNextConfig,
        LlavaNextImageProcessorPil,
        LlavaNextProcessor,
        MistralConfig,
    )

    size, patch = 56, 14
    config = LlavaNextConfig(vision_config=_clip(size, patch), text_config=MistralConfig(**_text_kwargs(tok, sliding_window=None)), image_token_index=_ids(tok, "<image>")[0], image_grid_pinpoints=_PINPOINTS, vision_feature_layer=-2, vision_feature_select_strategy="default", tie_word_embeddings=False)
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size}, image_grid_pinpoints=_PINPOINTS, image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    proc = LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=patch, vision_feature_select_strategy="default", num_additional_image_tokens=1, chat_template=LLAVA_NEXT_TEMPLATE)
    return config, proc


def _make_llava_onevision(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionImageProcessorPil,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
        Qwen2Config,
    )

    size, patch = 56, 14
    config = LlavaOnevisionConfig(vision_config=_siglip(size, patch), text_config=Qwen2Config(**_text_kwargs(tok)), image_token_index=_ids(tok, "<image>")[0], video_token_index=_ids(tok, "<video>")[0], image_grid_pinpoints=_PINPOINTS, vision_feature_layer=-1, vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9", tie_word_embeddings=False)
    ip = LlavaOnevisionImageProcessorPil(size={"height": size, "width": size}, image_grid_pinpoints=_PINPOINTS, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    vp = LlavaOnevisionVideoProcessor(size={"height": size, "width": size})
    proc = LlavaOnevisionProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, num_image_tokens=(size // patch) ** 2, vision_feature_select_strategy="full", chat_template=CHATML_TEMPLATE)
    return config, proc


def _qwen_image_processor(patch: int) -> Any:
    from transformers import Qwen2VLImageProcessorPil

    px = (2 * patch) ** 2  # one merged token = 2x2 patches
    return Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2, min_pixels=4 * px, max_pixels=16 * px, size={"shortest_edge": 4 * px, "longest_edge": 16 * px})


_QWEN_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def _qwen_ids(tok: Any) -> dict[str, Any]:
    image, video, start, end = _ids(tok, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    return {"image_token_id": image, "video_token_id": video, "vision_start_token_id": start, "vision_end_token_id": end}


def _make_qwen2_vl(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import Qwen2VLConfig, Qwen2VLProcessor, Qwen2VLVideoProcessor

    patch = 14
    text = _text_kwargs(tok, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]})
    vision = {"depth": VISION["layers"], "embed_dim": VISION["hidden"], "hidden_size": TEXT["hidden"], "num_heads": VISION["heads"], "patch_size": patch, "mlp_ratio": 3}
    config = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(tok))
    proc = Qwen2VLProcessor(image_processor=_qwen_image_processor(patch), tokenizer=tok, video_processor=Qwen2VLVideoProcessor(patch_size=patch), chat_template=QWEN_VL_TEMPLATE)
    return config, proc


def _make_qwen2_5_vl(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLVideoProcessor

    patch = 14
    text = _text_kwargs(tok, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]})
    vision = {"depth": VISION["layers"], "hidden_size": VISION["hidden"], "intermediate_size": VISION["intermediate"], "out_hidden_size": TEXT["hidden"], "num_heads": VISION["heads"], "patch_size": patch, "window_size": 56, "fullatt_block_indexes": [VISION["layers"] - 1]}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(tok))
    proc = Qwen2_5_VLProcessor(image_processor=_qwen_image_processor(patch), tokenizer=tok, video_processor=Qwen2VLVideoProcessor(patch_size=patch), chat_template=QWEN_VL_TEMPLATE)
    return config, proc


def _make_qwen3_vl(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import Qwen3VLConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor

    patch = 16
    head_dim = TEXT["hidden"] // TEXT["heads"]
    text = _text_kwargs(tok, head_dim=head_dim, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    for k in ("bos_token_id", "eos_token_id"):
        text.pop(k)
    vision = {"depth": VISION["layers"], "hidden_size": VISION["hidden"], "intermediate_size": VISION["intermediate"], "out_hidden_size": TEXT["hidden"], "num_heads": VISION["heads"], "patch_size": patch, "num_position_embeddings": 64, "deepstack_visual_indexes": [0]}
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(tok))
    proc = Qwen3VLProcessor(image_processor=_qwen_image_processor(patch), tokenizer=tok, video_processor=Qwen3VLVideoProcessor(patch_size=patch), chat_template=QWEN_VL_TEMPLATE)
    return config, proc


def _make_gemma3(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import Gemma3Config, Gemma3ImageProcessorPil, Gemma3Processor

    size, patch, tokens = 64, 8, 16  # 8x8 patches pooled to 4x4 image tokens
    text = _text_kwargs(tok, head_dim=TEXT["hidden"] // TEXT["heads"], query_pre_attn_scalar=TEXT["hidden"] // TEXT["heads"], sliding_window=512, layer_types=["sliding_attention", "full_attention"][: TEXT["layers"]])
    boi, eoi, image = _ids(tok, "<start_of_image>", "<end_of_image>", "<image_soft_token>")
    config = Gemma3Config(text_config=text, vision_config=_siglip(size, patch).to_dict(), mm_tokens_per_image=tokens, boi_token_index=boi, eoi_token_index=eoi, image_token_index=image, tie_word_embeddings=False)
    ip = Gemma3ImageProcessorPil(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    proc = Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=tokens, chat_template=GEMMA3_TEMPLATE)
    return config, proc


def _make_idefics3(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        Idefics3Config,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
        LlamaConfig,
    )

    size, patch, scale = 64, 8, 2  # 8x8 patches, pixel shuffle by 2: 16 image tokens
    vision = {"image_size": size, "patch_size": patch, "hidden_size": VISION["hidden"], "intermediate_size": VISION["intermediate"], "num_hidden_layers": VISION["layers"], "num_attention_heads": VISION["heads"]}
    config = Idefics3Config(vision_config=vision, text_config=LlamaConfig(**_text_kwargs(tok)).to_dict(), image_token_id=_ids(tok, "<image>")[0], scale_factor=scale, tie_word_embeddings=False)
    ip = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": size}, max_image_size={"longest_edge": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=(size // patch) ** 2 // scale**2, chat_template=IDEFICS3_TEMPLATE)
    return config, proc


def _make_internvl(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        GotOcr2ImageProcessorPil,
        InternVLConfig,
        InternVLProcessor,
        InternVLVideoProcessor,
        Qwen2Config,
    )

    size, patch = 56, 14  # 4x4 patches, pixel shuffle 0.5: 4 image tokens
    vision = {"image_size": [size, size], "patch_size": [patch, patch], "hidden_size": VISION["hidden"], "intermediate_size": VISION["intermediate"], "num_hidden_layers": VISION["layers"], "num_attention_heads": VISION["heads"]}
    config = InternVLConfig(vision_config=vision, text_config=Qwen2Config(**_text_kwargs(tok)).to_dict(), image_token_id=_ids(tok, "<IMG_CONTEXT>")[0], image_seq_length=(size // patch) ** 2 // 4, downsample_ratio=0.5, tie_word_embeddings=False)
    ip = GotOcr2ImageProcessorPil(size={"height": size, "width": size}, crop_to_patches=False, image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    vp = InternVLVideoProcessor(size={"height": size, "width": size})
    proc = InternVLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, image_seq_length=(size // patch) ** 2 // 4, chat_template=INTERNVL_TEMPLATE)
    return config, proc


def _make_mistral3(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        Mistral3Config,
        MistralConfig,
        PixtralImageProcessorPil,
        PixtralProcessor,
    )

    size, patch = 64, 8  # up to 8x8 patches, merged 2x2
    vision = {"model_type": "pixtral", "image_size": size, "patch_size": patch, "hidden_size": VISION["hidden"], "intermediate_size": VISION["intermediate"], "num_hidden_layers": VISION["layers"], "num_attention_heads": VISION["heads"], "head_dim": VISION["hidden"] // VISION["heads"]}
    config = Mistral3Config(vision_config=vision, text_config=MistralConfig(**_text_kwargs(tok, sliding_window=None)).to_dict(), image_token_index=_ids(tok, "[IMG]")[0], spatial_merge_size=2, tie_word_embeddings=False)
    ip = PixtralImageProcessorPil(size={"longest_edge": size}, patch_size=patch, image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    proc = PixtralProcessor(image_processor=ip, tokenizer=tok, patch_size=patch, spatial_merge_size=2, chat_template=MISTRAL_TEMPLATE)
    return config, proc


def _make_paligemma(tok: Any, seed: int) -> tuple[Any, Any]:
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaProcessor,
        SiglipImageProcessorPil,
    )

    size, patch = 56, 14  # 16 image tokens
    tokens = (size // patch) ** 2
    text = GemmaConfig(**_text_kwargs(tok, head_dim=TEXT["hidden"] // TEXT["heads"], vocab_size=len(tok) + 1152)).to_dict()
    ip: Any = SiglipImageProcessorPil(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    ip.image_seq_length = tokens  # PaliGemmaProcessor reads it from the image processor
    proc = PaliGemmaProcessor(image_processor=ip, tokenizer=tok, chat_template=PALIGEMMA_TEMPLATE)
    # The processor adds 1,152 <loc>/<seg> tokens to the tokenizer: size the vocabulary after it.
    text["vocab_size"] = len(proc.tokenizer)
    config = PaliGemmaConfig(vision_config=_siglip(size, patch).to_dict(), text_config=text, image_token_index=_ids(proc.tokenizer, "<image>")[0], projection_dim=TEXT["hidden"], hidden_size=TEXT["hidden"], vocab_size=len(proc.tokenizer), tie_word_embeddings=False)
    return config, proc


ARCHITECTURES: dict[str, TinyArch] = {
    a.name: a
    for a in [
        TinyArch("llava", "LLaVA-1.5", "LlavaForConditionalGeneration", _make_llava, LLAVA_CHAT_TEMPLATE, chat_format="llava"),
        TinyArch("llava_next", "LLaVA-NeXT", "LlavaNextForConditionalGeneration", _make_llava_next, LLAVA_NEXT_TEMPLATE, special_tokens=("[INST]", "[/INST]")),
        TinyArch("llava_onevision", "LLaVA-OneVision", "LlavaOnevisionForConditionalGeneration", _make_llava_onevision, CHATML_TEMPLATE, eos_token="<|im_end|>", add_bos=False, special_tokens=("<|im_start|>", "<video>"), needs_torchvision=True),
        TinyArch("qwen2_vl", "Qwen2-VL", "Qwen2VLForConditionalGeneration", _make_qwen2_vl, QWEN_VL_TEMPLATE, eos_token="<|im_end|>", add_bos=False, special_tokens=_QWEN_TOKENS, needs_torchvision=True),
        TinyArch("qwen2_5_vl", "Qwen2.5-VL", "Qwen2_5_VLForConditionalGeneration", _make_qwen2_5_vl, QWEN_VL_TEMPLATE, eos_token="<|im_end|>", add_bos=False, special_tokens=_QWEN_TOKENS, needs_torchvision=True),
        TinyArch("qwen3_vl", "Qwen3-VL", "Qwen3VLForConditionalGeneration", _make_qwen3_vl, QWEN_VL_TEMPLATE, eos_token="<|im_end|>", add_bos=False, special_tokens=_QWEN_TOKENS, needs_torchvision=True),
        TinyArch("gemma3", "Gemma 3", "Gemma3ForConditionalGeneration", _make_gemma3, GEMMA3_TEMPLATE, eos_token="<end_of_turn>", add_bos=False, special_tokens=("<start_of_turn>",), named_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}),
        TinyArch("idefics3", "Idefics3 / SmolVLM", "Idefics3ForConditionalGeneration", _make_idefics3, IDEFICS3_TEMPLATE, eos_token="<end_of_utterance>", add_bos=False, special_tokens=("<|im_start|>", "<fake_token_around_image>", "<global-img>"), named_tokens={"image_token": "<image>"}),
        TinyArch("internvl", "InternVL", "InternVLForConditionalGeneration", _make_internvl, INTERNVL_TEMPLATE, eos_token="<|im_end|>", add_bos=False, special_tokens=("<|im_start|>", "<video>"), named_tokens={"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}, needs_torchvision=True),
        TinyArch("mistral3", "Mistral 3 (Pixtral)", "Mistral3ForConditionalGeneration", _make_mistral3, MISTRAL_TEMPLATE, add_bos=False, special_tokens=("[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"), needs_torchvision=True),
        TinyArch("paligemma", "PaliGemma", "PaliGemmaForConditionalGeneration", _make_paligemma, PALIGEMMA_TEMPLATE, eos_token="<eos>", add_bos=False),
    ]
}
"""The architectures :func:`build_tiny_vlm` builds, by HF ``model_type``."""


def needs_torchvision(arch: str) -> bool:
    """Whether the architecture's processor needs torchvision (to build and to load)."""
    return _arch(arch).needs_torchvision


def _arch(arch: str) -> TinyArch:
    try:
        return ARCHITECTURES[arch]
    except KeyError:
        raise ValueError(f"unknown tiny architecture {arch!r} (known: {', '.join(ARCHITECTURES)})") from None


# ------------------------------------------------------------------ building
def build_tiny_vlm(arch: str, folder: str | Path, seed: int = 0) -> Path:
    """Write a tiny random model of ``arch`` (a key of :data:`ARCHITECTURES`) with its processor
    to ``folder`` and return the path. Offline, a few seconds, about 1 MB."""
    import torch
    import transformers

    spec = _arch(arch)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(seed, extra_special_tokens=spec.special_tokens, extra_words=(LIST_WORD,), eos_token=spec.eos_token, add_bos=spec.add_bos, named_tokens=spec.named_tokens)
    config, processor = spec.make(tok, seed)
    tok = processor.tokenizer
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config).eval()
    end_ids = _prompt_end_ids(processor)
    _calibrate(model, processor, _judge_like(model, tok, end_ids, seed))
    model.generation_config.eos_token_id = [int(tok.eos_token_id)]
    model.generation_config.pad_token_id = int(tok.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    (out / "CAPJUDGE_TINY_MODEL.txt").write_text(
        f"Random-weight {spec.title} test model written by capjudge.testing.tiny_vlm. Its scores are meaningless.\n",
        encoding="utf-8",
    )
    return out


def _prompt_end_ids(processor: Any) -> list[int]:
    """The last token of a generation prompt in this family's format (where answers start)."""
    from PIL import Image

    conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Rate the caption."}]}]
    text = processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    ids = processor(text=[text], images=[Image.new("RGB", (64, 64), (120, 80, 40))], return_tensors="pt")["input_ids"][0]
    return [int(ids[-1])]


def _text_model(model: Any) -> Any:
    inner = model.model
    return getattr(inner, "language_model", None) or inner.text_model


def _judge_like(model: Any, tokenizer: Any, end_ids: list[int], seed: int, extra: int = 0) -> dict[str, Any]:
    """Hand-set the weights that make the model answer like a judge (see the module doc); returns
    the reserved dimensions for :func:`_calibrate`.

    Reserved residual dimensions carry the state of the current token (end of prompt, ``0``,
    ``.``, a digit that may be followed by one more, a digit that ends the number, ``,``, a verdict
    letter) and flags; the first layer's head 0 looks from the prompt's last token for ``Answer`` /
    ``numbering`` and copies a flag, its head 1 averages a random projection of every position
    before it (image and text) into a "mood" that biases the digits. Nothing else writes to the
    reserved dimensions. Decimals 1-4 may be followed by a second decimal 5-9, which ends the
    number: answers are ``0.x`` or ``0.xy``, never a loop of digits. ``extra`` more reserved
    dimensions are kept free for a caller's own states (returned as ``"extra"``).
    """
    import torch

    lm = _text_model(model)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    h = emb.shape[1]
    n_mood = 4
    end, zero, dot, more, last, comma, stop, bias, pairk, listk, pair, lst, anchor = (h - 1 - i for i in range(13))
    mood = [h - 14 - i for i in range(n_mood)]
    more_states = [h - 14 - n_mood - i for i in range(extra)]
    reserved = [end, zero, dot, more, last, comma, stop, bias, pairk, listk, pair, lst, anchor, *mood, *more_states]
    free = [i for i in range(h) if i not in reserved]
    gen = torch.Generator().manual_seed(seed + 1)

    tid, randn = token_lookup(tokenizer), seeded_randn(gen)

    digits = [tid(str(d)) for d in range(10)]
    first, second = digits[1:5], digits[5:]
    eos = int(tokenizer.eos_token_id)
    verdicts = [tid("A"), tid("B")]
    with torch.no_grad():
        emb.normal_(0.0, 0.02, generator=gen)
        emb[:, reserved] = 0.0
        emb[:, bias] = 1.0
        emb[end_ids, end] = 1.0
        emb[tid(","), end] = 1.0  # a list goes on after a comma as after the prompt
        emb[tid(","), comma] = 1.0
        emb[digits[0], zero] = 1.0
        emb[tid("."), dot] = 1.0
        emb[first, more] = 1.0
        emb[second, last] = 1.0
        emb[verdicts, stop] = 1.0
        emb[tid(PAIR_WORD), pairk] = 1.0
        emb[tid(LIST_WORD), listk] = 1.0

        w = head
        w.normal_(0.0, 0.05, generator=gen)  # small: the random layers barely sway the answer
        w[:, reserved] = 0.0
        # The format is fixed whatever the mood: end of prompt (or ",") -> "0" -> "."
        w[:, end] = -2.0
        w[digits[0], end] = 3.0
        w[:, zero] = -2.0
        w[tid("."), zero] = 3.0
        w[:, dot] = -1.0
        w[digits[1:], dot] = 2.0  # "." -> a decimal digit (the mood decides which)
        w[digits[0], dot] = -2.0
        w[second, more] = 1.0  # 1-4 -> a second decimal 5-9 ...
        w[eos, more] = 1.0  # ... or the end
        w[eos, last] = 2.5  # 5-9 -> the end
        w[tid(","), lst] = 3.0  # in a list: "," after a decimal, where the end would be
        w[tid(","), [end, zero, dot]] = -4.0
        w[eos, lst] = -4.0
        w[eos, stop] = 2.5  # "A", "B" -> end
        w[verdicts, pair] = 7.0  # pairwise prompt: end of prompt -> "A" or "B"
        w[digits[0], pair] = -3.0
        for i in [*digits, eos]:
            w[i, mood] = randn(n_mood, std=0.5)
        for i in verdicts:
            w[i, mood] = randn(n_mood, std=0.3)

        # Random parts stay out of the reserved dimensions: every layer's residual writes, and
        # every projection from the vision side into the text width (Qwen3-VL's deepstack too).
        for layer in lm.layers:
            layer.self_attn.o_proj.weight[reserved, :] = 0.0
            layer.mlp.down_proj.weight[reserved, :] = 0.0
        skip = ("lm_head", _prefix_of(model, lm))
        for name, module in model.named_modules():
            if not name.startswith(skip) and isinstance(module, torch.nn.Linear) and module.out_features == h:
                module.weight[reserved, :] = 0.0
                if module.bias is not None:
                    module.bias[reserved] = 0.0
        for name, param in model.named_parameters():
            if name.startswith(skip):
                continue
            if name.endswith("mm_input_projection_weight"):  # Gemma 3's projector is a bare matrix
                param[:, reserved] = 0.0
            elif param.dim() == 1 and param.shape[0] == h:  # LLaVA-NeXT's image_newline, biases
                param[reserved] = 0.0

        attn = lm.layers[0].self_attn
        hd = int(getattr(attn, "head_dim", h // TEXT["heads"]))
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            proj.weight[: 2 * hd, :] = 0.0
            if proj.bias is not None:
                proj.bias[: 2 * hd] = 0.0
        attn.o_proj.weight[:, : 2 * hd] = 0.0
        # Head 0: the prompt's last token and the answer's tokens look for "Answer" / "numbering"
        # and copy a flag. The last RoPE pair turns slowest: the match barely depends on distance.
        low = hd // 2 - 1
        gain = _qk_gain(attn, low, hd)
        attn.q_proj.weight[low, [end, zero, dot, more, last]] = gain
        attn.k_proj.weight[low, pairk] = gain
        attn.k_proj.weight[low, listk] = gain
        attn.v_proj.weight[0, pairk] = 1.0
        attn.v_proj.weight[1, listk] = 1.0
        attn.o_proj.weight[pair, 0] = 1.0
        attn.o_proj.weight[lst, 1] = 1.0
        # Head 1: zero queries give uniform attention over everything so far (the image and the
        # caption); it writes a random projection of what it reads into the mood.
        attn.v_proj.weight[hd : hd + n_mood, free] = randn(n_mood, len(free), std=1.0)
        attn.o_proj.weight[mood, hd : hd + n_mood] = torch.eye(n_mood)
        post_norm = _post_attention_norm(lm.layers[0])
        if post_norm is not None:
            # Gemma 2/3 normalise the attention output before adding it, which would blow the
            # flags up from nothing. Head 1 also writes a large constant ("anchor") that sets the
            # norm's scale; the norm's weight then removes the anchor from the residual.
            attn.v_proj.weight[hd + n_mood, bias] = 1.0
            attn.o_proj.weight[anchor, hd + n_mood] = 50.0
            post_norm.weight[anchor] = -1.0  # (1 + weight) = 0
    return {"end": end, "pair": pair, "list": lst, "mood": mood, "extra": more_states}


def _calibrate(model: Any, processor: Any, dims: dict[str, Any]) -> None:
    """Scale the first layer's flag and mood writes to fixed sizes relative to the state
    dimensions, measured on this model (image features and residual scales differ by family)."""
    import torch
    from PIL import Image

    layer = _text_model(model).layers[0]
    image = Image.new("RGB", (80, 60), (150, 90, 30))

    def measure(text: str) -> Any:
        conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        prompt = processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
        with torch.no_grad():
            return model(**inputs, output_hidden_states=True).hidden_states[1][0, -1]

    def scale(rows: list[int], factor: float) -> None:
        with torch.no_grad():
            layer.self_attn.o_proj.weight[rows, :] *= factor

    targets = [("mood", "Rate the caption: a cat on a bed.", 0.6), ("pair", f"{PAIR_WORD} 1: a cat. {PAIR_WORD} 2: a dog.", 1.0), ("list", f"Give the {LIST_WORD} and scores.", 1.0)]
    for _ in range(3):
        for key, text, target in targets:
            v = measure(text)
            rows = dims[key] if isinstance(dims[key], list) else [dims[key]]
            size = float(v[rows].pow(2).mean().sqrt()) / float(v[dims["end"]])
            if size > 0:
                scale(rows, target / size)


def plant_judge(model: Any, tokenizer: Any, end_ids: list[int], seed: int, extra: int = 0) -> dict[str, Any]:
    """The judge-like weights of every tiny model (:func:`_judge_like`), for other builders."""
    return _judge_like(model, tokenizer, end_ids, seed, extra)


def calibrate(model: Any, processor: Any, dims: dict[str, Any]) -> None:
    """Scale the planted flags to this model (:func:`_calibrate`), for other builders."""
    _calibrate(model, processor, dims)


def _post_attention_norm(layer: Any) -> Any:
    """The norm applied to the attention output before the residual add (Gemma 2/3), if any."""
    return layer.post_attention_layernorm if hasattr(layer, "pre_feedforward_layernorm") else None


def _prefix_of(model: Any, lm: Any) -> str:
    """The dotted name of the text decoder inside ``model``."""
    for name, module in model.named_modules():
        if module is lm:
            return name
    raise RuntimeError("text decoder not found")


def _qk_gain(attn: Any, low: int, hd: int) -> float:
    """Weight on the designed query/key dimension for a clear match (score ~20).

    Without query/key norms the normalised input's reserved dimension is about sqrt(hidden/2);
    with them (Qwen3, Gemma 3), a one-dimensional query or key is normalised to sqrt(head_dim)
    times the norm's weight, which is then set to reach the same score."""
    import torch

    scaling = float(getattr(attn, "scaling", hd**-0.5))
    target = 20.0
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    if q_norm is None or k_norm is None:
        width = attn.q_proj.weight.shape[1]
        return float((target / scaling) ** 0.5 / (width / 2) ** 0.5)
    g = (target / scaling) ** 0.5 / hd**0.5  # wanted effective norm weight
    with torch.no_grad():
        for norm in (q_norm, k_norm):
            # Gemma-style norms multiply by (1 + weight), Llama-style ones by weight.
            offset = 1.0 if type(norm).__name__.startswith("Gemma") else 0.0
            norm.weight[low] = g - offset
    return 1.0
