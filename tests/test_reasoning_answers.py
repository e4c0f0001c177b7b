"""Open thinking models (issue 22, items 2 and 3): the score or verdict is read from the final
answer after the reasoning, never from the reasoning.

What this proves: the split (inline ``<think>``, a reasoning opened by the chat template, the
model's own markers, a separate ``reasoning`` / ``reasoning_content`` field, a reasoning cut off,
``\\boxed{}``, markers inside a quoted caption); with ``scripted:`` backends whose reasoning holds
digits, every parser kind (capjudge rules, first integer, FLEUR code digits) reads the final
answer, FLEUR's smoothed score equals the official rule applied at the final answer's digit
distributions (computed here from the planted distributions), the reasoning is in the record, a
reasoning cut off is an error record naming the option; a pairwise verdict after reasoning; and
through the CLI against the fake OpenAI-protocol server, the separate fields and inline ``<think>``
with log-probabilities, for ``score`` and ``compare``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge
from capjudge.backends.base import Completion, Request, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.judges.reasoning import REASONING_CHARS, final_answer
from capjudge.parsing.reasoning import boxed, split_text
from openai_fake_server import Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CATS = EXAMPLES / "images" / "cats.jpg"
KEY = "sk-test-THINK-77a1"

# Planted digit distributions: the reasoning's digits and the final answer's differ.
THINK_D1 = {8: 0.1, 2: 0.9}
THINK_D2 = {5: 0.2, 1: 0.8}
FINAL_D1 = {8: 0.6, 7: 0.3, 9: 0.1}
FINAL_D2 = {5: 0.5, 4: 0.5}


def official(d1: dict[int, float], d2: dict[int, float] | None) -> float:
    """FLEUR's rule, written out: 0.1 * E[first decimal] + 0.01 * E[second decimal]."""
    score = 0.1 * sum(d * p for d, p in d1.items())
    if d2 is not None:
        score += 0.01 * sum(d * p for d, p in d2.items())
    return score


def step(token: str, dist: dict[int, float] | None = None) -> TokenStep:
    if dist is None:
        return TokenStep(token=token, logprob=0.0, top=((token, 0.0),))
    top = tuple(sorted(((str(d), math.log(p)) for d, p in dist.items()), key=lambda t: -t[1]))
    return TokenStep(token=token, logprob=math.log(dist[int(token)]), top=top)


def thinking_steps(*, opened: bool = True) -> list[TokenStep]:
    """``<think>I think 0.85, no: 0.2 ... </think> 0.85`` with planted distributions: the
    reasoning's ``0.85`` has other probabilities than the final answer's."""
    steps = [step("<think>")] if opened else []
    steps += [step("I"), step(" think"), step(" 0"), step("."), step("8", {8: 0.2, 3: 0.8}), step("5", THINK_D2), step(","), step(" no"), step(":"),
              step(" 0"), step("."), step("2", THINK_D1), step("1", THINK_D2), step("</think>"), step("\n\n"), step("0"), step("."), step("8", FINAL_D1), step("5", FINAL_D2)]
    return steps


def text_of(steps: list[TokenStep]) -> str:
    return "".join(s.token for s in steps)


# -- the split ------------------------------------------------------------------------------------


def test_split_inline_template_opened_and_plain() -> None:
    s = split_text("<think>I think 0.2</think> 0.85")
    assert (s.reasoning, s.answer.strip(), s.cut_off) == ("I think 0.2", "0.85", False)
    s = split_text("  \n<think>\nlong\n</think>\n\nScore: 7")
    assert (s.reasoning, s.answer.strip()) == ("long", "Score: 7")
    # Only the closing marker: reasoning when the backend says the template opened it.
    s = split_text("the template opened it: 0.3 maybe</think>0.9", opened=True)
    assert (s.reasoning, s.answer) == ("the template opened it: 0.3 maybe", "0.9")
    s = split_text("0.7")
    assert (s.reasoning, s.answer, s.answer_start) == (None, "0.7", 0)
    s = split_text("<seed:think>x 0.1</seed:think>0.6", ("<seed:think>", "</seed:think>"))
    assert (s.reasoning, s.answer) == ("x 0.1", "0.6")


def test_split_cut_off_and_markers_in_a_quoted_caption() -> None:
    s = split_text("<think>I think 0.2 and then")
    assert s.cut_off and s.answer == "" and s.reasoning == "I think 0.2 and then"
    # A caption quoted in the answer that holds markers: answer text, not reasoning.
    quoted = "The caption 'a <think>cat</think> on 0.1 mats' is fair: 0.6"
    assert split_text(quoted).reasoning is None and split_text(quoted).answer == quoted
    # Reasoning that quotes a caption with an opening marker closes at its own closing marker.
    s = split_text("<think>the caption says '<think>' oddly</think> 0.4")
    assert (s.reasoning, s.answer.strip()) == ("the caption says '<think>' oddly", "0.4")


def test_boxed() -> None:
    a = "Some words 3. \\boxed{85}"
    span = boxed(a)
    assert span is not None and a[span[0] : span[1]] == "85"
    a = "\\boxed{1} then \\boxed{\\text{Answer 2}}"
    span = boxed(a)
    assert span is not None and a[span[0] : span[1]] == "\\text{Answer 2}"
    assert boxed("no box") is None and boxed("\\boxed{open") is None


def test_final_answer_of_a_completion() -> None:
    plain = Completion(text="0.7")
    assert final_answer(plain).plain and final_answer(plain).completion is plain
    sep = Completion(text="0.85", meta={"reasoning": "I think 0.2"})
    fa = final_answer(sep)
    assert (fa.reasoning, fa.completion.text, fa.cut_off) == ("I think 0.2", "0.85", False)
    cut = Completion(text="", finish_reason="length", meta={"reasoning": "I think 0.2 and"})
    assert final_answer(cut).cut_off
    steps = thinking_steps()
    fa = final_answer(Completion(text=text_of(steps), steps=steps, logprobs=True))
    assert [s.token for s in fa.completion.steps] == ["\n\n", "0", ".", "8", "5"]
    assert fa.reasoning_tokens == len(steps) - 5 and fa.completion.text.strip() == "0.85"


def test_steps_of_a_server_that_split_the_reasoning_out() -> None:
    # The reasoning field came apart, the log-probabilities still cover its tokens (no markers):
    # the final answer is found at the end of the steps.
    steps = [s for s in thinking_steps() if s.token not in ("<think>", "</think>")]
    fa = final_answer(Completion(text="\n\n0.85", steps=steps, logprobs=True, meta={"reasoning": "I think 0.85, no: 0.21"}))
    assert [s.token for s in fa.completion.steps] == ["0", ".", "8", "5"] and fa.steps_note is None
    # Steps that do not hold the final answer are not used (never smoothed at the reasoning).
    fa = final_answer(Completion(text="0.6", steps=steps[:9], logprobs=True, meta={"reasoning": "I think 0.85"}))
    assert fa.completion.steps == [] and fa.steps_note is not None and fa.completion.text == "0.6"


# -- judges with a scripted backend -------------------------------------------------------------


def scripted(steps: list[TokenStep], *, text: str | None = None, **meta: Any) -> ScriptedBackend:
    return ScriptedBackend(lambda _r: Completion(text=text if text is not None else text_of(steps), steps=list(steps), logprobs=True, meta=dict(meta)))


@pytest.mark.parametrize("opened", [True, False])
@pytest.mark.parametrize("method", ["fleur", "fleur-code"])
def test_fleur_smooths_the_final_answers_digits(method: str, opened: bool) -> None:
    steps = thinking_steps(opened=opened)
    # Without its own <think>, the reasoning was opened by the template: the backend says so.
    r = Judge(method, scripted(steps, **({} if opened else {"reasoning_opened": True}))).score(CATS, "two cats on a bed")
    assert r.status == "ok", r.error
    assert r.raw_score == 0.85 and r.smoothed is True
    assert r.score == pytest.approx(official(FINAL_D1, FINAL_D2), abs=1e-12)
    assert r.details["reasoning"].startswith("I think 0.85") and r.details["reasoning_tokens"] == len(steps) - 5
    assert r.raw is not None and r.raw.strip() == "0.85"
    assert "reasoning" not in r.details.get("backend_meta", {})


def test_rules_and_first_integer_read_only_the_final_answer() -> None:
    answer = "<think>Is it 20? The caption has 3 errors, maybe 30.</think>\nScore: 85"
    for method in ("vanilla", "vanilla-code"):
        r = Judge(method, ScriptedBackend(answer)).score(CATS, "two cats")
        assert (r.status, r.score) == ("ok", 85.0), (method, r.error)
        assert r.details["reasoning"] == "Is it 20? The caption has 3 errors, maybe 30." and r.raw == "\nScore: 85"
    r = Judge("vanilla", ScriptedBackend("<think>20 or 30</think> The score, out of 100: \\boxed{85}")).score(CATS, "two cats")
    assert (r.score, r.details["boxed"]) == (85.0, True) and "\\boxed{85}" in (r.raw or "")


def test_reasoning_cut_off_is_an_error_naming_the_option() -> None:
    steps = thinking_steps()[:9]  # "<think>I think 0.85, no" and the budget ran out
    r = Judge("fleur", scripted(steps)).score(CATS, "two cats")
    assert r.status == "error" and r.score is None
    assert "did not finish within the token budget" in (r.error or "") and "--max-new-tokens" in (r.error or "") and "reasoning_budget" in (r.error or "")
    assert r.details["reasoning"].startswith("I think 0.85") and r.details["reasoning_tokens"] == 9


def test_a_long_reasoning_is_kept_truncated() -> None:
    r = Judge("vanilla", ScriptedBackend("<think>" + "x" * (REASONING_CHARS + 50) + "</think> 70")).score(CATS, "two cats")
    assert r.score == 70.0 and len(r.details["reasoning"]) == REASONING_CHARS and r.details["reasoning_chars"] == REASONING_CHARS + 50


def test_answers_without_reasoning_are_read_as_before() -> None:
    r = Judge("vanilla", ScriptedBackend("The score is 85.")).score(CATS, "a cat </think> on a mat")
    assert r.score == 85.0 and "reasoning" not in r.details and r.raw == "The score is 85."


def test_pairwise_verdict_after_reasoning() -> None:
    def fair(req: Request) -> str:
        text = "\n".join(m.content for m in req.messages if m.role == "user")
        first = text.split("Answer 1: ")[1].split("\n")[0]
        # The reasoning names the wrong answer; the final answer the right one.
        return "<think>Answer 2 looks fine... Answer 1?</think>Answer 1" if "good" in first else "<think>Answer 1 is better, no</think>\\boxed{Answer 2}"

    r = Judge("gpt4v-pairwise", ScriptedBackend(fair)).compare(CATS, "a good caption", "a poor caption")
    assert (r.status, r.verdict, r.votes) == ("ok", "A", ["A", "A"])
    assert r.details["reasoning"] == ["Answer 2 looks fine... Answer 1?", "Answer 1 is better, no"]
    cut = Judge("gpt4v-pairwise", ScriptedBackend("<think>Answer 1 is")).compare(CATS, "x", "y")
    assert cut.status == "error" and "did not finish within the token budget" in (cut.error or "")


# -- OpenAI-protocol servers through the CLI ----------------------------------------------------


def token_specs(steps: list[TokenStep]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    return [(s.token, s.logprob or 0.0, list(s.top)) for s in steps]


def server_reply(field: str) -> Any:
    """A reply by ``field``: "inline" (``<think>`` in the content, logprobs over all tokens), or
    the name of the separate field ("reasoning", vLLM 0.32; "reasoning_content", llama.cpp)."""

    def respond(req: Received) -> Reply:
        pairwise = "Answer 1" in req.prompt_text()
        if pairwise:
            first = req.prompt_text().split("Answer 1: ")[1].split("\n")[0]
            final = "Answer 1" if "orange" in first else "Answer 2"
            reasoning = "Answer 2 looks right, 0.9? Answer 1"
            content = f"<think>{reasoning}</think>{final}" if field == "inline" else final
            body = chat_body(content, model="qwen3-vl-thinking")
        else:
            steps = thinking_steps(opened=True)
            if field == "inline":
                body = chat_body(text_of(steps), tokens=token_specs(steps), model="qwen3-vl-thinking")
            else:
                body = chat_body("\n\n0.85", tokens=token_specs(steps), model="qwen3-vl-thinking")  # vLLM: logprobs cover the reasoning too
            reasoning = "I think 0.85, no: 0.21"
        if field != "inline":
            body["choices"][0]["message"][field] = reasoning
        return Reply(body=body)

    return respond


@pytest.mark.parametrize("field", ["inline", "reasoning", "reasoning_content"])
def test_cli_score_and_compare_on_a_thinking_server(field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with running_server(responder=server_reply(field)) as srv:
        backend = ["--backend", f"openai-compatible:{srv.base_url}#qwen3-vl-thinking", "--images", str(EXAMPLES / "images"), "--no-cache", "--quiet"]
        out = tmp_path / "scores.jsonl"
        assert main(["score", "--method", "fleur", *backend, "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out)]) == 0
        res = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
        assert res and all(r["status"] == "ok" for r in res), [r.get("error") for r in res]
        for r in res:
            assert r["raw_score"] == 0.85 and r["smoothed"] is True
            assert r["score"] == pytest.approx(official(FINAL_D1, FINAL_D2), abs=1e-12)
            assert r["details"]["reasoning"].startswith("I think 0.85")
            assert "reasoning" not in r["details"].get("backend_meta", {})
        pairs = tmp_path / "pairs.jsonl"
        assert main(["compare", *backend, "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(pairs)]) == 0
        got = [json.loads(x) for x in pairs.read_text().splitlines() if x.strip()]
        assert got and all(r["status"] == "ok" for r in got), [r.get("error") for r in got]
        assert all(r["details"]["reasoning"] == ["Answer 2 looks right, 0.9? Answer 1"] * 2 for r in got)
        by_id = {r["id"]: r for r in got}
        assert by_id["p1"]["verdict"] == "A"
    assert all(KEY not in json.dumps(r) for r in res + got)
