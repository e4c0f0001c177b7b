"""LLaVA-Critic's published prompts as methods (LLaVA-Critic paper, https://arxiv.org/abs/2410.02712;
prompts of the lmms-lab/llava-critic-7b model card's Quick Start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.backends.scripted import ScriptedBackend
from capjudge.prompts import get_method, get_template
from capjudge.prompts.sources import SOURCES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# The model card's strings (Python literals there), with its example question and answers.
CARD_POINTWISE = (
    "Given an image and a corresponding question, please serve as an unbiased and fair judge to evaluate the quality of answer answers provided by a "
    "Large Multimodal Model (LMM). Score the response out of 100 and explain your reasoning with specific details. Your task is provided as follows:\n"
    "Question: [{q}]\nThe LMM response: [{r}]\nASSISTANT:\n "
)
CARD_PAIRWISE = (
    "Given an image and a corresponding question, please serve as an unbiased and fair judge to evaluate the quality of the answers provided by a "
    "Large Multimodal Model (LMM). Determine which answer is better and explain your reasoning with specific details. Your task is provided as follows:\n"
    "Question: [{q}]\nThe first response: [{a}]\nThe second response: [{b}]\nASSISTANT:\n"
)
QUESTION = "Provide a one-sentence caption for the provided image."


def test_templates_are_the_model_cards_prompts_byte_for_byte() -> None:
    assert get_template("llava_critic_pointwise").render(caption="A dog.") == CARD_POINTWISE.format(q=QUESTION, r="A dog.")
    assert get_template("llava_critic_pairwise").render(caption_a="X y", caption_b="Z") == CARD_PAIRWISE.format(q=QUESTION, a="X y", b="Z")


def test_methods_are_registered_with_their_source_and_reader() -> None:
    point, pair = get_method("llava-critic-pointwise"), get_method("llava-critic-pairwise")
    assert point.kind == "score" and point.scale == (0.0, 100.0) and point.parser == "rules" and not point.smoothing
    assert pair.kind == "pairwise"
    for m in (point, pair):
        assert m.source == "llava-critic" and "2410.02712" in SOURCES[m.source].url
        assert m.system is None  # the critic's own system turn comes from its judge preset
        assert "llava-critic-7b" in m.paper


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ("The LMM response accurately identifies the brown dog but omits the frisbee.\n\nScore: 72", 72.0),
        ("The caption is accurate and concise. I would score this response 90 out of 100.", 90.0),
        ("Score: 35\n\nReason: the response mentions a horse; the image shows a bicycle.", 35.0),
    ],
)
def test_pointwise_reads_the_critics_score(answer: str, score: float) -> None:
    r = Judge("llava-critic-pointwise", ScriptedBackend(answer)).score(Sample(EXAMPLES / "images" / "dog.jpg", "a dog"))
    assert r.ok and r.score == score and r.scale == (0.0, 100.0)


def test_pairwise_reads_the_critics_verdicts_in_both_orders() -> None:
    """Dual-sided: "[1]" in the first order and "[2]" in the swapped one both mean caption A."""

    def critic(req) -> str:  # type: ignore[no-untyped-def]
        text = req.messages[-1].content
        first = text.split("The first response: [")[1].split("]")[0]
        return "The better response: [1]." if first == "a dog on grass" else "The better response: [2]."

    judge = Judge("llava-critic-pairwise", ScriptedBackend(critic))
    r = judge.compare(EXAMPLES / "images" / "dog.jpg", "a dog on grass", "a cat on a sofa")
    assert r.verdict == "A" and r.votes == ["A", "A"]
    tie = Judge("llava-critic-pairwise", ScriptedBackend("Both are correct. Two responses are equally good.")).compare(EXAMPLES / "images" / "dog.jpg", "x", "y")
    assert tie.verdict == "tie"


@pytest.mark.hf
@pytest.mark.slow
def test_critic_methods_run_on_the_tiny_llava(tiny_llava_dir: Path) -> None:
    """Both methods end to end on the tiny LLaVA (llava-1.5 preset): the card's prompt reaches the
    model and every answer becomes a record (the tiny model's answers mean nothing)."""
    spec = f"hf:{tiny_llava_dir}"
    with Judge("llava-critic-pointwise", spec, max_new_tokens=8) as judge:
        results = list(judge.score_many([Sample(EXAMPLES / "images" / "dog.jpg", "a dog runs"), Sample(EXAMPLES / "images" / "cats.jpg", "two cats")]))
        assert len(results) == 2 and all(r.method == "llava-critic-pointwise" for r in results)
        assert all(r.ok or "no score" in (r.error or "") for r in results)
        assert all(r.details.get("judge_preset") == "llava-1.5" for r in results)
        prompt = judge.backend.load().format_prompt(judge.requests.score_request(judge.prepare_sample(0, Sample(EXAMPLES / "images" / "dog.jpg", "a dog runs"))).messages)
        assert prompt == "USER: <image>\n" + CARD_POINTWISE.format(q=QUESTION, r="a dog runs") + " ASSISTANT:"
    with Judge("llava-critic-pairwise", spec, max_new_tokens=8) as judge:
        pair = judge.compare(EXAMPLES / "images" / "dog.jpg", "a dog runs", "two cats")
        assert pair.mode == "pairwise" and len(pair.raw) == 2 and pair.details.get("judge_preset") == "llava-1.5"


def test_answer_length_differs_from_the_card_as_tabled_and_the_cards_length_is_one_option_away() -> None:
    """The card decodes up to 4096 new tokens; the methods stop at 1024 (why: docs/methods.md, the
    differences table) and --max-new-tokens 4096 decodes as the card does."""
    from capjudge.prompts.registry import (
        LLAVA_CRITIC_CARD_MAX_NEW_TOKENS,
        LLAVA_CRITIC_MAX_NEW_TOKENS,
    )

    assert LLAVA_CRITIC_CARD_MAX_NEW_TOKENS == 4096
    for name in ("llava-critic-pointwise", "llava-critic-pairwise"):
        assert get_method(name).max_new_tokens == LLAVA_CRITIC_MAX_NEW_TOKENS
    methods_md = (Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text(encoding="utf-8")
    row = next(line for line in methods_md.splitlines() if line.startswith("| LLaVA-Critic: answer length |"))
    assert f"max_new_tokens={LLAVA_CRITIC_CARD_MAX_NEW_TOKENS}" in row and f"up to {LLAVA_CRITIC_MAX_NEW_TOKENS} new tokens" in row
    assert "`--max-new-tokens 4096`" in row
    image = EXAMPLES / "images" / "dog.jpg"
    for max_new_tokens in (None, LLAVA_CRITIC_CARD_MAX_NEW_TOKENS):
        point, pair = ScriptedBackend("Score: 70"), ScriptedBackend("The better response: [1].")
        Judge("llava-critic-pointwise", point, max_new_tokens=max_new_tokens).score(Sample(image, "a dog"))
        Judge("llava-critic-pairwise", pair, max_new_tokens=max_new_tokens).compare(image, "a dog", "a cat")
        sent = {c.config.max_new_tokens for c in point.calls + pair.calls}
        assert sent == {max_new_tokens or LLAVA_CRITIC_MAX_NEW_TOKENS}
