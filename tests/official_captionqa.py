"""FOR VERIFICATION ONLY: the official CaptionQA functions, copied from bronyayang/CaptionQA commit
f7294897f724c35b95e5f8ea179d2c54a279c91e (``qa.py``; the request as ``pipeline/api.py``'s
``AMD_vllm_text_chat_call`` builds its chat), so that the tests compare capjudge with what the
official code computes on the same inputs. The repository has no licence file: this copy is not
part of capjudge (nothing under src/ imports it) and is not shipped; capjudge holds only the
protocol's strings as data (src/capjudge/prompts/detailed.py). Changes: ``evaluate_qa_with_captions``
is cut in two (the preparation loop over a given dataset and caption dict, and the scoring of given
responses, with ``call`` standing in for the vLLM batch); the Hugging Face loading, the file saving
and the progress prints are left out; type hints added.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

LETTER_ALPH = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CANNOT_ANSWER_TEXT = "Cannot answer from the caption"
EVAL_MODEL = "Qwen/Qwen2.5-72B-Instruct"
SYSTEM_PROMPT = "You are given a caption describing an image, and a question about the image. Answer with a SINGLE LETTER (A, B, C, ...), no explanation."
MAX_TOKENS = 4  # --max-tokens default
SEED = 0  # --seed default


def extract_letter(answer_text: str, num_options: int) -> str | None:
    if not answer_text:
        return None
    if "</think>" in answer_text:
        after_think = answer_text.split("</think>", 1)[1]
        answer_text = after_think
    if "Answer: " in answer_text:
        after_answer = answer_text.split("Answer: ", 1)[1]
        answer_text = after_answer
    if "\n" in answer_text:
        after_n = answer_text.split("\n", 1)[1]
        answer_text = after_n
    m = re.search(r"\b([A-Z])\b", answer_text.upper())
    if m:
        letter = m.group(1)
        idx = LETTER_ALPH.find(letter)
        if 0 <= idx < max(1, num_options):
            return letter
    m = re.search(r"\b([1-9][0-9]?)\b", answer_text)
    if m:
        k = int(m.group(1))
        if 1 <= k <= max(1, num_options):
            return LETTER_ALPH[k - 1]
    return None


def normalize_gt_letter(choices: list[str], answer: str) -> str | None:
    if not choices or not isinstance(answer, str):
        return None
    for i, choice in enumerate(choices):
        if answer.strip() == str(choice).strip():
            return LETTER_ALPH[i]
    return None


def is_yesno_question(question_text: str, choices: list[str]) -> bool:
    choice_texts = [str(c).strip().lower() for c in choices]
    has_yes = any("yes" in choice for choice in choice_texts)
    has_no = any("no" in choice for choice in choice_texts)
    if has_yes and has_no:
        return True
    question_lower = question_text.strip().lower()
    yesno_starters = [
        "is ", "are ", "was ", "were ",
        "do ", "does ", "did ",
        "have ", "has ", "had ",
        "can ", "could ",
        "will ", "would ",
        "should ", "shall ",
        "may ", "might ", "must ",
    ]
    for starter in yesno_starters:  # noqa: SIM110 - as qa.py has it
        if question_lower.startswith(starter):
            return True
    return False


def add_cannot_answer_option(question_text: str, choices: list[str]) -> list[str]:
    if is_yesno_question(question_text, choices):
        return choices
    return choices + [CANNOT_ANSWER_TEXT]


def build_caption_qa_prompt(caption: str, question: str, choices: list[str]) -> str:
    lines = [f"{LETTER_ALPH[i]}. {choice}" for i, choice in enumerate(choices)]
    prompt = f"""Caption:
{caption}

Question:
{question}

Options:
{chr(10).join(lines)}

Answer:"""
    return prompt


def prepare(dataset: list[dict[str, Any]], captions: dict[str, str], seed: int = SEED) -> tuple[list[str], list[tuple[Any, ...]], int, int]:
    """evaluate_qa_with_captions up to "Prepared N questions": (prompts, meta, skipped_no_caption, skipped_no_choices)."""
    rng = random.Random(seed)
    prompts: list[str] = []
    meta: list[tuple[Any, ...]] = []
    skipped_no_caption = 0
    skipped_no_choices = 0
    for entry in dataset:
        image_id = entry.get("id")
        if image_id is None:
            continue
        image_key = str(image_id)
        if image_key not in captions:
            skipped_no_caption += 1
            continue
        caption = captions[image_key]
        questions = entry.get("questions", [])
        if not questions:
            if "question" in entry:
                cat = entry.get("category", [])
                if isinstance(cat, list):
                    cat = cat[0] if cat else ""
                questions = [{"question": entry["question"], "choices": entry.get("choices", []), "answer": entry.get("answer"), "category": cat}]
            else:
                continue
        for q_idx, q in enumerate(questions):
            question_text = q.get("question", "")
            choices = q.get("choices", [])
            answer = q.get("answer")
            category = q.get("category", [])
            if isinstance(category, list):
                category = category[0] if category else ""
            if not choices or len(choices) < 2:
                skipped_no_choices += 1
                continue
            gt_letter_orig = normalize_gt_letter(choices, answer)
            if gt_letter_orig is None:
                continue
            gt_idx_orig = LETTER_ALPH.index(gt_letter_orig)
            choices_with_option = add_cannot_answer_option(question_text, choices)
            n_opts = len(choices_with_option)
            perm = list(range(n_opts))
            rng.shuffle(perm)
            shuffled_opts = [choices_with_option[i] for i in perm]
            prompt = build_caption_qa_prompt(caption, question_text, shuffled_opts)
            prompts.append(prompt)
            meta.append((image_key, q_idx, perm, n_opts, gt_idx_orig, {"question": question_text, "choices": choices, "answer": answer, "category": category}))
    return prompts, meta, skipped_no_caption, skipped_no_choices


def request_body(prompt: str, model: str = EVAL_MODEL) -> dict[str, Any]:
    """AMD_vllm_text_chat_call(client, [prompt], temperature=0.0, max_tokens=4, n=1, system=system_prompt):
    the chat _build_prompt renders (system, then the prompt as the user turn, plain strings) and
    its SamplingParams, as the body of an OpenAI-compatible chat request."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    return {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0.0}


def score(prompts: list[str], meta: list[tuple[Any, ...]], call: Callable[[str], str]) -> dict[str, list[dict[str, Any]]]:
    """The batch loop of evaluate_qa_with_captions with ``call`` answering each prompt (vLLM's text, stripped)."""
    results: dict[str, list[dict[str, Any]]] = {}
    for i, prompt in enumerate(prompts):
        resp = call(prompt).strip()
        image_key, q_idx, perm, n_opts, gt_idx_orig, q_data = meta[i]
        letter = extract_letter(resp, n_opts)
        is_correct = False
        is_cannot_answer = False
        model_answer_text = None
        score = 0.0
        original_choices = q_data["choices"]
        n_original_choices = len(original_choices)
        choices_with_option = add_cannot_answer_option(q_data["question"], original_choices)
        if letter is not None:
            shuf_idx = LETTER_ALPH.find(letter)
            if 0 <= shuf_idx < len(perm):
                orig_idx = perm[shuf_idx]
                if orig_idx < len(choices_with_option):
                    model_answer_text = str(choices_with_option[orig_idx])
                    if model_answer_text == CANNOT_ANSWER_TEXT:
                        is_cannot_answer = True
                        score = (1.0 / n_original_choices) + 0.05
                    elif orig_idx == gt_idx_orig:
                        is_correct = True
                        score = 1.0
                    else:
                        score = 0.0
        if image_key not in results:
            results[image_key] = []
        results[image_key].append({
            "question": q_data["question"],
            "choices": q_data["choices"],
            "ground_truth": q_data["answer"],
            "model_answer": model_answer_text,
            "model_response": resp,
            "is_correct": is_correct,
            "is_cannot_answer": is_cannot_answer,
            "score": round(score, 4),
            "category": q_data.get("category", ""),
        })
    return results


def print_final_summary(results: dict[str, list[dict[str, Any]]]) -> None:
    total_questions = 0
    total_score = 0.0
    correct_answers = 0
    cannot_answer_count = 0
    category_total: dict[str, int] = defaultdict(int)
    category_correct: dict[str, int] = defaultdict(int)
    category_scores: dict[str, list[float]] = defaultdict(list)
    category_cannot: dict[str, int] = defaultdict(int)
    for v in results.values():
        for item in v:
            total_questions += 1
            score = item.get("score", 0.0)
            total_score += score
            cat = item.get("category", "") or "unknown"
            category_total[cat] += 1
            category_scores[cat].append(score)
            if item.get("is_correct"):
                correct_answers += 1
                category_correct[cat] += 1
            if item.get("is_cannot_answer"):
                cannot_answer_count += 1
                category_cannot[cat] += 1
    overall_accuracy = correct_answers / total_questions if total_questions > 0 else 0.0
    average_score = total_score / total_questions if total_questions > 0 else 0.0
    print(f"\n{'=' * 60}")
    print("Evaluation Results:")
    print(f"{'=' * 60}")
    print(f"Model: {EVAL_MODEL}")
    if len(category_total) > 1:
        print("\nPer-Category Results:")
        for cat in sorted(category_total.keys()):
            n = category_total[cat]
            cat_score = sum(category_scores[cat]) / n if n else 0.0
            cat_acc = category_correct[cat] / n if n else 0.0
            cat_cannot = category_cannot[cat] / n if n else 0.0
            print(f"  {cat} ({n}q): score={cat_score:.4f}, acc={cat_acc:.2%}, cannot_answer={cat_cannot:.2%}")
    print("\nOverall:")
    print(f"  Total questions: {total_questions}")
    print(f"  Correct answers: {correct_answers} ({overall_accuracy:.2%})")
    print(f"  'Cannot answer' selections: {cannot_answer_count}")
    print(f"  Total score: {total_score:.2f} / {total_questions}")
    print(f"  Average score: {average_score:.4f}")
    print(f"{'=' * 60}")
