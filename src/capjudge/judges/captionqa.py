"""CaptionQA (bronyayang/CaptionQA f729489, ``qa.py``): a text-only judge answers the image's
multiple-choice questions from the caption alone (docs/methods.md, "CaptionQA").

One request per question (a caption's questions sent together), each with the shuffle planned
for the whole set (:mod:`capjudge.judges.captionqa_set`): the system sentence and the prompt of
``qa.py``, greedy, 4 tokens. The answer (stripped, as ``qa.py``'s vLLM call strips it) is read by ``extract_letter``'s
rules (:func:`capjudge.parsing.captionqa.answer_letter`): the right option scores 1, "Cannot answer
from the caption" ``1/n + 0.05`` (``n``: the question's own options), anything else 0, each score
rounded to 4 decimals as ``qa.py`` stores it. The caption's score: the mean over its questions;
the run's numbers (:func:`summary_rows`): ``qa.py``'s final summary over every question.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Sequence
from typing import Any

from capjudge.backends.base import Completion, Message, Request
from capjudge.judges.captionqa_set import PlannedQuestion, QuestionPlan, entry_key, question_plan
from capjudge.judges.steps import Outcome, Step, StepContext
from capjudge.parsing.captionqa import (
    CANNOT_ANSWER,
    LETTERS,
    answer_letter,
    cannot_answer_credit,
    option_lines,
)
from capjudge.prompts.registry import get_template

MEASURE = "CaptionQA score"
"""``details.counts.measure`` of a CaptionQA record (hits: the sum of its question scores)."""


def _request(ctx: StepContext, prompt: str) -> Request:
    """``qa.py``'s chat: the system sentence and the prompt, both plain strings (the judge's own
    system sentence, or none, in place of the official one when the judge's system is not auto)."""
    method = ctx.method
    if ctx.requests.official:
        system: Message | None = Message("system", get_template("captionqa_system").render())
    else:
        system = ctx.requests.system_turn(None)
    msgs = (system, Message("user", prompt)) if system is not None else (Message("user", prompt),)
    return Request(msgs, ctx.requests.config(method.max_new_tokens, False, method.temperature))


def judge_answer(q: PlannedQuestion, text: str) -> dict[str, Any]:
    """One answer scored as ``qa.py`` scores it: the letter read, the option it names (through the
    shuffle), correct / "Cannot answer" / wrong, the score rounded to 4 decimals."""
    letter = answer_letter(text, len(q.options))
    model_answer: str | None = None
    correct = cannot = False
    score = 0.0
    if letter is not None:
        shown = LETTERS.find(letter)
        if 0 <= shown < len(q.perm):
            original = q.perm[shown]
            model_answer = str(q.options[original])
            if model_answer == CANNOT_ANSWER:
                cannot = True
                score = cannot_answer_credit(len(q.choices))
            elif original == q.truth:
                correct = True
                score = 1.0
    return {
        "position": q.position,
        "q_idx": q.q_idx,
        "question": q.question,
        "options": [str(o) for o in q.shown],
        "ground_truth": q.answer,
        "letter": letter,
        "model_answer": model_answer,
        "model_response": text,
        "is_correct": correct,
        "is_cannot_answer": cannot,
        "score": round(score, 4),
        "category": q.category,
    }


def _questions_of(ctx: StepContext, plan: QuestionPlan) -> tuple[tuple[PlannedQuestion, ...], str | None]:
    sample = ctx.prep.sample
    key = entry_key(sample.id, sample.image, plan.ids)
    if key is None or key not in plan.ids:
        return (), f"sample {ctx.sid}: image {key!r} is not in the question set {plan.source} (found by the sample's id, else its image file's stem)"
    if plan.captioned is not None and key not in plan.captioned:
        return (), f"sample {ctx.sid}: image {key!r} has no row in the captioned input file, so its shuffles were planned without it; score it with the file that holds it"
    questions = plan.by_image.get(key, ())
    if not questions:
        return (), f"sample {ctx.sid}: image {key!r} has no question qa.py asks (each has fewer than 2 options or an answer that matches no option)"
    return questions, None


def captionqa(ctx: StepContext) -> Generator[Step, Any, Outcome]:
    """CaptionQA ``qa.py``: the image's questions asked together (one request each, the caption
    alone), each answer scored; the caption's score is the mean of its questions' scores."""
    method = ctx.method
    source = str(method.options.get("questions") or "")
    if not source:
        return Outcome(None, None, {}, f"sample {ctx.sid}: captionqa needs the question set (method option questions=FILE_OR_DIR)")
    try:
        plan = question_plan(source, str(method.options.get("captioned") or ""))
    except ValueError as exc:
        return Outcome(None, None, {}, f"sample {ctx.sid}: {exc}")
    questions, problem = _questions_of(ctx, plan)
    if problem is not None:
        return Outcome(None, None, {}, problem)
    tpl = get_template(method.template)
    # the questions do not wait on each other: asked together (one round in batch mode)
    outs: list[Completion] = yield tuple(_request(ctx, tpl.render(caption=ctx.caption, question=q.question, options=option_lines(q.shown))) for q in questions)
    items = [judge_answer(q, out.text.strip()) for q, out in zip(questions, outs)]
    total = sum(item["score"] for item in items)
    counts = {"measure": MEASURE, "hits": total, "total": len(items)}
    return Outcome(total / len(items), items[-1]["model_response"], {"steps": {"image": questions[0].image, "questions": items}, "counts": counts})


def summary_lines(items: Sequence[dict[str, Any]], model: str) -> list[str]:
    """``qa.py``'s ``print_final_summary`` over the question items (``details.steps.questions`` of
    a run's records, put in dataset order here), line for line, with ``model`` the judge."""
    ordered = sorted(items, key=lambda item: item.get("position", 0))
    total = len(ordered)
    total_score = 0.0
    correct = cannot = 0
    cat_total: dict[str, int] = defaultdict(int)
    cat_correct: dict[str, int] = defaultdict(int)
    cat_scores: dict[str, list[float]] = defaultdict(list)
    cat_cannot: dict[str, int] = defaultdict(int)
    for item in ordered:
        score = item.get("score", 0.0)
        total_score += score
        cat = item.get("category", "") or "unknown"
        cat_total[cat] += 1
        cat_scores[cat].append(score)
        if item.get("is_correct"):
            correct += 1
            cat_correct[cat] += 1
        if item.get("is_cannot_answer"):
            cannot += 1
            cat_cannot[cat] += 1
    accuracy = correct / total if total > 0 else 0.0
    average = total_score / total if total > 0 else 0.0
    lines = ["", "=" * 60, "Evaluation Results:", "=" * 60, f"Model: {model}"]
    if len(cat_total) > 1:
        lines += ["", "Per-Category Results:"]
        for cat in sorted(cat_total):
            n = cat_total[cat]
            lines.append(f"  {cat} ({n}q): score={sum(cat_scores[cat]) / n:.4f}, acc={cat_correct[cat] / n:.2%}, cannot_answer={cat_cannot[cat] / n:.2%}")
    lines += [
        "",
        "Overall:",
        f"  Total questions: {total}",
        f"  Correct answers: {correct} ({accuracy:.2%})",
        f"  'Cannot answer' selections: {cannot}",
        f"  Total score: {total_score:.2f} / {total}",
        f"  Average score: {average:.4f}",
        "=" * 60,
    ]
    return lines


def summary_rows(items: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The summary table's rows of a CaptionQA run: :func:`summary_lines`' per-category and
    overall lines, as ``(label, value)`` pairs, values printed as ``qa.py`` prints them."""
    rows: list[tuple[str, str]] = []
    section = ""
    for line in summary_lines(items, "")[5:-1]:
        text = line.strip()
        if not text:
            continue
        if text.endswith("Results:") or text == "Overall:":
            section = "CaptionQA " + ("category" if text.startswith("Per-Category") else "overall")
            continue
        label, _, value = text.partition(": ")
        rows.append((f"{section} {label}", value))
    return rows


__all__ = ["MEASURE", "captionqa", "judge_answer", "summary_lines", "summary_rows"]
