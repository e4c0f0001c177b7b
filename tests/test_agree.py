"""`capjudge agree`: agreement between judges' results files (scores and pairwise verdicts)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from capjudge.cli.agree import register
from capjudge.metaeval import agree_stats as S
from capjudge.metaeval import stats
from capjudge.metaeval.agree import AgreeInputError, agree
from capjudge.metaeval.agree_report import format_table

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="capjudge")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def score_rec(i: int | str, score: float | None, *, image: str | None = None, caption: str | None = None,
              scale: tuple[float, float] = (0.0, 1.0), with_id: bool = True, **kw) -> dict:
    rec = {"image": image or f"img{int(i) // 3}.jpg", "caption": caption or f"caption {i}", "score": score,
           "method": kw.pop("method", "fleur"), "backend": kw.pop("backend", "scripted:x"), "scale": list(scale),
           "status": "ok" if score is not None else "error", "error": None if score is not None else "no number in the answer"}
    if with_id:
        rec["id"] = f"s{i}"
    rec.update(kw)
    return rec


def pair_rec(i: int, verdict: str | None, votes: list | None = None, **kw) -> dict:
    rec = {"id": f"p{i}", "image": f"img{i}.jpg", "caption_a": f"first {i}", "caption_b": f"second {i}",
           "verdict": verdict, "votes": votes if votes is not None else ([verdict, verdict] if verdict else []),
           "method": "gpt4v-pairwise", "backend": "scripted:x", "status": "ok" if verdict else "error",
           "error": None if verdict else "no verdict"}
    rec.update(kw)
    return rec


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def synthetic(n: int = 120, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = np.round(rng.random(n), 2)  # two decimals: ties, as FLEUR's printed scores have
    b = np.clip(np.round(a + rng.normal(0, 0.2, n), 1), 0, 1)
    return a, b


# ------------------------------------------------------------------------------------ scores
def test_correlations_match_scipy():
    a, b = synthetic()
    rep = agree([[score_rec(i, a[i]) for i in range(a.size)], [score_rec(i, b[i]) for i in range(a.size)]], bootstrap=0)
    m = rep.pairs[0].measures
    assert rep.pairs[0].n == a.size and rep.key == "id"
    assert m["kendall_tau_b"] == pytest.approx(100 * st.kendalltau(a, b, variant="b").statistic, abs=1e-9)
    assert m["spearman"] == pytest.approx(100 * st.spearmanr(a, b).statistic, abs=1e-9)
    assert m["pearson"] == pytest.approx(100 * st.pearsonr(a, b).statistic, abs=1e-9)
    assert m["mean_diff"] == pytest.approx(float(np.mean(b - a)))
    assert rep.pairs[0].ci == {}  # bootstrap=0: no intervals


def test_vectorised_resample_statistics_equal_scipy_on_each_resample():
    a, b = synthetic(60)
    idx = next(stats.resample_index_chunks(a.size, 40, seed=5))
    w = stats.resample_counts(idx, a.size)
    assert np.array_equal(w.sum(axis=1), np.full(40, a.size))
    tau = S.KendallPlan(a, b).tau_b(w)
    pa, pb = S.RankPlan(a), S.RankPlan(b)
    rho = S.weighted_pearson(w, pa.ranks(w), pb.ranks(w))
    rho2 = S.weighted_spearman(w, pa, pb, pa.group_sums(w), pb.group_sums(w))
    assert np.allclose(rho, rho2, rtol=0, atol=1e-12)
    r = S.weighted_pearson(w, a, b)
    for k, row in enumerate(idx):
        assert tau[k] == pytest.approx(st.kendalltau(a[row], b[row], variant="b").statistic, abs=1e-12)
        assert rho[k] == pytest.approx(st.spearmanr(a[row], b[row]).statistic, abs=1e-12)
        assert r[k] == pytest.approx(st.pearsonr(a[row], b[row]).statistic, abs=1e-12)
    # a resample in which one side is constant: undefined, as scipy says
    w1 = np.zeros((1, a.size))
    w1[0, 0] = a.size
    assert math.isnan(S.KendallPlan(a, b).tau_b(w1)[0]) and math.isnan(S.weighted_pearson(w1, a, b)[0])
    assert math.isnan(S.weighted_spearman(w1, pa, pb, pa.group_sums(w1), pb.group_sums(w1))[0])


def test_bootstrap_cis_are_repeatable_and_hold_the_estimate():
    a, b = synthetic(80)
    recs = [[score_rec(i, a[i]) for i in range(a.size)], [score_rec(i, b[i]) for i in range(a.size)]]
    r1 = agree(recs, bootstrap=200, seed=7).pairs[0]
    r2 = agree(recs, bootstrap=200, seed=7).pairs[0]
    r3 = agree(recs, bootstrap=200, seed=8).pairs[0]
    assert r1.ci == r2.ci and r1.ci != r3.ci
    for key in ("kendall_tau_b", "spearman", "pearson", "mean_diff"):
        lo, hi = r1.ci[key]
        assert lo < r1.measures[key] < hi


def test_same_image_pairs_tiny_case():
    # image 1: captions x, y, z; image 2: u, v; image 3 has one caption (no pair)
    # A: x=0.9 y=0.5 z=0.5 | u=0.2 v=0.8 | w=0.1     B: x=80 y=60 z=90 | u=30 v=10 | w=5
    # pairs: (x,y): A x>y, B x>y same; (x,z): A x>z, B x<z opposite; (y,z): A tie, B y<z tied in A only;
    #        (u,v): A u<v, B u>v opposite
    img = {"x": "1.jpg", "y": "1.jpg", "z": "1.jpg", "u": "2.jpg", "v": "2.jpg", "w": "3.jpg"}
    sa = {"x": 0.9, "y": 0.5, "z": 0.5, "u": 0.2, "v": 0.8, "w": 0.1}
    sb = {"x": 80, "y": 60, "z": 90, "u": 30, "v": 10, "w": 5}
    ra = [score_rec(0, sa[c], image=img[c], caption=c, id=c) for c in sa]
    rb = [score_rec(0, sb[c], image=img[c], caption=c, id=c, scale=(0, 100)) for c in sb]
    sp = agree([ra, rb], bootstrap=0).pairs[0].same_image_pairs
    assert sp["images"] == 2 and sp["pairs"] == 4
    assert (sp["same"], sp["opposite"], sp["tied_a_only"], sp["tied_b_only"], sp["tied_both"]) == (1, 2, 1, 0, 0)
    assert sp["same_order"] == pytest.approx(100 / 3)
    # the vectorised count equals a plain double loop on a bigger random case
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 30, 200)
    a, b = rng.integers(0, 5, 200).astype(float), rng.integers(0, 5, 200).astype(float)
    got = S.same_image_order(a, b, groups.tolist())
    same = opp = 0
    for i in range(200):
        for j in range(i + 1, 200):
            if groups[i] == groups[j]:
                da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
                same += da == db != 0
                opp += da == -db != 0
    assert (got["same"], got["opposite"]) == (same, opp)
    # one image with so many captions that its pairs are counted caption by caption
    big = rng.integers(0, 50, 2100).astype(float)
    noisy = big + rng.integers(-5, 6, 2100)
    one = S.same_image_order(big, noisy, ["same.jpg"] * 2100)
    two = S.same_image_order(big[:1000], noisy[:1000], ["same.jpg"] * 1000)  # the vectorised path
    assert one["pairs"] == 2100 * 2099 // 2 and two["pairs"] == 1000 * 999 // 2
    sa = np.sign(big[:1000, None] - big[None, :1000])[np.triu_indices(1000, 1)]
    sb = np.sign(noisy[:1000, None] - noisy[None, :1000])[np.triu_indices(1000, 1)]
    assert two["same"] == int(np.sum((sa == sb) & (sa != 0)))
    sa = np.sign(big[:, None] - big[None, :])[np.triu_indices(2100, 1)]
    sb = np.sign(noisy[:, None] - noisy[None, :])[np.triu_indices(2100, 1)]
    assert one["same"] == int(np.sum((sa == sb) & (sa != 0))) and one["tied_both"] == int(np.sum((sa == 0) & (sb == 0)))


def test_different_scales_compared_by_rank_only():
    a, b = synthetic(40)
    rep = agree([[score_rec(i, a[i]) for i in range(40)], [score_rec(i, 100 * b[i], scale=(0, 100)) for i in range(40)]], bootstrap=20)
    pc = rep.pairs[0]
    assert pc.comparison == "ranks"
    assert "mean_diff" not in pc.measures and "mean_diff" not in pc.ci
    assert any("compared by rank" in n for n in pc.notes)
    d = rep.to_dict()
    assert d["comparison"] == "ranks" and "mean_diff" not in d
    assert "compared by rank" in d["notes"][0]  # the pair's notes lead the JSON's notes
    # same data on the same scale: values, with a mean difference
    same = agree([[score_rec(i, a[i]) for i in range(40)], [score_rec(i, b[i]) for i in range(40)]], bootstrap=0).pairs[0]
    assert same.comparison == "values" and "mean_diff" in same.measures


def test_calibration_and_largest_disagreements():
    a = np.arange(40, dtype=float) / 40
    b = a.copy()
    b[[3, 30]] = b[[30, 3]]  # two samples swap places: the largest rank differences
    pc = agree([[score_rec(i, a[i]) for i in range(40)], [score_rec(i, b[i]) for i in range(40)]], bootstrap=0).pairs[0]
    assert len(pc.calibration) == 10 and sum(c["n"] for c in pc.calibration) == 40
    assert pc.calibration[0]["mean_a"] == pytest.approx(np.mean(a[:4]))
    assert [d["id"] for d in pc.disagreements] == ["s3", "s30"]
    top = pc.disagreements[0]
    assert (top["score_a"], top["score_b"], top["rank_a"], top["rank_b"], top["rank_diff"]) == (a[3], a[30], 4.0, 31.0, 27.0)
    assert top["caption"] == "caption 3" and top["image"] == "img1.jpg"


def test_mismatched_sample_sets_are_counted(tmp_path):
    fa = write(tmp_path / "a.jsonl", [score_rec(i, i / 10) for i in range(0, 6)])
    fb = write(tmp_path / "b.jsonl", [score_rec(i, i / 9) for i in range(3, 10)])
    pc = agree([fa, fb], bootstrap=0).pairs[0]
    assert pc.counts == {"joined": 3, "only_a": 3, "only_b": 4, "excluded_errors": 0, "content_mismatch": 0}
    assert pc.n == 3 and any("3 only in a, 4 only in b" in n for n in pc.notes)


def test_error_records_are_counted_and_left_out(tmp_path):
    a, b = synthetic(10)
    ra = [score_rec(i, None if i in (1, 2) else a[i]) for i in range(10)]
    rb = [score_rec(i, None if i in (2, 5) else b[i]) for i in range(10)]
    rep = agree([write(tmp_path / "a.jsonl", ra), write(tmp_path / "b.jsonl", rb)], bootstrap=0)
    pc = rep.pairs[0]
    assert pc.n == 7 and pc.counts["excluded_errors"] == 3
    keep = [i for i in range(10) if i not in (1, 2, 5)]
    assert pc.measures["spearman"] == pytest.approx(100 * st.spearmanr(a[keep], b[keep]).statistic)
    assert [j["errors"] for j in rep.judges] == [2, 2]
    assert "line 2 (id s1): no number in the answer" in rep.judges[0]["error_examples"][0]
    assert any("a: 2 error records left out" in n for n in rep.notes)


def test_join_on_image_and_caption_when_ids_are_missing():
    a, b = synthetic(12)
    ra = [score_rec(i, a[i], with_id=False, image=f"/abs/path/img{i}.jpg") for i in range(12)]
    rb = [score_rec(i, b[i], id=f"other{i}", image=f"img{i}.jpg", caption=f"  caption   {i} ") for i in range(12)]
    rep = agree([ra, rb], bootstrap=0)
    assert rep.key == "image+caption" and rep.pairs[0].n == 12
    assert "image file name" in " ".join(rep.notes)


def test_ids_that_join_different_captions_are_reported():
    ra = [score_rec(i, i / 10) for i in range(5)]
    rb = [score_rec(i, i / 10, caption="something else" if i == 4 else None) for i in range(5)]
    pc = agree([ra, rb], bootstrap=0).pairs[0]
    assert pc.counts["content_mismatch"] == 1 and any(n.startswith("WARNING: 1 ids") for n in pc.notes)


def test_bad_input_errors_name_file_and_line(tmp_path):
    good = write(tmp_path / "good.jsonl", [score_rec(i, 0.5) for i in range(3)])
    dup = write(tmp_path / "dup.jsonl", [score_rec(0, 0.1), score_rec(1, 0.2), score_rec(0, 0.3)])
    with pytest.raises(AgreeInputError, match=r"dup\.jsonl: line 3: duplicate id 's0' \(first at line 1\)"):
        agree([good, dup])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(score_rec(0, 0.1)) + "\n{not json\n")
    with pytest.raises(AgreeInputError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        agree([good, bad])
    nan = write(tmp_path / "nan.jsonl", [score_rec(0, 0.1), {**score_rec(1, 0.1), "score": "high"}])
    with pytest.raises(AgreeInputError, match=r"nan\.jsonl: line 2: score 'high' is not a number"):
        agree([good, nan])
    mixed = write(tmp_path / "mixed.jsonl", [score_rec(0, 0.1), pair_rec(1, "A")])
    with pytest.raises(AgreeInputError, match=r"mixed\.jsonl: line 2 is a pairwise record but line 1 is a score record"):
        agree([good, mixed])
    pairs = write(tmp_path / "pairs.jsonl", [pair_rec(0, "A")])
    with pytest.raises(AgreeInputError, match="mix score and pairwise"):
        agree([good, pairs])
    with pytest.raises(AgreeInputError, match="not found"):
        agree([good, tmp_path / "missing.jsonl"])
    with pytest.raises(AgreeInputError, match="two or more"):
        agree([good])
    # duplicates without ids: the (image, caption) key repeats
    nid = write(tmp_path / "noid.jsonl", [score_rec(0, 0.1, with_id=False), score_rec(0, 0.2, with_id=False)])
    with pytest.raises(AgreeInputError, match="duplicate image and caption 'img0.jpg / caption 0'.*add a unique 'id'"):
        agree([nid, nid])


def test_three_score_judges_every_pair_and_matrix():
    a, b = synthetic(30)
    c = np.round(1 - a, 2)
    lists = [[score_rec(i, v[i]) for i in range(30)] for v in (a, b, c)]
    rep = agree(lists, names=["x", "y", "z"], bootstrap=0)
    assert [(p.a, p.b) for p in rep.pairs] == [("x", "y"), ("x", "z"), ("y", "z")]
    d = rep.to_dict()
    assert d["n"] == 30 and len(d["pairs"]) == 3 and "kendall_tau_b" not in d
    assert d["matrix"]["kendall_tau_b"][0][2] == pytest.approx(-100.0)
    assert "x vs y" in format_table(rep)


# ------------------------------------------------------------------------------------ verdicts
def test_cohen_kappa_hand_worked():
    # 20 pairs; rows: judge 1, columns: judge 2
    #            A   B  tie | row total
    #      A     6   1   1  |  8
    #      B     2   5   1  |  8
    #      tie   0   1   3  |  4
    #   total    8   7   5  | 20
    # p_o = (6 + 5 + 3) / 20 = 0.70
    # p_e = (8*8 + 8*7 + 4*5) / 20^2 = 140 / 400 = 0.35
    # kappa = (0.70 - 0.35) / (1 - 0.35) = 0.35 / 0.65 = 7/13 = 0.538...
    cells = {("A", "A"): 6, ("A", "B"): 1, ("A", "tie"): 1, ("B", "A"): 2, ("B", "B"): 5, ("B", "tie"): 1,
             ("tie", "A"): 0, ("tie", "B"): 1, ("tie", "tie"): 3}
    x, y = [], []
    for (v1, v2), k in cells.items():
        x += [v1] * k
        y += [v2] * k
    assert S.cohen_kappa(x, y) == pytest.approx(7 / 13)
    pc = agree([[pair_rec(i, v) for i, v in enumerate(x)], [pair_rec(i, v) for i, v in enumerate(y)]], bootstrap=100).pairs[0]
    assert pc.measures["cohen_kappa"] == pytest.approx(700 / 13)
    assert pc.measures["agreement"] == pytest.approx(70.0)
    assert pc.confusion == [[6, 1, 1], [2, 5, 1], [0, 1, 3]]
    lo, hi = pc.ci["cohen_kappa"]
    assert lo < 700 / 13 < hi


def test_fleiss_kappa_hand_worked():
    # 3 judges, 5 pairs; n_ij = judges giving pair i verdict j (A, B, tie)
    #   pair 1: A A A       -> (3,0,0)  P_1 = (9 - 3) / (3*2) = 1
    #   pair 2: A A B       -> (2,1,0)  P_2 = (4 + 1 - 3) / 6 = 1/3
    #   pair 3: B B B       -> (0,3,0)  P_3 = 1
    #   pair 4: A B tie     -> (1,1,1)  P_4 = (3 - 3) / 6 = 0
    #   pair 5: tie tie B   -> (0,1,2)  P_5 = (1 + 4 - 3) / 6 = 1/3
    # P = (1 + 1/3 + 1 + 0 + 1/3) / 5 = 8/15
    # p_A = 6/15, p_B = 6/15, p_tie = 3/15 -> P_e = 0.16 + 0.16 + 0.04 = 0.36
    # kappa = (8/15 - 0.36) / (1 - 0.36) = 13/48 = 0.2708...
    votes = [("A", "A", "A"), ("A", "A", "B"), ("B", "B", "B"), ("A", "B", "tie"), ("tie", "tie", "B")]
    assert S.fleiss_kappa(votes) == pytest.approx(13 / 48)
    lists = [[pair_rec(i, v[k]) for i, v in enumerate(votes)] for k in range(3)]
    rep = agree(lists, names=["j1", "j2", "j3"], bootstrap=50)
    d = rep.to_dict()
    assert d["n"] == 5 and d["fleiss_kappa"] == pytest.approx(100 * 13 / 48, abs=1e-4)
    assert d["agreement"] == pytest.approx(40.0)  # pairs 1 and 3 unanimous
    assert len(d["pairs"]) == 3 and d["pairs"][0]["agreement"] == pytest.approx(80.0)  # j1, j2 differ on pair 4 only
    assert "fleiss_kappa" in d["ci95"]


def test_position_bias_hand_made():
    # votes[0]: order (A, B), votes[1]: order (B, A), both mapped back to A/B
    #   r1 [A, A]   order 1 picked the first shown, order 2 the second     first 1, second 1
    #   r2 [A, B]   both orders picked the caption shown first             first 2, flip, position flip
    #   r3 [B, A]   both picked the caption shown second                   second 2, flip, position flip
    #   r4 [A, tie]                                                        first 1, tie vote 1, flip
    #   r5 [tie, tie]                                                      tie votes 2
    # first 4, second 3 -> 4/7; tie votes 3/10; flips 3/5; position flips 2/5; tie verdicts (r2, r3, r5) 3/5
    recs = [pair_rec(1, "A", ["A", "A"]), pair_rec(2, "tie", ["A", "B"]), pair_rec(3, "tie", ["B", "A"]),
            pair_rec(4, "A", ["A", "tie"]), pair_rec(5, "tie", ["tie", "tie"]), pair_rec(6, None)]
    rep = agree([recs, recs], names=["j", "k"], bootstrap=0)
    pb = rep.position_bias["j"]
    assert pb["records"] == 5 and pb["two_order_records"] == 5
    assert pb["first_position"] == pytest.approx(400 / 7)
    assert pb["tie_votes"] == pytest.approx(30.0)
    assert pb["flip_rate"] == pytest.approx(60.0)
    assert pb["position_flips"] == pytest.approx(40.0)
    assert pb["tie_share"] == pytest.approx(60.0)
    assert rep.judges[0]["errors"] == 1


def test_pairs_shown_in_the_other_order_are_compared_in_one_order():
    a = [pair_rec(i, v) for i, v in enumerate(["A", "B", "tie", "A"])]
    # judge 2 was given the captions swapped and prefers the same captions: its labels are the other way
    b = [{**pair_rec(i, {"A": "B", "B": "A"}.get(v, v)), "caption_a": f"second {i}", "caption_b": f"first {i}"}
         for i, v in enumerate(["A", "B", "tie", "A"])]
    pc = agree([a, b], bootstrap=0).pairs[0]
    assert pc.measures["agreement"] == 100.0 and pc.counts["content_mismatch"] == 0
    assert any("other order" in n for n in pc.notes)


# ------------------------------------------------------------------------------------ CLI
def test_cli_json_last_line_scores_and_pairs(tmp_path, capsys):
    a, b = synthetic(30)
    fa = write(tmp_path / "open.jsonl", [score_rec(i, a[i]) for i in range(30)])
    fb = write(tmp_path / "gpt.jsonl", [score_rec(i, b[i]) for i in range(30)])
    assert run(["agree", str(fa), str(fb), "--format", "json", "--bootstrap", "50", "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["n"] == 30 and out["unit"] == "x100" and out["kind"] == "score"
    assert out["kendall_tau_b"] == pytest.approx(100 * st.kendalltau(a, b).statistic, abs=1e-3)
    assert {"spearman", "pearson", "mean_diff", "ci95", "calibration", "same_image_pairs", "disagreements"} <= set(out)
    assert [j["name"] for j in out["judges"]] == ["open", "gpt"] and out["bootstrap"] == 50

    pa = write(tmp_path / "pa.jsonl", [pair_rec(i, v) for i, v in enumerate("AABBA")])
    pb = write(tmp_path / "pb.jsonl", [pair_rec(i, v) for i, v in enumerate("ABBBA")])
    assert run(["agree", str(pa), str(pb), "--names", "first", "second", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["agreement"] == pytest.approx(80.0) and out["cohen_kappa"] is not None
    assert set(out["position_bias"]) == {"first", "second"}

    assert run(["agree", str(fa), str(fb), "--bootstrap", "20"]) == 0  # the rich table
    text = capsys.readouterr().out
    assert "Kendall tau-b (x100)" in text and "calibration" in text


def test_cli_bad_input_exit_2(tmp_path, capsys):
    fa = write(tmp_path / "a.jsonl", [score_rec(0, 0.1)])
    assert run(["agree", str(fa)]) == 2
    assert run(["agree", str(fa), str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert run(["agree", str(fa), str(fa), "--names", "one"]) == 2


def test_cli_is_registered_in_capjudge():
    from capjudge.cli import build_parser

    args = build_parser().parse_args(["agree", "a.jsonl", "b.jsonl", "--bootstrap", "0"])
    assert args.bootstrap == 0 and args.func.__name__ == "cmd_agree"
    import capjudge

    assert capjudge.agree is agree


def test_real_pipeline_scores_and_pairs(tmp_path, capsys):
    """Two judges run by the real pipeline (Judge + ScriptedBackend, `capjudge compare`) on the bundled examples."""
    from capjudge import Judge, Sample
    from capjudge.backends.scripted import ScriptedBackend
    from capjudge.cli import main
    from capjudge.data.io import read_samples, write_results

    samples = [Sample(s["image"], s["caption"], tuple(s["references"]), s["id"]) for s in read_samples(EXAMPLES / "captions.jsonl") if isinstance(s, dict)]
    quality = {s.caption: k for k, s in enumerate(samples)}

    def grader(scale: float, noise: int):
        def respond(req):
            text = [m for m in req.messages if m.role == "user"][-1].content
            k = next(v for c, v in quality.items() if c in text)
            return str(round(scale * ((k * 7 + noise * k * k) % 11) / 10, 2))
        return respond

    fleur = Judge("fleur", ScriptedBackend(grader(1.0, 0)), images_root=EXAMPLES / "images")
    vanilla = Judge("vanilla", ScriptedBackend(grader(100.0, 3)), images_root=EXAMPLES / "images")
    missing = Sample("no-such-image.jpg", "a cat.", (), "missing")  # an error record in both files
    write_results(tmp_path / "fleur.jsonl", fleur.score_many([*samples, missing]))
    write_results(tmp_path / "vanilla.jsonl", vanilla.score_many([*samples, missing]))

    assert main(["agree", str(tmp_path / "fleur.jsonl"), str(tmp_path / "vanilla.jsonl"), "--format", "json", "--bootstrap", "100"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    f = [(k * 7) % 11 / 10 for k in range(6)]
    v = [100 * ((k * 7 + 3 * k * k) % 11) / 10 for k in range(6)]
    assert out["n"] == 6 and out["key"] == "id" and out["comparison"] == "ranks"
    assert out["kendall_tau_b"] == pytest.approx(100 * st.kendalltau(f, v).statistic, abs=1e-3)
    assert [j["errors"] for j in out["judges"]] == [1, 1] and out["counts"]["excluded_errors"] == 1
    assert out["same_image_pairs"]["pairs"] == 6  # 3 captions of cats.jpg, 3 of dog.jpg

    for name, answer in (("first", "Answer 1"), ("tie", "Tie")):
        rc = main(["compare", "--backend", f"scripted:{answer}", "--images", str(EXAMPLES / "images"), "--input",
                   str(EXAMPLES / "pairs.jsonl"), "--out", str(tmp_path / f"{name}.jsonl"), "--no-cache", "--quiet"])
        assert rc == 0
    capsys.readouterr()
    assert main(["agree", str(tmp_path / "first.jsonl"), str(tmp_path / "tie.jsonl"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["kind"] == "pairwise" and out["n"] == 2 and out["agreement"] == 100.0
    assert out["cohen_kappa"] is None  # both always "tie": chance agreement is 1, kappa undefined
    first = out["position_bias"]["first"]  # always "Answer 1": the first shown wins in both orders
    assert first["first_position"] == 100.0 and first["position_flips"] == 100.0 and first["tie_share"] == 100.0
    assert out["position_bias"]["tie"]["tie_votes"] == 100.0
