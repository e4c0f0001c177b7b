"""Many judges at once through Ray Data (capjudge.distributed, `capjudge score --ray`).

One local Ray instance with 2 CPUs for the module (start-up costs seconds). Every run is checked
against a single-process run of the same judge: the same records, in input order, every sample
present, one model load per actor, and an actor that dies has its work redone.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from capjudge.distributed.config import JudgeConfig, plan_units
from capjudge.judges.judge import Judge
from capjudge.judges.scoring import image_key

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "images"


def _samples(n: int = 14) -> list[dict]:
    """Interleaved images (grouping reorders them), a missing image, an empty caption, references."""
    images = [str(EXAMPLES / "cats.jpg"), str(EXAMPLES / "dog.jpg")]
    out: list[dict] = [{"image": images[i % 2], "caption": f"a picture, caption number {i}", "references": [f"ref {i}"]} for i in range(n)]
    out[3] = {"image": str(EXAMPLES / "no-such-picture.jpg"), "caption": "a caption of a missing picture"}
    out[5] = {"image": images[1], "caption": "   "}
    out[7]["id"] = "own-id"
    return out


def _dicts(results) -> list[dict]:
    return [r.to_dict() for r in results]


def _same(a, b, rel: float) -> bool:
    """Equal records, floats to ``rel``."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, rel) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------------ no Ray needed
def test_units_hold_whole_image_groups_in_input_order() -> None:
    samples = [{"image": f"img{i % 5}.jpg", "caption": str(i)} for i in range(23)] + [{"image": "big.jpg", "caption": str(i)} for i in range(9)]
    units = list(plan_units(samples, 4))
    where: dict = {}
    for u, unit in enumerate(units):
        for _, sample in unit:
            where.setdefault(image_key(sample["image"]), set()).add(u)
        for key in {image_key(s["image"]) for _, s in unit}:  # input order inside each group
            group = [i for i, s in unit if image_key(s["image"]) == key]
            assert group == sorted(group)
        assert len(unit) <= 5 or len({image_key(s["image"]) for _, s in unit}) == 1  # a larger group is alone
    assert all(len(us) == 1 for us in where.values()), "an image group was split between units"
    assert sorted(i for unit in units for i, _ in unit) == list(range(len(samples)))


def test_config_carries_user_templates_and_paths(tmp_path: Path) -> None:
    from capjudge.prompts.registry import _TEMPLATES, get_method, register_template

    register_template("user:ray-test", "Rate {{ caption }} from 0 to 1. Score:", overwrite=True)
    method = get_method("vanilla").with_options(name="vanilla+ray-test", template="user:ray-test")
    config = JudgeConfig.from_judge_args(method, "scripted:Score: 0.5", cache_dir=str(tmp_path / "c"))
    assert dict(config.templates) == {"user:ray-test": "Rate {{ caption }} from 0 to 1. Score:"}
    assert Path(config.options["cache_dir"]).is_absolute() and config.workdir == os.getcwd()
    del _TEMPLATES["user:ray-test"]  # as in a fresh worker process
    judge = config.build()
    assert judge.score({"image": str(EXAMPLES / "dog.jpg"), "caption": "a dog"}).ok


def test_cli_ray_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"image": str(EXAMPLES / "dog.jpg"), "caption": "a dog"}) + "\n")
    base = ["score", "--method", "vanilla", "--backend", "scripted:Score: 0.5", "--input", str(data), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    assert main([*base, "--ray-actors", "2"]) == 2
    assert "need --ray" in capsys.readouterr().err
    assert main([*base, "--ray", "--ray-actors", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    api = ["score", "--method", "vanilla", "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--input", str(data), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    assert main([*api, "--ray", "--max-cost", "1"]) == 2
    assert "--max-cost cannot be used with --ray" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_plan_message_says_the_concurrency_is_per_actor() -> None:
    from capjudge.cli.ray import describe as _describe

    judge = Judge("vanilla", "openai-compatible:http://127.0.0.1:9/v1#m", backend_options={"concurrency": 8})
    lines = _describe(3, 0.0, judge, "/c")
    assert any("up to 3 x 8 = 24 requests in flight" in line for line in lines)
    assert any("share the response cache /c" in line for line in lines)


# ------------------------------------------------------------------ a local Ray instance
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray", reason="Ray is an extra (pip install 'capjudge[ray]'; make test installs it)")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_scripted_two_actors_equal_a_single_process_run_even_when_one_dies(ray_local, tmp_path: Path) -> None:
    from capjudge.distributed import score_list
    from capjudge.testing.ray_workers import DieOnce, scripted_caption_backend

    samples = _samples(16)
    # visce2 asks a first step per image (in each actor that judges the image) before scoring.
    single = _dicts(Judge("visce2", scripted_caption_backend(), batch_size=3).score_many(samples))
    marker = tmp_path / "died"
    many = _dicts(score_list(samples, "visce2", DieOnce(marker), actors=2, batch_size=3))
    assert marker.exists(), "no actor died: the retry was not tested"
    assert many == single  # every sample once, in input order, the records one process makes
    assert [r["status"] for r in single].count("error") == 2
    assert single[7]["id"] == "own-id" and single[8]["id"] == "8"


@pytest.mark.slow
@pytest.mark.hf
def test_tiny_hf_model_one_load_per_actor(ray_local, tiny_llava_dir: Path, tmp_path: Path) -> None:
    from capjudge.distributed import score_list
    from capjudge.testing.ray_workers import CountingLoads

    samples = _samples(12)
    spec = f"hf:{tiny_llava_dir}"
    single = _dicts(Judge("fleur", spec, batch_size=4).score_many(samples))
    log = tmp_path / "loads.txt"
    many = _dicts(score_list(samples, "fleur", CountingLoads(spec, log), actors=2, batch_size=4))
    # float32 on CPU: the last digits of a probability depend on the torch threads and on what
    # the process computed before (one process judged the cats before the dog; an actor may not),
    # ~1e-7 relative. Everything else is equal.
    assert _same(many, single, rel=1e-5)
    assert sum(1 for r in many if r["status"] == "ok" and r["smoothed"]) == 10
    pids = log.read_text().split()
    assert 1 <= len(pids) <= 2 and len(set(pids)) == len(pids), f"loads per actor process: {pids}"
    assert str(os.getpid()) not in pids  # the driver never loads the model


@pytest.mark.slow
def test_a_unit_that_always_kills_its_actor_becomes_resumable_errors(ray_local) -> None:
    from capjudge.distributed.config import JudgeConfig
    from capjudge.distributed.ray_run import RayOptions, score_stream
    from capjudge.testing.ray_workers import DieOn, scripted_caption_backend

    samples = [{"image": str(EXAMPLES / "cats.jpg"), "caption": f"cat {i}"} for i in range(4)]
    samples += [{"image": str(EXAMPLES / "dog.jpg"), "caption": "POISON dog"}, {"image": str(EXAMPLES / "dog.jpg"), "caption": "another dog"}]
    config = JudgeConfig.from_judge_args("vanilla", DieOn("POISON"), batch_size=4)
    got = dict(score_stream(samples, config, RayOptions(actors=1, task_retries=1)))
    assert sorted(got) == list(range(len(samples)))  # nothing lost
    single = _dicts(Judge("vanilla", scripted_caption_backend(), batch_size=4).score_many(samples[:4]))
    assert [got[i].to_dict() for i in range(4)] == single
    for i in (4, 5):  # the dog's unit: killed its actor on every try
        assert got[i].status == "error" and got[i].details["resumable"] is True
        assert "failed 2 time(s)" in got[i].error and got[i].error.startswith(f"sample {i}: ")


@pytest.mark.slow
def test_cli_score_ray_writes_the_same_results_file(ray_local, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    samples = _samples(10)
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in samples) + "{not json\n")
    common = ["score", "--method", "vanilla", "--backend", "scripted:Score: 0.42", "--input", str(data), "--batch-size", "3"]
    assert main([*common, "--out", str(tmp_path / "one.jsonl"), "--cache-dir", str(tmp_path / "c1")]) == 0
    assert main([*common, "--out", str(tmp_path / "ray.jsonl"), "--cache-dir", str(tmp_path / "c2"), "--ray", "--ray-actors", "2"]) == 0
    assert "Ray: 2 actor(s)" in capsys.readouterr().err
    one = (tmp_path / "one.jsonl").read_text().splitlines()
    assert (tmp_path / "ray.jsonl").read_text().splitlines() == one and len(one) == 11
    # Both actors wrote their answers into the one cache folder (diskcache is process-safe).
    from capjudge.backends.cache import ResponseCache

    assert len(ResponseCache(tmp_path / "c2")) == len(ResponseCache(tmp_path / "c1")) == 8


@pytest.mark.slow
def test_openai_protocol_server_concurrency_is_per_actor(ray_local) -> None:
    from capjudge.distributed import score_list
    from openai_fake_server import running_server

    samples = [s for s in _samples(16) if s["caption"].strip()]
    with running_server(delay=0.2) as server:
        spec = f"openai-compatible:{server.base_url}#fake-model"
        single = _dicts(Judge("fleur", spec, backend_options={"concurrency": 2}).score_many(samples))
        server.reset()
        # units of whole image groups, at least 4 x concurrency = 8 samples: one per image here
        many = _dicts(score_list(samples, "fleur", spec, actors=2, batch_size=4, backend_options={"concurrency": 2}))
        assert server.max_concurrent <= 2 * 2  # actors x concurrency, never more
        assert server.count == len(samples) - 1  # each sample asked once (the missing image never)
    assert many == single
    assert sum(1 for r in many if r["smoothed"]) == len(samples) - 1  # FLEUR smoothing from top_logprobs


@pytest.mark.slow
def test_score_dataset_returns_results_in_input_order(ray_local) -> None:
    from capjudge.distributed import score_dataset
    from capjudge.testing.ray_workers import scripted_caption_backend

    samples = [s for s in _samples(12) if "references" in s]
    ds = ray_local.data.from_items(samples)
    rows = score_dataset(ds, "reference", scripted_caption_backend, actors=2, batch_size=3).take_all()
    single = _dicts(Judge("reference", scripted_caption_backend(), batch_size=3).score_many(samples))
    assert [r["row"] for r in rows] == list(range(1, len(samples) + 1))
    assert [json.loads(r["record"]) for r in rows] == single
    assert [r["score"] for r in rows] == [s["score"] for s in single]


@pytest.mark.slow
def test_a_model_that_cannot_load_stops_the_run(ray_local) -> None:
    from capjudge.backends.lazy import BackendLoadError
    from capjudge.distributed import score_list
    from capjudge.testing.ray_workers import CannotLoad

    with pytest.raises(BackendLoadError, match="no-such-model"):
        score_list(_samples(8), "vanilla", CannotLoad("no-such-model"), actors=1)

