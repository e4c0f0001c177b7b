"""Every command on the tiny offline models (issue 29, item 13): ``hf:tiny-llava``,
``hf:tiny-thinking``, ... are built once on first use into ``$CAPJUDGE_HOME/tiny-random-weights``,
named in records by a folder that says what it is, and every report says the scores are
meaningless; ``capjudge tiny list|build``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CAPJUDGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def prebuilt(home: Path, tiny_llava_dir: Path) -> Path:
    """tiny-llava already in its cache folder (the session's build, copied: no second build)."""
    from capjudge.testing.tiny_models import tiny_path

    target = tiny_path("tiny-llava")
    shutil.copytree(tiny_llava_dir, target)
    return target


def _score(tmp_path: Path, backend: str, *extra: str) -> tuple[int, list[dict]]:
    out = tmp_path / "out.jsonl"
    rc = main(["score", "--method", "fleur", "--backend", backend, "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", *extra])
    return rc, ([json.loads(x) for x in out.read_text().splitlines()] if out.exists() else [])


def test_tiny_list_names_the_models_and_where_they_go(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "list"]) == 0
    out = capsys.readouterr().out
    assert "hf:tiny-llava" in out and "hf:tiny-thinking" in out and "hf:tiny-qwen2-5-vl" in out
    assert str(home / "tiny-random-weights" / "tiny-llava-") in out and "built on first use" in out


def test_an_unknown_tiny_name_is_a_usage_error_naming_the_known_ones(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, records = _score(tmp_path, "hf:tiny-nope")
    err = capsys.readouterr().err
    assert rc == 2 and not records
    assert "unknown tiny model 'tiny-nope'" in err and "tiny-llava" in err and "tiny-thinking" in err
    assert main(["tiny", "build", "tiny-nope"]) == 2
    assert not (home / "tiny-random-weights").exists()  # nothing built


def test_a_spec_keeps_its_options_and_a_local_folder_of_that_name_wins(prebuilt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.testing.tiny_models import resolve_spec, tiny_name_of

    assert resolve_spec("hf:tiny-llava?batch_size=1") == f"hf:{prebuilt}?batch_size=1"
    err = capsys.readouterr().err
    assert "RANDOM-WEIGHT" in err and "MEANINGLESS" in err
    assert resolve_spec("openai:gpt-4o") == "openai:gpt-4o" and resolve_spec("hf:llava-hf/llava-1.5-7b-hf") == "hf:llava-hf/llava-1.5-7b-hf"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-llava").mkdir()
    assert tiny_name_of("hf:tiny-llava") is None


@pytest.mark.hf
def test_score_on_hf_tiny_llava_records_and_reports_a_random_model(prebuilt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, records = _score(tmp_path, "hf:tiny-llava", "--html", str(tmp_path / "r.html"))
    assert rc == 0 and len(records) == 6
    assert all(r["status"] == "ok" and r["smoothed"] for r in records)
    assert {r["backend"] for r in records} == {f"hf:{prebuilt}"} and "tiny-random-weights" in records[0]["model"]
    assert "RANDOM-WEIGHT test model" in capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    assert "RANDOM MODEL" in page and "MEANINGLESS" in page
    # a panel and parity take the name too
    assert main(["parity", "--a", "hf:tiny-llava", "--b", "hf:tiny-llava?batch_size=1", "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--limit", "2", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert str(prebuilt) in json.dumps(report)


@pytest.mark.hf
@pytest.mark.slow
def test_tiny_build_builds_once_into_a_folder(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "models" / "tiny-llava"
    assert main(["tiny", "build", "tiny-llava", "--dir", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert (target / "config.json").is_file() and (target / "CAPJUDGE_TINY_MODEL.txt").is_file()
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert main(["tiny", "build", "tiny-llava", "--dir", str(target)]) == 0  # already there: not rebuilt
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no half-built folder left


@pytest.mark.hf
@pytest.mark.slow
def test_hf_tiny_thinking_reads_the_answer_after_the_reasoning(home: Path, tmp_path: Path) -> None:
    """Reasoning offline: the thinking model is built on first use, its <think> is kept apart."""
    rc, records = _score(tmp_path, "hf:tiny-thinking", "--thinking-budget", "64")
    assert rc == 0 and records and all(r["status"] == "ok" for r in records)
    assert all(r["details"]["reasoning"] and r["details"]["judge_preset"] == "qwen3-vl-thinking" for r in records)
    assert (home / "tiny-random-weights").is_dir() and any(p.name.startswith("tiny-thinking-") for p in (home / "tiny-random-weights").iterdir())


def test_a_panel_file_entry_may_name_a_tiny_model(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    panel = tmp_path / "judges.json"
    panel.write_text(json.dumps([{"backend": "hf:tiny-nope"}, {"backend": "scripted:0.5"}]))
    rc = main(["score", "--method", "fleur", "--panel", str(panel), "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--panel {panel}: entry 1" in err and "unknown tiny model 'tiny-nope'" in err


@pytest.mark.hf
def test_a_panel_of_a_tiny_model_and_a_scripted_judge(prebuilt: Path, tmp_path: Path) -> None:
    rc, records = _score(tmp_path, "hf:tiny-llava", "--backend", "scripted:0.5")
    assert rc == 0 and len(records) == 6
    assert records[0]["backend"] == f"panel:mean(hf:{prebuilt}, scripted:0.5)"
