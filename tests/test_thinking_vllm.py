"""Open thinking models on a real vLLM server (issue 22, items 2 and 5): the tiny thinking
Qwen3-VL (capjudge.testing.tiny_thinking, heads of 32 for vLLM's CPU attention) served by vLLM
0.32's CPU build with ``--reasoning-parser qwen3``. The server sends the reasoning in
``message.reasoning`` and the answer in ``content``; capjudge reads the answer (never 97 from the
reasoning), FLEUR's smoothed score equals the HF backend's on the same weights (which
tests/test_thinking_hf.py proves equal to the official rule at the final answer's digits), the
reasoning is in the record, ``--thinking off`` sends ``chat_template_kwargs`` (the template closes
the reasoning, the parser passes the text as content), ``compare`` reads the verdicts after the
reasoning, and a reasoning cut off (empty content, ``finish_reason: length``) is an error record.

One server for the module (several minutes to start on a busy CPU); skipped where
``CAPJUDGE_VLLM_PYTHON`` (the vLLM venv's python, tools/vllm_venv.sh) is not set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capjudge import Judge
from capjudge.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.hf, pytest.mark.vllm]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CATS = EXAMPLES / "images" / "cats.jpg"
REASONING = "score 97 out of 100, or 3"
TOLERANCE = 5e-5  # same weights in float32, CPU kernels of two libraries


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torchvision")
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    return build_tiny_thinking_vlm(tmp_path_factory.mktemp("tiny-thinking-vllm") / "model", head_dim=32)


@pytest.fixture(scope="module")
def server(model: Path):
    python = os.environ.get("CAPJUDGE_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("CAPJUDGE_VLLM_PYTHON (the vLLM venv's python, tools/vllm_venv.sh) is not set")
    from capjudge.testing.vllm_server import VLLMServer

    srv = VLLMServer(python, model, extra_args=["--reasoning-parser", "qwen3"])
    srv.start(timeout=600)
    yield srv
    srv.stop()


def test_score_reads_the_content_after_the_reasoning_field(server, model: Path) -> None:
    served = Judge("fleur", server.spec, backend_options={"thinking_budget": 16}).score(CATS, "two cats lying on a blanket")
    local = Judge("fleur", f"hf:{model}", backend_options={"thinking_budget": 16}).score(CATS, "two cats lying on a blanket")
    assert served.error is None, served.error
    assert served.details["reasoning"] == REASONING and local.details["reasoning"] == REASONING
    assert served.raw_score == local.raw_score and served.raw_score not in (0.97, 0.3)
    assert served.smoothed and abs(served.score - local.score) < TOLERANCE, (served.score, local.score)
    first = Judge("vanilla", server.spec, backend_options={"thinking_budget": 16}).score(CATS, "a cat")
    assert first.details["reasoning"] == REASONING and first.raw_score not in (97, 100, 3)
    cut = Judge("fleur", server.spec, max_new_tokens=2).score(CATS, "a cat")
    assert cut.score is None and "did not finish within the token budget" in (cut.error or ""), cut.error


def test_thinking_off_and_compare_through_the_cli(server, tmp_path: Path) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"id": "c", "image": "cats.jpg", "caption": "two cats"}) + "\n", encoding="utf-8")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"id": "p", "image": "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}) + "\n", encoding="utf-8")
    common = ["--backend", server.spec, "--images", str(EXAMPLES / "images"), "--no-cache", "--quiet"]
    off = tmp_path / "off.jsonl"
    assert main(["score", "--method", "fleur", *common, "--input", str(rows), "--out", str(off), "--thinking", "off"]) == 0
    rec = json.loads(off.read_text().splitlines()[0])
    assert rec["status"] == "ok" and "reasoning" not in rec["details"] and 0 < rec["raw_score"] < 1
    verdicts = tmp_path / "verdicts.jsonl"
    assert main(["compare", *common, "--input", str(pairs), "--out", str(verdicts), "--thinking-budget", "16"]) == 0
    got = json.loads(verdicts.read_text().splitlines()[0])
    assert got["status"] == "ok" and got["verdict"] in ("A", "B", "tie")
    assert got["details"]["reasoning"] == [REASONING, REASONING]
    assert all(v.strip() in ("A", "B") for v in got["raw"])
