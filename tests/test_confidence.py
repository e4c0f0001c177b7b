"""Confidence on every record (issue 31, item 1): ``--method-option confidence=on``.

What this proves: against the OpenAI-protocol fake server serving planted top log-probabilities,
a pair verdict's ``details.confidence`` equals a hand computation from the same alternatives to
1e-9 (one order; both orders combined by the dual-sided vote, and their order agreement; a tie from
orders that part), a score's ``score_sd`` and ``confidence`` equal the planted distribution's,
an answer without log-probabilities gets the agreement of N sampled answers
(``estimate_by_sampling=N``), a panel the share of its judges agreeing; without the option the
requests ask no log-probabilities and the records carry no confidence field; on the tiny HF
model the fields appear and agree with the distributions they record; capjudge.trust's reader
takes the fields and their rule.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from capjudge.cli import main
from capjudge.judges.voting import dual_sided_vote
from openai_fake_server import Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
KEY = "sk-test-CONFIDENCE-7a1"
L = math.log
PAIRS = [json.loads(x) for x in (EXAMPLES / "pairs.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def tok(text: str, alts: list[tuple[str, float]] | None = None) -> tuple[str, float, list[tuple[str, float]]]:
    """A served token; without ``alts`` it is certain."""
    if alts is None:
        return (text, 0.0, [(text, 0.0)])
    return (text, L(dict(alts)[text]), [(t, L(p)) for t, p in alts])


def a_first(req: Received) -> bool:
    """The request shows a pair's caption A first (the first order)."""
    text = req.prompt_text()
    for p in PAIRS:
        if p["caption_a"] in text and p["caption_b"] in text:
            return text.index(p["caption_a"]) < text.index(p["caption_b"])
    raise AssertionError("no pair in the prompt")


def responder(first: list[Any], second: list[Any], asked: list[dict[str, Any]] | None = None) -> Any:
    """``first``'s tokens to the order (A, B), ``second``'s to (B, A); log-probabilities only when asked."""

    def respond(req: Received) -> Reply:
        body = req.body or {}
        if asked is not None:
            asked.append(body)
        tokens = first if a_first(req) else second
        return Reply(body=chat_body("".join(t for t, _, _ in tokens), tokens=tokens if body.get("logprobs") else None))

    return respond


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run(srv: Any, tmp_path: Path, command: str, method: str, *extra: str, name: str = "out") -> list[dict[str, Any]]:
    out = tmp_path / f"{name}.jsonl"
    data = ["--input", str(EXAMPLES / ("pairs.jsonl" if command == "compare" else "captions.jsonl"))]
    argv = [command, "--method", method, "--backend", f"openai-compatible:{srv.base_url}#judge", "--images", str(EXAMPLES / "images"), *data, "--out", str(out), "--no-cache", "--quiet", *extra]
    assert main(argv) == 0
    return records(out)


# The verdict token of "Answer 1 ..." and its alternatives: the other answer, a tie and a word read as none.
ALTS_1 = [(" 1", 0.6), (" 2", 0.25), (" Tie", 0.05), (" is", 0.1)]
ALTS_2 = [(" 2", 0.7), (" 1", 0.2), (" Tie", 0.1)]


def by_hand(p1: dict[str, float], p2_shown: dict[str, float], verdict: str) -> tuple[float, float]:
    """The dual-sided rule written out: order 2's distribution mapped back, the vote's probability
    over independent orders, and the probability that the orders agree."""
    p2 = {"A": p2_shown["B"], "B": p2_shown["A"], "tie": p2_shown["tie"]}
    conf = sum(p1[a] * p2[b] for a in p1 for b in p2 if dual_sided_vote(a, b) == verdict)
    return conf, sum(p1[v] * p2[v] for v in p1)


def test_dual_sided_confidence_equals_the_hand_computation(tmp_path: Path) -> None:
    # Order (A, B) says "Answer 1" (A); order (B, A) says "Answer 2" (A again): verdict A.
    first = [tok("Answer"), tok(" 1", ALTS_1), tok(" is"), tok(" better")]
    second = [tok("Answer"), tok(" 2", ALTS_2), tok(".")]
    asked: list[dict[str, Any]] = []
    with running_server(responder=responder(first, second, asked)) as srv:
        res = run(srv, tmp_path, "compare", "gpt4v-pairwise", "--method-option", "confidence=on")
        plain = run(srv, tmp_path, "compare", "gpt4v-pairwise", name="plain")
    assert res and all(r["status"] == "ok" and r["verdict"] == "A" for r in res), [r["error"] for r in res]
    m1 = 0.6 + 0.25 + 0.05  # " is" reads as no verdict: outside the mass
    p1 = {"A": 0.6 / m1, "B": 0.25 / m1, "tie": 0.05 / m1}
    p2_shown = {"A": 0.2, "B": 0.7, "tie": 0.1}
    want, agree = by_hand(p1, p2_shown, "A")
    for r in res:
        d = r["details"]
        assert abs(d["confidence"] - want) < 1e-9 and abs(d["order_agreement"] - agree) < 1e-9
        assert d["confidence_rule"] == "logprobs"
        assert abs(d["verdict_mass"][0] - m1) < 1e-9 and abs(d["verdict_mass"][1] - 1.0) < 1e-9
        assert d["verdict_probs"][1] == pytest.approx({"A": 0.7, "B": 0.2, "tie": 0.1}, abs=1e-12)
    # Without the option: no log-probabilities asked, no confidence field (records as before).
    n = len(res) * 2
    assert all(b.get("logprobs") and b.get("top_logprobs") for b in asked[:n])
    assert not any(b.get("logprobs") or b.get("top_logprobs") for b in asked[n:])
    assert plain and all(not {"confidence", "confidence_rule", "verdict_probs"} & set(r["details"]) for r in plain)
    assert all(KEY not in json.dumps(r) for r in res)


def test_orders_that_part_give_a_tie_and_its_probability(tmp_path: Path) -> None:
    # Both orders say "Answer 1": A then B once mapped back -> tie.
    first = [tok("Answer"), tok(" 1", ALTS_1)]
    with running_server(responder=responder(first, first)) as srv:
        res = run(srv, tmp_path, "compare", "gpt4v-pairwise", "--method-option", "confidence=on")
    m1 = 0.9
    p = {"A": 0.6 / m1, "B": 0.25 / m1, "tie": 0.05 / m1}
    want, agree = by_hand(p, p, "tie")
    assert res and all(r["verdict"] == "tie" and abs(r["details"]["confidence"] - want) < 1e-9 and abs(r["details"]["order_agreement"] - agree) < 1e-9 for r in res)


def test_single_order_is_the_verdicts_probability(tmp_path: Path) -> None:
    # Whichever caption is shown first, the answer picks the one shown second ("Answer 2").
    second = [tok("Answer"), tok(" 2", ALTS_2)]
    with running_server(responder=responder(second, second)) as srv:
        res = run(srv, tmp_path, "compare", "gpt4v-pairwise", "--method-option", "confidence=on", "--order", "single")
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    for r in res:
        assert r["verdict"] == ("B" if r["details"]["shown_first"] == "A" else "A")
        assert abs(r["details"]["confidence"] - 0.7) < 1e-9 and r["details"]["confidence_rule"] == "logprobs"
        assert "order_agreement" not in r["details"]


def test_score_spread_and_probability_of_the_printed_number(tmp_path: Path) -> None:
    alts = [(" 85", 0.5), (" 80", 0.2), (" 90", 0.1), (" N", 0.1), (" 150", 0.05)]
    tokens = [tok("Rating"), tok(":"), tok(" 85", alts)]

    def respond(req: Received) -> Reply:
        return Reply(body=chat_body("Rating: 85", tokens=tokens if (req.body or {}).get("logprobs") else None))

    with running_server(responder=respond) as srv:
        res = run(srv, tmp_path, "score", "vanilla", "--method-option", "confidence=on")
    dist = {85.0: 0.5 / 0.8, 80.0: 0.2 / 0.8, 90.0: 0.1 / 0.8}
    mean = sum(v * p for v, p in dist.items())
    sd = math.sqrt(sum(p * (v - mean) ** 2 for v, p in dist.items()))
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    for r in res:
        assert r["score"] == 85.0 and r["smoothed"] is False  # the score stays the printed one
        d = r["details"]
        assert abs(d["score_sd"] - sd) < 1e-9 and abs(d["confidence"] - 0.5 / 0.8) < 1e-9 and d["confidence_rule"] == "logprobs"


def test_grading_is_the_probability_that_one_score_beats_the_other(tmp_path: Path) -> None:
    alts_a = [(" 85", 0.5), (" 80", 0.3), (" 70", 0.1), (" N", 0.1)]
    alts_b = [(" 80", 0.6), (" 85", 0.2), (" 90", 0.2)]
    captions_a = {p["caption_a"] for p in PAIRS}

    def respond(req: Received) -> Reply:
        is_a = any(c in req.prompt_text() for c in captions_a)
        tokens = [tok("Rating"), tok(":"), tok(" 85", alts_a) if is_a else tok(" 80", alts_b)]
        return Reply(body=chat_body("".join(t for t, _, _ in tokens), tokens=tokens if (req.body or {}).get("logprobs") else None))

    with running_server(responder=respond) as srv:
        res = run(srv, tmp_path, "compare", "vanilla", "--mode", "grading", "--method-option", "confidence=on")
    pa = {85.0: 0.5 / 0.9, 80.0: 0.3 / 0.9, 70.0: 0.1 / 0.9}
    pb = {80.0: 0.6, 85.0: 0.2, 90.0: 0.2}
    want = sum(p * q for x, p in pa.items() for y, q in pb.items() if x > y)
    assert res and all(r["status"] == "ok" and r["verdict"] == "A" and r["scores"] == [85.0, 80.0] for r in res), [r["error"] for r in res]
    assert all(abs(r["details"]["confidence"] - want) < 1e-9 and r["details"]["confidence_rule"] == "logprobs" for r in res)


def test_without_log_probabilities_the_agreement_of_sampled_answers(tmp_path: Path) -> None:
    # A reasoning API: greedy answers without log-probabilities; 4 sampled answers per order.
    sampled = {True: ["Answer 1", "Answer 1", "Answer 2", "no idea"], False: ["Answer 2", "Tie", "Answer 2", "Answer 2"]}
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(req: Received) -> Reply:
        body = req.body or {}
        order = a_first(req)
        if body.get("temperature", 0) != 1:
            return Reply(body=chat_body("Answer 1" if order else "Answer 2"))
        with lock:
            k = asked[req.prompt_text()] = asked.get(req.prompt_text(), -1) + 1
        return Reply(body=chat_body(sampled[order][k % 4]))

    with running_server(responder=respond) as srv:
        res = run(srv, tmp_path, "compare", "gpt4v-pairwise", "--method-option", "confidence=on", "--backend-opt", "estimate_by_sampling=4")
    p1 = {"A": 2 / 3, "B": 1 / 3, "tie": 0.0}  # "no idea" holds no verdict
    p2_shown = {"A": 0.0, "B": 0.75, "tie": 0.25}
    want, agree = by_hand(p1, p2_shown, "A")
    assert res and all(r["status"] == "ok" and r["verdict"] == "A" for r in res), [r["error"] for r in res]
    for r in res:
        d = r["details"]
        assert d["confidence_rule"] == "sampling" and abs(d["confidence"] - want) < 1e-9 and abs(d["order_agreement"] - agree) < 1e-9
        assert d["verdict_mass"] == [0.75, 1.0]


def test_no_log_probabilities_and_no_sampling_says_why(tmp_path: Path) -> None:
    with running_server(responder=lambda req: Reply(body=chat_body("Answer 1" if a_first(req) else "Answer 2"))) as srv:
        res = run(srv, tmp_path, "compare", "gpt4v-pairwise", "--method-option", "confidence=on")
    assert res and all(r["status"] == "ok" and r["details"]["confidence"] is None and "estimate_by_sampling" in r["details"]["confidence_missing"] for r in res)


def test_panel_confidence_is_the_share_of_judges_agreeing(tmp_path: Path) -> None:
    # Two judges pick A in both orders (a rules file: caption A shown first -> "Answer 1", else "Answer 2"), one says Tie.
    rules = [[f"Answer 1: {p['caption_a']}", "Answer 1"] for p in PAIRS]
    specs = []
    for name in ("one", "two"):
        (tmp_path / f"{name}.json").write_text(json.dumps(rules))
        specs += ["--backend", f"scripted:Answer 2?rules={tmp_path / f'{name}.json'}"]
    out = tmp_path / "panel.jsonl"
    argv = ["compare", "--method", "gpt4v-pairwise", *specs, "--backend", "scripted:Tie",
            "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--method-option", "confidence=on"]
    assert main(argv) == 0
    res = records(out)
    assert res and all(r["verdict"] == "A" and abs(r["details"]["confidence"] - 2 / 3) < 1e-12 and r["details"]["confidence_rule"] == "panel" for r in res), res[0]


def test_option_refused_where_it_cannot_apply() -> None:
    from capjudge import get_method
    from capjudge.prompts.registry import MethodOptionError

    with pytest.raises(MethodOptionError, match="no option 'confidence'"):
        get_method("fleur").configure({"confidence": "on"})
    assert get_method("gpt4v-pairwise").configure({"confidence": "on"}).confidence
    assert get_method("vanilla").option_defaults()["confidence"] == "off"


def test_trust_reader_takes_the_fields(tmp_path: Path) -> None:
    from capjudge.trust.inputs import read_results

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in [
        {"id": "p1", "image": "a.jpg", "verdict": "A", "votes": ["A", "A"], "status": "ok", "details": {"confidence": 0.83, "confidence_rule": "logprobs"}},
        {"id": "p2", "image": "a.jpg", "verdict": "B", "votes": ["B", "tie"], "status": "ok", "details": {"confidence": None, "confidence_rule": None, "confidence_missing": "no"}},
    ]) + "\n")
    r = read_results(pairs)
    assert {k: (v.confidence, v.rule) for k, v in r.rows.items()} == {"p1": (0.83, "logprobs"), "p2": (0.5, "votes")}
    scores = tmp_path / "scores.jsonl"
    scores.write_text(json.dumps({"id": "s1", "image": "a.jpg", "score": 80.0, "scale": [0, 100], "status": "ok", "details": {"confidence": 0.6, "confidence_rule": "logprobs", "score_sd": 3.5}}) + "\n")
    row = read_results(scores).rows["s1"]
    assert (row.confidence, row.rule, row.score_sd) == (0.6, "logprobs", 3.5)


@pytest.mark.hf
def test_tiny_hf_records_carry_the_confidence_of_their_own_tokens(tiny_llava_dir: Path) -> None:
    from capjudge import Judge, Sample
    from capjudge.judges.smoothing import token_text
    from capjudge.parsing import parse_verdict
    from capjudge.prompts.registry import get_template

    spec = f"hf:{tiny_llava_dir}?device=cpu"
    on = Judge("gpt4v-pairwise", spec, max_new_tokens=4, method_options={"confidence": "on"}, images_root=str(EXAMPLES / "images"))
    off = Judge("gpt4v-pairwise", on.backend, max_new_tokens=4, images_root=str(EXAMPLES / "images"))
    tpl = get_template("gpt4v_pairwise")
    for p in PAIRS:
        got = on.compare(p["image"], p["caption_a"], p["caption_b"], id=p["id"])
        plain = off.compare(p["image"], p["caption_a"], p["caption_b"], id=p["id"])
        # The answers are the ones asked without the option; only the confidence fields are added.
        assert got.ok and (got.verdict, got.votes, got.raw) == (plain.verdict, plain.votes, plain.raw)
        assert set(got.details) - set(plain.details) == {"confidence", "confidence_rule", "verdict_probs", "verdict_mass", "order_agreement"}
        # By hand: each order's answer asked again, the verdict letter's alternatives read in its place.
        image = on.prepare_sample(0, Sample(p["image"], p["caption_a"])).image
        dists = []
        # Both orders in one batch, as compare sends them (a batch of one pads otherwise: float32 logits differ in the last digits).
        outs = on.backend.generate([on.request(tpl.render(caption_a=x, caption_b=y, references=[]), image, 4, logprobs=True) for x, y in ((p["caption_a"], p["caption_b"]), (p["caption_b"], p["caption_a"]))])
        for k, out in enumerate(outs):
            assert not isinstance(out, BaseException)
            texts = [token_text(s.token) for s in out.steps]
            at = max(i for i, t in enumerate(texts) if t.strip() in ("A", "B"))
            w = {"A": 0.0, "B": 0.0, "tie": 0.0}
            for alt, lp in out.steps[at].top:
                v = parse_verdict("".join(texts[:at]) + token_text(alt) + "".join(texts[at + 1 :]))
                if v in w:
                    w[v] += math.exp(lp)
            mass = sum(w.values())
            dist = {v: q / mass for v, q in w.items()}
            dists.append(dist if k == 0 else {"A": dist["B"], "B": dist["A"], "tie": dist["tie"]})
            assert abs(got.details["verdict_mass"][k] - mass) < 1e-9
        want = sum(dists[0][a] * dists[1][b] for a in w for b in w if dual_sided_vote(a, b) == got.verdict)
        assert abs(got.details["confidence"] - want) < 1e-9 and got.details["confidence_rule"] == "logprobs"
    on.close()


def test_tiny_llamacpp_score_spread_from_its_digit_probabilities(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from capjudge import Judge, Sample
    from capjudge.judges.smoothing import token_text
    from capjudge.testing.tiny_gguf import build_tiny_llava_gguf

    model, mmproj = build_tiny_llava_gguf(tmp_path / "gguf", seed=0)
    judge = Judge("vanilla", f"llamacpp:{model}?mmproj={mmproj}&n_ctx=1024&n_threads=2", max_new_tokens=4, method_options={"confidence": "on"}, images_root=str(EXAMPLES / "images"))
    try:
        sample = Sample("cats.jpg", "an orange cat and a grey cat are lying together.")
        got = judge.score(sample)
        assert got.ok and got.details["confidence_rule"] == "logprobs", got.error
        # By hand: the printed number's digit tokens (one per token), their ten digits' probabilities
        # (exact under llama.cpp's softmax), every digit keeping a 0-100 score: independent positions.
        out = judge.backend.generate([judge.score_request(sample)])[0]
        assert not isinstance(out, BaseException) and out.text.strip() == got.raw.strip()
        digits = [s for s in out.steps if token_text(s.token).strip().isdigit()]
        assert len(digits) == len(got.raw.replace(".", "").strip()) == 2 and got.raw.strip()[1] == "."
        var, p_printed = 0.0, 1.0
        for place, step, printed in zip((1.0, 0.1), digits, (got.raw.strip()[0], got.raw.strip()[2]), strict=True):
            assert step.digits is not None
            w = [math.exp(lp) for lp in step.digits]
            p = [x / sum(w) for x in w]
            mean = sum(d * q for d, q in enumerate(p))
            var += place**2 * sum(q * (d - mean) ** 2 for d, q in enumerate(p))
            p_printed *= p[int(printed)]
        assert abs(got.details["score_sd"] - math.sqrt(var)) < 1e-9 and abs(got.details["confidence"] - p_printed) < 1e-9
    finally:
        judge.close()


def test_score_without_log_probabilities_the_spread_of_sampled_scores(tmp_path: Path) -> None:
    sampled = ["Rating: 85", "70", "Rating: 85 points", "no idea"]
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(req: Received) -> Reply:
        if (req.body or {}).get("temperature", 0) != 1:
            return Reply(body=chat_body("Rating: 85"))  # never any log-probabilities
        with lock:
            k = asked[req.prompt_text()] = asked.get(req.prompt_text(), -1) + 1
        return Reply(body=chat_body(sampled[k % 4]))

    with running_server(responder=respond) as srv:
        res = run(srv, tmp_path, "score", "vanilla", "--method-option", "confidence=on", "--backend-opt", "estimate_by_sampling=4")
    vals = [85.0, 70.0, 85.0]
    mean = sum(vals) / 3
    assert res and all(r["status"] == "ok" and r["score"] == 85.0 for r in res), [r["error"] for r in res]
    for r in res:
        d = r["details"]
        assert d["confidence_rule"] == "sampling" and abs(d["confidence"] - 2 / 3) < 1e-12
        assert abs(d["score_sd"] - math.sqrt(sum((v - mean) ** 2 for v in vals) / 3)) < 1e-9
        assert d["score_distribution"] == [[70.0, 1 / 3], [85.0, 2 / 3]]


def test_a_reasoning_api_refusing_log_probabilities_is_judged_by_sampling(tmp_path: Path) -> None:
    from openai_fake_server import reasoning_api

    seq = {True: ["Answer 1", "Answer 1", "Answer 2", "Answer 1"], False: ["Answer 2", "Answer 2", "Answer 2", "Tie"]}
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def answer(req: Received) -> str:
        with lock:  # the greedy answer first, then its 3 sampled copies (the same set in any order)
            k = seen[req.prompt_text()] = seen.get(req.prompt_text(), -1) + 1
        return seq[a_first(req)][k % 4]

    with running_server(responder=reasoning_api(answer=answer)) as srv:
        out = tmp_path / "o4.jsonl"
        argv = ["compare", "--method", "gpt4v-pairwise", "--backend", f"openai-compatible:{srv.base_url}#o4-mini", "--images", str(EXAMPLES / "images"),
                "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--method-option", "confidence=on", "--backend-opt", "estimate_by_sampling=3"]
        assert main(argv) == 0
        bodies = [r.body or {} for r in srv.received]
    res = records(out)
    assert len(bodies) == 2 * 4 * len(PAIRS) and not any("logprobs" in b or "top_logprobs" in b for b in bodies)  # never asked of a reasoning model
    p1 = {"A": 2 / 3, "B": 1 / 3, "tie": 0.0}
    p2_shown = {"A": 0.0, "B": 2 / 3, "tie": 1 / 3}
    want, _ = by_hand(p1, p2_shown, "A")
    assert res and all(r["status"] == "ok" and r["verdict"] == "A" for r in res), [r["error"] for r in res]
    assert all(r["details"]["confidence_rule"] == "sampling" and abs(r["details"]["confidence"] - want) < 1e-9 for r in res)
