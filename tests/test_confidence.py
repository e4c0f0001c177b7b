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
