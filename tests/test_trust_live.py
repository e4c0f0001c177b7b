"""The trust tools inside the running commands, offline on examples/trust/ with scripted judges:
``score|compare --calibration``, ``compare --cascade PLAN``, ``score|arena --human``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli.app import main
from capjudge.data.types import PairResult
from capjudge.judges.judge import Judge
from capjudge.trust import cascade as csc
from capjudge.trust.apply import CalibratedJudge, CalibrationMismatch
from capjudge.trust.calibration import IsotonicMap
from capjudge.trust.inputs import read_results
from capjudge.trust.live import LiveCascade, load_plan
from capjudge.trust.ppi import estimate_all
from capjudge.trust.system import arena_summary

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "trust"
IMAGES = str(ROOT / "examples" / "images")
SCORE_JUDGE = f"scripted:I would rate it 50 out of 100.?rules={EX / 'score_rules.json'}"
CHEAP = f"scripted:Answer 1?rules={EX / 'cascade' / 'cheap_rules.json'}"
STRONG = f"scripted:Answer 1?rules={EX / 'cascade' / 'strong_rules.json'}"


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _score(out: Path, *extra: str, method: str = "vanilla", backend: str = SCORE_JUDGE) -> int:
    return main(["score", "--method", method, "--backend", backend, "--images", IMAGES, "--input", str(EX / "score_captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", *extra])


@pytest.fixture()
def score_calibration(tmp_path: Path) -> Path:
    raw = tmp_path / "raw.jsonl"
    assert _score(raw) == 0
    cal = tmp_path / "cal.json"
    assert main(["calibrate", str(raw), "--human", str(EX / "score_human.jsonl"), "--human-scale", "1", "5", "--save", str(cal), "--format", "json"]) == 0
    return cal


def test_score_calibration_keeps_the_raw_score_beside_the_calibrated_one(tmp_path: Path, score_calibration: Path) -> None:
    out = tmp_path / "cal_run.jsonl"
    assert _score(out, "--calibration", str(score_calibration)) == 0
    fmap = IsotonicMap.load(score_calibration)
    digest = "sha256:" + hashlib.sha256(score_calibration.read_bytes()).hexdigest()
    recs = _records(out)
    assert len(recs) == 40
    for rec in recs:
        c = rec["details"]["calibration"]
        assert c["of"] == "score" and c["raw"] == rec["score"]  # the record's score stays the judge's
        assert c["calibrated"] == pytest.approx(float(fmap([rec["score"]])[0]), abs=1e-12)
        assert c["digest"] == digest and c["file"] == score_calibration.name
        assert c["fitted_on"]["method"] == "vanilla" and c["fitted_on"]["n"] == 23 and c["human_scale"] == [1.0, 5.0]
    assert len({r["details"]["calibration"]["calibrated"] for r in recs}) > 1


def test_a_calibration_of_another_method_scale_or_kind_is_refused(tmp_path: Path, score_calibration: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.jsonl"
    assert _score(out, "--calibration", str(score_calibration), method="fleur", backend="scripted:0.5") == 2
    assert "fitted on method 'vanilla', not 'fleur'" in capsys.readouterr().err
    data = json.loads(score_calibration.read_text())
    data["fitted_on"]["scale"] = [1.0, 10.0]
    other = tmp_path / "scale.json"
    other.write_text(json.dumps(data))
    assert _score(out, "--calibration", str(other)) == 2
    assert "fitted on the scale [1.0, 10.0], not [0.0, 100.0]" in capsys.readouterr().err
    data = json.loads(score_calibration.read_text())
    data["fitted_on"]["backend"] = "hf:another-model"
    other.write_text(json.dumps(data))
    assert _score(out, "--calibration", str(other)) == 0  # another backend: a warning, the run goes on
    assert "fitted on backend 'hf:another-model', this run's is 'scripted:" in capsys.readouterr().err
    out.unlink()
    pair = main(["compare", "--backend", CHEAP, "--images", IMAGES, "--input", str(EX / "cascade" / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--calibration", str(score_calibration)])
    assert pair == 2
    assert "fitted on score records, not pair records" in capsys.readouterr().err
    assert not out.exists()  # nothing judged


def test_compare_calibration_maps_the_vote_confidence(tmp_path: Path) -> None:
    fmap = IsotonicMap([0.0, 1.0], [0.2, 0.9], {"method": "gpt4v-pairwise", "confidence_rule": "votes", "target": "agreement with the human verdict"})
    cal = tmp_path / "pair_cal.json"
    fmap.save(cal)
    out = tmp_path / "pairs.jsonl"
    assert main(["compare", "--backend", CHEAP, "--images", IMAGES, "--input", str(EX / "cascade" / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--limit", "12", "--calibration", str(cal)]) == 0
    for rec in _records(out):
        c = rec["details"]["calibration"]
        agree = rec["votes"][0] == rec["votes"][1]
        assert c["of"] == "confidence" and c["confidence_rule"] == "votes"
        assert (c["raw"], c["calibrated"]) == ((1.0, 0.9) if agree else (0.0, 0.2))


def test_calibrated_judge_in_python(score_calibration: Path) -> None:
    judge = Judge("vanilla", ScriptedBackend("I would rate it 75 out of 100."), images_root=IMAGES)
    wrapped = CalibratedJudge(judge, score_calibration)
    rec = next(iter(wrapped.score_many([{"image": "cats.jpg", "caption": "two cats"}])))
    fmap = IsotonicMap.load(score_calibration)
    assert rec.score == 75.0 and rec.details["calibration"]["calibrated"] == pytest.approx(float(fmap([75.0])[0]))
    assert wrapped.method is judge.method  # everything else is the judge's
    with pytest.raises(CalibrationMismatch, match="fitted on method 'vanilla'"):
        CalibratedJudge(Judge("fleur", ScriptedBackend("0.5")), score_calibration)


@pytest.fixture()
def cascade_run(tmp_path: Path) -> dict[str, Path]:
    """Both example judges over every pair, their plan, and the plan run live."""
    pairs = str(EX / "cascade" / "pairs.jsonl")
    files = {}
    for name, spec in (("cheap", CHEAP), ("strong", STRONG)):
        files[name] = tmp_path / f"{name}.jsonl"
        assert main(["compare", "--backend", spec, "--images", IMAGES, "--input", pairs, "--out", str(files[name]), "--no-cache", "--quiet"]) == 0
    files["plan"] = tmp_path / "plan.json"
    assert main(["cascade", "--human", str(EX / "cascade" / "human_pairs.jsonl"), "--judge", str(files["cheap"]), "--judge", str(files["strong"]), "--risk", "0.2", "--min-samples", "10", "--save", str(files["plan"]), "--format", "json"]) == 0
    files["live"] = tmp_path / "live.jsonl"
    assert main(["compare", "--cascade", str(files["plan"]), "--images", IMAGES, "--input", pairs, "--out", str(files["live"]), "--no-cache", "--quiet"]) == 0
    return files


def test_the_plan_names_its_judges(cascade_run: dict[str, Path]) -> None:
    plan = csc.CascadePlan.load(cascade_run["plan"])
    assert [r["backend"] for r in plan.runs] == [CHEAP, STRONG]
    assert {r["method"] for r in plan.runs} == {"gpt4v-pairwise"} and {r["mode"] for r in plan.runs} == {"pairwise"}


def test_live_cascade_equals_the_offline_cascade_on_the_same_records(cascade_run: dict[str, Path]) -> None:
    plan = csc.CascadePlan.load(cascade_run["plan"])
    judges = [read_results(cascade_run["cheap"]), read_results(cascade_run["strong"])]
    ids = list(judges[0].rows)
    out = csc.apply(plan, [np.array([j.rows[i].confidence for i in ids]) for j in judges], [np.array([j.rows[i].value for i in ids]) for j in judges])
    live = {r["id"]: r for r in _records(cascade_run["live"])}
    assert len(live) == len(ids) == 120
    names = [jt.name for jt in plan.judges]
    for k, i in enumerate(ids):
        c = live[i]["details"]["cascade"]
        d = int(out.decided_by[k])
        assert c["decided_by"] == (names[d] if d >= 0 else None) and c["abstained"] == (d < 0)
        if d >= 0:
            assert live[i]["verdict"] == out.verdicts[k] and live[i]["backend"] == plan.runs[d]["backend"]
            assert c["confidence"] >= plan.judges[d].threshold
        # the strong judge is asked only where the cheap one did not keep its verdict
        assert [a["name"] for a in c["asked"]] == (["cheap"] if d == 0 else ["cheap", "strong"])
    decided = sum(1 for r in live.values() if not r["details"]["cascade"]["abstained"])
    assert decided / len(ids) == pytest.approx(out.coverage, abs=1e-12)
    assert 0 < out.coverage < 1 and out.shares["cheap"] > 0 and out.shares["strong"] > 0


def test_live_cascade_reads_details_confidence_and_escalates_failures() -> None:
    plan = csc.CascadePlan([csc.JudgeThreshold("a", 0.8, 0, 0, None, None, 0), csc.JudgeThreshold("b", 0.5, 0, 0, None, None, 0)], 0.1, 0.1, "guaranteed", 5000, 30, 0, [None, None], [{"backend": "x", "method": "m", "mode": "pairwise"}] * 2)

    class Fake:
        def __init__(self, answers: dict[str, tuple[str | None, float | None]]) -> None:
            self.answers, self.seen = answers, []

        def compare_stream(self, pairs, mode=None):
            for k, p in enumerate(pairs):
                self.seen.append(p["id"])
                verdict, conf = self.answers[p["id"]]
                status = "ok" if verdict else "error"
                details = {"usage": {"prompt_tokens": 100, "completion_tokens": 2}, "cost_usd": 0.25}
                yield k, PairResult("i.jpg", "a", "b", verdict, "m", "x", "x", "t", mode="single", votes=[verdict], status=status, id=p["id"], details=details if conf is None else {**details, "confidence": conf})

    a = Fake({"1": ("A", 0.9), "2": ("B", 0.7), "3": (None, None), "4": ("A", 0.1)})
    b = Fake({"2": ("A", 0.6), "3": ("B", 0.55), "4": ("B", 0.2)})
    live = LiveCascade(plan, [a, b])
    got = dict(live.stream([{"id": i} for i in "1234"]))
    assert b.seen == ["2", "3", "4"]
    assert [got[k].details["cascade"]["decided_by"] for k in range(4)] == ["a", "b", "b", None]
    assert [got[k].verdict for k in range(3)] == ["A", "A", "B"]
    assert got[2].details["cascade"]["asked"][0]["status"] == "error"
    summary = live.summary()
    assert summary["abstained"] == 1 and summary["coverage"] == 0.75
    assert [(j["asked"], j["decided"], j["failed"], j["tokens"], j["cost_usd"]) for j in summary["judges"]] == [(4, 1, 1, 408, 1.0), (3, 2, 0, 306, 0.75)]
    assert got[0].details["cascade"]["asked"] == [{"name": "a", "backend": "x", "verdict": "A", "confidence": 0.9, "status": "ok", "usage": {"prompt_tokens": 100, "completion_tokens": 2}, "tokens": 102, "cost_usd": 0.25}]


def test_a_plan_that_cannot_run_live_is_a_usage_error(tmp_path: Path, cascade_run: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(cascade_run["plan"].read_text())
    data["runs"][1]["backend"] = "openai:gpt-4o?api_key=***"
    masked = tmp_path / "masked.json"
    masked.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="masked"):
        load_plan(masked)
    del data["runs"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    args = ["compare", "--cascade", str(old), "--images", IMAGES, "--input", str(EX / "cascade" / "pairs.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"]
    assert main(args) == 2
    assert "save it again" in capsys.readouterr().err
    assert main([*args[:2], str(cascade_run["plan"]), *args[3:7], "--out", str(cascade_run["cheap"]), *args[9:]]) == 2
    assert "holds records of another run than this cascade plan" in capsys.readouterr().err
    assert main([*args[:2], str(cascade_run["plan"]), *args[3:], "--backend", CHEAP]) == 2
    assert "--backend do not go with it" in capsys.readouterr().err


def test_score_human_summary_is_ppi_on_the_calibrated_values(tmp_path: Path, score_calibration: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.jsonl"
    capsys.readouterr()
    assert _score(out, "--calibration", str(score_calibration), "--human", str(EX / "score_human.jsonl")) == 0
    text = capsys.readouterr().out
    human = {json.loads(x)["id"]: json.loads(x)["human"] for x in (EX / "score_human.jsonl").read_text().splitlines()}
    recs = _records(out)
    lab = [r for r in recs if r["id"] in human]
    unl = [r for r in recs if r["id"] not in human]
    est = estimate_all([human[r["id"]] for r in lab], [r["details"]["calibration"]["calibrated"] for r in lab], [r["details"]["calibration"]["calibrated"] for r in unl], alpha=0.1, clusters=[r["image"] for r in lab], clusters_unlabeled=[r["image"] for r in unl])
    p = est["ppi++"]
    assert f"PPI++                  {p.estimate:.3f} [{p.low:.3f}, {p.high:.3f}]" in text
    ess = len(lab) * ((est["classical"].high - est["classical"].low) / (p.high - p.low)) ** 2
    assert f"effective labels (PPI++): {ess:.1f}" in text


def test_arena_human_json_and_labels_in_either_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "battles.jsonl"
    rules = f"scripted:Answer 1?rules={EX / 'arena_rules.json'}"
    args = ["arena", "--input", str(EX / "arena_captions.jsonl"), "--round-robin", "--backend", rules, "--images", IMAGES, "--out", str(out), "--no-cache", "--quiet", "--bootstrap", "0", "--format", "json", "--human", str(EX / "arena_human.jsonl")]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["human_labels"]
    assert d["labelled"] == 33 and d["unlabelled"] == 39
    assert set(d["win_rate"]) == {"human", "repeat", "swap"}
    for e in d["win_rate"].values():
        assert set(e) >= {"naive", "classical", "ppi", "ppi++", "effective_n"}
        assert e["ppi++"]["clustered"] is True
    bt = d["bradley_terry"]
    assert bt["errors"] == {} and bt["models"]["repeat"]["ppi++"]["strength"] < 0
    # the same labels with every battle's models written the other way round: the same numbers
    flipped = tmp_path / "flipped.jsonl"
    swap = {"A": "B", "B": "A", "tie": "tie"}
    rows = [json.loads(x) for x in (EX / "arena_human.jsonl").read_text().splitlines()]
    flipped.write_text("".join(json.dumps({"id": r["id"], "model_a": r["model_b"], "model_b": r["model_a"], "human": swap[r["human"]]}) + "\n" for r in rows))
    # each model's PPI++ win rate from the arrays themselves (outcome 1 / 0.5 / 0 for the model)
    labels = {(r["id"], frozenset((r["model_a"], r["model_b"]))): r for r in rows}
    battles = _records(out)
    m = "swap"

    def outcome(verdict: str, first: bool) -> float:
        o = {"A": 1.0, "B": 0.0, "tie": 0.5}[verdict]
        return o if first else 1.0 - o

    lab, unl = [], []
    for b in battles:
        if m not in (b["model_a"], b["model_b"]):
            continue
        hit = labels.get((b["id"], frozenset((b["model_a"], b["model_b"]))))
        if hit is None:
            unl.append((outcome(b["verdict"], b["model_a"] == m), b["id"]))
        else:
            lab.append((outcome(hit["human"], hit["model_a"] == m), outcome(b["verdict"], b["model_a"] == m), b["id"]))
    est = estimate_all([x[0] for x in lab], [x[1] for x in lab], [x[0] for x in unl], alpha=0.1, clusters=[x[2] for x in lab], clusters_unlabeled=[x[1] for x in unl])
    assert d["win_rate"][m]["ppi++"]["estimate"] == pytest.approx(est["ppi++"].estimate, abs=1e-12)
    assert d["win_rate"][m]["ppi++"]["low"] == pytest.approx(est["ppi++"].low, abs=1e-12)
    again, problems = arena_summary(str(out), str(flipped))
    assert problems == []
    for m, e in d["win_rate"].items():
        assert again["win_rate"][m]["ppi++"]["estimate"] == pytest.approx(e["ppi++"]["estimate"], abs=1e-12)


def test_a_cascade_that_abstains_everywhere_still_answers(tmp_path: Path, cascade_run: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(cascade_run["plan"].read_text())
    for j in data["judges"]:
        j["threshold"] = None  # neither judge keeps anything
    plan = tmp_path / "never.json"
    plan.write_text(json.dumps(data))
    out = tmp_path / "never.jsonl"
    assert main(["compare", "--cascade", str(plan), "--images", IMAGES, "--input", str(EX / "cascade" / "pairs.jsonl"), "--out", str(out), "--no-cache", "--limit", "8"]) == 0
    recs = _records(out)
    assert len(recs) == 8 and all(r["status"] == "ok" and r["details"]["cascade"]["abstained"] for r in recs)
    assert all(len(r["details"]["cascade"]["asked"]) == 2 for r in recs)
    text = capsys.readouterr().out
    assert "abstained (ask a person)" in text and "0 / 0 / 0" in text


def test_score_summary_shows_the_calibrated_mean(tmp_path: Path, score_calibration: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "shown.jsonl"
    capsys.readouterr()
    args = ["score", "--method", "vanilla", "--backend", SCORE_JUDGE, "--images", IMAGES, "--input", str(EX / "score_captions.jsonl"), "--out", str(out), "--no-cache", "--calibration", str(score_calibration)]
    assert main(args) == 0
    values = [r["details"]["calibration"]["calibrated"] for r in _records(out)]
    assert f"{sum(values) / len(values):.4g} (of 40 new records" in capsys.readouterr().out


def test_a_cascade_run_resumes_from_its_own_records(tmp_path: Path, cascade_run: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "resumed.jsonl"
    args = ["compare", "--cascade", str(cascade_run["plan"]), "--images", IMAGES, "--input", str(EX / "cascade" / "pairs.jsonl"), "--out", str(out), "--no-cache"]
    assert main([*args, "--limit", "30", "--quiet"]) == 0
    first = {r["id"]: r for r in _records(out)}
    capsys.readouterr()
    assert main(args) == 0
    text = capsys.readouterr().out
    recs = {r["id"]: r for r in _records(out)}
    full = {r["id"]: r for r in _records(cascade_run["live"])}
    assert len(recs) == 120 and all(recs[i]["details"]["cascade"] == first[i]["details"]["cascade"] for i in first)
    assert all(recs[i]["details"]["cascade"]["decided_by"] == full[i]["details"]["cascade"]["decided_by"] for i in full)
    assert "asked now 90" in text  # the cheap judge asked only on the 90 rows not kept
