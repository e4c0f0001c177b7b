"""Prefix reuse in the HF backend: grouped, prefix-shared decoding equals independent decoding."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from capjudge import Judge, Sample  # noqa: E402
from capjudge.backends.base import GenerationConfig, Message, Request  # noqa: E402
from capjudge.backends.hf import HFBackend  # noqa: E402
from capjudge.data.images import load_image  # noqa: E402
from capjudge.prompts import LLAVA_V1_SYSTEM, get_template  # noqa: E402

pytestmark = pytest.mark.hf

CAPTIONS = [
    "a cat.",
    "an orange cat and a grey cat are lying together on a white bed in the room.",
    "three horses run across a snowy field.",
    "a dog xyzzy on the grass.",  # the tiny model answers "xyzzy": no number
    "two dogs are playing with a red ball in the park while a man is walking behind them.",
]
# float32, different summation order (prefix + packed suffix forwards vs one forward): this
# model's hand-set sharp attention amplifies rounding, and log-probabilities agree to ~2e-4. In
# float64 (test_float64_equality_with_either_attention) the two agree to 1e-9.
LP_TOL = 5e-4
REFS = ("two cats sleeping on a bed.", "a dog on the grass.")


@pytest.fixture(scope="module")
def fast(tiny_llava_dir: Path):
    """Prefix reuse on (the default)."""
    backend = HFBackend(str(tiny_llava_dir), batch_size=4)
    assert backend.prefix_reuse
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def slow(tiny_llava_dir: Path):
    """Prefix reuse off: the plain ``generate`` path."""
    backend = HFBackend(str(tiny_llava_dir), batch_size=4, prefix_reuse=False)
    yield backend
    backend.close()


def _samples(example_images: list[Path]) -> list[Sample]:
    samples = [Sample(img, c, references=REFS, id=f"{j}-{i}") for j, img in enumerate(example_images) for i, c in enumerate(CAPTIONS)]
    random.Random(3).shuffle(samples)  # the two images' captions interleaved
    return samples


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: object) -> None:
        self.calls += 1


@pytest.mark.parametrize("method", ["fleur", "ref-fleur", "vanilla"])
def test_grouped_equals_independent_scoring(fast, slow, example_images, method: str) -> None:
    samples = _samples(example_images)
    counter = _Counter()
    hook = fast.net.model.vision_tower.register_forward_hook(counter)
    fast.prefix_stats.reset()
    try:
        grouped = list(Judge(method, fast).score_many(samples))
    finally:
        hook.remove()
    independent = [Judge(method, slow).score(s) for s in samples]  # one request at a time

    assert [r.id for r in grouped] == [s.id for s in samples]  # input order
    assert {r.details.get("prefix_reuse") for r in grouped} == {"used"}
    assert all("prefix_reuse" not in r.details for r in independent)  # turned off: nothing to say
    assert counter.calls == 2 and fast.prefix_stats.prefix_forwards == 2  # one prefix per image
    assert fast.prefix_stats.rows == len(samples)
    for g, i in zip(grouped, independent):
        assert (g.status, g.raw, g.smoothed) == (i.status, i.raw, i.smoothed), g.id
        assert g.details.get("usage") == i.details.get("usage")
        if i.score is None:
            assert g.score is None
        else:
            assert g.score == pytest.approx(i.score, abs=1e-5)
        if "digit_probs" in i.details:
            for key in ("first", "second", "units"):
                a, b = g.details["digit_probs"][key], i.details["digit_probs"][key]
                assert (a is None) == (b is None)
                if a is not None:
                    assert a == pytest.approx(b, rel=LP_TOL, abs=1e-6)
    xyzzy = [r for r in grouped if "xyzzy" in r.caption]
    assert xyzzy and all(r.raw == "xyzzy" and r.status == "error" for r in xyzzy)
    if method != "vanilla":
        assert sum(r.smoothed for r in grouped) >= 6


def _fleur_request(img, caption: str, top: int = 5, max_new: int = 16) -> Request:
    prompt = get_template("fleur").render(caption=caption)
    return Request((Message("system", LLAVA_V1_SYSTEM), Message("user", prompt, images=(img,))), GenerationConfig(max_new_tokens=max_new, top_logprobs=top))


def _assert_same_completion(a, b, tol: float = LP_TOL) -> None:
    assert a.text == b.text and a.finish_reason == b.finish_reason
    assert a.usage.prompt_tokens == b.usage.prompt_tokens and a.usage.completion_tokens == b.usage.completion_tokens
    assert [s.token for s in a.steps] == [s.token for s in b.steps]
    for x, y in zip(a.steps, b.steps):
        assert [t for t, _ in x.top] == [t for t, _ in y.top]
        assert [lp for _, lp in x.top] == pytest.approx([lp for _, lp in y.top], abs=tol)
        assert x.logprob == pytest.approx(y.logprob, abs=tol)
        assert x.digits == pytest.approx(y.digits, abs=tol)


@pytest.mark.parametrize("draft", ["learned", "wrong", "none"])
def test_token_steps_equal_with_any_answer_draft(fast, slow, example_images, draft: str) -> None:
    imgs = [load_image(p) for p in example_images]
    reqs = [_fleur_request(imgs[i % 2], c) for i, c in enumerate(CAPTIONS * 2)]
    reqs.append(_fleur_request(imgs[0], CAPTIONS[1], top=0, max_new=2))  # no log-probs, cut by length
    if draft == "wrong":  # a draft the model never follows: rejected at its first token
        fast._prefix.draft = tuple(fast.tokenizer.encode("1.9", add_special_tokens=False))
    elif draft == "none":
        fast._prefix.draft = ()
    fast.prefix_stats.reset()
    grouped = fast.generate(reqs)
    if draft == "learned":
        assert fast.prefix_stats.draft_tokens_accepted > 0
    assert fast.prefix_stats.prefix_forwards == 2
    for req, g in zip(reqs, grouped):
        _assert_same_completion(g, slow.generate_one(req))
    assert grouped[-1].finish_reason == "length" and not grouped[-1].steps


@pytest.mark.parametrize("bound", ["rows", "tokens"])
def test_large_groups_are_chunked_from_one_prefix(fast, slow, example_images, monkeypatch, bound: str) -> None:
    from capjudge.backends.hf import prefix as hf_prefix

    img = load_image(example_images[0])
    reqs = [_fleur_request(img, f"{c} number {k}") for k, c in enumerate(CAPTIONS)]
    if bound == "rows":
        monkeypatch.setattr(fast._prefix, "max_rows", 2)
    else:  # a few captions' worth of packed tokens per chunk
        monkeypatch.setattr(hf_prefix, "MAX_PACKED_TOKENS", 60)
        chunks = fast._prefix._chunks([0, 1, 2, 3], [20, 30, 5, 80])
        assert chunks == [[0, 1], [2], [3]]  # 24 + 34 fits, + 9 would not; 84 alone exceeds, still one
    fast.prefix_stats.reset()
    grouped = fast.generate(reqs)
    assert fast.prefix_stats.prefix_forwards == 1 and fast.prefix_stats.rows == len(reqs)
    for req, g in zip(reqs, grouped):
        _assert_same_completion(g, slow.generate_one(req))


def test_requests_outside_the_fast_path_use_plain_generate(fast, slow, example_images) -> None:
    a, b = (load_image(p) for p in example_images)
    single = _fleur_request(a, CAPTIONS[0])  # the only request of its image
    sampled = Request(_fleur_request(b, CAPTIONS[1]).messages, GenerationConfig(max_new_tokens=4, temperature=0.7, seed=1))
    multi_turn = Request((Message("user", "Rate it.", images=(b,)), Message("assistant", "0.5"), Message("user", "Why?")), GenerationConfig(max_new_tokens=4))
    greedy_b = _fleur_request(b, CAPTIONS[2])
    reqs = [single, sampled, multi_turn, greedy_b]
    fast.prefix_stats.reset()
    out = fast.generate(reqs)
    assert fast.prefix_stats.rows == 0  # nothing here is a group of two greedy single-image requests
    notes = [o.meta["prefix_reuse"] for o in out]
    assert notes == [
        "not used: the only greedy request of its image in the batch",
        "not used: sampled decoding",
        "not used: multi-turn conversation",
        "not used: the only greedy request of its image in the batch",
    ]
    for req, o in zip([single, multi_turn, greedy_b], [out[0], out[2], out[3]]):
        _assert_same_completion(o, slow.generate_one(req))
    assert not isinstance(out[1], BaseException)


def test_context_overflow_stays_a_per_request_error(fast, example_images) -> None:
    from capjudge.backends.base import ContextLengthError

    img = load_image(example_images[0])
    ok = _fleur_request(img, CAPTIONS[0])
    too_long = _fleur_request(img, "cat " * 5000)
    out = fast.generate([ok, too_long, _fleur_request(img, CAPTIONS[2])])
    assert not isinstance(out[0], BaseException) and not isinstance(out[2], BaseException)
    assert isinstance(out[1], ContextLengthError)



@pytest.mark.parametrize(("attn", "graphs"), [("sdpa", "off"), ("eager", "off"), ("sdpa", "on")])
def test_packed_path_equals_one_plain_forward_in_float64(tiny_llava_dir: Path, example_images, attn: str, graphs: str) -> None:
    """Each answer of the packed path, teacher-forced through one plain forward of its whole prompt:
    same greedy tokens, same log-probabilities to 1e-10 (float64 leaves no rounding to hide in;
    eager attention takes its softmax in float32 whatever the model's dtype: float32's relative
    precision (1.2e-7) on log-probabilities of up to ~40 in size allows 5e-6 there; measured up to
    1.4e-6, depending on the image processor's pixels). ``graphs=on``: the decoding steps at fixed
    shapes (backends/hf/graphs.py, the CPU stand-in of CUDA graphs)."""
    tol = 1e-10 if attn == "sdpa" else 5e-6
    be = HFBackend(str(tiny_llava_dir), dtype="float64", attn_implementation=attn, decode_graphs=graphs)
    torch = be._torch
    try:
        imgs = [load_image(p) for p in example_images]
        reqs = [_fleur_request(imgs[i % 2], c) for i, c in enumerate(CAPTIONS * 2)]
        be.generate(reqs[:3])  # learn the answer draft
        be.prefix_stats.reset()
        grouped = be.generate(reqs)
        assert be.prefix_stats.prefix_forwards == 2 and be.prefix_stats.rows == len(reqs)
        assert be.prefix_stats.draft_tokens_accepted > 0
        assert be.prefix_stats.head_reused == 2  # the system sentence's keys kept from the call before
        if graphs == "on":
            steps = be._prefix.packed
            assert steps and all(s.failed is None for s in steps.values()) and sum(s.replays for s in steps.values()) > 0
            assert {g.meta.get("decode_graphs") for g in grouped} == {"used"}
        be._prefix.release()  # the kept buffers freed: computed afresh, same numbers
        again = be.generate(reqs[:4])
        for a, b in zip(again, grouped[:4]):
            _assert_same_completion(a, b, tol=tol)
        for req, g in zip(reqs, grouped):
            enc = be.encode([req])
            n = enc["input_ids"].shape[1]
            gen = be.tokenizer.convert_tokens_to_ids([s.token for s in g.steps])
            ids = torch.cat([enc["input_ids"], torch.tensor([gen], dtype=torch.long)], dim=1)
            with torch.inference_mode():
                logits = be.net(input_ids=ids, pixel_values=enc["pixel_values"], attention_mask=torch.ones_like(ids)).logits[0, n - 1 :]
            logp = torch.log_softmax(logits, dim=-1)
            assert logp[: len(gen)].argmax(-1).tolist() == gen
            if g.finish_reason == "stop":
                assert int(logp[len(gen)].argmax()) in be.eos_ids
            else:
                assert len(gen) == req.config.max_new_tokens
            for t, step in enumerate(g.steps):
                top = logp[t].topk(len(step.top))
                assert [lp for _, lp in step.top] == pytest.approx(top.values.tolist(), abs=tol)
                assert step.logprob == pytest.approx(float(logp[t, gen[t]]), abs=tol)
                assert step.digits == pytest.approx(logp[t, be.digit_ids].tolist(), abs=tol)
    finally:
        be.close()


def test_a_generation_setting_that_changes_greedy_decoding_sends_requests_to_generate(fast, slow, example_images, caplog) -> None:
    """Read at every call: a length penalty set after loading is honoured as plain generate does;
    the fallback is logged and every answer says why."""
    img = load_image(example_images[0])
    reqs = [_fleur_request(img, c, max_new=12) for c in CAPTIONS[:3]]
    for be in (fast, slow):
        be.net.generation_config.exponential_decay_length_penalty = (1, 3.0)
    try:
        fast.prefix_stats.reset()
        with caplog.at_level("INFO", logger="capjudge"):
            out = fast.generate(reqs)
        assert fast.prefix_stats.rows == 0
        why = "fallback: the model's generation config sets exponential_decay_length_penalty"
        assert [o.meta["prefix_reuse"] for o in out] == [why] * 3
        assert why.removeprefix("fallback: ") in caplog.text
        for req, o in zip(reqs, out):
            _assert_same_completion(o, slow.generate_one(req))
    finally:
        for be in (fast, slow):
            be.net.generation_config.exponential_decay_length_penalty = None
    fast.prefix_stats.reset()
    fast.generate(reqs)
    assert fast.prefix_stats.rows == len(reqs)  # back on the fast path


def test_a_prompt_opening_with_the_image_does_not_leave_a_stale_head(tiny_llava_dir: Path, example_images) -> None:
    """A group with no tokens before the image writes its prefix from slot 0; the next group with
    the earlier system sentence must compute that sentence again, not reuse what was overwritten."""
    from tokenizers import processors

    be = HFBackend(str(tiny_llava_dir), dtype="float64", chat_format="template")
    be.processor.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'][0]['text'] }} {% elif m['role'] == 'user' %}"
        "{% for it in m['content'] %}{% if it['type'] == 'image' %}<image>\n{% else %}{{ it['text'] }}{% endif %}{% endfor %}{% endif %}{% endfor %} ASSISTANT:"
    )
    be.tokenizer._tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")  # no BOS
    try:
        a, b = (load_image(p) for p in example_images)
        with_system = [_fleur_request(a, c) for c in CAPTIONS[:2]]
        image_first = [Request((Message("user", get_template("fleur").render(caption=c), images=(b,)),), GenerationConfig(max_new_tokens=16, top_logprobs=5)) for c in CAPTIONS[2:4]]
        assert be.format_prompt(image_first[0].messages).startswith("<image>")
        first = be.generate(with_system)
        be.generate(image_first)
        be.prefix_stats.reset()
        again = be.generate(with_system)
        assert be.prefix_stats.rows == 2 and be.prefix_stats.head_reused == 0
        for x, y in zip(again, first):
            _assert_same_completion(x, y, tol=1e-10)
    finally:
        be.close()


def test_a_group_that_fails_on_the_packed_path_is_answered_by_generate(fast, slow, example_images, monkeypatch, caplog) -> None:
    """A runtime failure of the packed path: logged, the group decoded by plain generate, and each
    answer's record says why."""
    img = load_image(example_images[0])
    reqs = [_fleur_request(img, c) for c in CAPTIONS[:3]]

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(fast._prefix, "_decode_chunk", boom)
    with caplog.at_level("WARNING", logger="capjudge"):
        out = fast.generate(reqs)
    assert "prefix reuse failed for a group of 3 (RuntimeError: boom)" in caplog.text
    for req, o in zip(reqs, out):
        assert o.meta["prefix_reuse"] == "fallback: the packed path failed (RuntimeError: boom)"
        _assert_same_completion(o, slow.generate_one(req))
    monkeypatch.undo()
    records = list(Judge("fleur", fast).score_many([Sample(example_images[0], c) for c in CAPTIONS[:2]]))
    assert [r.details["prefix_reuse"] for r in records] == ["used", "used"]


def test_a_long_prefix_is_computed_from_the_first_slot(fast, slow, example_images, monkeypatch) -> None:
    """Past HEAD_REUSE_MAX tokens the kept system-sentence keys are not reused (the rest would need
    the slower masked attention); the answers are the same."""
    from capjudge.backends.hf import prefix as hf_prefix

    monkeypatch.setattr(hf_prefix, "HEAD_REUSE_MAX", 10)
    img = load_image(example_images[0])
    reqs = [_fleur_request(img, c) for c in CAPTIONS[:3]]
    fast.generate(reqs)
    fast.prefix_stats.reset()
    out = fast.generate(reqs)
    assert fast.prefix_stats.head_reused == 0 and fast.prefix_stats.rows == len(reqs)
    for req, o in zip(reqs, out):
        _assert_same_completion(o, slow.generate_one(req))
