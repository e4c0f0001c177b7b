"""capjudge.trust.inputs: human labels and results files joined by id, pair confidence rules, bad
rows named by file and line with the others kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.trust.inputs import TrustInputError, read_human, read_results


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _pair(pid: str, verdict: str | None, votes: list, **more) -> dict:
    return {"id": pid, "image": "i.jpg", "caption_a": "a", "caption_b": "b", "verdict": verdict, "votes": votes, "method": "m", "backend": "scripted:x", "status": "ok", **more}


def test_human_labels_scores_verdicts_lists_and_bad_rows(tmp_path) -> None:
    path = _write(tmp_path / "h.jsonl", [
        {"id": "a", "human": "A"},
        {"id": "b", "human": ["A", "B", "B"]},
        {"id": "c", "human": ["A", "B"]},
        "{not json",
        {"id": "d", "human": "maybe"},
        {"id": "a", "human": "B"},
        {"human": "A"},
        {"id": 7, "human": "tie"},
    ])
    h = read_human(path)
    assert {k: v.value for k, v in h.labels.items()} == {"a": "A", "b": "B", "c": "tie", "7": "tie"}
    assert h.labels["b"].votes == ("A", "B", "B")
    assert len(h.problems) == 4
    assert h.problems[0].startswith(f"{path} line 4: ")
    assert f"{path} line 5: id 'd': 'human' verdict 'maybe'" in h.problems[1]
    assert "line 6: id 'a' again (first on line 1)" in h.problems[2]
    assert "line 7: no usable 'id'" in h.problems[3]
    scores = read_human(_write(tmp_path / "s.jsonl", [{"id": "x", "human": [3, 4, 5]}, {"id": "y", "human": 2}, {"id": "z", "human": [1, "A"]}]))
    assert scores.labels["x"].value == 4.0 and scores.kind == "score"
    assert "list of one kind" in scores.problems[0]


def test_pair_confidence_rules_and_bad_rows(tmp_path) -> None:
    path = _write(tmp_path / "r.jsonl", [
        _pair("p1", "A", ["A", "A"]),
        _pair("p2", "tie", ["A", "B"]),
        _pair("p3", "B", ["B"], details={"confidence": 0.8}),
        _pair("p4", "A", ["A"]),
        _pair("p5", "A", ["A", "A"], details={"confidence": 1.5}),
        _pair("p6", None, [], status="error", error="backend gone"),
        _pair("p7", "A", [80.0, 60.0], mode="grading"),
        [1, 2],
    ])
    r = read_results(path)
    assert r.kind == "pair"
    assert {k: (v.value, v.confidence, v.rule) for k, v in r.rows.items()} == {"p1": ("A", 1.0, "votes"), "p2": ("tie", 0.0, "votes"), "p3": ("B", 0.8, "details.confidence")}
    assert r.confidence_rule == "mixed: details.confidence 1, votes 2"
    assert r.failed == {"p6": "backend gone"}
    assert [p.split(": ", 1)[0] for p in r.problems] == [f"{path} line {n}" for n in (4, 5, 7, 8)]
    assert "one vote and no details.confidence" in r.problems[0]
    assert "not a number in [0, 1]" in r.problems[1]
    assert "grading record" in r.problems[2]


def test_costs_and_tokens_from_records(tmp_path) -> None:
    path = _write(tmp_path / "s.jsonl", [
        {"id": "1", "image": "i.jpg", "caption": "c", "score": 50.0, "scale": [0, 100], "method": "m", "backend": "openai:x", "status": "ok", "details": {"usage": {"prompt_tokens": 100, "completion_tokens": 5}, "backend_meta": {"cost_usd": 0.002}}},
        {"id": "2", "image": "i.jpg", "caption": "c", "score": 70.0, "scale": [0, 100], "method": "m", "backend": "openai:x", "status": "ok", "details": {"usage": {"prompt_tokens": 200, "completion_tokens": 5}, "backend_meta": {"cost_usd": 0.004}}},
        {"id": "3", "image": "i.jpg", "caption": "c", "score": "high", "method": "m", "backend": "openai:x", "status": "ok"},
    ])
    r = read_results(path)
    assert r.kind == "score" and r.scale == (0.0, 100.0)
    assert r.cost_per_judgment() == pytest.approx(0.003)
    assert r.tokens_per_judgment() == pytest.approx(155)
    assert "line 3: id '3': score 'high' is not a finite number" in r.problems[0]
    pairs = read_results(_write(tmp_path / "p.jsonl", [_pair("p", "A", ["A", "A"], details={"usage": [{"prompt_tokens": 10, "completion_tokens": 1}] * 2, "cost_usd": [0.1, 0.2]})]))
    assert pairs.cost_per_judgment() == pytest.approx(0.3) and pairs.tokens_per_judgment() == 22
    assert read_results(_write(tmp_path / "n.jsonl", [_pair("p", "A", ["A", "A"])])).cost_per_judgment() is None


def test_whole_file_errors(tmp_path) -> None:
    with pytest.raises(TrustInputError, match="no such file"):
        read_results(tmp_path / "missing.jsonl")
    mixed = _write(tmp_path / "m.jsonl", [_pair("p", "A", ["A", "A"]), {"id": "s", "score": 1.0, "status": "ok"}])
    with pytest.raises(TrustInputError, match="both score and pair records"):
        read_results(mixed)
