"""The HF transformers backend end to end on a tiny random LLaVA (real from_pretrained, real generate)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from capjudge import Judge, Sample  # noqa: E402
from capjudge.backends.base import ContextLengthError, GenerationConfig, Message, Request  # noqa: E402
from capjudge.data.images import load_image  # noqa: E402
from capjudge.judges.smoothing import expected_digit_score  # noqa: E402
from capjudge.prompts import LLAVA_V1_SYSTEM, get_template  # noqa: E402

pytestmark = pytest.mark.hf

CAPTIONS = [
    "an orange cat and a grey cat are lying together.",
    "a calico cat and a white cat are lying together.",
    "three horses run across a snowy field.",
    "a black dog wearing headphones looks at the camera.",
    "a red bus on a city street.",
]


def independent_fleur(backend, image: Path, caption: str, generated: list[int]) -> tuple[float, float | None]:
    """FLEUR's score recomputed from the model's own logits, outside capjudge's decoding code:
    one teacher-forced forward pass over prompt + answer, softmax at the decimal positions."""
    from transformers import AutoProcessor

    from capjudge.data.images import pad_to_square

    proc = AutoProcessor.from_pretrained(backend.model)
    prompt = f"{LLAVA_V1_SYSTEM} USER: <image>\n{get_template('fleur').render(caption=caption)} ASSISTANT:"
    img = load_image(image).pil()
    img = pad_to_square(img, tuple(int(x * 255) for x in proc.image_processor.image_mean))
    inputs = proc(images=img, text=prompt, return_tensors="pt")
    ids = torch.cat([inputs["input_ids"], torch.tensor([generated])], dim=1)
    with torch.no_grad():
        logits = backend.net(input_ids=ids, pixel_values=inputs["pixel_values"], attention_mask=torch.ones_like(ids)).logits[0]
    n_prompt = inputs["input_ids"].shape[1]
    pieces = proc.tokenizer.convert_ids_to_tokens(generated)
    dot = pieces.index(".")
    digit_ids = [proc.tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]

    def dist(pos: int) -> list[float]:
        probs = torch.softmax(logits[n_prompt - 1 + pos].float(), dim=-1)
        return [float(probs[i]) for i in digit_ids]

    first = dist(dot + 1)
    printed = "".join(pieces[dot - 1 : dot + 3]).replace("▁", "")
    # FLEUR's code: the second decimal counts when len(str(float(answer))) > 3 ("0.30" is "0.3").
    two = len(pieces) > dot + 2 and pieces[dot + 2].isdigit() and len(str(float(printed))) > 3
    second = dist(dot + 2) if two else None
    raw = None
    return expected_digit_score(first, second), raw


def _generated_ids(backend, text_steps) -> list[int]:
    return backend.tokenizer.convert_tokens_to_ids([s.token for s in text_steps])


@pytest.mark.parametrize("batched", [True, False], ids=["batch", "one-at-a-time"])
def test_fleur_smoothing_equals_independent_computation(hf_backend, example_images, batched: bool) -> None:
    judge = Judge("fleur", hf_backend)
    samples = [Sample(example_images[i % 2], c) for i, c in enumerate(CAPTIONS)]
    results = list(judge.score_many(samples)) if batched else [judge.score(s) for s in samples]
    smoothed = [r for r in results if r.smoothed]
    assert len(smoothed) >= 3, [r.raw for r in results]
    for sample, r in zip(samples, results):
        if not r.smoothed:
            continue
        # Re-generate once to get the token ids (the result keeps text and probabilities only).
        req = judge.requests.score_request(judge.prepare_sample(0, sample))
        comp = hf_backend.generate_one(req)
        assert comp.text == r.raw
        expected, _ = independent_fleur(hf_backend, Path(sample.image), sample.caption, _generated_ids(hf_backend, comp.steps))
        assert r.score == pytest.approx(expected, abs=1e-5), (r.raw, r.details)
        assert 0.0 <= r.score <= 1.0
        assert r.raw_score == pytest.approx(float(r.raw[:4]), abs=1e-9) or r.raw.startswith("0.")


def test_batched_equals_one_at_a_time(hf_backend, example_images) -> None:
    judge = Judge("fleur", hf_backend)
    samples = [Sample(example_images[i % 2], c) for i, c in enumerate(CAPTIONS)]
    batch = list(judge.score_many(samples))
    single = [judge.score(s) for s in samples]
    for a, b in zip(batch, single):
        assert a.raw == b.raw
        assert a.score == pytest.approx(b.score, abs=1e-5)
    # Different captions of one image do get different answers (the test model is not constant).
    assert len({round(r.score, 6) for r in batch if r.score is not None}) > 2


def test_corrupt_image_and_unanswerable_caption_leave_the_rest_scored(hf_backend, example_images, corrupt_image) -> None:
    judge = Judge("fleur", hf_backend)
    samples = [
        Sample(example_images[0], CAPTIONS[0]),
        Sample(corrupt_image, CAPTIONS[1]),
        Sample(example_images[1], "a dog xyzzy on the grass."),  # the test model answers "xyzzy": no number
        Sample(example_images[1], CAPTIONS[3]),
    ]
    results = list(judge.score_many(samples))
    assert [r.status for r in results] == ["ok", "error", "error", "ok"]
    assert "corrupt.jpg" in results[1].error and "could not be decoded" in results[1].error
    assert results[2].raw == "xyzzy" and "no score" in results[2].error
    assert results[0].smoothed and results[3].score is not None


def test_two_step_visce2_and_pairwise_on_the_tiny_model(hf_backend, example_images) -> None:
    visce2 = Judge("visce2", hf_backend)
    results = list(visce2.score_many([Sample(example_images[0], c) for c in CAPTIONS[:3]]))
    assert all(r.context for r in results)
    assert len({r.context for r in results}) == 1  # one context for the image
    pair = Judge("gpt4v-pairwise", hf_backend).compare(example_images[0], CAPTIONS[0], CAPTIONS[2])
    assert pair.status == "ok" and pair.verdict in ("A", "B", "tie") and len(pair.votes) == 2
    graded = Judge("fleur", hf_backend).compare(example_images[0], CAPTIONS[0], CAPTIONS[2])
    assert graded.mode == "grading" and graded.verdict in ("A", "B", "tie")


def test_explain_and_determinism(hf_backend, example_images) -> None:
    judge = Judge("fleur", hf_backend)
    s = Sample(example_images[0], CAPTIONS[0])
    a, b = judge.score(s), judge.score(s)
    assert a.to_dict() == b.to_dict()
    r = judge.explain(s)
    assert r.ok and isinstance(r.explanation, str)


def test_prompt_format_and_square_padding(hf_backend, example_images) -> None:
    img = load_image(example_images[0])
    msgs = (Message("system", LLAVA_V1_SYSTEM), Message("user", "Rate it.", images=(img,)), Message("assistant", "0.5"), Message("user", "Why?"))
    assert hf_backend.format_prompt(msgs) == f"{LLAVA_V1_SYSTEM} USER: <image>\nRate it. ASSISTANT: 0.5</s>USER: Why? ASSISTANT:"
    assert hf_backend.format_prompt(msgs[1:2]) == "USER: <image>\nRate it. ASSISTANT:"
    w, h = img.pil().size
    assert w != h
    padded = hf_backend.prepare_image(img)
    assert padded.size == (max(w, h), max(w, h))
    mean = tuple(int(x * 255) for x in hf_backend.processor.image_processor.image_mean)
    corner = padded.getpixel((0, 0)) if h > w else padded.getpixel((0, 0))
    assert corner == mean or padded.getpixel((padded.size[0] - 1, padded.size[1] - 1)) == mean
    # 576 image tokens, as LLaVA-1.5 expects.
    enc = hf_backend.encode([Request(msgs[1:2])])
    image_id = hf_backend.net.config.image_token_index
    assert int((enc["input_ids"] == image_id).sum()) == 576


def test_context_overflow_is_a_per_request_error(hf_backend, example_images) -> None:
    img = load_image(example_images[0])
    ok = Request((Message("user", "Rate.", images=(img,)),), GenerationConfig(max_new_tokens=4))
    too_long = Request((Message("user", "cat " * 5000, images=(img,)),), GenerationConfig(max_new_tokens=4))
    out = hf_backend.generate([ok, too_long])
    assert not isinstance(out[0], BaseException)
    assert isinstance(out[1], ContextLengthError)


def test_digit_probabilities_are_exact_full_softmax(hf_backend, example_images) -> None:
    img = load_image(example_images[1])
    req = Request((Message("user", "Score:", images=(img,)),), GenerationConfig(max_new_tokens=4, top_logprobs=5))
    comp = hf_backend.generate_one(req)
    assert comp.logprobs and comp.steps
    step = comp.steps[0]
    assert step.digits is not None and len(step.digits) == 10
    assert len(step.top) == 5
    assert step.top[0][1] >= step.top[-1][1]
    assert sum(pow(2.718281828459045, x) for x in step.digits) <= 1.0 + 1e-6
    assert step.logprob == pytest.approx(step.top[0][1])  # greedy: the chosen token is the top one


def test_tiny_model_answers_like_a_judge_at_another_size(tmp_path: Path, example_images) -> None:
    """The benchmark relies on the tiny model keeping its judge behaviour when made larger."""
    from capjudge.backends.hf import HFBackend
    from capjudge.testing.tiny_llava import build_tiny_llava

    model_dir = build_tiny_llava(tmp_path / "m", hidden_size=256, num_layers=4, vocab_size=2000)
    backend = HFBackend(str(model_dir))
    try:
        captions = ["a cat.", "two cats lying on a white bed.", "a dog xyzzy on the grass."]
        results = list(Judge("fleur", backend).score_many([Sample(example_images[i % 2], c) for i, c in enumerate(captions)]))
    finally:
        backend.close()
    assert [r.smoothed for r in results] == [True, True, False]
    assert all(r.raw.startswith("0.") and 0.0 <= r.score <= 1.0 for r in results[:2])
    assert results[2].raw == "xyzzy" and results[2].status == "error"


def test_fleur_code_equals_the_codes_arithmetic_on_generate_scores(hf_backend, example_images) -> None:
    """fleur-code on the real backend against fleur.py's own path, re-implemented: generate with
    output_scores, decode with special tokens, digits and dots of outputs[:-4], the digit-token
    search, softmax of the scores at the found steps."""
    import re

    from transformers import AutoProcessor

    from capjudge.data.images import pad_to_square

    proc = AutoProcessor.from_pretrained(hf_backend.model)
    tok = proc.tokenizer
    rate2token = {d: tok.encode(str(d))[-1] for d in range(10)}
    judge = Judge("fleur-code", hf_backend)
    checked = 0
    for i, caption in enumerate(CAPTIONS):
        image = example_images[i % 2]
        r = judge.score(Sample(image, caption))
        prompt = f"{LLAVA_V1_SYSTEM} USER: <image>\n{get_template('fleur').render(caption=' '.join(caption.split()))} ASSISTANT:"
        img = pad_to_square(load_image(image).pil(), tuple(int(x * 255) for x in proc.image_processor.image_mean))
        inputs = proc(images=img, text=prompt, return_tensors="pt")
        with torch.no_grad():
            out = hf_backend.net.generate(**inputs, do_sample=False, max_new_tokens=512, output_scores=True, return_dict_in_generate=True)
        n = inputs["input_ids"].shape[1]
        new = out.sequences[0, n:]
        outputs = tok.decode(new).strip()
        numbers = re.sub(r"\.+$", "", re.sub(r"^\.+", "", re.sub(r"[^\d.]", "", outputs[:-4])))
        try:
            score_check = float(numbers)
        except ValueError:
            assert not r.ok and "reads no number" in (r.error or "")
            continue
        if not 0 <= score_check < 1.0:
            continue  # 1.0 and out-of-range answers are covered by the synthetic tests
        text = str(score_check)
        d1 = int(text[text.index(".") + 1])
        hits = (new == rate2token[d1]).nonzero().flatten().tolist()
        idx = hits[0] if len(hits) == 1 else (hits[1] if d1 == 0 else hits[0])
        probs = torch.softmax(out.scores[idx][0].float(), dim=-1)
        expected = sum(float(probs[rate2token[k]]) * k * 0.1 for k in range(10))
        if len(text) > 3:
            d2 = int(text[text.index(".") + 2])
            hits2 = (new == rate2token[d2]).nonzero().flatten().tolist()
            probs2 = torch.softmax(out.scores[hits2[0] if len(hits2) == 1 else hits2[1]][0].float(), dim=-1)
            expected += sum(float(probs2[rate2token[k]]) * k * 0.01 for k in range(10))
        assert r.ok and r.smoothed, (r.raw, r.error)
        assert r.score == pytest.approx(expected, abs=1e-5), (outputs, r.raw)
        checked += 1
    assert checked >= 3


def test_a_missing_optional_package_names_the_install_command() -> None:
    from capjudge.backends.hf import missing_package_message

    msg = missing_package_message("Qwen/Qwen2.5-VL-7B-Instruct", ImportError("Qwen2VLVideoProcessor requires the Torchvision library but it was not found in your environment."))
    # The torchvision release that matches the installed torch (else pip would replace torch).
    from capjudge.backends.hf.backend import torchvision_requirement

    assert f"pip install '{torchvision_requirement()}'" in msg and "Qwen/Qwen2.5-VL-7B-Instruct" in msg
    assert re.fullmatch(r"torchvision==0\.\d+\.\*", torchvision_requirement())
    err = ImportError("No module named 'timm'")
    err.name = "timm"
    assert "pip install timm" in missing_package_message("m", err)
    assert "a package it needs is missing" in missing_package_message("m", ImportError("something else"))
