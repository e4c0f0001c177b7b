"""Acceptance: FLEUR's released per-sample scores, converted to capjudge results, reproduce the
published Flickr8k-Expert tau-c and Pascal-50S accuracies through ``capjudge meta-eval``.

Pascal-50S and the released label file
--------------------------------------
FLEUR (Lee et al., ACL 2024, Table 2) reports HC 61.3, HI 99.7, HM 97.6, MM 74.2 (mean 83.2).
Scoring FLEUR's released per-caption scores against the labels in the released
``annotations/pascal_50s.json`` gives HC 61.3 and HI 99.7 exactly, but HM 97.7 and MM 74.7 (mean
83.35). Not a protocol difference: both use all 4 x 1000 pairs and count a tie as wrong (HC has 9
ties, MM 1, as in FLEUR's ``tie count``). The cause is the labels: each results file prints the
label FLEUR ran with (``label : k``), and these differ from ``pascal_50s.json`` on 18 HC, 0 HI,
1 HM and 16 MM pairs. A Pascal-50S label is the majority of 48 human votes and 24-24 ties are
broken at random when the label file is built (as in the loaders of CLIPScore-derived code), so two
builds of the file disagree on tied pairs. In HC the flips happen to cancel (613 either way); in HM
one flip turns a miss into a hit (976 -> 977); in MM five (742 -> 747). With the run-time labels
rebuilt from the results files (``fleur_pascal_annotations``) every category matches the paper.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from capjudge.cli.metaeval import register
from capjudge.metaeval import fleur_pascal_annotations, fleur_results_to_jsonl, parse_fleur_results

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FLEUR = SHARED / "Yebin46_FLEUR"
CATS = ("HC", "HI", "HM", "MM")

_HAVE_DATA = (FLEUR / "results" / "fleur_flickr8k_expert.txt").is_file() and (FLEUR / "annotations" / "pascal_50s.json").is_file()
# CI always has ../shared beside the clone: there a missing file is a failure, not a skip.
if not _HAVE_DATA and os.environ.get("CI"):
    raise RuntimeError(f"FLEUR's released data not found under {FLEUR} (CI expects ../shared/data beside the repository)")
pytestmark = pytest.mark.skipif(
    not _HAVE_DATA,
    reason=f"FLEUR's released data not found under {FLEUR} (expects ../shared/data beside the repository)",
)


def meta_eval_json(argv: list[str], capsys) -> dict:
    parser = argparse.ArgumentParser(prog="capjudge")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["meta-eval", *argv, "--format", "json"])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def pascal_results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleur") / "fleur_pascal.jsonl"
    n = fleur_results_to_jsonl([FLEUR / "results" / f"fleur_pascal_{c}.txt" for c in CATS], out)
    assert n == 8000  # 4 categories x 1000 pairs x 2 captions, each scored on its own
    return out


def test_parse_fleur_results_formats():
    f8k = parse_fleur_results(FLEUR / "results" / "fleur_flickr8k_expert.txt")
    assert len(f8k.records) == 5664 and not f8k.problems
    first = f8k.records[0]
    assert first.image == "Flickr8k_Dataset/1056338697_4f7d7ce270.jpg"
    assert first.raw_score == 0.0 and first.score == pytest.approx(0.00751495361328125)
    hc = parse_fleur_results(FLEUR / "results" / "fleur_pascal_HC.txt")
    assert len(hc.records) == 2000 and hc.footer == {"true_count": 613, "tie_count": 9}
    assert hc.records[0].group == "HC" and hc.records[0].label == 1 and [r.position for r in hc.records[:2]] == [0, 1]


def test_flickr8k_expert_tau_c_53_0(tmp_path, capsys):
    scores = tmp_path / "fleur_f8k.jsonl"
    assert fleur_results_to_jsonl(FLEUR / "results" / "fleur_flickr8k_expert.txt", scores) == 5664
    rec = json.loads(scores.read_text().splitlines()[0])
    assert rec["method"] == "fleur" and rec["status"] == "ok" and rec["smoothed"] is True and rec["raw_score"] == 0.0
    out = meta_eval_json(["--dataset", "flickr8k-expert", "--human", str(FLEUR / "annotations" / "flickr8k.json"), "--scores", str(scores)], capsys)
    # FLEUR, Table 1: Flickr8k-Expert tau-c 53.0 (each caption's score against its 3 expert ratings)
    assert round(out["tau_c"], 1) == 53.0
    assert abs(out["tau_c"] - 53.0) < 0.05
    assert out["counts"]["used_rows"] == 16992 and out["counts"]["used_captions"] == 5664
    assert out["counts"]["unmatched_rows"] == 0 and out["counts"]["failed_rows"] == 0


def test_pascal50s_from_released_labels(pascal_results, capsys):
    out = meta_eval_json(["--dataset", "pascal50s", "--human", str(FLEUR / "annotations" / "pascal_50s.json"), "--scores", str(pascal_results)], capsys)
    assert out["HC"] == pytest.approx(61.3) and out["HI"] == pytest.approx(99.7)  # the paper's numbers
    assert out["by_category"]["HC"]["ties"] == 9 and out["by_category"]["MM"]["ties"] == 1
    # HM and MM differ from the paper's 97.6 / 74.2 because of the label file (module docstring)
    assert out["HM"] == pytest.approx(97.7) and out["MM"] == pytest.approx(74.7)
    assert out["mean"] == pytest.approx(83.35)
    assert out["counts"]["used_pairs"] == 4000


def test_pascal50s_with_fleurs_run_time_labels_matches_the_paper(pascal_results, tmp_path, capsys):
    labels = tmp_path / "pascal_50s_fleur_labels.json"
    fleur_pascal_annotations([FLEUR / "results" / f"fleur_pascal_{c}.txt" for c in CATS], labels)
    released = json.loads((FLEUR / "annotations" / "pascal_50s.json").read_text())
    rebuilt = json.loads(labels.read_text())
    differ = {c: sum(a["label"] != b["label"] for a, b in zip(released[c], rebuilt[c], strict=True)) for c in CATS}
    assert differ == {"HC": 18, "HI": 0, "HM": 1, "MM": 16}
    out = meta_eval_json(["--dataset", "pascal50s", "--human", str(labels), "--scores", str(pascal_results)], capsys)
    assert {c: out[c] for c in CATS} == {"HC": 61.3, "HI": 99.7, "HM": 97.6, "MM": 74.2}
    assert {c: out["by_category"][c]["correct"] for c in CATS} == {"HC": 613, "HI": 997, "HM": 976, "MM": 742}
