"""The ``*-code`` methods run what the official code ran; the paper methods differ only where the
"Differences from the official code" table in docs/methods.md says so.

The official strings below are facts quoted from the official repositories at fixed commits:
- Silviase/VisCE2 @ f08b2e15512c21151c01f406cdfa89069a54f0a7: prompts/*.txt (no final newline),
  src/utils/constants.py (``desc_task``), src/utils/prompter.py (what ``format`` replaces),
  src/eval.py (which ``use_*`` flags it passes: never ``use_caption``).
- Yebin46/FLEUR @ b9cd6c9c086113b9ad3d040522a85c776aff1225: fleur.py and reffleur.py (``inp``).
- haotian-liu/LLaVA @ c121f0432da27facab705978f83c4ada465e46fd: llava/conversation.py
  (``conv_llava_v1``: system sentence, roles USER/ASSISTANT, ``sep=" "``, ``sep2="</s>"``).
The assembling code in this file is written from those files' logic, not copied.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion, Request, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.judges.smoothing import smooth_by_code_search
from capjudge.parsing.official import first_integer, fleur_code_number
from capjudge.prompts import get_method

# --------------------------------------------------------------------------- official strings
VISCE2_DESC_TASK = "\nOn a precise scale from 0 to 100, rate whether the candidate caption is appropriate for the given image.\n"
_APPROPRIATENESS = (
    "Your final rating must be a single digit between 0 and 100.\n"
    "\n"
    "Appropriateness(0-100): How well the caption matches the image's content, atmosphere, and context.\n"
    "A score of 0 indicates complete inappropriateness, while a score of 100 indicates perfect appropriateness."
)
VISCE2_PROMPT_FILES = {
    "base.txt": "[task]\nCandidate caption:\n[cand]\n\n" + _APPROPRIATENESS,
    "references.txt": "[task]\nCandidate caption:\n[cand]\n\nUse the image and following visual context to evaluate the candidate caption:\n[refs]\n\n" + _APPROPRIATENESS,
    "captions.txt": "[task]\nCandidate caption:\n[cand]\n\nUse the image and following visual context to evaluate the candidate caption:\n[caption]\n\n" + _APPROPRIATENESS,
    "visce_2.txt": "[task]\nCandidate caption:\n[cand]\n\nUse the image and following visual context to evaluate the candidate caption:\n[context]\n\n" + _APPROPRIATENESS,
    "visual_context.txt": (
        "Analyze the uploaded image and provide a structured output focusing on the objects, their features, and the relationships between them. \n"
        "Select up to five of the most important elements. The output should be organized as follows:\n"
        "\n"
        "List of Important Objects (up to five):\n"
        "\n"
        "- Object 1: [Brief description]\n"
        "- Object 2: [Brief description]\n"
        "- (Continue as necessary, up to five objects)\n"
        "\n"
        "Features (Specific characteristics and attributes of each object, such as color, shape, size, and texture):\n"
        "\n"
        "- Features of Object 1: [Detailed description of features]\n"
        "- Features of Object 2: [Detailed description of features]\n"
        "- (Continue as necessary for each selected object)\n"
        "\n"
        "Relationships (The way objects interact or are positioned relative to each other, without using specific object names or symbols):\n"
        "\n"
        "- Description of a relationship: [General description]\n"
        "- Another relationship: [General description]\n"
        "- (Continue as necessary for each relevant relationship)\n"
        "\n"
        "Focus on providing unique and detailed insights into the features and relationships of the selected objects up to five objects."
    ),
}
FLEUR_INP = (
    "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. (Print Real Number Score ONLY)\n\n"
    "Grading Criteria:\n\n0.0: The caption does not describe the image at all.\n1.0: The caption accurately and clearly describes the image.\n\n"
    "Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"
)
REFFLEUR_INP = (
    "Your task is to evaluate and rate the candidate caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. (Print Real Number Score ONLY)\n\n"
    "Grading Criteria:\n\n0.0: The caption does not describe the image at all.\n1.0: The caption accurately and clearly describes the image.\n\n"
    "Reference Captions: {reference}\n\nCandidate Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"
)
LLAVA_V1_SYSTEM = "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the human's questions."


def visce2_prompter(file: str, datum: dict[str, Any], **use: bool) -> str:
    """The VisCE2 Prompter's ``format``: placeholders replaced only when their flag is on."""
    prompt = VISCE2_PROMPT_FILES[file].replace("[task]", VISCE2_DESC_TASK)
    if use.get("use_cand"):
        prompt = prompt.replace("[cand]", "Candidate:\n" + datum["candidate"])
    if use.get("use_refs"):
        prompt = prompt.replace("[refs]", "References:\n" + "\n".join(datum["references"]))
    if use.get("use_caption"):
        prompt = prompt.replace("[caption]", "Visual Context:\n" + datum["caption"])
    if use.get("use_context"):
        prompt = prompt.replace("[context]", "Visual Context:\n" + datum["visual_context"])
    return prompt


def llava_v1_conversation(user_text: str) -> str:
    """``conv_llava_v1`` with one user turn ``<image>\\n`` + text and an open assistant turn."""
    return LLAVA_V1_SYSTEM + " " + "USER: " + "<image>\n" + user_text + " " + "ASSISTANT:"


# --------------------------------------------------------------------------- helpers
CAPTION = "  A dog  runs\tthrough the  grass . "  # whitespace the VisCE2 code keeps and FLEUR's collapses
REFS = ["A brown dog runs.", "A dog  in a field .  "]
CONTEXT = "List of Important Objects:\n- Object 1: a dog"


def _capture(method: str, tmp_image: Any, answer: str = "85", **judge_kw: Any) -> tuple[Any, list[Request]]:
    def respond(req: Request) -> str:
        step1 = req.messages[-1].content.startswith(("Analyze the uploaded image", "Generate a detailed description"))
        return CONTEXT if step1 else answer

    backend = ScriptedBackend(respond)
    judge = Judge(method, backend, **judge_kw)
    result = judge.score(Sample(tmp_image, CAPTION, references=tuple(REFS)))
    return result, backend.calls


def _user_text(req: Request) -> str:
    return next(m.content for m in req.messages if m.role == "user")


def _full_prompt(req: Request) -> str:
    from capjudge.backends.llava_prompt import render_llava_v1

    return render_llava_v1(req.messages)


@pytest.fixture()
def image(example_images: list[Any]) -> Any:
    return example_images[0]


# --------------------------------------------------------------------------- byte-identical prompts
def test_vanilla_code_prompt_is_the_codes_bytes(image: Any) -> None:
    result, calls = _capture("vanilla-code", image)
    expected = visce2_prompter("base.txt", {"candidate": CAPTION}, use_cand=True)
    assert len(calls) == 1
    assert _user_text(calls[0]) == expected
    assert _full_prompt(calls[0]) == llava_v1_conversation(expected)
    assert result.score == 85


def test_reference_code_prompt_is_the_codes_bytes(image: Any) -> None:
    _, calls = _capture("reference-code", image)
    expected = visce2_prompter("references.txt", {"candidate": CAPTION, "references": REFS}, use_cand=True, use_refs=True)
    assert _user_text(calls[0]) == expected
    assert _full_prompt(calls[0]) == llava_v1_conversation(expected)


def test_visce2_code_both_steps_are_the_codes_bytes(image: Any) -> None:
    result, calls = _capture("visce2-code", image)
    assert len(calls) == 2
    step1 = visce2_prompter("visual_context.txt", {})
    assert "between them. \n" in step1  # the trailing space of the official file
    assert _user_text(calls[0]) == step1
    assert _full_prompt(calls[0]) == llava_v1_conversation(step1)
    step2 = visce2_prompter("visce_2.txt", {"candidate": CAPTION, "visual_context": CONTEXT}, use_cand=True, use_context=True)
    assert _user_text(calls[1]) == step2
    assert _full_prompt(calls[1]) == llava_v1_conversation(step2)
    assert result.context == CONTEXT


def test_description_code_keeps_the_placeholder_as_the_released_code_did(image: Any) -> None:
    # src/eval.py builds its Prompter without use_caption: "[caption]" is never replaced.
    result, calls = _capture("description-code", image)
    expected = visce2_prompter("captions.txt", {"candidate": CAPTION}, use_cand=True)
    assert "\n[caption]\n" in expected
    assert len(calls) == 1, "no description step: its output never reached the released prompt"
    assert _user_text(calls[0]) == expected
    assert _full_prompt(calls[0]) == llava_v1_conversation(expected)
    assert result.ok


def test_paper_description_method_fills_the_description(image: Any) -> None:
    _, calls = _capture("description", image)
    assert len(calls) == 2
    assert "[caption]" not in _user_text(calls[1]) and CONTEXT in _user_text(calls[1])


@pytest.mark.parametrize("method", ["fleur", "fleur-code"])
def test_fleur_prompt_is_the_codes_bytes(method: str, image: Any) -> None:
    _, calls = _capture(method, image, answer="0.8")
    candidate = " ".join(CAPTION.split())  # fleur.py: ' '.join(caption.split())
    assert _user_text(calls[0]) == FLEUR_INP.format(candidate=candidate)
    assert _full_prompt(calls[0]) == llava_v1_conversation(FLEUR_INP.format(candidate=candidate))


@pytest.mark.parametrize("method", ["ref-fleur", "ref-fleur-code"])
def test_ref_fleur_prompt_is_the_codes_bytes(method: str, image: Any) -> None:
    _, calls = _capture(method, image, answer="0.8")
    expected = REFFLEUR_INP.format(reference="\n".join(REFS), candidate=" ".join(CAPTION.split()))
    assert _user_text(calls[0]) == expected
    assert _full_prompt(calls[0]) == llava_v1_conversation(expected)


# --------------------------------------------------------------------------- decoding
def test_visce2_code_decodes_as_the_code(image: Any) -> None:
    _, calls = _capture("visce2-code", image)
    for req in calls:  # llava_v15.py: do_sample=True, temperature=0.2, max_new_tokens=1024, both steps
        assert req.config.temperature == 0.2
        assert req.config.max_new_tokens == 1024
    _, greedy = _capture("visce2-code", image, method_options={"temperature": 0})
    assert all(req.config.temperature == 0.0 for req in greedy)


def test_fleur_code_decodes_as_the_code(image: Any) -> None:
    _, calls = _capture("fleur-code", image, answer="0.8")
    assert calls[0].config.temperature == 0.0 and calls[0].config.max_new_tokens == 512
    _, calls = _capture("fleur", image, answer="0.8")
    assert calls[0].config.temperature == 0.0 and calls[0].config.max_new_tokens == 16


def test_4bit_settings_are_llavas_and_missing_packages_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import importlib.util

    from capjudge.backends import hf
    from capjudge.backends.base import BackendError

    # llava/model/builder.py, load_4bit=True
    assert hf.llava_4bit_settings(torch) == {"load_in_4bit": True, "bnb_4bit_compute_dtype": torch.float16, "bnb_4bit_use_double_quant": True, "bnb_4bit_quant_type": "nf4"}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    with pytest.raises(BackendError, match=r"load_4bit=true needs bitsandbytes.*: pip install bitsandbytes"):
        hf.HFBackend("/nonexistent/model", load_4bit=True)  # fails on the package, before any load


# --------------------------------------------------------------------------- VisCE2 first-integer parsing
@pytest.mark.parametrize(
    ("answer", "expected"),
    [("Rating: 7/10", 7), ("85.5", 85), ("0.85", 0), ("There are 2 dogs in the picture. 60", 2), ("85</s>", 85), ("Score: 150", 150), ("x٣ 4", 4)],
)
def test_code_methods_read_the_first_integer(answer: str, expected: float, image: Any) -> None:
    official = re.findall(r"[0-9]+", answer)
    assert float(official[0]) == expected  # the code's own rule, for the record
    result, _ = _capture("vanilla-code", image, answer=answer)
    assert result.ok and result.score == expected and result.raw_score == expected
    assert result.details.get("outside_scale", False) == (expected > 100)


def test_no_number_is_an_error_unless_the_codes_zero_is_asked(image: Any) -> None:
    result, _ = _capture("vanilla-code", image, answer="The caption is fine.")
    assert not result.ok and "no number" in (result.error or "") and "no_number=zero" in (result.error or "")
    result, _ = _capture("vanilla-code", image, answer="The caption is fine.", method_options={"no_number": "zero"})
    assert result.ok and result.score == 0.0 and "scored 0" in result.details["fallback"]
    assert result.details["method_options"] == {"no_number": "zero"}


def test_method_options_are_checked() -> None:
    from capjudge.prompts.registry import MethodOptionError

    with pytest.raises(MethodOptionError, match="has no option 'no_number'"):
        get_method("fleur").configure({"no_number": "zero"})
    with pytest.raises(MethodOptionError, match="one of official, printed"):
        get_method("fleur").configure({"second_decimal": "always"})
    with pytest.raises(MethodOptionError, match="temperature"):
        get_method("fleur").configure({"temperature": "hot"})


# --------------------------------------------------------------------------- FLEUR smoothing
VOCAB = ["▁", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ".", "</s>", "The", "score"]
ID = {t: i for i, t in enumerate(VOCAB)}


def _tokens(answer: str) -> list[str]:
    return ["▁", *answer, "</s>"]  # LLaMA-2 style: one token per digit and dot


def _logits(tokens: list[str], seed: int) -> list[list[float]]:
    """Random logits per step with the generated token as the argmax (greedy decoding)."""
    rng = random.Random(seed)
    rows = []
    for tok in tokens:
        row = [rng.uniform(-2.0, 3.0) for _ in VOCAB]
        row[ID[tok]] = max(row) + rng.uniform(0.1, 1.5)
        rows.append(row)
    return rows


def _softmax(row: list[float]) -> list[float]:
    m = max(row)
    e = [math.exp(x - m) for x in row]
    z = sum(e)
    return [x / z for x in e]


def official_fleur(answer_ids: list[int], scores: list[list[float]], decoded: str) -> float:
    """fleur.py's arithmetic on generated ids and per-step logits (re-implemented from its logic)."""
    rate2token = {d: ID[str(d)] for d in range(10)}
    cut = decoded[:-4]  # drops "</s>"
    numbers = re.sub(r"\.+$", "", re.sub(r"^\.+", "", re.sub(r"[^\d.]", "", cut)))
    score_check = float(numbers)
    text = str(score_check)

    def where(d: int) -> list[int]:
        return [i for i, t in enumerate(answer_ids) if t == rate2token[d]]

    if score_check < 1.0:
        d1 = int(text[text.index(".") + 1])
        hits = where(d1)
        idx = hits[0] if len(hits) == 1 else (hits[1] if d1 == 0 else hits[0])
        probs = _softmax(scores[idx])
        score = sum(probs[rate2token[r]] * r * 0.1 for r in range(10))
        if len(text) > 3:
            d2 = int(text[text.index(".") + 2])
            hits2 = where(d2)
            idx2 = hits2[0] if len(hits2) == 1 else hits2[1]
            probs2 = _softmax(scores[idx2])
            score += sum(probs2[rate2token[r]] * r * 0.01 for r in range(10))
        return score
    (idx,) = where(1)
    probs = _softmax(scores[idx])
    return 0.9 * probs[rate2token[0]] + probs[rate2token[1]]


def _completion(answer: str, seed: int) -> tuple[Completion, float]:
    tokens = _tokens(answer)
    logits = _logits(tokens, seed)
    steps = []
    for tok, row in zip(tokens, logits):
        logp = [math.log(p) for p in _softmax(row)]
        top = tuple(sorted(((VOCAB[i], lp) for i, lp in enumerate(logp)), key=lambda x: -x[1]))
        digits = tuple(logp[ID[str(d)]] for d in range(10))
        steps.append(TokenStep(token=tok, logprob=logp[ID[tok]], top=top, digits=digits))
    official = official_fleur([ID[t] for t in tokens], logits, answer + "</s>")
    return Completion(text=answer, steps=steps, finish_reason="stop"), official


def _judge_fleur(method: str, comp: Completion, image: Any, **kw: Any) -> Any:
    judge = Judge(method, ScriptedBackend(lambda req: comp), **kw)
    return judge.score(Sample(image, "a dog"))


ANSWERS = ["0.85", "0.8", "0.80", "0.10", "0.00", "0.05", "0.55", "1.0"]


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_fleur_equals_the_codes_arithmetic(answer: str, seed: int, image: Any) -> None:
    comp, official = _completion(answer, seed)
    for method in ("fleur", "fleur-code"):
        result = _judge_fleur(method, comp, image)
        assert result.ok and result.smoothed, result.error
        assert abs(result.score - official) < 1e-9, (method, answer, result.score, official)


@pytest.mark.parametrize("answer", ["0", "1"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bare_zero_or_one_is_smoothed_as_the_code_does(answer: str, seed: int, image: Any) -> None:
    """fleur.py reads a bare "0" / "1" as 0.0 / 1.0 and smooths it at that digit's token."""
    comp, official = _completion(answer, seed)
    for method in ("fleur", "fleur-code"):
        result = _judge_fleur(method, comp, image)
        assert result.ok and result.smoothed, (method, result.error, result.details)
        assert abs(result.score - official) < 1e-9, (method, answer, result.score, official)
        assert result.raw_score == float(answer)


def test_printed_second_decimal_is_the_named_alternative(image: Any) -> None:
    comp, official = _completion("0.80", 3)
    default = _judge_fleur("fleur", comp, image)
    printed = _judge_fleur("fleur", comp, image, method_options={"second_decimal": "printed"})
    assert abs(default.score - official) < 1e-9
    second = [math.exp(x) for x in comp.steps[4].digits or ()]
    assert abs(printed.score - (official + 0.01 * sum(i * p for i, p in enumerate(second)))) < 1e-9
    assert printed.score > default.score


@pytest.mark.parametrize(("answer", "right_steps"), [("0.155", (3, 4)), ("0.005", (3, 4))])
def test_three_decimals_capjudge_reads_the_printed_positions(answer: str, right_steps: tuple[int, int], image: Any) -> None:
    """A documented difference: FLEUR's search reads 0.155's second decimal at the third decimal
    and 0.005's at the first; capjudge's fleur reads the printed positions, fleur-code the code's."""
    comp, official = _completion(answer, 5)
    p1 = [math.exp(x) for x in comp.steps[right_steps[0]].digits or ()]
    p2 = [math.exp(x) for x in comp.steps[right_steps[1]].digits or ()]
    pinned = 0.1 * sum(i * p for i, p in enumerate(p1)) + 0.01 * sum(i * p for i, p in enumerate(p2))
    ours = _judge_fleur("fleur", comp, image)
    assert abs(ours.score - pinned) < 1e-12
    assert abs(ours.score - official) > 1e-4
    code = _judge_fleur("fleur-code", comp, image)
    assert abs(code.score - official) < 1e-9


def test_fleur_code_reads_digits_and_dots_of_the_whole_answer(image: Any) -> None:
    assert fleur_code_number("Score: 0.85").value == 0.85
    assert fleur_code_number("0.8 (out of 1.0)").value is None  # "0.81.0"
    assert fleur_code_number("...0.7.").value == 0.7
    assert fleur_code_number("0.75 is my score and this runs on", finish_reason="length").value == 0.75
    assert fleur_code_number("0.7 then 12345", finish_reason="length").value == 0.71  # "</s>" cut hits text
    comp = Completion(text="0.8 (out of 1.0)", steps=[TokenStep(token="0")], finish_reason="stop")
    result = _judge_fleur("fleur-code", comp, image)
    assert not result.ok and "reads no number" in (result.error or "") and "'0.81.0'" in (result.error or "")


def test_fleur_code_search_failures_are_errors_not_scores() -> None:
    from capjudge.judges.smoothing import CodeSearchError

    steps = [TokenStep(token=t, digits=tuple([-2.302585] * 10)) for t in ["▁", "1", ".", "0", "1"]]
    with pytest.raises(CodeSearchError, match="exactly one '1'"):
        smooth_by_code_search(steps, 1.0)
    with pytest.raises(CodeSearchError, match="no '7' token"):
        smooth_by_code_search(steps, 0.7)


# --------------------------------------------------------------------------- first integer over the corpus
def test_first_integer_over_the_parsing_corpus() -> None:
    import json
    from pathlib import Path

    corpus = [json.loads(x) for x in (Path(__file__).parent / "data" / "parsing_corpus.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in corpus if r["kind"] == "score"]
    pinned = [r for r in rows if "first_integer" in r]
    assert {r["text"] for r in pinned} >= {"Rating: 7/10", "85.5", "0.85", "There are 2 dogs in the picture. 60"}
    for r in rows:
        found = re.findall(r"[0-9]+", r["text"])
        assert first_integer(r["text"]) == (float(found[0]) if found else None), r["text"]
    for r in pinned:
        assert first_integer(r["text"]) == r["first_integer"], r["text"]


def test_explanation_turn_has_one_end_of_turn_marker(image: Any) -> None:
    """fleur_exp.py writes the smoothed score plus "</s>" into the assistant turn and its template
    adds another; capjudge writes one (a documented difference)."""
    backend = ScriptedBackend(lambda req: "Because." if "Why?" in req.messages[-1].content else "0.6")
    Judge("fleur", backend).explain(Sample(image, "a dog"))
    follow = _full_prompt(backend.calls[-1])
    assert follow.endswith(" ASSISTANT: 0.6</s>USER: Why? Tell me the reason. ASSISTANT:")
    assert "</s></s>" not in follow


def test_readme_lists_where_the_two_fleur_readers_differ_on_the_corpus() -> None:
    import json
    from pathlib import Path

    from capjudge.parsing import parse_score

    root = Path(__file__).resolve().parents[1]
    rows = [json.loads(x) for x in (root / "tests" / "data" / "parsing_corpus.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    differ = []
    for r in rows:
        if r["kind"] != "score" or r["high"] != 1.0:
            continue
        ours = parse_score(r["text"], low=0, high=1)
        code = fleur_code_number(r["text"]).value
        code = code if code is not None and 0 <= code <= 1 else None
        if (ours is None) != (code is None) or (ours is not None and code is not None and abs(ours - code) > 1e-12):
            differ.append(r["text"])
    readme = (root / "docs" / "methods.md").read_text(encoding="utf-8")
    assert f"{len(differ)} differ" in readme
    for text in differ:
        assert f"| `{text}` |" in readme, text
