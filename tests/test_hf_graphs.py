"""Fixed-shape decoding steps of slot refill (``decode_graphs``; issue 33, item 2).

On CUDA the steps are captured as CUDA graphs; here, without a GPU, the same fixed-shape steps run
with the CPU stand-in that replays by running the step again into the captured output tensor. The
answers must equal one plain forward in float64, a failed capture or a replay that differs from
the eager step must fall back to eager steps with the same answers, and the option is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

from capjudge.backends.hf import HFBackend, check_options  # noqa: E402
from capjudge.backends.hf import refill as refill_module  # noqa: E402
from capjudge.backends.hf.graphs import BUCKET_MIN, bucket, eager_capture, mode  # noqa: E402
from capjudge.backends.options import OptionError  # noqa: E402
from capjudge.backends.registry import parse_spec  # noqa: E402
from refill_helpers import plain_logprobs, requests_of  # noqa: E402

pytestmark = pytest.mark.hf

LENGTHS = [150, 300, 128, 170]  # prompt + 300 passes 256 columns: two buckets
TOL = 1e-9


def _check_exact(be: HFBackend, reqs: list[Any], out: list[Any]) -> None:
    for req, c in zip(reqs, out):
        assert c.meta["refill"] == "used" and len(c.steps) == req.config.max_new_tokens
        gen = be.tokenizer.convert_tokens_to_ids([s.token for s in c.steps])
        logp = plain_logprobs(be, req, gen)
        assert logp[: len(gen)].argmax(-1).tolist() == gen
        assert [s.logprob for s in c.steps] == pytest.approx([float(logp[t, g]) for t, g in enumerate(gen)], abs=TOL)
        for t, step in enumerate(c.steps):
            assert [lp for _, lp in step.top] == pytest.approx(logp[t].topk(len(step.top)).values.tolist(), abs=TOL)


def test_fixed_shape_steps_equal_one_plain_forward_in_float64(endless_model: Path, example_images: list[Path]) -> None:
    be = HFBackend(str(endless_model), dtype="float64", batch_size=3, thinking_budget=0, decode_graphs="on")
    try:
        reqs = requests_of(example_images, LENGTHS)
        out = be.generate(reqs)
        steps = be._refill.graph_steps if be._refill else None
        assert steps is not None and steps.failed is None
        # one graph per combination of the 3 row groups' buckets (rows longest first), reused
        assert steps.row_groups == ((0, 1), (1, 2), (2, 3)) and steps.captures == len(set(steps.shapes)) >= 2
        assert all(list(key) == sorted(key, reverse=True) and set(key) <= {256, 512} for key in steps.shapes)
        assert (512, 256, 256) in steps.shapes  # the longest row past 256 columns, the others not
        assert steps.graphs == {} and steps.kv is None  # released after the call: buffers freed
        assert steps.replays == be._refill.forwards and be._refill.grouped_calls == 0
        assert all(c.meta["decode_graphs"] == "used" for c in out)
        _check_exact(be, reqs, out)
    finally:
        be.close()


def test_past_the_graph_limit_new_shapes_run_eagerly(endless_model: Path, example_images: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.backends.hf import graphs

    monkeypatch.setattr(graphs, "MAX_GRAPHS", 1)
    be = HFBackend(str(endless_model), dtype="float64", batch_size=3, thinking_budget=0, decode_graphs="on")
    try:
        reqs = requests_of(example_images, LENGTHS)
        out = be.generate(reqs)
        steps = be._refill.graph_steps if be._refill else None
        assert steps is not None and steps.failed is None and len(steps.shapes) == 1
        assert 0 < steps.replays < be._refill.forwards  # the other steps: eager
        assert all(c.meta["decode_graphs"] == "used" for c in out)
        _check_exact(be, reqs, out)
    finally:
        be.close()


def test_a_failed_capture_decodes_eagerly_and_says_why(endless_model: Path, example_images: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(step: Any) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(refill_module, "eager_capture", broken)
    be = HFBackend(str(endless_model), dtype="float64", batch_size=2, thinking_budget=0, decode_graphs="on")
    try:
        reqs = requests_of(example_images, LENGTHS[:3])
        out = be.generate(reqs)
        assert all(c.meta["decode_graphs"].startswith("fallback: capture failed (RuntimeError: operation not permitted") for c in out)
        assert be._refill is not None and be._refill.graph_steps is not None and be._refill.graph_steps.replays == 0
        _check_exact(be, reqs, out)
    finally:
        be.close()


def test_a_replay_that_differs_from_the_eager_step_is_not_used(endless_model: Path, example_images: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def drifting(step: Any) -> Any:
        replay = eager_capture(step)

        def wrong() -> Any:
            out = replay()
            out[:, 0] += 50.0  # token 0 becomes every row's argmax
            return out

        return wrong

    monkeypatch.setattr(refill_module, "eager_capture", drifting)
    be = HFBackend(str(endless_model), dtype="float64", batch_size=2, thinking_budget=0, decode_graphs="on")
    try:
        reqs = requests_of(example_images, LENGTHS[:2])
        out = be.generate(reqs)
        assert {c.meta["decode_graphs"] for c in out} == {"fallback: replayed step differs from the eager step"}
        _check_exact(be, reqs, out)
    finally:
        be.close()


def test_off_and_auto_on_a_cpu_decode_eagerly(endless_model: Path, example_images: list[Path]) -> None:
    for value in ("off", "auto"):
        be = HFBackend(str(endless_model), batch_size=2, thinking_budget=0, decode_graphs=value)
        try:
            out = be.generate(requests_of(example_images, [130, 140]))
            assert be._refill is not None and be._refill.graph_steps is None
            assert all("decode_graphs" not in c.meta for c in out)
        finally:
            be.close()


def test_the_option_is_checked_before_loading() -> None:
    assert [mode(v) for v in ("auto", "ON", "true", "no", "off")] == ["auto", "on", "on", "off", "off"]
    with pytest.raises(OptionError, match="decode_graphs='sometimes' is not one of auto, on, off"):
        check_options(parse_spec("hf:some/model"), decode_graphs="sometimes")
    assert check_options(parse_spec("hf:some/model"), decode_graphs="false")["decode_graphs"] == "off"


def test_buckets_are_powers_of_two_within_the_buffers() -> None:
    assert bucket(1, 4096) == BUCKET_MIN == 256
    assert [bucket(w, 4096) for w in (256, 257, 1000, 1025)] == [256, 512, 1024, 2048]
    assert bucket(1500, 1600) == 1600  # capped by the buffers' columns
    assert bucket(300, 200) == 300  # never fewer columns than the longest row holds
