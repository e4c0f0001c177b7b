"""The verified architecture matrix of the HF backend: every architecture of
capjudge.testing.tiny_vlm runs every kind of method through the real ``Judge`` API (FLEUR
smoothing, VisCE2's two steps, dual-sided pairwise, listwise), batches equal batch size 1 and run
as one batch, and a missing torchvision gives the install command. The "Verified judges"
table is checked against this matrix (:data:`MATRIX`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capjudge.testing.tiny_vlm import ARCHITECTURES, needs_torchvision

ROOT = Path(__file__).resolve().parents[1]

MATRIX_METHODS = ("fleur", "visce2", "gpt4v-pairwise", "listwise")
"""The methods each architecture runs below (one of each kind: smoothed score, two-step score,
pairwise, listwise)."""

MATRIX = {arch: {"backends": ("hf",), "methods": MATRIX_METHODS} for arch in ARCHITECTURES}
"""What the tests of this module prove per architecture (the docs/backends.md table must say the same)."""

ALSO_VERIFIED: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "llava": (
        ("llama.cpp", "test_llamacpp.py", ("test_fleur_end_to_end_in_process", "test_visce2_end_to_end_in_process", "test_pairwise_end_to_end_in_process")),
        ("vLLM server", "test_vllm_server.py", ("test_fleur_smoothing_from_vllm_top_logprobs", "test_pairwise_verdicts_match_hf", "test_bos_pitfall_detected_and_fixed")),
    ),
    "qwen2_5_vl": (("llama.cpp", "test_llamacpp_families.py", ("test_fleur_and_visce2_end_to_end", "test_digit_logprobs_equal_llama_cpp_logits")),),
    "gemma3": (("llama.cpp", "test_llamacpp_families.py", ("test_fleur_and_visce2_end_to_end", "test_digit_logprobs_equal_llama_cpp_logits")),),
}
"""Backends besides HF that other test modules prove per architecture (backend, module, the tests
that prove it); the docs table's "Also on" column must say the same."""

ARCHS = sorted(ARCHITECTURES)
CAPTIONS = ["a cat lying on a bed.", "two dogs run in a park.", "a red bus on a street."]

pytestmark = [pytest.mark.hf, pytest.mark.slow]


@pytest.fixture(scope="module")
def backend_of(tiny_vlm):
    """``backend_of(arch)``: the tiny model of ``arch`` loaded once through the real HF backend,
    with its family's own chat format."""
    from capjudge.backends.hf import HFBackend

    loaded: dict[str, HFBackend] = {}

    def get(arch: str) -> HFBackend:
        if arch not in loaded:
            loaded[arch] = HFBackend(str(tiny_vlm(arch)), batch_size=4)  # the judge preset chosen from config.json
        return loaded[arch]

    yield get
    for backend in loaded.values():
        backend.close()


def _samples(example_images, n: int = 3):
    from capjudge import Sample

    return [Sample(example_images[i % 2], CAPTIONS[i % len(CAPTIONS)]) for i in range(n)]


@pytest.mark.parametrize("arch", ARCHS)
def test_fleur_smoothing(backend_of, example_images, arch: str) -> None:
    from capjudge import Judge

    results = list(Judge("fleur", backend_of(arch)).score_many(_samples(example_images, 4)))
    for r in results:
        assert r.ok and r.smoothed, (arch, r.raw, r.error)
        assert re.fullmatch(r"0\.[0-9]{1,2}", r.raw or ""), r.raw
        assert 0.0 <= r.score <= 1.0
        first = r.details["digit_probs"]["first"]
        assert len(first) == 10 and 0.5 < sum(first) <= 1.0 + 1e-6
        # The smoothed score is an expectation over the digits, not the printed number.
        assert r.score != pytest.approx(float(r.raw), abs=1e-9)
        assert r.details["usage"]["prompt_tokens"] > 16  # the image tokens are in the prompt
    assert len({round(r.score, 6) for r in results}) > 1, "scores do not depend on image and caption"


@pytest.mark.parametrize("arch", ARCHS)
def test_a_batch_runs_as_one_batch_and_equals_batch_size_one(backend_of, example_images, monkeypatch, arch: str) -> None:
    """Per-sample image lists: several samples with their own images go through the processor
    and the model as ONE batch (no per-request retry), with the results of batch size 1."""
    from capjudge import Judge

    backend = backend_of(arch)
    monkeypatch.setattr(backend, "prefix_reuse", False)  # this test is about plain batches
    sizes: list[int] = []
    real = backend._generate_batch

    def spy(reqs):
        sizes.append(len(reqs))
        return real(reqs)

    monkeypatch.setattr(backend, "_generate_batch", spy)
    judge = Judge("fleur", backend)
    samples = _samples(example_images, 3)
    batched = list(judge.score_many(samples))
    assert sizes == [3], f"{arch}: batch sizes {sizes} (a failed batch is retried one by one)"
    sizes.clear()
    single = [judge.score(s) for s in samples]
    assert sizes == [1, 1, 1]
    for b, s in zip(batched, single):
        assert b.ok and s.ok, (b.error, s.error)
        assert b.raw == s.raw
        assert b.score == pytest.approx(s.score, abs=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_visce2_two_steps(backend_of, example_images, arch: str) -> None:
    from capjudge import Judge

    results = list(Judge("visce2", backend_of(arch)).score_many(_samples(example_images, 3)))
    for r in results:
        assert r.ok, (arch, r.error)
        assert r.context, "step 1 (the visual context) is kept with the result"
        assert 0.0 <= r.score <= 100.0
    # Step 1 is asked once per image: the two samples of the first image share their context.
    assert results[0].context == results[2].context


@pytest.mark.parametrize("arch", ARCHS)
def test_dual_sided_pairwise(backend_of, example_images, arch: str) -> None:
    from capjudge import Judge

    judge = Judge("gpt4v-pairwise", backend_of(arch))
    results = list(judge.compare_many([(example_images[0], CAPTIONS[0], CAPTIONS[1]), (example_images[1], CAPTIONS[1], CAPTIONS[2])]))
    for r in results:
        assert r.ok, (arch, r.error)
        assert r.verdict in ("A", "B", "tie")
        assert len(r.raw) == 2 and all(t in ("A", "B") for t in r.raw), r.raw  # both orders asked


@pytest.mark.parametrize("arch", ARCHS)
def test_listwise(backend_of, example_images, arch: str) -> None:
    from capjudge import Judge, Sample

    samples = [Sample(example_images[0], c) for c in CAPTIONS]
    results = list(Judge("listwise", backend_of(arch)).score_many(samples))
    assert [r.details["list_position"] for r in results] == [1, 2, 3]
    assert len({r.raw for r in results}) == 1  # one prompt, one answer for the whole list
    for r in results:
        assert r.ok, (arch, r.error)
        assert 0.0 <= r.score <= 1.0


def test_without_torchvision_the_error_names_the_install_command(tiny_vlm) -> None:
    """In a process where torchvision cannot be imported, the six architectures whose processor
    needs it fail with a BackendError naming the pip command; the others load."""
    folders = {arch: str(tiny_vlm(arch)) for arch in ARCHS}
    code = (
        "import json, sys\n"
        "sys.modules['torchvision'] = None  # import torchvision now fails, as when not installed\n"
        "from capjudge.backends.base import BackendError\n"
        "from capjudge.backends.hf import HFBackend\n"
        "out = {}\n"
        "for arch, folder in json.loads(sys.argv[1]).items():\n"
        "    try:\n"
        "        HFBackend(folder).close()\n"
        "        out[arch] = 'loaded'\n"
        "    except BackendError as exc:\n"
        "        out[arch] = str(exc)\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(folders)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for arch in ARCHS:
        if needs_torchvision(arch):
            assert "it needs torchvision" in out[arch] and "pip install 'torchvision==0." in out[arch], (arch, out[arch])
            assert folders[arch] in out[arch]
        else:
            assert out[arch] == "loaded", (arch, out[arch])


# ------------------------------------------------------------------ the docs/backends.md table
def _readme_table() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    section = re.split(r"\n##+ ", text.split("\n### Verified judges\n", 1)[1], maxsplit=1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    table = {}
    for line in rows[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        table[cells["model_type"].strip("`")] = cells
    return table


def test_readme_verified_judges_table_matches_the_matrix() -> None:
    from capjudge.backends.hf.prefix import supports_prefix_reuse

    table = _readme_table()
    assert set(table) == set(MATRIX), "docs/backends.md rows and the test matrix name different architectures"
    for arch, proven in MATRIX.items():
        row = table[arch]
        assert row["Architecture"] == ARCHITECTURES[arch].title
        assert [b.strip() for b in row["Backends"].split(",")] == list(proven["backends"])
        assert [m.strip().strip("`") for m in row["Methods"].split(",")] == list(proven["methods"])
        assert row["Prefix reuse"] == ("yes" if supports_prefix_reuse(arch) else "no (plain batches)")
        assert row["Needs torchvision"] == ("yes" if needs_torchvision(arch) else "no")
        assert row["Also on"] == (", ".join(b for b, _, _ in ALSO_VERIFIED.get(arch, ())) or "-")


def test_other_backends_in_the_table_are_proven_by_tests_that_exist() -> None:
    import ast

    for arch, entries in ALSO_VERIFIED.items():
        for backend, module, tests in entries:
            tree = ast.parse((ROOT / "tests" / module).read_text(encoding="utf-8"))
            defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            missing = set(tests) - defined
            assert not missing, f"{arch} on {backend}: {module} lacks {sorted(missing)}"
