"""Prefix reuse on every architecture of the verified matrix: in float64, the packed prefix path
gives the same tokens and the same log-probabilities (to 1e-9) as one plain forward over each
whole prompt, and the same answers as plain ``generate``; PaliGemma falls back, logged and recorded.

Tiny random models of each architecture come from :mod:`capjudge.testing.tiny_vlm` (the
``tiny_vlm`` fixture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from capjudge import Judge, Sample  # noqa: E402
from capjudge.backends.base import GenerationConfig, Message, Request  # noqa: E402
from capjudge.backends.hf import HFBackend  # noqa: E402
from capjudge.backends.hf.adapters import prefix_reuse_support  # noqa: E402
from capjudge.data.images import load_image  # noqa: E402
from capjudge.prompts import get_template  # noqa: E402
from capjudge.testing.tiny_vlm import ARCHITECTURES  # noqa: E402

pytestmark = [pytest.mark.hf, pytest.mark.slow]

SUPPORT = prefix_reuse_support()
assert isinstance(SUPPORT, dict)
SUPPORTED = [a for a in ARCHITECTURES if SUPPORT[a].supported]
FALLBACK = [a for a in ARCHITECTURES if not SUPPORT[a].supported]
CAPTIONS = [
    "a cat.",
    "an orange cat and a grey cat are lying together on a white bed in the room.",
    "three horses run across a snowy field.",
]
TOL = 1e-9
# Processor outputs with one value per prompt token: extended over the generated tokens for the
# teacher-forced forward (1 for the attention mask, 0 = text for the token types).
_PER_TOKEN = {"attention_mask": 1, "token_type_ids": 0, "mm_token_type_ids": 0}


def _model(tiny_vlm, arch: str, tmp_path_factory: pytest.TempPathFactory, window: int | None = None) -> Path:
    folder = tiny_vlm(arch)
    if window:  # a sliding window shorter than the prompts, so that the packed masks must apply it
        copy = tmp_path_factory.mktemp(f"{arch}-window")
        shutil.copytree(folder, copy, dirs_exist_ok=True)
        path = copy / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["text_config"]["sliding_window"] = window
        path.write_text(json.dumps(config), encoding="utf-8")
        return copy
    return folder


def _request(img, caption: str, max_new: int = 8) -> Request:
    prompt = get_template("fleur").render(caption=caption)
    return Request((Message("user", prompt, images=(img,)),), GenerationConfig(max_new_tokens=max_new, top_logprobs=5))


def _teacher_forced(be: HFBackend, req: Request, gen: list[int]):
    """Log-probabilities of one plain forward over the whole prompt followed by ``gen``."""
    torch = be._torch
    enc = be.encode([req])
    n = enc["input_ids"].shape[1]
    inputs = dict(enc)
    inputs["input_ids"] = torch.cat([enc["input_ids"], torch.tensor([gen], dtype=torch.long)], dim=1)
    for key, fill in _PER_TOKEN.items():
        if key in enc:
            inputs[key] = torch.cat([enc[key], torch.full((1, len(gen)), fill, dtype=enc[key].dtype)], dim=1)
    with torch.inference_mode():
        logits = be.net(**inputs).logits[0, n - 1 :]
    return torch.log_softmax(logits, dim=-1)


# Gemma 3 alternates sliding-window and full layers (a dict of masks); Mistral's window applies to
# every layer (one mask). Windows of 24 tokens make both masks differ from the full ones.
WINDOWED = [pytest.param("gemma3", 24, id="gemma3-window24"), pytest.param("mistral3", 24, id="mistral3-window24")]


@pytest.mark.parametrize("graphs", ["off", "on"])
@pytest.mark.parametrize(("arch", "window"), [pytest.param(a, None, id=a) for a in SUPPORTED] + WINDOWED)
def test_packed_path_equals_plain_decoding_in_float64(arch: str, window: int | None, graphs: str, tiny_vlm, tmp_path_factory, example_images) -> None:
    """``graphs=on``: the decoding steps at fixed shapes (the CPU stand-in of CUDA graphs), except
    with sliding-window layers, which keep the per-step masks."""
    folder = _model(tiny_vlm, arch, tmp_path_factory, window)
    chat = ARCHITECTURES[arch].chat_format
    be = HFBackend(str(folder), dtype="float64", chat_format=chat, decode_graphs=graphs)
    plain = HFBackend(str(folder), dtype="float64", chat_format=chat, prefix_reuse=False)
    try:
        assert be._prefix is not None and be._prefix.unsupported is None and be.capabilities.prefix_reuse
        if window:
            assert window in be._prefix.layout.windows.values()
        a, b = (load_image(p) for p in example_images)
        reqs = [_request(a, c) for c in CAPTIONS] + [_request(b, c) for c in CAPTIONS[:2]]
        be.generate(reqs[:2])  # learns the answer draft and keeps the text before the image
        be.prefix_stats.reset()
        grouped = be.generate(reqs)
        assert be.prefix_stats.prefix_forwards == 2 and be.prefix_stats.rows == len(reqs)
        assert be.prefix_stats.head_reused >= 1
        windowless = all(w is None for w in be._prefix.layout.windows.values())
        assert be._prefix.use_graphs == (graphs == "on" and windowless)
        if be._prefix.use_graphs and any(len(g.steps) > 2 for g in grouped):
            assert sum(s.replays for s in be._prefix.packed.values()) > 0
            assert all(s.failed is None for s in be._prefix.packed.values())
        for req, g in zip(reqs, grouped):
            assert not isinstance(g, BaseException), g
            assert g.meta["prefix_reuse"] == "used"
            p = plain.generate_one(req)
            assert (g.text, g.finish_reason, g.usage) == (p.text, p.finish_reason, p.usage)
            assert [s.token for s in g.steps] == [s.token for s in p.steps]
            gen = be.tokenizer.convert_tokens_to_ids([s.token for s in g.steps])
            logp = _teacher_forced(be, req, gen)
            assert logp[: len(gen)].argmax(-1).tolist() == gen
            if g.finish_reason == "stop":
                assert int(logp[len(gen)].argmax()) in be.eos_ids
            for t, step in enumerate(g.steps):
                assert step.logprob == pytest.approx(float(logp[t, gen[t]]), abs=TOL)
                assert [lp for _, lp in step.top] == pytest.approx(logp[t].topk(len(step.top)).values.tolist(), abs=TOL)
                if step.digits is not None:
                    assert step.digits == pytest.approx(logp[t, be.digit_ids].tolist(), abs=TOL)
    finally:
        be.close()
        plain.close()


@pytest.mark.parametrize("arch", FALLBACK)
def test_architectures_without_exact_prefix_reuse_fall_back_logged_and_recorded(arch: str, tiny_vlm, tmp_path_factory, example_images, caplog) -> None:
    folder = _model(tiny_vlm, arch, tmp_path_factory)
    chat = ARCHITECTURES[arch].chat_format
    with caplog.at_level("WARNING", logger="capjudge"):
        be = HFBackend(str(folder), chat_format=chat)
    plain = HFBackend(str(folder), chat_format=chat, prefix_reuse=False)
    try:
        reason = SUPPORT[arch].reason
        assert be._prefix is not None and be._prefix.unsupported == reason and not be.capabilities.prefix_reuse
        assert f"prefix reuse off for {folder}: {reason}" in caplog.text
        samples = [Sample(example_images[0], c) for c in CAPTIONS]
        records = list(Judge("fleur", be).score_many(samples))
        expected = list(Judge("fleur", plain).score_many(samples))
        assert [r.details["prefix_reuse"] for r in records] == [f"fallback: {reason}"] * len(samples)
        assert [(r.raw, r.score) for r in records] == [(e.raw, e.score) for e in expected]
        assert be.prefix_stats.rows == 0
    finally:
        be.close()
        plain.close()
