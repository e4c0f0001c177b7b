"""Slot refill on the HF backend (issue 33, item 1): long answers of varying length decode in
``batch_size`` slots, each refilled from the queue when its answer ends; the answers equal
independent decoding (float64: same tokens, log-probabilities to 1e-9 against one plain forward
over each whole prompt and answer)."""

from __future__ import annotations

import functools
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from capjudge.backends.base import GenerationConfig, Request  # noqa: E402
from capjudge.backends.hf import HFBackend  # noqa: E402
from capjudge.backends.hf.slot_attention import plan_groups  # noqa: E402
from refill_helpers import plain_logprobs, requests_of  # noqa: E402

pytestmark = pytest.mark.hf

LENGTHS = [140, 190, 128, 170, 135, 150, 260]  # planted: the endless model runs to its token limit
TOL = 1e-9


@pytest.mark.parametrize("call_cost", [0, None])
def test_refilled_slots_equal_one_plain_forward_in_float64(endless_model: Path, example_images: list[Path], call_cost: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``call_cost=0``: every row its own attention group (the grouped path at its most split)."""
    if call_cost is not None:
        from capjudge.backends.hf import refill

        monkeypatch.setattr(refill, "plan_groups", functools.partial(plan_groups, call_cost=call_cost))
    be = HFBackend(str(endless_model), dtype="float64", batch_size=3, thinking_budget=0)
    try:
        reqs = requests_of(example_images, LENGTHS)
        out = be.generate(reqs)
        assert be._refill is not None
        assert be._refill.prefills == len(reqs)
        if call_cost == 0:  # steps whose rows differ in length, computed group by group in every layer
            layers = be.net.config.text_config.num_hidden_layers
            assert be._refill.grouped_calls >= layers and be._refill.grouped_calls % layers == 0
        # 3 slots kept busy: the steps are about the tokens over 3, not the sum of each wave's longest
        assert be._refill.forwards < sum(LENGTHS) / 3 + max(LENGTHS)
        for req, c in zip(reqs, out):
            assert c.meta["refill"] == "used" and "prefix_reuse" not in c.meta
            assert c.finish_reason == "length" and len(c.steps) == req.config.max_new_tokens
            gen = be.tokenizer.convert_tokens_to_ids([s.token for s in c.steps])
            logp = plain_logprobs(be, req, gen)
            assert logp[: len(gen)].argmax(-1).tolist() == gen
            for t, step in enumerate(c.steps):
                assert step.logprob == pytest.approx(float(logp[t, gen[t]]), abs=TOL)
                assert [lp for _, lp in step.top] == pytest.approx(logp[t].topk(len(step.top)).values.tolist(), abs=TOL)
                assert step.digits == pytest.approx(logp[t, be.digit_ids].tolist(), abs=TOL)
    finally:
        be.close()


def test_refill_matches_one_request_at_a_time_and_can_be_turned_off(endless_model: Path, example_images: list[Path]) -> None:
    """Long answers of several lengths in 2 slots: the same as the batched path one request at a
    time; a short request keeps its path; ``refill=false`` leaves them all to ``generate``."""
    be = HFBackend(str(endless_model), batch_size=2, thinking_budget=0)
    off = HFBackend(str(endless_model), batch_size=1, thinking_budget=0, refill="false", prefix_reuse=False)
    try:
        reqs = requests_of(example_images, [136, 164, 128, 148])
        short = Request(reqs[0].messages, GenerationConfig(max_new_tokens=6, top_logprobs=2))  # short: not refilled
        got = be.generate([*reqs, short])
        ref = [off.generate([r])[0] for r in [*reqs, short]]
        assert off._refill is None and all("refill" not in c.meta for c in ref)
        assert [c.meta.get("refill") for c in got] == ["used"] * 4 + [None]
        for a, b in zip(got, ref):
            assert a.text == b.text and a.finish_reason == b.finish_reason
            assert [s.token for s in a.steps] == [s.token for s in b.steps]
            # float32: one forward per prompt either way, summation order of batched steps differs
            assert [s.logprob for s in a.steps] == pytest.approx([s.logprob for s in b.steps], abs=1e-4)
    finally:
        be.close()
        off.close()


def test_a_prompt_too_long_is_its_own_error_and_the_others_are_answered(endless_model: Path, example_images: list[Path]) -> None:
    from capjudge.backends.base import ContextLengthError

    be = HFBackend(str(endless_model), batch_size=2, thinking_budget=0)
    try:
        reqs = requests_of(example_images, [140, 5000, 134])
        out = be.generate(reqs)
        assert isinstance(out[1], ContextLengthError)
        assert [len(out[i].steps) for i in (0, 2)] == [140, 134]
    finally:
        be.close()


@pytest.mark.parametrize("graphs", ["off", "on"])
@pytest.mark.parametrize("arch", ["llava_next", "llava_onevision", "qwen2_vl", "qwen2_5_vl", "idefics3", "internvl", "mistral3", "gemma3", "paligemma"])
def test_every_architecture_refills_exactly_or_falls_back(tiny_vlm: Any, example_images: list[Path], arch: str, graphs: str) -> None:
    """Each tiny architecture: the refill path's answers equal one plain forward in float64, or
    (sliding windows, prefix-LM attention) the answers say why they were decoded otherwise; with
    ``decode_graphs=on`` through the fixed-shape steps (tests/test_hf_graphs.py)."""
    be = HFBackend(str(tiny_vlm(arch)), dtype="float64", batch_size=2, decode_graphs=graphs)
    try:
        reqs = requests_of(example_images, [130, 128, 140])
        out = be.generate(reqs)
        assert be._refill is not None
        if be._refill.unsupported:
            assert all(c.meta["refill"].startswith("fallback: ") for c in out)
            return
        for req, c in zip(reqs, out):
            assert c.meta["refill"] == "used" and c.meta.get("decode_graphs") == ("used" if graphs == "on" else None)
            gen = be.tokenizer.convert_tokens_to_ids([s.token for s in c.steps])
            logp = plain_logprobs(be, req, gen)
            assert logp[: len(gen)].argmax(-1).tolist() == gen
            if c.finish_reason == "stop":
                assert int(logp[len(gen)].argmax()) in be.eos_ids
            assert [s.logprob for s in c.steps] == pytest.approx([float(logp[t, g]) for t, g in enumerate(gen)], abs=TOL)
    finally:
        be.close()


def _cost(lengths: list[int], groups: tuple[tuple[int, int], ...], call_cost: int) -> int:
    return sum((b - a) * (max(lengths[a:b]) + 1) + call_cost for a, b in groups)


def test_attention_groups_are_the_cheapest_contiguous_split() -> None:
    """Against every split of up to 7 rows: contiguous, covering, and of the least cost."""
    rng = random.Random(3)
    for _ in range(200):
        m = rng.randint(1, 7)
        lengths = sorted((rng.randint(1, 2000) for _ in range(m)), reverse=True)
        cost = rng.choice([0, 64, 256, 4096])
        got = plan_groups(lengths, cost)
        assert got[0][0] == 0 and got[-1][1] == m and all(a[1] == b[0] for a, b in zip(got, got[1:]))
        best = min(
            _cost(lengths, tuple(zip((0, *cuts), (*cuts, m))), cost)
            for r in range(m)
            for cuts in itertools.combinations(range(1, m), r)
        )
        assert _cost(lengths, got, cost) == best
    assert plan_groups([]) == ()
    assert plan_groups([900, 880, 120, 110], 256) == ((0, 2), (2, 4))
    assert plan_groups([900, 880, 870], 256) == ((0, 3),)
