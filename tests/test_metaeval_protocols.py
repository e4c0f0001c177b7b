"""Joining results to human rows and the papers' protocols on hand-made fixtures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from capjudge.data.types import ScoreResult
from capjudge.metaeval import evaluate, load_dataset, load_results, results_from_records

DATA = Path(__file__).parent / "data" / "metaeval"


def rec(image: str, caption: str, score: float | None, **kw) -> dict:
    """A results-file record as the judges write it."""
    r = ScoreResult(
        image=image,
        caption=caption,
        score=score,
        method=kw.pop("method", "fleur"),
        backend=kw.pop("backend", "hf:test"),
        model="test",
        template_hash="abc",
        raw=None if score is None else str(score),
        status="ok" if score is not None else "error",
        error=None if score is not None else kw.pop("error", "parse failure"),
        scale=(0.0, 1.0),
        **kw,
    )
    return r.to_dict()


def write_jsonl(path: Path, records: list[dict], extra_lines: list[str] = ()) -> Path:
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def test_flickr8k_protocol_repeats_each_score_for_each_rating(tmp_path):
    bench = load_dataset("flickr8k-expert", DATA / "flickr8k_tiny.json")
    scores = {
        "A dog runs on the grass .": 0.9,
        "A cat sleeps on a sofa .": 0.1,
        "Kids playing in water .": 0.7,
        "A man rides a horse .": 0.3,
    }
    # absolute image paths and messy whitespace still join (file name + normalised caption)
    records = [rec(f"/data/flickr/img{1 if i < 2 else 2}.jpg", f"  {c}  ", s) for i, (c, s) in enumerate(scores.items())]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", records)))
    judge = [0.9, 0.9, 0.9, 0.1, 0.1, 0.7, 0.7, 0.7, 0.3, 0.3, 0.3]  # NaN rating row dropped
    human = [4, 3, 4, 1, 1, 3, 2, 3, 2, 1, 1]
    assert ev.counts["used_rows"] == 11 and ev.counts["used_captions"] == 4
    assert ev.counts["skipped_by_protocol"] == 1
    assert ev.measures["tau_c"] == pytest.approx(100 * st.kendalltau(judge, human, variant="c")[0])
    assert ev.measures["tau_b"] == pytest.approx(100 * st.kendalltau(judge, human, variant="b")[0])
    assert ev.primary == "tau_c" and ev.ok
    assert ev.to_dict()["tau_c"] == pytest.approx(round(ev.measures["tau_c"], 4))


def test_unmatched_failed_extra_bad_lines_and_conflicts_are_counted(tmp_path):
    bench = load_dataset("flickr8k-expert", DATA / "flickr8k_tiny.json")
    records = [
        rec("img1.jpg", "A dog runs on the grass .", 0.9),
        rec("img1.jpg", "A dog runs on the grass .", 0.5),  # conflicting duplicate: first kept
        rec("img1.jpg", "A cat sleeps on a sofa .", None, error="sample 1: no score in answer"),
        rec("img2.jpg", "Kids playing in water .", 0.7),
        rec("img9.jpg", "Not in the benchmark .", 0.2),
        # "A man rides a horse ." has no result at all
    ]
    path = write_jsonl(tmp_path / "r.jsonl", records, ["{not json", "[1, 2]"])
    ev = evaluate(bench, load_results(path))
    c = ev.counts
    assert (c["used_rows"], c["failed_rows"], c["unmatched_rows"]) == (6, 2, 3)
    assert (c["failed_captions"], c["unmatched_captions"]) == (1, 1)
    assert c["extra_results"] == 1 and c["bad_lines"] == 2 and c["conflicting_duplicates"] == 1
    assert c["used_rows"] + c["failed_rows"] + c["unmatched_rows"] == c["human_rows"]
    text = " ".join(ev.notes)
    assert "no score in answer" in text and "no score for them" in text and "unreadable" in text
    assert ev.judge is not None and set(ev.judge.tolist()) == {0.9, 0.7}


def test_a_later_success_replaces_an_earlier_failure():
    res = results_from_records([rec("a.jpg", "x", None), rec("a.jpg", "x", 0.4)])
    assert res.scores == {("a.jpg", "x"): 0.4} and not res.failed


def test_nothing_matched_gives_nan_not_an_exception(tmp_path):
    bench = load_dataset("composite", DATA / "composite_tiny.json")
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", [rec("zzz.jpg", "nothing", 0.5)])))
    assert not ev.ok and math.isnan(ev.measures["tau_c"])
    assert ev.counts["unmatched_rows"] == 5
    assert ev.to_dict()["tau_c"] is None


def test_composite_by_group(tmp_path):
    bench = load_dataset("composite", DATA / "composite_tiny.json")
    records = [rec(r.image, r.caption, r.rating / 5) for r in bench.ratings]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", records)))
    assert ev.measures["tau_c"] == pytest.approx(100.0)
    assert set(ev.by_category) == {"coco", "flickr8k"}
    assert ev.by_category["coco"]["n"] == 2


def test_thumb_pearson_with_and_without_human(tmp_path):
    bench = load_dataset("thumb", DATA / "mscoco_THumB-1.0.jsonl")
    judge = [0.6, 0.9, 0.2, 0.7, 0.8]
    records = [rec(r.image, r.caption, s) for r, s in zip(bench.ratings, judge, strict=True)]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", records)))
    p = np.array([4, 5, 2, 4, 5.0])
    r = np.array([3, 5, 2, 5, 3.0])
    total = np.array([3.5, 5.0, 1.5, 4.5, 3.9])
    keep = np.array([True, False, True, False, True])  # the Human system's rows are out
    assert ev.measures["pearson_P"] == pytest.approx(100 * st.pearsonr(judge, p)[0])
    assert ev.measures["pearson_R"] == pytest.approx(100 * st.pearsonr(judge, r)[0])
    assert ev.measures["pearson_total"] == pytest.approx(100 * st.pearsonr(judge, total)[0])
    j = np.array(judge)
    assert ev.measures["pearson_total_no_human"] == pytest.approx(100 * st.pearsonr(j[keep], total[keep])[0])
    assert ev.measures["pearson_R_no_human"] == pytest.approx(100 * st.pearsonr(j[keep], r[keep])[0])
    assert ev.primary == "pearson_total"


PASCAL_SCORES = {
    # HC p1: label 1 -> right; HC p2: label 0, tie -> wrong / half
    ("p1.jpg", "a man on a bike"): 0.4,
    ("p1.jpg", "a person riding a bicycle"): 0.8,
    ("p2.jpg", "a cat"): 0.5,
    ("p2.jpg", "a sleeping cat"): 0.5,
    ("p3.jpg", "a train at a station"): 0.9,  # HI right
    ("p3.jpg", "two dogs in snow"): 0.1,
    ("p4.jpg", "there is one sky and one boat"): 0.7,  # HM label 1 -> wrong
    ("p4.jpg", "a boat on a lake"): 0.6,
    # MM p5 ("the sofa" / "one sofa and one cat") missing -> unmatched
}


def test_pascal_accuracy_per_category_and_tie_rules(tmp_path):
    bench = load_dataset("pascal50s", DATA / "pascal_tiny.json")
    path = write_jsonl(tmp_path / "r.jsonl", [rec(f"VOC/{i}", c, s) for (i, c), s in PASCAL_SCORES.items()])
    ev = evaluate(bench, load_results(path))
    assert ev.measures["HC"] == pytest.approx(50.0)  # 1 right, 1 tie (wrong)
    assert ev.measures["HI"] == pytest.approx(100.0)
    assert ev.measures["HM"] == pytest.approx(0.0)
    assert math.isnan(ev.measures["MM"])
    assert ev.measures["mean"] == pytest.approx(50.0)  # over the categories with pairs
    assert ev.by_category["HC"]["ties"] == 1 and ev.by_category["MM"]["unmatched"] == 1
    assert ev.counts["unmatched_pairs"] == 1
    assert any("MM" in n for n in ev.notes)
    half = evaluate(bench, load_results(path), ties="half")
    assert half.measures["HC"] == pytest.approx(75.0)
    assert half.to_dict()["ties"] == "half"


def test_pascal_from_pairwise_verdicts_either_order(tmp_path):
    bench = load_dataset("pascal50s", DATA / "pascal_tiny.json")
    verdicts = [
        # shown in file order, B = caption 1 = the preferred one -> right
        {"image": "p1.jpg", "caption_a": "a man on a bike", "caption_b": "a person riding a bicycle", "verdict": "B", "status": "ok"},
        # shown swapped: A = "a sleeping cat" = caption 1, but people preferred caption 0 -> wrong
        {"image": "p2.jpg", "caption_a": "a sleeping cat", "caption_b": "a cat", "verdict": "A", "status": "ok"},
        {"image": "p3.jpg", "caption_a": "a train at a station", "caption_b": "two dogs in snow", "verdict": "tie", "status": "ok"},
        {"image": "p4.jpg", "caption_a": "there is one sky and one boat", "caption_b": "a boat on a lake", "verdict": None, "status": "error", "error": "no verdict"},
    ]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "v.jsonl", verdicts)), ties="half")
    assert ev.by_category["HC"]["correct"] == 1 and ev.by_category["HC"]["wrong"] == 1
    assert ev.measures["HI"] == pytest.approx(50.0)  # a tie is half right here
    assert ev.by_category["HM"]["failed"] == 1
    assert any("pairwise verdicts" in n for n in ev.notes)


def test_foil_accuracy(tmp_path):
    bench = load_dataset("foil", DATA / "foil_tiny.json")
    records = [rec("a/COCO_val2014_000000000001.jpg", "A dog on a couch.", 0.8), rec("COCO_val2014_000000000001.jpg", "A cat on a couch.", 0.3),
               rec("COCO_val2014_000000000002.jpg", "A man with a kite.", 0.2), rec("COCO_val2014_000000000002.jpg", "A man with a surfboard.", 0.6)]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", records)))
    assert ev.measures == {"accuracy": pytest.approx(50.0)}


def test_bootstrap_cis_bracket_the_estimate(tmp_path):
    rng = np.random.default_rng(0)
    bench = load_dataset("flickr8k-expert", DATA / "flickr8k_tiny.json")
    records = [rec(s.image, s.caption, float(rng.random())) for s in bench.samples()]
    ev = evaluate(bench, load_results(write_jsonl(tmp_path / "r.jsonl", records)), bootstrap=200, seed=3)
    lo, hi = ev.ci["tau_c"]
    assert lo <= ev.measures["tau_c"] <= hi
    again = evaluate(bench, load_results(tmp_path / "r.jsonl"), bootstrap=200, seed=3)
    assert again.ci == ev.ci
    assert ev.to_dict()["bootstrap"] == 200
