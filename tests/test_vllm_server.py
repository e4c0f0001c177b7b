"""capjudge against a real vLLM OpenAI-compatible server (vLLM's CPU build) on a tiny LLaVA.

One server per test session (about 45-90 s to start, ~3 GB of memory), stopped at the end. The
server runs in the vLLM venv that ``make test`` builds (tools/vllm_venv.sh, cached per machine);
these tests never skip in CI, and skip locally only where that venv is absent.

The model directory's generation_config.json sets a repetition penalty, as some released models'
do (exaggerated here: the tiny model's answers are far from ties, realistic values of 1.1-1.3 do
not move them). vLLM applies it to every request that does not say otherwise, so these tests also
prove that capjudge's requests pin it (``neutral_penalties``) and greedy answers stay the model's own.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.prompts.registry import get_method

pytestmark = [pytest.mark.slow, pytest.mark.hf, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[1]
GEN_CONFIG_PENALTY = 100.0


def _vllm_python() -> Path:
    env = os.environ.get("CAPJUDGE_VLLM_PYTHON")
    if env:
        return Path(env)
    out = subprocess.run([str(ROOT / "tools" / "vllm_venv.sh"), "--print-path"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's python (built by ``make test``)."""
    py = _vllm_python()
    given = bool(os.environ.get("CAPJUDGE_VLLM_PYTHON"))  # make test sets it after building the venv
    # A venv of tools/vllm_venv.sh is complete once it holds its stamp (a build may have died midway).
    ready = py.exists() and (given or (py.parents[1] / ".capjudge-complete").exists())
    if not ready:
        if given or os.environ.get("CI"):
            pytest.fail(f"the vLLM venv is missing or incomplete at {py}: `make test` builds it (tools/vllm_venv.sh)")
        pytest.skip(f"vLLM venv absent ({py}); build it with tools/vllm_venv.sh (make test does)")
    return py


@pytest.fixture(scope="session")
def vllm_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One tiny LLaVA (head size 32) in HF layout and in vLLM layout; the vLLM copy's
    generation_config.json carries a repetition penalty."""
    from capjudge.testing.vllm_server import build_tiny_llava_for_vllm

    hf_dir, vllm_dir = build_tiny_llava_for_vllm(tmp_path_factory.mktemp("tiny-llava-vllm"))
    cfg_path = vllm_dir / "generation_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["repetition_penalty"] = GEN_CONFIG_PENALTY
    cfg_path.write_text(json.dumps(cfg))
    return hf_dir, vllm_dir


@pytest.fixture(scope="session")
def vllm_server(vllm_python: Path, vllm_models: tuple[Path, Path]):
    """The session's one vLLM server (accepts a request's chat template, for the template test)."""
    from capjudge.testing.vllm_server import VLLMServer

    server = VLLMServer(vllm_python, vllm_models[1], extra_args=["--trust-request-chat-template"])
    server.start(timeout=420)
    print(f"\nvLLM server ready in {server.startup_s:.1f} s")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hf_tiny(vllm_models: tuple[Path, Path]):
    """The same weights through the HF backend, preprocessing images as vLLM does (no padding)."""
    from capjudge.backends.hf import HFBackend

    backend = HFBackend(str(vllm_models[0]), pad_square=False, dtype="float32", batch_size=8)
    yield backend
    backend.close()


def _samples(example_images: list[Path]) -> list[Sample]:
    caps = ["A cat sleeping on a sofa.", "Two dogs running in the park.", "A man riding a red bike on the street.", "Several people at the beach."]
    return [Sample(img, c, id=f"{img.stem}-{i}") for img in example_images for i, c in enumerate(caps)]


# Same weights, same dtype (float32), same prompt: the measured differences are ~1e-5 (CPU kernels).
TOLERANCE = 5e-5


def test_fleur_smoothing_from_vllm_top_logprobs(vllm_server, hf_tiny, example_images) -> None:
    """FLEUR smoothing reads vLLM's top_logprobs and agrees with HF's exact digit probabilities."""
    m = get_method("fleur")
    samples = _samples(example_images)
    served = Judge(m, vllm_server.spec, system=m.system, backend_options={"add_special_tokens": True})
    local = Judge(m, hf_tiny, system=m.system)
    rv, rh = list(served.score_many(samples)), list(local.score_many(samples))
    assert all(r.ok and r.smoothed for r in rv), [r.error for r in rv]
    for v, h in zip(rv, rh):
        assert v.raw == h.raw
        assert v.details["backend_meta"]["top_logprobs"] == 20
        assert abs(v.score - h.score) < TOLERANCE, (v.id, v.score, h.score)
        assert v.score != float(v.raw)  # smoothed, not the printed number
    served.close()


def test_pairwise_verdicts_match_hf(vllm_server, hf_tiny, example_images) -> None:
    """Dual-sided pairwise judging through vLLM gives HF's verdicts and votes."""
    m = get_method("gpt4v-pairwise")
    pairs = [
        {"image": str(example_images[0]), "caption_a": "A cat sleeping on a sofa.", "caption_b": "Two dogs running in the park.", "id": "p1"},
        {"image": str(example_images[1]), "caption_a": "A dog on the grass.", "caption_b": "A red bus on a street.", "id": "p2"},
        {"image": str(example_images[1]), "caption_a": "Several people at the beach.", "caption_b": "A dog on the grass.", "id": "p3"},
    ]
    served = Judge(m, vllm_server.spec, system=m.system, backend_options={"add_special_tokens": True})
    local = Judge(m, hf_tiny, system=m.system)
    rv, rh = list(served.compare_many(pairs)), list(local.compare_many(pairs))
    assert all(r.ok for r in rv), [r.error for r in rv]
    assert [r.votes for r in rv] == [r.votes for r in rh]
    assert [r.verdict for r in rv] == [r.verdict for r in rh]
    assert {v for r in rv for v in r.votes} <= {"A", "B", "tie"}
    served.close()


def test_deterministic_request_fields(vllm_server, hf_tiny, example_images) -> None:
    """Greedy answers are repeatable and immune to the model's generation_config.json: capjudge
    sends temperature 0 and neutral penalties; without the penalties the server's default (the
    model's repetition penalty) changes the answer's probabilities."""
    from capjudge.backends import base
    from capjudge.backends.openai import OpenAIBackend

    m = get_method("fleur")
    pinned = OpenAIBackend("tiny", kind="openai-compatible", base_url=vllm_server.base_url, add_special_tokens=True, concurrency=4)
    loose = OpenAIBackend("tiny", kind="openai-compatible", base_url=vllm_server.base_url, add_special_tokens=True, neutral_penalties=False)
    judge = Judge(m, pinned, system=m.system)
    request = judge.score_request(Sample(example_images[0], "A cat sleeping on a sofa."))
    body = pinned._params(request, with_logprobs=True)
    assert body["temperature"] == 0.0
    assert body["extra_body"] == {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "add_special_tokens": True}
    # Repeats, one at a time and concurrently, give the same tokens and log-probabilities.
    outs = pinned.generate([request] * 4) + [pinned.generate_one(request)]
    first = outs[0]
    assert isinstance(first, base.Completion)
    for out in outs[1:]:
        assert isinstance(out, base.Completion)
        assert out.text == first.text
        assert [(s.token, s.logprob) for s in out.steps] == [(s.token, s.logprob) for s in first.steps]
    assert first.text == hf_tiny.generate_one(request).text  # the model's own greedy answer
    # Without the pinned fields the model's repetition penalty (generation_config.json) applies:
    # the prompt's tokens ("0", ".", the digits) are penalised and the greedy answer changes.
    other = loose.generate_one(request)
    assert other.text != first.text
    pinned.close()
    loose.close()


def test_bos_pitfall_detected_and_fixed(vllm_server, hf_tiny, example_images) -> None:
    """The tiny model's chat template (like llava-hf's) has no <s>, and vLLM adds no special
    tokens to a rendered chat template: the served prompt lacks the BOS that HF's has. Parity
    finds it at token 0; add_special_tokens=true, or a chat template that writes the BOS, fixes it."""
    from capjudge.parity import run_parity
    from capjudge.prompts.server import server_chat_template

    samples = _samples(example_images)
    broken = run_parity(samples, hf_tiny, vllm_server.spec, method="fleur")
    assert broken.prompt_checked == 5 and broken.prompt_differs == 5
    diff = broken.first_token_diff
    assert diff is not None and diff.index == 0 and diff.a_token == "<s>" and diff.b_token != "<s>"
    assert diff.a_length == diff.b_length + 1
    assert diff.hint and "add_special_tokens" in diff.hint
    assert not broken.within(TOLERANCE)

    for fix in ({"add_special_tokens": True}, {"extra_body": {"chat_template": server_chat_template("llava_v1")}}):
        fixed = run_parity(samples, hf_tiny, vllm_server.spec, method="fleur", backend_options_b=fix)
        assert fixed.prompt_checked == 5 and fixed.prompt_differs == 0, fixed.first_token_diff
        assert fixed.n_both == len(samples) and fixed.same_answer == 1.0
        assert fixed.max_abs_diff is not None and fixed.max_abs_diff < TOLERANCE
        assert fixed.within(TOLERANCE)
        assert fixed.kendall_tau_b == pytest.approx(1.0) and fixed.spearman == pytest.approx(1.0)
        # The missing BOS moves scores more than the fixed prompt's numerical noise does.
        assert broken.max_abs_diff is not None and broken.max_abs_diff > fixed.max_abs_diff


def test_parity_cli_json(vllm_server, vllm_models, example_images, tmp_path, capsys) -> None:
    """`capjudge parity` prints one JSON object and exits 5 outside the tolerance, 0 within."""
    from capjudge.cli import main

    inp = tmp_path / "samples.jsonl"
    pairs = tmp_path / "pairs.jsonl"
    inp.write_text("".join(json.dumps({"image": p.name, "caption": c, "id": f"{p.stem}{i}"}) + "\n" for p in example_images for i, c in enumerate(["A cat on a sofa.", "A dog on the grass."])))
    pairs.write_text(json.dumps({"image": example_images[0].name, "caption_a": "A cat on a sofa.", "caption_b": "A dog on the grass.", "id": "q1"}) + "\n")
    common = ["parity", "--a", f"hf:{vllm_models[0]}", "--a-opt", "pad_square=false", "--b", vllm_server.spec, "--input", str(inp), "--pairs", str(pairs), "--images", str(example_images[0].parent), "--format", "json", "--tolerance", str(TOLERANCE)]
    assert main(common) == 5
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["prompt_differs"] == report["prompt_checked"] == 4
    assert report["first_token_diff"]["a_token"] == "<s>"
    assert main([*common, "--b-opt", "add_special_tokens=true"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["prompt_differs"] == 0 and report["n_both"] == 4 and report["n_pairs_both"] == 1 and report["verdict_flips"] == 0
    assert report["max_abs_diff"] < TOLERANCE
