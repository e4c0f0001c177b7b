"""Expected scores for every scoring method (issue 22, items 3 and 4): ``--method-option score=expected``.

What this proves: against the OpenAI-protocol fake server serving planted top log-probabilities,
the one-token rule (``"85"`` with alternatives ``80``, ``90``, a non-number and a number off the
scale) equals an independent hand computation to 1e-9 on ``vanilla`` (a bare number),
``gpt4v-grade`` (a JSON answer that prints the same number twice) and ``vanilla-code`` (the first
integer); the score is taken at the final answer's tokens after an inline ``<think>`` holding the
same number and after a separate ``reasoning`` field whose tokens the log-probabilities cover; an
answer without log-probabilities is an error record naming the options, or, with
``estimate_by_sampling=N``, the mean of N sampled answers read on the method's scale;
``compare --mode grading`` grades with expected scores. The per-digit rule (scripted steps: one
digit per token, a merged ``85`` before a decimal, ``100`` at the top of the scale, a fraction
rescaled) equals the formula written out here; options are refused where they cannot apply; and on
the tiny HF model (one digit per token) the expected score of a 0-1 user template equals the value
computed from the model's own logits (a teacher-forced forward pass outside capjudge) to 1e-5.
"""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample, get_method
from capjudge.backends.base import Completion, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED
from capjudge.judges.expected import expected_score, printed_by_rules
from capjudge.parsing import parse_score_details
from capjudge.prompts.registry import MethodOptionError
from openai_fake_server import Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
KEY = "sk-test-EXPECTED-19c2"

L = math.log
# The planted alternatives at the score token "85": two numbers besides it, a word, a number off the 0-100 scale.
ALTS_85 = [(" 85", 0.5), (" 80", 0.2), (" 90", 0.1), (" N", 0.1), (" 150", 0.05)]
# Elsewhere (the reasoning, a restated number): other probabilities, which must not be read.
ALTS_DECOY = [(" 85", 0.3), (" 10", 0.6), (" 20", 0.05)]


def by_hand(alts: list[tuple[str, float]], low: float = 0.0, high: float = 100.0) -> float:
    """The one-token rule written out: the numbers on the scale, weighted, renormalised."""
    numbers = [(float(t), p) for t, p in alts if t.strip().isdigit() and low <= float(t) <= high]
    return sum(v * p for v, p in numbers) / sum(p for _, p in numbers)


def tok(text: str, alts: list[tuple[str, float]] | None = None) -> tuple[str, float, list[tuple[str, float]]]:
    """A served token; without ``alts`` it is certain."""
    if alts is None:
        return (text, 0.0, [(text, 0.0)])
    chosen = dict(alts)[text]
    return (text, L(chosen), [(t, L(p)) for t, p in alts])


def answer(tokens: list[tuple[str, float, list[tuple[str, float]]]]) -> str:
    return "".join(t for t, _, _ in tokens)


def responder(make: Any) -> Any:
    """A server that answers every scoring request with ``make(req)``'s tokens, and their
    log-probabilities only when asked (so a passing test proves the request asked for them)."""

    def respond(req: Received) -> Reply:
        tokens = make(req)
        body = chat_body(answer(tokens), tokens=tokens if (req.body or {}).get("logprobs") else None)
        return Reply(body=body)

    return respond


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run_score(srv: Any, tmp_path: Path, method: str, *extra: str, code: int = 0) -> list[dict[str, Any]]:
    out = tmp_path / f"{method}.jsonl"
    argv = ["score", "--method", method, "--backend", f"openai-compatible:{srv.base_url}#judge", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", *extra]
    assert main(argv) == code
    return records(out)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


# -- one token per number (OpenAI's tokenizers) against the fake server ------------------------------


def test_vanilla_one_token_equals_the_hand_computation(tmp_path: Path) -> None:
    with running_server(responder=responder(lambda req: [tok("Rating"), tok(":"), tok(" 85", ALTS_85)])) as srv:
        res = run_score(srv, tmp_path, "vanilla", "--method-option", "score=expected")
        plain = run_score(srv, tmp_path / "plain", "vanilla") if (tmp_path / "plain").mkdir() is None else []
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    want = by_hand(ALTS_85)
    assert want == pytest.approx((85 * 0.5 + 80 * 0.2 + 90 * 0.1) / 0.8, abs=1e-12)
    for r in res:
        assert abs(r["score"] - want) < 1e-9
        assert r["smoothed"] is True and r["raw_score"] == 85.0
        e = r["details"]["expected"]
        assert e["rule"] == "one-token" and e["alternatives"] == 3 and abs(e["mass"] - 0.8) < 1e-9
        assert r["details"]["method_options"] == {"score": "expected"}
    # The default is the plain score, records as before (no option written).
    assert plain and all(r["score"] == 85.0 and r["smoothed"] is False and "method_options" not in r["details"] for r in plain)
    assert all(KEY not in json.dumps(r) for r in res)


def test_gpt4v_grade_json_weights_the_score_key_not_the_restated_number(tmp_path: Path) -> None:
    # {"reasoning": "... 85 ...", "score": 85}: the json_key rule reads the last number; its token is weighted.
    tokens = [tok('{"'), tok("reason"), tok("ing"), tok('":'), tok(' "'), tok("close"), tok(" to"), tok(" 85", ALTS_DECOY), tok('",'), tok(' "'), tok("score"), tok('":'), tok(" 85", ALTS_85), tok("}")]
    with running_server(responder=responder(lambda req: tokens)) as srv:
        res = run_score(srv, tmp_path, "gpt4v-grade", "--method-option", "score=expected")
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    assert all(abs(r["score"] - by_hand(ALTS_85)) < 1e-9 and r["details"]["expected"]["rule"] == "one-token" for r in res)


def test_first_integer_code_method(tmp_path: Path) -> None:
    alts = [("72", 0.6), ("70", 0.25), ("8", 0.1), ("x", 0.05)]
    tokens = [tok("Rating"), tok(":"), tok(" "), tok("72", alts), tok("."), tok(" Maybe"), tok(" 85", ALTS_85)]
    with running_server(responder=responder(lambda req: tokens)) as srv:
        res = run_score(srv, tmp_path, "vanilla-code", "--method-option", "score=expected")
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    for r in res:
        assert abs(r["score"] - by_hand(alts)) < 1e-9 and r["raw_score"] == 72.0
        assert r["details"]["method_options"] == {"no_number": "error", "score": "expected"}


# -- after the reasoning -----------------------------------------------------------------------------


def test_inline_think_the_final_answers_tokens_are_weighted(tmp_path: Path) -> None:
    tokens = [tok("<think>"), tok("Is"), tok(" it"), tok(" 85", ALTS_DECOY), tok("?"), tok(" or"), tok(" 10", ALTS_DECOY), tok("</think>"), tok("\n\n"), tok("Score"), tok(":"), tok(" 85", ALTS_85)]
    with running_server(responder=responder(lambda req: tokens)) as srv:
        res = run_score(srv, tmp_path, "vanilla", "--method-option", "score=expected")
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    for r in res:
        assert abs(r["score"] - by_hand(ALTS_85)) < 1e-9
        assert r["details"]["reasoning"] == "Is it 85? or 10" and r["raw"].strip() == "Score: 85"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_separate_reasoning_field_with_log_probabilities_over_it(field: str, tmp_path: Path) -> None:
    # vLLM: the content is the final answer, the log-probabilities cover the reasoning's tokens too.
    tokens = [tok("Is"), tok(" it"), tok(" 85", ALTS_DECOY), tok("?"), tok("\n\n"), tok("Score"), tok(":"), tok(" 85", ALTS_85)]

    def respond(req: Received) -> Reply:
        body = chat_body("\n\nScore: 85", tokens=tokens if (req.body or {}).get("logprobs") else None)
        body["choices"][0]["message"][field] = "Is it 85?"
        return Reply(body=body)

    with running_server(responder=respond) as srv:
        res = run_score(srv, tmp_path, "llava-critic-pointwise", "--method-option", "score=expected")
    assert res and all(r["status"] == "ok" for r in res), [r["error"] for r in res]
    assert all(abs(r["score"] - by_hand(ALTS_85)) < 1e-9 and r["details"]["reasoning"] == "Is it 85?" for r in res)


# -- no log-probabilities ------------------------------------------------------------------------------


def test_no_log_probabilities_is_an_error_or_a_sampling_estimate(tmp_path: Path) -> None:
    sampled = ["Rating: 60", "70", "Rating: 90 points", "no idea"]
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(req: Received) -> Reply:
        body = req.body or {}
        if body.get("temperature", 0) != 1:
            return Reply(body=chat_body("Rating: 85"))  # never any log-probabilities
        with lock:  # each prompt's sampled answers, in turn
            k = asked[req.prompt_text()] = asked.get(req.prompt_text(), -1) + 1
        return Reply(body=chat_body(sampled[k % len(sampled)]))

    with running_server(responder=respond) as srv:
        res = run_score(srv, tmp_path, "vanilla", "--method-option", "score=expected", code=EXIT_ALL_FAILED)
        assert res and all(r["status"] == "error" and r["score"] is None for r in res)
        assert all("score=expected" in r["error"] and "estimate_by_sampling" in r["error"] and "score=plain" in r["error"] for r in res)
        est = run_score(srv, tmp_path / "est", "vanilla", "--method-option", "score=expected", "--backend-opt", "estimate_by_sampling=4") if (tmp_path / "est").mkdir() is None else []
    assert est and all(r["status"] == "ok" for r in est), [r["error"] for r in est]
    for r in est:
        meta = r["details"]["backend_meta"]["sampling_estimate"]
        parsed = [s for s in meta["scores"] if s is not None]
        assert len(parsed) == 3 and sorted(parsed) == [60.0, 70.0, 90.0]  # read on the 0-100 scale
        assert abs(r["score"] - sum(parsed) / 3) < 1e-9 and r["smoothed"] is True
        assert r["details"]["expected"] == {"rule": "sampling", "n": 4}


# -- compare by grading --------------------------------------------------------------------------------


def test_compare_grading_uses_expected_scores(tmp_path: Path) -> None:
    hi = [(" 85", 0.5), (" 80", 0.2), (" 90", 0.1), (" N", 0.2)]
    lo = [(" 85", 0.5), (" 20", 0.5)]

    def make(req: Received) -> list[Any]:
        # Caption A of each pair gets the higher expected score; both captions print 85.
        text = req.prompt_text()
        return [tok("Rating"), tok(":"), tok(" 85", hi if "a grey cat" in text or "wearing a hat" in text else lo)]

    with running_server(responder=responder(make)) as srv:
        out = tmp_path / "pairs.jsonl"
        argv = ["compare", "--method", "vanilla", "--mode", "grading", "--method-option", "score=expected", "--backend", f"openai-compatible:{srv.base_url}#judge", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet"]
        assert main(argv) == 0
    got = records(out)
    assert len(got) == 2 and all(r["status"] == "ok" for r in got), [r.get("error") for r in got]
    for r in got:
        assert r["verdict"] == "A" and r["details"]["smoothed"] == [True, True]
        assert abs(r["scores"][0] - by_hand(hi)) < 1e-9 and abs(r["scores"][1] - by_hand(lo)) < 1e-9


# -- the per-digit rule on scripted steps --------------------------------------------------------------


def step(token: str, dist: dict[str, float] | None = None) -> TokenStep:
    if dist is None:
        return TokenStep(token, 0.0, ((token, 0.0),))
    return TokenStep(token, L(dist[token]), tuple((t, L(p)) for t, p in dist.items()))


def weigh(text: str, steps: list[TokenStep], low: float = 0.0, high: float = 100.0) -> Any:
    printed = printed_by_rules(text, parse_score_details(text, low=low, high=high), low, high)
    assert not isinstance(printed, str), printed
    return expected_score(steps, printed)


def test_per_digit_rule_equals_the_formula() -> None:
    d1 = {"8": 0.5, "7": 0.3, "0": 0.1, "▁": 0.1}  # "0" in front would be a leading zero: not a tens digit
    d2 = {"5": 0.6, "0": 0.3, "<0x0A>": 0.1}
    got = weigh("Score: 85", [step("Score"), step(":"), step("▁"), step("8", d1), step("5", d2)])
    e1 = (8 * 0.5 + 7 * 0.3) / 0.8
    e2 = (5 * 0.6 + 0 * 0.3) / 0.9
    assert abs(got.score - (10 * e1 + e2)) < 1e-12
    assert got.details["rule"] == "per-digit" and got.details["masses"] == pytest.approx([0.8, 0.9]) and got.details["mass"] == pytest.approx(0.72)


def test_per_digit_top_of_the_scale_merged_digits_and_a_fraction() -> None:
    # "100" on 0-100: no other digit keeps it on the scale.
    got = weigh("100", [step("1", {"1": 0.6, "9": 0.4}), step("0", {"0": 0.9, "5": 0.1}), step("0", {"0": 1.0})])
    assert got.score == 100.0 and got.details["masses"] == pytest.approx([0.6, 0.9, 1.0])
    # OpenAI writes "85.5" as "85", ".", "5": the merged token's digits by the merged-digit rule.
    merged = {"85": 0.5, "80": 0.3, "9": 0.2}
    got = weigh("85.5", [step("85", merged), step("."), step("5", {"5": 0.5, "7": 0.5})])
    tens = (8 * 0.8 + 9 * 0.2) / 1.0
    units = (5 * 0.5 + 0 * 0.3) / 0.8  # given the printed "8": "85" and "80" (and the bare "8": none here)
    assert abs(got.score - (10 * tens + units + 0.1 * 6.0)) < 1e-12
    # "8/10" on 0-100 is read as 80: the expected numerator, rescaled the same way.
    got = weigh("Rating: 8/10", [step("Rating"), step(":"), step(" 8", {" 8": 0.5, " 9": 0.25, " 7": 0.25}), step("/"), step("10")])
    assert got.details["rule"] == "one-token" and abs(got.score - 10 * (8 * 0.5 + 9 * 0.25 + 7 * 0.25)) < 1e-12


def test_scripted_backend_without_steps_is_an_error_record(example_images: list[Path]) -> None:
    judge = Judge("vanilla", ScriptedBackend("85"), method_options={"score": "expected"})
    r = judge.score(Sample(example_images[0], "a cat"))
    assert r.status == "error" and "no token log-probabilities" in (r.error or "") and r.score is None


# -- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt4v-pairwise", "llava-critic-pairwise", "listwise", "fleur", "fleur-code", "ref-fleur"])
def test_refused_where_it_cannot_apply(name: str) -> None:
    with pytest.raises(MethodOptionError, match=repr(name)):
        get_method(name).configure({"score": "expected"})
    assert "score" not in get_method(name).option_names()


@pytest.mark.parametrize("name", ["vanilla", "reference", "description", "visce2", "gpt4v-grade", "llava-critic-pointwise", "vanilla-code", "visce2-code", "vanilla-hardened"])
def test_taken_by_every_plain_scoring_method(name: str) -> None:
    m = get_method(name)
    assert "score" in m.option_names() and m.option_defaults()["score"] == "plain" and "score" not in m.options
    assert m.configure({"score": "expected"}).expected_score and m.configure({"score": "expected"}).reads_logprobs
    with pytest.raises(MethodOptionError, match="plain, expected"):
        m.configure({"score": "weighted"})


def test_methods_listing_shows_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods", "--json"]) == 0
    rows = {r["method"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["vanilla"]["options"] == {"confidence": "off", "score": "plain"}  # confidence: tests/test_confidence.py
    assert rows["fleur"]["options"] == {"answer_form": "decimal", "second_decimal": "official"}


# -- the tiny HF model (one digit per token) ---------------------------------------------------------


TEMPLATE_01 = "Rate how well the caption fits the image from 0.0 to 1.0.\nCaption: {{ caption }}\nScore:"


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("which", ["vanilla 0-100", "user template 0-1"])
def test_tiny_hf_per_digit_equals_the_models_own_distributions(which: str, hf_backend: Any, example_images: list[Path]) -> None:
    # The tiny model answers "0.xy" (one digit per token): on vanilla's 0-100 scale that is the
    # number 0.xy, whose units digit may be any digit; on a 0-1 user template only 0 keeps it on the scale.
    import torch
    from transformers import AutoProcessor

    from capjudge.data.images import load_image, pad_to_square
    from capjudge.prompts import LLAVA_V1_SYSTEM, get_template, register_template

    if which == "vanilla 0-100":
        method = get_method("vanilla")
    else:
        register_template("expected-test-0to1", TEMPLATE_01, overwrite=True)
        method = get_method("vanilla").with_options(name="vanilla+0to1", template="expected-test-0to1", scale=(0.0, 1.0))
    low, high = method.scale
    judge = Judge(method, hf_backend, method_options={"score": "expected"})
    captions = ["an orange cat and a grey cat are lying together.", "three horses run across a snowy field.", "a red bus on a city street.", "a black dog wearing headphones."]
    samples = [Sample(example_images[i % 2], c) for i, c in enumerate(captions)]
    results = list(judge.score_many(samples))
    proc = AutoProcessor.from_pretrained(hf_backend.model)
    digit_ids = [proc.tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
    for sample, r in zip(samples, results):
        assert r.status == "ok", r.error
        assert r.smoothed and r.details["expected"]["rule"] == "per-digit" and r.details["method_options"] == {"score": "expected"}
        comp = hf_backend.generate_one(judge.requests.score_request(judge.prepare_sample(0, sample)))
        assert comp.text == r.raw
        generated = hf_backend.tokenizer.convert_tokens_to_ids([s.token for s in comp.steps])
        # Outside capjudge: one teacher-forced forward pass over prompt + answer.
        prompt = f"{LLAVA_V1_SYSTEM} USER: <image>\n{get_template(method.template).render(caption=sample.caption)} ASSISTANT:"
        img = pad_to_square(load_image(sample.image).pil(), tuple(int(x * 255) for x in proc.image_processor.image_mean))
        inputs = proc(images=img, text=prompt, return_tensors="pt")
        ids = torch.cat([inputs["input_ids"], torch.tensor([generated])], dim=1)
        with torch.no_grad():
            logits = hf_backend.net(input_ids=ids, pixel_values=inputs["pixel_values"], attention_mask=torch.ones_like(ids)).logits[0]
        n_prompt = inputs["input_ids"].shape[1]
        pieces = [p.replace("▁", "") for p in proc.tokenizer.convert_ids_to_tokens(generated)]
        printed = r.details["expected"]["printed"]
        start = "".join(pieces).index(printed)
        owner = [i for i, p in enumerate(pieces) for _ in p]
        point = printed.index(".") if "." in printed else len(printed)
        # Each digit: the digits that keep the printed number on the scale with it in place, renormalised.
        value = 0.0
        for k, c in enumerate(printed):
            if not c.isdigit():
                continue
            probs = torch.softmax(logits[n_prompt - 1 + owner[start + k]].double(), dim=-1)
            ok = [d for d in range(10) if low <= float(printed[:k] + str(d) + printed[k + 1 :]) <= high and not (k == 0 and d == 0 and point > 1)]
            mass = sum(float(probs[digit_ids[d]]) for d in ok)
            place = 10.0 ** (point - 1 - k) if k < point else 10.0 ** -(k - point)
            value += place * sum(d * float(probs[digit_ids[d]]) for d in ok) / mass
        assert r.score == pytest.approx(value, abs=1e-5), (r.raw, r.details)
        assert r.raw_score == pytest.approx(float(printed))


def test_completion_without_number_tokens_is_an_error_naming_why(example_images: list[Path]) -> None:
    # Log-probabilities, but not at the number (the steps do not hold it): an error, never the plain score.
    steps = [TokenStep("Score", 0.0, (("Score", 0.0),)), TokenStep(":", 0.0, ((":", 0.0),))]
    backend = ScriptedBackend(lambda request: Completion(text="Score: 85", steps=steps))
    r = Judge("vanilla", backend, method_options={"score": "expected"}).score(Sample(example_images[0], "a cat"))
    assert r.status == "error" and "not found among the answer's tokens" in (r.error or "")


def test_explain_scores_with_the_expected_value(tmp_path: Path) -> None:
    def make(req: Received) -> list[Any]:
        if "Why?" in req.prompt_text():
            return [tok("Because"), tok(" cats")]
        return [tok("Rating"), tok(":"), tok(" 85", ALTS_85)]

    with running_server(responder=responder(make)) as srv:
        out = tmp_path / "explain.jsonl"
        argv = ["explain", "--method", "vanilla", "--method-option", "score=expected", "--backend", f"openai-compatible:{srv.base_url}#judge", "--image", str(EXAMPLES / "images" / "cats.jpg"), "--caption", "two cats", "--out", str(out), "--no-cache"]
        assert main(argv) == 0
        asked = [r.prompt_text() for r in srv.received if r.path.endswith("/chat/completions")]
    (r,) = records(out)
    assert r["status"] == "ok" and abs(r["score"] - by_hand(ALTS_85)) < 1e-9 and r["explanation"] == "Because cats"
    assert any("Why?" in p for p in asked)


@pytest.mark.parametrize("name", ["capmas-factuality", "capmas-coverage", "clair", "caparena"])
def test_refused_by_the_methods_of_several_answers(name: str) -> None:
    with pytest.raises(MethodOptionError, match="no option 'score'"):
        get_method(name).configure({"score": "expected"})


def test_a_resumed_out_of_other_method_options_is_refused_and_the_summary_counts_smoothed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain run's --out is not continued by score=expected (nor the other way round): its records
    say their options (details.method_options), and a re-run checks them; the summary of an expected
    run counts its smoothed scores as a FLEUR run's does."""
    with running_server(responder=responder(lambda req: [tok("Rating"), tok(":"), tok(" 85", ALTS_85)])) as srv:
        out = tmp_path / "vanilla.jsonl"
        base = ["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#judge", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache"]
        assert main(base) == 0
        n = srv.count
        capsys.readouterr()
        assert main([*base, "--method-option", "score=expected"]) == 2
        err = capsys.readouterr().err
        assert "method options none (this run: {'score': 'expected'})" in err
        assert srv.count == n  # nothing asked
        assert main(base) == 0 and srv.count == n  # the same options: all kept
        out.unlink()
        assert main([*base, "--method-option", "score=expected"]) == 0
        printed = capsys.readouterr().out
        rows = len(records(out))
        assert re.search(rf"smoothed\s*\S?\s*{rows}\b", printed), printed
        assert main(base) == 2  # and back
