"""capjudge calibrate and capjudge cascade on the bundled examples (examples/trust/), offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli.app import main
from capjudge.trust.calibration import IsotonicMap
from capjudge.trust.cascade import CascadePlan

EX = Path(__file__).resolve().parents[1] / "examples" / "trust"


def _json_last_line(capsys) -> dict:
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_calibrate_scores_json_and_save(tmp_path, capsys) -> None:
    save = tmp_path / "cal.json"
    code = main(["calibrate", str(EX / "judge_scores.jsonl"), "--human", str(EX / "human_scores.jsonl"), "--human-scale", "1", "5", "--save", str(save), "--format", "json"])
    assert code == 0
    d = _json_last_line(capsys)
    assert d["kind"] == "score" and d["labelled"] == 120 and d["unlabelled"] == 180
    assert sum(b["count"] for b in d["reliability"]) == 120
    assert d["after_calibration"]["brier"] < d["brier"]
    est = d["mean_human_score"]
    assert set(est) == {"naive", "classical", "ppi", "ppi++"}
    assert est["naive"]["estimate"] > est["ppi"]["high"]  # the judge alone is biased upwards
    fmap = IsotonicMap.load(save)
    assert fmap.fitted_on["n"] == 120 and fmap.fitted_on["method"] == "fleur" and fmap.fitted_on["backend"] == "hf:example"


def test_calibrate_pairs_text(capsys) -> None:
    assert main(["calibrate", str(EX / "judge_cheap.jsonl"), "--human", str(EX / "human_pairs.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "confidence rule: details.confidence" in out and "ECE" in out and "Brier" in out


def test_cascade_json_and_plan(tmp_path, capsys) -> None:
    plan_path = tmp_path / "plan.json"
    code = main(["cascade", "--human", str(EX / "human_pairs.jsonl"), "--judge", str(EX / "judge_cheap.jsonl"), "--judge", str(EX / "judge_strong.jsonl"), "--risk", "0.15", "--delta", "0.1", "--format", "json", "--save", str(plan_path)])
    assert code == 0
    d = _json_last_line(capsys)
    assert [j["name"] for j in d["judges"]] == ["judge_cheap", "judge_strong"]
    assert [j["confidence_rule"] for j in d["judges"]] == ["details.confidence", "votes"]
    assert d["judges"][1]["failed"] == 1
    for j in d["judges"]:
        assert j["threshold"] is None or j["risk_bound"] <= 0.15
    c = d["calibration"]
    assert 0 < c["coverage"] <= 1 and c["cost_per_1000"] is not None
    assert d["guaranteed_risk"] == max(j["risk_bound"] for j in d["judges"] if j["threshold"] is not None) <= 0.15
    # the cheap judge keeps some: the cascade costs less than asking the strong judge everything
    assert c["cost_per_1000"] < 1000 * d["judges"][1]["cost_per_judgment"]
    plan = CascadePlan.load(plan_path)
    assert [j.threshold for j in plan.judges] == [j["threshold"] for j in d["judges"]]


def test_bad_rows_are_named_and_the_rest_used(tmp_path, capsys) -> None:
    human = tmp_path / "h.jsonl"
    human.write_text((EX / "human_pairs.jsonl").read_text() + '{"id": "p001", "human": "maybe"}\n{oops\n')
    assert main(["cascade", "--human", str(human), "--judge", str(EX / "judge_strong.jsonl"), "--risk", "0.2", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert f"{human} line 301: id 'p001' again" in captured.err
    assert f"{human} line 302: " in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["bad_rows"] == 2


@pytest.mark.parametrize("argv, message", [
    (["cascade", "--human", "HUMAN", "--judge", "SCORES", "--risk", "0.1"], "needs pair records"),
    (["cascade", "--human", "HUMAN", "--judge", "MISSING", "--risk", "0.1"], "no such file"),
    (["cascade", "--human", "HUMAN", "--judge", "CHEAP", "--risk", "1.5"], "--risk and --delta"),
    (["calibrate", "SCORES", "--human", "HUMAN"], "0 ids in common"),
    (["cascade", "--human", "HUMAN", "--judge", "CHEAP", "--risk", "0.1", "--rule", "official", "--min-samples", "1000"], "the official code stops here"),
])
def test_usage_errors_exit_2(argv, message, capsys) -> None:
    files = {"HUMAN": EX / "human_pairs.jsonl", "SCORES": EX / "judge_scores.jsonl", "CHEAP": EX / "judge_cheap.jsonl", "MISSING": EX / "missing.jsonl"}
    assert main([str(files.get(a, a)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_save_never_replaces_a_file_capjudge_did_not_write(tmp_path, capsys) -> None:
    mine = tmp_path / "notes.json"
    mine.write_text('{"my": "notes"}')
    assert main(["calibrate", str(EX / "judge_cheap.jsonl"), "--human", str(EX / "human_pairs.jsonl"), "--save", str(mine)]) == 2
    assert "will not replace it" in capsys.readouterr().err
    assert mine.read_text() == '{"my": "notes"}'
