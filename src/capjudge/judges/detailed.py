"""The detailed-caption pipelines: CapMAS factuality and coverage, CLAIR (docs/methods.md).

Each is a generator of a :class:`~capjudge.judges.steps.StepContext` (see
:mod:`capjudge.judges.steps`) that sends its official code's requests, reads the answers with the
code's readers (:mod:`capjudge.parsing.detailed`), asks again where the code does, and returns the
caption's own value with the steps behind it. Where the code skips a caption (an empty answer, a
repeating decomposition, answers that never match the questions), the caption is an error record
naming why, and stays out of the run's aggregate as the code leaves it out.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

from capjudge.backends.base import Completion, Request
from capjudge.judges.capability import capability
from capjudge.judges.captionqa import captionqa
from capjudge.judges.dcscore import dcscore
from capjudge.judges.steps import Outcome, Pipeline, StepContext
from capjudge.parsing.detailed import (
    capmas_answers,
    capmas_propositions,
    clair_answer,
    clair_statements,
    coverage_answers,
    numbered_questions,
    proposition_text,
)
from capjudge.prompts.registry import get_template

Steps = Generator[Request, Completion, Outcome]

VERIFY_TRIES = 3
"""CapMAS factuality: verifications of one decomposition before it is decomposed again."""
DECOMPOSE_ROUNDS = 3
"""CapMAS factuality: decompositions at most (the code loops without bound; docs/methods.md)."""
COVERAGE_TRIES = 3
"""CapMAS coverage: answers asked while their count differs from the questions'."""


def _system(name: str) -> str:
    return get_template(name).render()


def factuality(ctx: StepContext) -> Steps:
    """CapMAS ``eval_factuality.py``: decompose the caption into numbered atomic propositions
    (text only: the system prompt, the raw caption), then ask with the reference description and
    the image (text part first) whether each is True or False, asking again while the count of
    answers differs (3 tries, then a new decomposition). Score: true propositions / propositions."""
    method = ctx.method
    description = "\n".join(ctx.prep.sample.references)
    decompose = ctx.requests.step_request(_system("capmas_decompose_system"), ctx.caption, temperature=method.context_temperature, max_new_tokens=method.context_max_new_tokens)
    decompositions: list[str] = []
    refused: list[str] = []
    for round_ in range(DECOMPOSE_ROUNDS):
        out = yield ctx.again(decompose, round_)
        text = ctx.text(out)
        decompositions.append(text)
        steps: dict[str, Any] = {"decompositions": decompositions, "refused_verifications": refused}
        if text == "":
            return Outcome(None, text, {"steps": steps}, f"sample {ctx.sid}: the decomposition answer is empty (the CapMAS code skips the caption)")
        atoms = capmas_propositions(text)
        if atoms is None:
            return Outcome(None, text, {"steps": steps}, f"sample {ctx.sid}: the decomposition repeats a proposition three times or has a line over 245 words (the CapMAS code skips the caption)")
        if not atoms:
            return Outcome(None, text, {"steps": steps}, f"sample {ctx.sid}: no numbered proposition in the decomposition (the CapMAS code skips the caption)")
        prompt = get_template(method.template).render(description=description, propositions="\n".join(atoms))
        assert ctx.prep.image is not None
        verify = ctx.requests.step_request(_system("capmas_verify_system"), prompt, ctx.prep.image, temperature=method.temperature, max_new_tokens=method.max_new_tokens, text_first=True)
        for attempt in range(VERIFY_TRIES):
            out = yield ctx.again(verify, round_ * VERIFY_TRIES + attempt)
            answer = ctx.text(out)
            verdicts = capmas_answers(answer)
            if verdicts is not None and len(verdicts) == len(atoms):
                true = sum(v == "True" for v in verdicts)
                steps["propositions"] = [{"proposition": proposition_text(a), "verdict": v, "true": v == "True"} for a, v in zip(atoms, verdicts)]
                counts = {"measure": "precision", "hits": true, "total": len(atoms)}
                return Outcome(true / len(atoms), answer, {"steps": steps, "counts": counts})
            refused.append(answer)
    return Outcome(None, refused[-1] if refused else None, {"steps": {"decompositions": decompositions, "refused_verifications": refused}}, f"sample {ctx.sid}: the verification never gave one True/False per proposition ({VERIFY_TRIES} tries on each of {DECOMPOSE_ROUNDS} decompositions)")


def load_questions(vqa_dir: str, image: Any) -> tuple[list[str], list[str], str]:
    """CapMAS coverage's questions of an image: ``VQA_DIR/<image file stem>.json`` holding
    ``{"questions": [...], "answers": [...]}`` of one length. Raises ``ValueError`` naming the
    file and what is wrong with it."""
    if not isinstance(image, (str, Path)):
        raise ValueError("coverage finds an image's questions by its file name; this image has none")
    # An image a client sent inline to a judge server carries the client's name for it (its
    # ``str`` is a key of the server's own): the questions are looked up by that name.
    name = getattr(image, "name", None)
    image = name if isinstance(name, str) and not isinstance(image, Path) else image
    path = Path(vqa_dir) / f"{Path(str(image)).stem}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no questions for image {str(image)!r}: {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"question file {path} cannot be read: {type(exc).__name__}: {exc}") from None
    questions = data.get("questions") if isinstance(data, dict) else None
    answers = data.get("answers") if isinstance(data, dict) else None
    if not isinstance(questions, list) or not isinstance(answers, list) or not all(isinstance(x, str) for x in questions + answers):
        raise ValueError(f"question file {path} is not {{\"questions\": [strings], \"answers\": [strings]}}")
    if len(questions) != len(answers):
        raise ValueError(f"question file {path} has {len(questions)} questions but {len(answers)} answers")
    if not questions:
        raise ValueError(f"question file {path} has no questions")
    return questions, answers, str(path)


def coverage(ctx: StepContext) -> Steps:
    """CapMAS ``eval_coverage.py``: a text-only request (system prompt; the caption and the
    image's questions numbered from 0) answered from the caption alone, read by coverage's own
    ``a2l`` (each answer whole up to ``)``); asked again while the count of answers differs (3
    tries). Score: answers equal to the key (case folded) / questions."""
    method = ctx.method
    vqa_dir = str(method.options.get("vqa_dir") or "")
    if not vqa_dir:
        return Outcome(None, None, {}, f"sample {ctx.sid}: capmas-coverage needs the question folder (--vqa-dir DIR, or method option vqa_dir=DIR)")
    try:
        questions, key, path = load_questions(vqa_dir, ctx.prep.sample.image)
    except ValueError as exc:
        return Outcome(None, None, {}, f"sample {ctx.sid}: {exc}")
    prompt = get_template(method.template).render(caption=ctx.caption, questions=numbered_questions(questions))
    request = ctx.requests.step_request(_system("capmas_coverage_system"), prompt, temperature=method.temperature, max_new_tokens=method.max_new_tokens)
    refused: list[str] = []
    steps: dict[str, Any] = {"question_file": path, "refused_answers": refused}
    for attempt in range(COVERAGE_TRIES):
        out = yield ctx.again(request, attempt)
        text = ctx.text(out)
        if text == "":
            return Outcome(None, text, {"steps": steps}, f"sample {ctx.sid}: the answer is empty (the CapMAS code skips the caption)")
        preds = ["I don't know"] * len(questions) if text in ("I don't know", "I don't know.") else coverage_answers(text)
        if len(preds) == len(key):
            correct = [p.lower() == k.lower() for p, k in zip(preds, key)]
            steps["questions"] = [{"question": q, "answer": p, "key": k, "correct": c} for q, p, k, c in zip(questions, preds, key, correct)]
            counts = {"measure": "recall", "hits": sum(correct), "total": len(key)}
            return Outcome(sum(correct) / len(key), text, {"steps": steps, "counts": counts})
        refused.append(text)
    return Outcome(None, refused[-1], {"steps": steps}, f"sample {ctx.sid}: {COVERAGE_TRIES} answers, none with one answer per question ({len(key)})")


def clair(ctx: StepContext) -> Steps:
    """CLAIR as CapMAS's ``eval_clair.py`` runs it: one text-only request (the prompt as the only,
    system, turn), read as JSON or the first number; 3 tries. Score: CLAIR's 0-100 / 100;
    ``details.counts`` what the code's mean adds up (``hits``: the score; ``total``: 0 for an
    answer whose JSON ``reason`` is null, which the code counts as skipped, else 1)."""
    method = ctx.method
    prompt = get_template(method.template).render(candidate_statements=clair_statements([ctx.caption]), target_statements=clair_statements(list(ctx.prep.sample.references)))
    request = ctx.requests.system_only_request(prompt, temperature=method.temperature, max_new_tokens=method.max_new_tokens)
    refused: list[str] = []
    for attempt in range(method.format_tries):
        out = yield ctx.again(request, attempt)
        text = ctx.text(out)
        read = clair_answer(text)
        if read.fatal:
            return Outcome(None, text, {"steps": {"refused_answers": refused}}, f"sample {ctx.sid}: {read.problem} (the CLAIR code stops the run here)")
        if read.score is not None:
            steps = {"clair_score": read.score, "reason": read.reason, "rule": read.rule, "refused_answers": refused}
            # eval_clair.py adds every score to score_accu but counts a caption whose reason is
            # None (JSON "reason": null) as skipped: out of the number it divides by.
            counts = {"measure": "CLAIR", "hits": read.score / 100, "total": 0 if read.reason is None else 1}
            return Outcome(read.score / 100, text, {"steps": steps, "counts": counts})
        refused.append(text)
    return Outcome(None, refused[-1] if refused else None, {"steps": {"refused_answers": refused}}, f"sample {ctx.sid}: no CLAIR score in {method.format_tries} answers (JSON with \"score\", or a number)")


PIPELINES: dict[str, Pipeline] = {
    "capmas-factuality": factuality,
    "capmas-coverage": coverage,
    "clair": clair,
    "capability": capability,
    "captionqa": captionqa,
    "dcscore": dcscore,
    "dcscore-code": dcscore,
}
"""Pipelines by ``Method.pipeline``."""


__all__ = ["COVERAGE_TRIES", "DECOMPOSE_ROUNDS", "PIPELINES", "VERIFY_TRIES", "clair", "coverage", "factuality", "load_questions"]
