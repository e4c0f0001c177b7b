"""``vllm:MODEL`` on vLLM's CPU build (issue 33, item 4): capjudge starts the server for the tiny
LLaVA itself (its preset's ``llava_v1`` chat template, prefix caching, ``--max-logprobs``), and
the bundled examples get the HF backend's records on the same weights: the same answers, verdicts
and votes, and scores within the float tolerance of tests/test_vllm_server.py. Then ``close()``
leaves no process of the server's group.

One server for the module (a start takes 1-2 minutes on 2 busy cores). The server runs in the
vLLM venv that ``make test`` builds and names in ``CAPJUDGE_VLLM_PYTHON``; skipped only where that
variable is unset outside CI."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capjudge import Judge

pytestmark = [pytest.mark.slow, pytest.mark.hf, pytest.mark.vllm]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TOLERANCE = 5e-5  # tests/test_vllm_server.py's: same weights in float32, CPU kernels of two libraries


def _rows(name: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (EXAMPLES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny LLaVA (head size 32) in transformers' layout and in vLLM's."""
    from capjudge.testing.vllm_server import build_tiny_llava_for_vllm

    return build_tiny_llava_for_vllm(tmp_path_factory.mktemp("tiny-llava-vllm-kind"))


@pytest.fixture(scope="module")
def served(models: tuple[Path, Path]) -> Iterator[object]:
    """The module's one ``vllm:`` backend, its server started by capjudge."""
    python = os.environ.get("CAPJUDGE_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CAPJUDGE_VLLM_PYTHON is unset: `make test` builds the vLLM venv (tools/vllm_venv.sh) and sets it")
        pytest.skip("CAPJUDGE_VLLM_PYTHON (the vLLM venv's python, tools/vllm_venv.sh; make test sets it) is not set")
    from capjudge.backends.registry import load_backend

    old = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; vLLM's CPU default is far larger
    try:
        backend = load_backend(f"vllm:{models[1]}?dtype=float32&max_model_len=2048&enforce_eager=true", python=python, startup_timeout=600)
    finally:
        if old is None:
            os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        else:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = old
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf(models: tuple[Path, Path]) -> Iterator[object]:
    """The same weights on the HF backend, with its defaults (LLaVA-1.5's preset: images padded to
    a square, which ``vllm:`` does before sending them)."""
    from capjudge.backends.registry import load_backend

    backend = load_backend(f"hf:{models[0]}?dtype=float32")
    yield backend
    backend.close()


def test_examples_get_the_hf_backends_records(served, hf) -> None:
    """FLEUR and vanilla on examples/captions.jsonl, pairwise on examples/pairs.jsonl: the same
    records through ``vllm:`` as through ``hf:``."""
    command = " ".join(served.server.command)
    assert "--enable-prefix-caching" in command and "--max-logprobs 20" in command and command.endswith("llava_v1.jinja")
    rows = _rows("captions.jsonl")
    for method in ("fleur", "vanilla"):
        got = list(Judge(method, served, images_root=EXAMPLES / "images").score_many(rows))
        want = list(Judge(method, hf, images_root=EXAMPLES / "images").score_many(rows))
        assert all(r.ok for r in got), [r.error for r in got]
        for v, h in zip(got, want):
            assert (v.id, v.status, v.raw, v.smoothed, v.scale, v.details["judge_preset"]) == (h.id, h.status, h.raw, h.smoothed, h.scale, h.details["judge_preset"])
            assert v.score is not None and h.score is not None and abs(v.score - h.score) < TOLERANCE, (method, v.id, v.score, h.score)
    pairs = _rows("pairs.jsonl")
    got_pairs = list(Judge("gpt4v-pairwise", served, images_root=EXAMPLES / "images").compare_many(pairs))
    want_pairs = list(Judge("gpt4v-pairwise", hf, images_root=EXAMPLES / "images").compare_many(pairs))
    assert all(r.ok for r in got_pairs), [r.error for r in got_pairs]
    assert [(r.verdict, r.votes, r.raw) for r in got_pairs] == [(r.verdict, r.votes, r.raw) for r in want_pairs]


def test_close_leaves_no_server_process(served) -> None:
    group = served.server.pid
    assert group is not None
    served.close()
    deadline = time.monotonic() + 30  # killed members are reaped by init a moment later
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail(f"processes of the server's group {group} are still there after close()")
