"""Benchmark models of other architectures: the judge-like random models of
``capjudge.testing.tiny_vlm`` built at the real image-token counts and image inputs of a 7B
checkpoint, with fewer and narrower layers so that a 2-core CPU runs ``bench_judge.py --arch`` in
about a minute or two.

Tiny-model shapes would say nothing about speed: what decides how much prefix reuse saves is the
share of the prompt the image takes, so the processor, the vision grid and the number of image
tokens are the real model's; the layers' width and count are scaled down (their cost scales the
same way for the reference, capjudge and the floor).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class ArchShape:
    """One architecture's benchmark shape."""

    title: str
    real: str
    """The real checkpoint's shapes (for the results table)."""
    bench: str
    """What the benchmark model keeps and what it scales down."""
    text: dict[str, int]
    vision: dict[str, int]


QWEN_7B = ArchShape(
    title="Qwen2.5-VL-7B",
    real=(
        "text 3584 wide, 28 layers, 28 heads (4 KV), MLP 18944; vision 1280 wide, 32 layers, 16 heads, "
        "patch 14, 2x2 merge, 112 px attention windows, full attention every 8th block; image processor "
        "min 3136 / max 12845056 pixels"
    ),
    bench=(
        "real image processor and vision grid (a 750x751 image: 54x54 patches, 729 image tokens), "
        "M-RoPE sections scaled to the head size; text 512 wide, 4 layers, 8 heads, MLP 2048; vision 320 "
        "wide, 2 layers (one windowed, one full), 4 heads"
    ),
    text={"hidden": 512, "layers": 4, "heads": 8, "intermediate": 2048},
    vision={"hidden": 320, "layers": 2, "heads": 4, "intermediate": 1280},
)

ONEVISION_7B = ArchShape(
    title="LLaVA-OneVision-7B",
    real=(
        "Qwen2 text 3584 wide, 28 layers, 28 heads (4 KV), MLP 18944; SigLIP-so400m vision 1152 wide, "
        "27 layers, 16 heads, 384 px / patch 14 (729 tokens per crop); anyres_max_9 tiling over the "
        "384-px grid pinpoints up to 2304x2304"
    ),
    bench=(
        "real image processor, tiling and token count (a 750x751 image: 768x768 as 2x2 crops plus the "
        "whole image, unpadded, with a newline token per row); text 256 wide, 2 layers, 4 heads, MLP "
        "1024; vision 288 wide, 1 layer, 4 heads"
    ),
    text={"hidden": 256, "layers": 2, "heads": 4, "intermediate": 1024},
    vision={"hidden": 288, "layers": 1, "heads": 4, "intermediate": 1152},
)

SHAPES: dict[str, ArchShape] = {"qwen2_5_vl": QWEN_7B, "llava_onevision": ONEVISION_7B}

_ONEVISION_PINPOINTS = [[384 * i, 384 * j] for i in range(1, 7) for j in range(1, 7)]


def _qwen2_5_vl(make: Any) -> Any:
    def bench_make(tok: Any, seed: int) -> tuple[Any, Any]:
        from transformers import Qwen2VLImageProcessorPil

        config, proc = make(tok, seed)
        head = config.text_config.hidden_size // config.text_config.num_attention_heads
        unit = head // 16  # Qwen2.5-VL-7B: head 128, sections [16, 24, 24]
        config.text_config.rope_parameters["mrope_section"] = [2 * unit, 3 * unit, 3 * unit]
        config.vision_config.window_size = 112
        config.vision_config.fullatt_block_indexes = [config.vision_config.depth - 1]
        proc.image_processor = Qwen2VLImageProcessorPil(
            patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136, max_pixels=12845056,
            size={"shortest_edge": 3136, "longest_edge": 12845056},
        )  # fmt: skip
        return config, proc

    return bench_make


def _llava_onevision(make: Any) -> Any:
    def bench_make(tok: Any, seed: int) -> tuple[Any, Any]:
        from transformers import LlavaOnevisionImageProcessorPil

        config, proc = make(tok, seed)
        config.vision_config.image_size = 384
        config.image_grid_pinpoints = _ONEVISION_PINPOINTS
        proc.image_processor = LlavaOnevisionImageProcessorPil(
            size={"height": 384, "width": 384}, image_grid_pinpoints=_ONEVISION_PINPOINTS, image_mean=[0.5] * 3, image_std=[0.5] * 3
        )
        proc.num_image_tokens = 729
        return config, proc

    return bench_make


_MAKERS = {"qwen2_5_vl": _qwen2_5_vl, "llava_onevision": _llava_onevision}


@contextlib.contextmanager
def _sizes(module: Any, shape: ArchShape) -> Iterator[None]:
    """The builder's layer sizes set to the benchmark's for the duration of one build."""
    saved = dict(module.TEXT), dict(module.VISION)
    module.TEXT.update(shape.text)
    module.VISION.update(shape.vision)
    try:
        yield
    finally:
        module.TEXT.clear()
        module.TEXT.update(saved[0])
        module.VISION.clear()
        module.VISION.update(saved[1])


def _head_reads_hand_set_dimensions(calibrate: Any) -> Any:
    """The builder's calibration, then the output head restricted to the hand-set dimensions.

    At these widths the random part of the output head outweighs the hand-set one and answers
    run to ``max_new_tokens``; reading only the hand-set dimensions (those every token embedding
    sets to exactly 0 or 1) and a smaller "mood" (which picks the digits) make the answers
    ``0.x[y]`` as with the tiny models, whatever the random layers do (the final norm scales those
    dimensions alike, so the argmax is theirs). Every layer still computes: the cost per token is
    unchanged."""

    def wrapped(model: Any, processor: Any, dims: Any) -> None:
        import torch

        calibrate(model, processor, dims)
        with torch.no_grad():
            # The mood is calibrated on a small image; averaged over hundreds of image tokens it
            # comes out ~2x the state dimensions and decides the answer's format too (0.3636...).
            from capjudge.testing.tiny_vlm import _text_model

            _text_model(model).layers[0].self_attn.o_proj.weight[dims["mood"], :] *= 0.25
            emb = model.get_input_embeddings().weight
            n_tok = len(processor.tokenizer)
            hand_set = ((emb[:n_tok] == 0) | (emb[:n_tok] == 1)).all(0)
            model.get_output_embeddings().weight[:, ~hand_set] = 0.0

    return wrapped


def build_arch_model(arch: str, folder: Path) -> Path:
    """The judge-like benchmark model of ``arch`` (a key of :data:`SHAPES`), written to ``folder``."""
    from capjudge.testing import tiny_vlm

    shape = SHAPES[arch]
    spec = tiny_vlm.ARCHITECTURES[arch]
    calibrate = tiny_vlm._calibrate
    tiny_vlm.ARCHITECTURES[arch] = dataclasses.replace(spec, make=_MAKERS[arch](spec.make))
    tiny_vlm._calibrate = _head_reads_hand_set_dimensions(calibrate)
    try:
        with _sizes(tiny_vlm, shape):
            return tiny_vlm.build_tiny_vlm(arch, folder)
    finally:
        tiny_vlm.ARCHITECTURES[arch] = spec
        tiny_vlm._calibrate = calibrate
