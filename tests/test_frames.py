"""capjudge.results_frame: results files as a DataFrame in one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from capjudge import Judge, Sample, results_frame
from capjudge.backends.scripted import ScriptedBackend
from capjudge.data.io import write_results

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "images"


def test_score_results_flatten_the_useful_details(tmp_path: Path) -> None:
    judge = Judge("vanilla-code", ScriptedBackend(lambda r: "no idea" if "bad" in r.messages[-1].content else "Rating: 70"))
    results = list(judge.score_many([Sample(EXAMPLES / "cats.jpg", "two cats", id="a"), Sample(EXAMPLES / "dog.jpg", "bad caption", id="b")]))
    path = tmp_path / "r.jsonl"
    write_results(path, results)
    df = results_frame(path)
    assert list(df["id"]) == ["a", "b"]
    assert list(df["status"]) == ["ok", "error"]
    assert df.loc[0, "score"] == 70 and df.loc[0, "option_no_number"] == "error"
    assert df.loc[0, "scale_low"] == 0 and df.loc[0, "scale_high"] == 100
    assert not df["cached"].any() and "details" in df.columns
    assert "no number" in df.loc[1, "error"]


def test_several_files_and_pair_results(tmp_path: Path) -> None:
    judge = Judge("gpt4v-pairwise", ScriptedBackend("Answer 1"))
    pairs = list(judge.compare_many([{"image": EXAMPLES / "cats.jpg", "caption_a": "two cats", "caption_b": "a dog"}]))
    write_results(tmp_path / "p.jsonl", pairs)
    write_results(tmp_path / "q.jsonl", pairs)
    df = results_frame([tmp_path / "p.jsonl", tmp_path / "q.jsonl"])
    assert len(df) == 2 and set(df["file"]) == {str(tmp_path / "p.jsonl"), str(tmp_path / "q.jsonl")}
    assert df.loc[0, "vote_1"] == "A" and df.loc[0, "vote_2"] == "B" and df.loc[0, "verdict"] == "tie"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises((FileNotFoundError, ValueError)):
        results_frame(tmp_path / "nope.jsonl")
