"""The meta-eval, run-benchmark and report subcommands (registered on a throwaway parser)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from capjudge.cli.metaeval import register
from capjudge.data.types import ScoreResult

DATA = Path(__file__).parent / "data" / "metaeval"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="capjudge")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def result(image: str, caption: str, score: float | None, method: str = "fleur", backend: str = "hf:a") -> ScoreResult:
    return ScoreResult(
        image=image, caption=caption, score=score, method=method, backend=backend, model="m", template_hash="h",
        raw=str(score), status="ok" if score is not None else "error", error=None if score is not None else "failed", scale=(0.0, 1.0),
    )


def flickr_results(path: Path, scores: dict[str, float], **kw) -> Path:
    images = {"A dog runs on the grass .": "img1.jpg", "A cat sleeps on a sofa .": "img1.jpg",
              "Kids playing in water .": "img2.jpg", "A man rides a horse .": "img2.jpg"}
    with path.open("w") as f:
        for cap, s in scores.items():
            f.write(json.dumps(result(images[cap], cap, s, **kw).to_dict()) + "\n")
    return path


GOOD = {"A dog runs on the grass .": 0.9, "A cat sleeps on a sofa .": 0.1, "Kids playing in water .": 0.7, "A man rides a horse .": 0.3}
POOR = {"A dog runs on the grass .": 0.2, "A cat sleeps on a sofa .": 0.8, "Kids playing in water .": 0.7, "A man rides a horse .": None}


def test_meta_eval_json_is_one_object(tmp_path, capsys):
    scores = flickr_results(tmp_path / "r.jsonl", GOOD)
    rc = run(["meta-eval", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(scores), "--format", "json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON document on stdout
    assert {"tau_b", "tau_c", "pearson"} <= set(out)
    assert out["primary"] == "tau_c" and out["unit"] == "x100"
    assert out["counts"]["used_rows"] == 11 and out["counts"]["skipped_by_protocol"] == 1
    assert out["tau_c"] > 50


def test_meta_eval_table_and_png_plot(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    scores = flickr_results(tmp_path / "r.jsonl", POOR)
    png = tmp_path / "plots" / "heat.png"
    rc = run(["meta-eval", "--dataset", "flickr8k", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(scores), "--plot", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "tau-c" in text and "failed_rows=3" in text and "heatmap written" in text
    assert png.read_bytes()[:8] == PNG_MAGIC
    img = mpimg.imread(png)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_pascal_plot_and_json(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    with path.open("w") as f:
        for cap, s in [("a man on a bike", 0.2), ("a person riding a bicycle", 0.9), ("a cat", 0.5), ("a sleeping cat", 0.5)]:
            img = "p1.jpg" if "bi" in cap else "p2.jpg"
            f.write(json.dumps(result(img, cap, s).to_dict()) + "\n")
    png = tmp_path / "p.png"
    rc = run(["meta-eval", "--dataset", "pascal50s", "--human", str(DATA / "pascal_tiny.json"), "--scores", str(path), "--format", "json", "--ties", "half", "--plot", str(png)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["HC"] == 75.0 and out["mean"] == 75.0 and out["HI"] is None
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_meta_eval_bad_input_exit_codes(tmp_path, capsys):
    missing = ["meta-eval", "--dataset", "pascal50s", "--human", str(tmp_path / "nope.json"), "--scores", str(tmp_path / "r.jsonl")]
    assert run(missing) == 2
    assert "not found" in capsys.readouterr().err
    scores = flickr_results(tmp_path / "r.jsonl", {"A dog runs on the grass .": 0.5})
    # one caption only: tau undefined -> exit 1, still printed
    assert run(["meta-eval", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(scores)]) == 1
    with pytest.raises(SystemExit):
        run(["meta-eval", "--dataset", "pascal50s", "--human", "x", "--scores", "y", "--ties", "coin"])


def test_report_compares_files_with_cis_and_markdown(tmp_path, capsys):
    a = flickr_results(tmp_path / "a.jsonl", GOOD, method="fleur", backend="hf:llava-13b")
    b = flickr_results(tmp_path / "b.jsonl", POOR, method="visce2", backend="openai:gpt-4o")
    md = tmp_path / "out" / "report.md"
    rc = run(["report", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(a), str(b),
              "--bootstrap", "50", "--seed", "1", "--markdown", str(md)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "fleur @ hf:llava-13b" in text and "visce2 @ openai:gpt-4o" in text and "[" in text
    table = md.read_text()
    assert table.count("\n| ") >= 3 and "| judge | tau-c |" in table and "95% bootstrap" in table
    rc = run(["report", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(a), str(b),
              "--bootstrap", "0", "--names", "LLaVA", "GPT-4o", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert [r["judge"] for r in out["results"]] == ["LLaVA", "GPT-4o"]
    assert run(["report", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--scores", str(a), "--names", "x", "y"]) == 2


class FakeMethod:
    kind = "score"
    name = "fake"


class FakeJudge:
    """Stands in for capjudge.judges.judge.Judge: scores captions by length, one fails."""

    made: list[dict] = []

    def __init__(self, method, backend, *, cache_dir=None, **kw):
        self.method = FakeMethod()
        FakeJudge.made.append({"method": method, "backend": backend, "cache_dir": cache_dir})

    def score_many(self, samples, progress=False):
        for s in samples:
            assert Path(s.image).is_file(), s.image  # the loader resolved it under --images
            score = None if "horse" in s.caption else min(1.0, len(s.caption) / 30)
            yield result(s.image, s.caption, score, method="fake", backend="fake:model")

    def close(self):
        pass


def test_run_benchmark_scores_writes_and_meta_evaluates(tmp_path, monkeypatch, capsys):
    import capjudge.judges.judge as judge_module

    monkeypatch.setattr(judge_module, "Judge", FakeJudge)
    images = tmp_path / "images" / "Flickr8k_Dataset"
    images.mkdir(parents=True)
    for name in ("img1.jpg", "img2.jpg"):
        (images / name).write_bytes(b"jpeg")
    out = tmp_path / "results.jsonl"
    rc = run(["run-benchmark", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--images", str(tmp_path / "images"),
              "--method", "vanilla", "--backend", "scripted:model", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--format", "json"])
    assert rc == 0
    assert FakeJudge.made[-1] == {"method": "vanilla", "backend": "scripted:model", "cache_dir": str(tmp_path / "cache")}
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 4 and sum(r["status"] == "error" for r in lines) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"]["failed_rows"] == 3 and summary["counts"]["used_rows"] == 8
    # --limit keeps the first rating rows only
    rc = run(["run-benchmark", "--dataset", "flickr8k-expert", "--human", str(DATA / "flickr8k_tiny.json"), "--images", str(tmp_path / "images"),
              "--method", "vanilla", "--backend", "scripted:model", "--out", str(out), "--limit", "5", "--format", "json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"]["human_rows"] == 5 and len(out.read_text().splitlines()) == 2


def test_run_benchmark_missing_image_folder(tmp_path, capsys):
    rc = run(["run-benchmark", "--dataset", "pascal50s", "--human", str(DATA / "pascal_tiny.json"), "--images", str(tmp_path / "none"),
              "--method", "fleur", "--backend", "hf:x", "--out", str(tmp_path / "o.jsonl")])
    assert rc == 2 and "image folder" in capsys.readouterr().err


class PlainJudge(FakeJudge):
    """A Judge whose score_many has no progress option (the fallback progress is used)."""

    def score_many(self, samples):  # type: ignore[override]
        yield from FakeJudge.score_many(self, samples)


def test_run_benchmark_pairs_without_progress_option(tmp_path, monkeypatch, capsys):
    import capjudge.judges.judge as judge_module

    monkeypatch.setattr(judge_module, "Judge", PlainJudge)
    images = tmp_path / "VOC2012" / "JPEGImages"
    images.mkdir(parents=True)
    for i in range(1, 6):
        (images / f"p{i}.jpg").write_bytes(b"jpeg")
    out = tmp_path / "r.jsonl"
    rc = run(["run-benchmark", "--dataset", "pascal50s", "--human", str(DATA / "pascal_tiny.json"), "--images", str(tmp_path),
              "--method", "vanilla", "--backend", "scripted:model", "--out", str(out), "--format", "json"])
    assert rc == 0
    assert len(out.read_text().splitlines()) == 10  # both captions of 5 pairs, scored one by one
    summary = json.loads(capsys.readouterr().out)
    assert summary["counts"]["used_pairs"] == 5 and summary["HI"] == 100.0  # longer caption wins
