"""The tiny random models of every architecture (capjudge.testing.tiny_vlm) load with plain
transformers and answer like judges: ``0.x[y]``, ``A``/``B`` on a pairwise prompt, a list of
scores on a listwise one."""

from __future__ import annotations

import re

import pytest

from capjudge.testing.tiny_vlm import ARCHITECTURES, LIST_WORD, build_tiny_vlm

pytestmark = [pytest.mark.hf, pytest.mark.slow]


def _answer(folder, text: str, image, max_new_tokens: int = 12) -> str:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    proc = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = proc.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=[prompt], images=[image], return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return proc.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_tiny_model_loads_and_answers_like_a_judge(tiny_vlm, example_images, arch: str) -> None:
    from PIL import Image

    folder = tiny_vlm(arch)
    image = Image.open(example_images[0]).convert("RGB")
    assert re.fullmatch(r"0\.[1-9][5-9]?", _answer(folder, "Rate the caption: a cat on a bed.", image))
    assert _answer(folder, "Answer 1: a cat. Answer 2: a dog. Which is better?", image) in ("A", "B")
    listed = _answer(folder, f"Give the {LIST_WORD} and the score of each caption.", image, max_new_tokens=16)
    assert re.fullmatch(r"(0\.[1-9],)+(0\.?[0-9]?)?", listed), listed


def test_unknown_architecture_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown tiny architecture 'nope'.*qwen2_5_vl"):
        build_tiny_vlm("nope", tmp_path)
