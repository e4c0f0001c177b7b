"""`capjudge report`: bootstrap progress on stderr (quiet with --quiet), rows that never share a
label, smoothed against raw scores, and "no CIs" when there is no bootstrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.metaeval import evaluate, load_dataset, load_results
from test_metaeval_cli import DATA, GOOD, POOR, flickr_results, run

HUMAN = str(DATA / "flickr8k_tiny.json")


def set_smoothed(path: Path, flags: list[bool]) -> Path:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for rec, flag in zip(recs, flags):
        rec["smoothed"] = flag
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def report(*args: str) -> int:
    return run(["report", "--dataset", "flickr8k-expert", "--human", HUMAN, *args])


def test_bootstrap_shows_progress_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = flickr_results(tmp_path / "a.jsonl", GOOD)
    b = flickr_results(tmp_path / "b.jsonl", POOR)
    assert report("--scores", str(a), str(b), "--bootstrap", "40") == 0
    err = capsys.readouterr().err
    assert "bootstrap a.jsonl" in err and "bootstrap b.jsonl" in err and "40/40" in err
    assert report("--scores", str(a), str(b), "--bootstrap", "40", "--quiet") == 0
    assert capsys.readouterr().err == ""


def test_progress_callback_once_per_resample() -> None:
    bench = load_dataset("flickr8k-expert", HUMAN)
    calls: list[int] = []
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        res = load_results(flickr_results(Path(d) / "r.jsonl", GOOD))
    evaluate(bench, res, bootstrap=25, progress=lambda: calls.append(1))
    assert len(calls) == 25
    pascal = load_dataset("pascal50s", str(DATA / "pascal_tiny.json"))
    calls.clear()
    evaluate(pascal, res, bootstrap=7, progress=lambda: calls.append(1))
    assert len(calls) == 7


def test_rows_with_the_same_name_get_distinct_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run1").mkdir()
    (tmp_path / "run2").mkdir()
    a = flickr_results(tmp_path / "run1" / "fleur.jsonl", GOOD, method="fleur", backend="openai:gpt-4o")
    b = flickr_results(tmp_path / "run2" / "fleur-again.jsonl", POOR, method="fleur", backend="openai:gpt-4o")
    assert report("--scores", str(a), str(b), "--bootstrap", "0") == 0
    out = capsys.readouterr().out
    assert "fleur @ openai:gpt-4o (fleur.jsonl)" in out and "fleur @ openai:gpt-4o (fleur-again.jsonl)" in out
    # the same file name in two folders: the paths tell them apart
    c = flickr_results(tmp_path / "run2" / "fleur.jsonl", POOR, method="fleur", backend="openai:gpt-4o")
    assert report("--scores", str(a), str(c), "--bootstrap", "0", "--format", "json") == 0
    judges = [r["judge"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert judges == [f"fleur @ openai:gpt-4o ({a})", f"fleur @ openai:gpt-4o ({c})"]
    # the same file twice, and the same --names twice
    assert report("--scores", str(a), str(a), "--names", "X", "X", "--bootstrap", "0", "--format", "json") == 0
    judges = [r["judge"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert judges == ["X (fleur.jsonl) #1", "X (fleur.jsonl) #2"]


def test_smoothed_raw_and_no_cis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    smoothed = set_smoothed(flickr_results(tmp_path / "s.jsonl", GOOD), [True] * 4)
    raw = set_smoothed(flickr_results(tmp_path / "r.jsonl", GOOD), [False] * 4)
    mixed = set_smoothed(flickr_results(tmp_path / "m.jsonl", GOOD), [True, False, True, True])
    md = tmp_path / "t.md"
    assert report("--scores", str(smoothed), str(raw), str(mixed), "--names", "S", "R", "M", "--bootstrap", "0", "--markdown", str(md)) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line[:2] in ("S ", "R ", "M ")}
    assert " smoothed " in lines["S"] and " raw " in lines["R"] and "mixed (3 smoothed, 1 raw)" in lines["M"]
    assert "no CIs (--bootstrap 0)" in out and "[" not in lines["S"]
    text = md.read_text()
    assert "| scores |" in text and "No confidence intervals (--bootstrap 0)." in text
    assert report("--scores", str(smoothed), "--bootstrap", "20", "--quiet") == 0
    assert "95% bootstrap CI in brackets" in capsys.readouterr().out
    assert report("--scores", str(mixed), "--bootstrap", "0", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["scores_kind"] == "mixed (3 smoothed, 1 raw)"
