"""The official code's texts, copied (njucckevin/CapArena c251cdd vlm_as_a_judge.py, caparena_auto_scores.py;
adobe-research/CapMAS ca2aa00 eval_factuality.py, eval_coverage.py, eval_clair.py) with the code that builds each
request from them (the tests compare what capjudge sends with what these build, byte for byte), their answer
readers and their scoring loops (the tests compare capjudge's aggregates with what these compute)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

# fmt: off
CAPARENA_SYSTEM_WITHOUT_REF = '\nYou are a highly capable multimodal AI assistant tasked with evaluating image captions.\n\nGiven an image and two candidate captions, you are require to determine which of the two captions is better.\n\nBelow are some guidelines for your reference:\n\n1. **Precision**: The caption should accurately correspond to the content of the image, providing precise information about it. Common examples of imprecision include errors in color, quantity, spatial relationships, or the posture of people.\n\n2. **Informativeness**: Salient information in the image should be reflected in the caption. Since it is impossible to include every detail, you will need to subjectively judge which aspects of the image are important. For instance, describing an otter as "a small animal" is precise, but it is less informative than specifying "an otter".\n\n3. **Hallucination**: Captions that include descriptions of objects or elements that are clearly absent from the image should be significantly penalized.\n\n4. **Attention to detail**: Annotators should pay close attention to the details in the image to distinguish the quality of the descriptions.\n\n5. **Assistive description**: Imagine a visually impaired person asking you to describe the image for them. How would you convey the image to them?\n\n6. **Reverse thinking**: What image does the caption lead us to imagine? Does the caption effectively lead you to imagine the intended image?\n\n7. **Ties are acceptable**: If you find it genuinely difficult to determine which caption is better (e.g., both captions are excellent), marking a tie is acceptable.\n\nWhile the above guidelines provide a framework, they cannot cover all possible cases. Therefore, we encourage you to make **subjective judgments** based on the specific circumstances and your own reasoning about which caption is better.\n\n### Response Format:\nFormat your response into two lines as shown below:\nReason: <your thoughts and reasoning process for the judgment>\nJudgment: <Caption 1 is better>/<Caption 2 is better>/<Tie>\n'
CAPARENA_SYSTEM_WITH_REF = '\nYou are a highly capable multimodal AI assistant tasked with evaluating image captions.\n\nGiven an image, two candidate captions and one reference caption annotated by human expert, you are require to determine which of the two captions is better.\n\nBelow are some guidelines for your reference:\n\n1. **Precision**: The caption should accurately correspond to the content of the image, providing precise information about it. Common examples of imprecision include errors in color, quantity, spatial relationships, or the posture of people.\n\n2. **Informativeness**: Salient information in the image should be reflected in the caption. Since it is impossible to include every detail, you will need to subjectively judge which aspects of the image are important. For instance, describing an otter as "a small animal" is precise, but it is less informative than specifying "an otter".\n\n3. **Hallucination**: Captions that include descriptions of objects or elements that are clearly absent from the image should be significantly penalized.\n\n4. **Attention to detail**: Annotators should pay close attention to the details in the image to distinguish the quality of the descriptions.\n\n5. **Assistive description**: Imagine a visually impaired person asking you to describe the image for them. How would you convey the image to them?\n\n6. **Reverse thinking**: What image does the caption lead us to imagine? Does the caption effectively lead you to imagine the intended image?\n\n7. **Ties are acceptable**: If you find it genuinely difficult to determine which caption is better (e.g., both captions are excellent), marking a tie is acceptable.\n\nWhile the above guidelines provide a framework, they cannot cover all possible cases. Therefore, we encourage you to make **subjective judgments** based on the specific circumstances and your own reasoning about which caption is better.\n\n**Reference caption**: The reference caption is annotated by a human expert. When you\'re uncertain about which description is better (e.g., when unsure about specific details in the image), you can use the reference caption to assist your judgment. The content in the reference caption can be considered correct; however, it is not perfect, and descriptions not included in the reference caption can still be reasonable.\n\n### Response Format:\nFormat your response into two lines as shown below:\nReason: <your thoughts and reasoning process for the judgment>\nJudgment: <Caption 1 is better>/<Caption 2 is better>/<Tie>\n'
# fmt: on


def caparena_payload(image: str, caption_1: str, caption_2: str, caption_ref: str | None) -> dict[str, Any]:
    """vlm_as_a_judge.py mllm_judge_pairs (with_ref when a reference is given) and call_llm's
    temperature override: the JSON body it posts."""
    with_ref = caption_ref is not None
    if with_ref:
        compare_prompt = f"Caption 1:\n{caption_1}\nCaption 2:\n{caption_2}\nCaption Reference:\n{caption_ref}\nDetermine which is better and answer with the given format. Only mark a tie if it is truly difficult to decide which caption is better based on their quality, informativeness, and precision."
    else:
        compare_prompt = f"Caption 1:\n{caption_1}\nCaption 2:\n{caption_2}\nDetermine which is better and answer with the given format. Only mark a tie if there is no discernible difference in quality, informativeness, and precision after careful evaluation."
    messages: list[dict[str, Any]] = []
    messages.append({"role": "system", "content": [{"type": "text", "text": CAPARENA_SYSTEM_WITH_REF if with_ref else CAPARENA_SYSTEM_WITHOUT_REF}]})
    action_text_image = []
    action_text_image.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}", "detail": "high"}})
    action_text_image.append({"type": "text", "text": compare_prompt})
    messages.append({"role": "user", "content": action_text_image})
    model_name = "gpt-4o-2024-08-06"
    payload = {"model": model_name, "messages": messages, "max_tokens": 1500, "top_p": 0.9, "temperature": 0.5}
    return {**payload, "temperature": 0.1}


CAPMAS_TEMPERATURE = 0.0000001  # argparse default of every CapMAS eval script
CAPMAS_MAX_TOKENS = 4096  # OpenAIAPI.make_call's default max_token


def factuality_decompose_messages(caption: str) -> list[dict[str, Any]]:
    """eval_factuality.py generate_q."""
    prompt_sys = f"I want to verify if the given CAPTION is accurate. To assist with this verification, decompose the given CAPTION into atomic propositions. All parts of the caption must be broken down into propositions. The outputs should follow the following format:'1. proposition one\n2. proposition two\n3. proposition three'"  # noqa: F541
    return [
        {"role": "system", "content": [{"type": "text", "text": prompt_sys}]},
        {"role": "user", "content": [{"type": "text", "text": caption}]},
    ]


def factuality_verify_messages(questions: str, image_url: str, gt_caption: str) -> list[dict[str, Any]]:
    """eval_factuality.py generate_a_image (image_url: encode_image's data URL)."""
    prompt_sys = "Your role is to determine whether the given propositions are True or False based on the provided image and its description."
    prompt_sys += "The outputs should follow the following format:'1. True/False\n2. True/False\n3. True/False\n4. True/False\n5. True/False\n ...'."
    prompt_sys += "The number of True/False answers must match the number of propositions."
    user_input = f"Description: {gt_caption}\n\nPropositions:\n{questions}"
    return [
        {"role": "system", "content": [{"type": "text", "text": prompt_sys}]},
        {"role": "user", "content": [{"type": "text", "text": user_input}, {"type": "image_url", "image_url": {"url": image_url}}]},
    ]


def coverage_messages(questions: list[str], caption: str) -> list[dict[str, Any]]:
    """eval_coverage.py generate_a_caption."""
    questions_set = "\n\n".join([f"{i}. {questions[i]}" for i in range(len(questions))])
    prompt_sys = f"Your role is to answer the given questions based on the provided caption. "  # noqa: F541
    prompt_sys += "I want to measure the amount of information in the caption. Therefore, if the correct answer to the question cannot be determined from the caption, you should answer it with \"I don't know\". "
    prompt_sys += "Do not use your own knowledge in your response. Do not use information that can be inferred from the question itself. Only use the information provided in the caption. "
    prompt_sys += "Answer the question by directly selecting the letter of the corresponding option. Do not repeat the question."
    user_input = f"Caption: {caption}.\n"
    user_input += f"Questions:\n{questions_set}"
    return [
        {"role": "system", "content": [{"type": "text", "text": prompt_sys}]},
        {"role": "user", "content": [{"type": "text", "text": user_input}]},
    ]


_CLAIR_PROMPT = """\
You are trying to tell if a candidate set of captions is describing the same image as a reference set of captions.
Candidate set:
{candidate_statements}
Reference set:
{target_statements}
On a precise scale from 0 to 100, how likely is it that the candidate set is \
describing the same image as the reference set? (JSON format, with a key "score", \
value between 0 and 100, and a key "reason" with a string value.)
"""


def clair_messages(candidates: list[str], targets: list[str]) -> list[dict[str, Any]]:
    """eval_clair.py clair (the prompt is the only, system, turn; temperature 0.0)."""
    candidate_statements = [f"- {c}\n" for c in candidates]
    target_statements = [f"- {t}\n" for t in targets]
    formatted_prompt = _CLAIR_PROMPT.format(candidate_statements="".join(candidate_statements), target_statements="".join(target_statements))
    return [{"role": "system", "content": [{"type": "text", "text": formatted_prompt}]}]


def factuality_a2l(answers: str) -> list[str]:
    """eval_factuality.py a2l (CapMAS ca2aa00): each piece's first word."""
    a = answers.replace("\n\n", "\n").strip().replace(". ", "\n")
    a = [b.split(")")[0] for b in a.split("\n")]
    a = [b.split()[0] for b in a]
    return a[1::2]


def coverage_a2l(answers: str) -> list[str]:
    """eval_coverage.py a2l (CapMAS ca2aa00; its logging lines dropped): each piece kept whole up
    to ")", no first word taken."""
    a = answers.replace("\n\n", "\n").strip().replace(". ", "\n")
    a = [b.split(")")[0] for b in a.split("\n")]
    return a[1::2]


# The official scripts' scoring loops, copied (CapMAS ca2aa00 eval_factuality.py, eval_coverage.py,
# eval_clair.py; CapArena c251cdd caparena_auto_scores.py) with only these changes: the logging lines
# dropped, `model.make_call(messages, temperature)` passed in as `make_call`, the files they read
# passed in as lists. The tests feed them the answers they serve capjudge and compare the aggregates.
MakeCall = Callable[[list[dict[str, Any]], float], str]


def factuality_precision(items: list[tuple[str, str, str, str]], make_call: MakeCall) -> tuple[float, list[str]]:
    """eval_factuality.py: generate_q, generate_a_image and the main loop over (name, caption,
    image data URL, DOCCI description); ``corr / total_num`` and the skipped names."""

    def generate_q(caption: str) -> str:
        messages = factuality_decompose_messages(caption)
        response = make_call(messages, CAPMAS_TEMPERATURE)
        if response == "":
            return ""
        out = response.replace("\n\n", "\n").split("\n")
        atoms = []
        three_queue = ["a", "b", "c"]
        for o in out:
            if o[0].isdigit() and len(o.split(". ")) > 1:
                atoms.append(o)
                three_queue.append(o.split(". ")[1])
                three_queue.pop(0)
                if len(set(three_queue)) == 1 or len(o.split()) > 245:
                    return ""
        return "\n".join(atoms)

    def generate_a_image(questions: str, image_url: str, gt_caption: str) -> tuple[list[str], bool]:
        num_questions = len(questions.split("\n"))
        messages = factuality_verify_messages(questions, image_url, gt_caption)
        num_try = 0
        retry = False
        while True:
            num_try += 1
            response = make_call(messages, CAPMAS_TEMPERATURE)
            out = factuality_a2l(response)
            if len(out) == num_questions:
                break
            elif num_try == 3:
                retry = True
        return out, retry

    total_num = 0
    corr = 0
    fmt = "\n"
    skipped = []
    for name, caption, image_url, gt_caption in items:
        while True:
            is_continue = False
            questions = generate_q(caption)
            if questions == "":
                skipped.append(name)
                is_continue = True
                break
            image_answers, retry = generate_a_image(questions, image_url, gt_caption)
            if retry == False:  # noqa: E712 - as written
                break
        if is_continue:
            continue
        outputs = []
        for j, q in enumerate(questions.split(fmt)):
            output: dict[str, Any] = {}
            output["question"] = " ".join(q.split(" ")[1:])
            output["caption_answer"] = "True"
            output["image_answer"] = image_answers[j]
            outputs.append(output)
            total_num += 1
            corr += image_answers[j] == output["caption_answer"]
    return corr / total_num, skipped


def coverage_recall(items: list[tuple[str, dict[str, list[str]], str]], make_call: MakeCall) -> tuple[int, int, list[str]]:
    """eval_coverage.py: generate_a_caption and the main loop over (name, question file's data,
    caption); ``corr``, ``total_num`` (Recall = corr / total_num) and the skipped names."""

    def generate_a_caption(questions: list[str], caption: str) -> Any:
        messages = coverage_messages(questions, caption)
        response = make_call(messages, CAPMAS_TEMPERATURE)
        if response == "":
            return ""
        elif response == "I don't know" or response == "I don't know.":
            return ["I don't know" for i in range(len(questions))]
        out = coverage_a2l(response)
        return out

    total_num = 0
    corr = 0
    skipped = []
    for name, data, caption in items:
        questions = data["questions"]
        is_continue = False
        num_try = 0
        while True:
            num_try += 1
            preds = generate_a_caption(questions, caption)
            if preds == "":
                skipped.append(name)
                is_continue = True
                break
            if len(preds) == len(data["answers"]) or num_try == 3:
                break
        if is_continue:
            continue
        preds = np.array([x.lower() for x in preds])
        answers = np.array([x.lower() for x in data["answers"]])
        corr += (preds == answers).sum()
        total_num += len(answers)
    return int(corr), total_num, skipped


def clair(candidates: list[str], targets: list[str], make_call: MakeCall, max_tokens: int = 1024) -> tuple[float, str | None]:
    """eval_clair.py clair."""
    candidate_statements = [f"- {c}\n" for c in candidates]
    target_statements = [f"- {t}\n" for t in targets]
    formatted_prompt = _CLAIR_PROMPT.format(
        candidate_statements="".join(candidate_statements),
        target_statements="".join(target_statements),
    )

    temperature, score, reason = 0.0, None, None
    for _ in range(3):
        messages = [{"role": "system", "content": [{"type": "text", "text": formatted_prompt}]}]
        response = make_call(messages, temperature)
        try:
            parsed = response.split("{")[1]
            parsed = "{" + parsed.split("}")[0] + "}"
            data = json.loads(parsed)
            score = float(data["score"])
            reason = data.get("reason", "Unknown")
            break
        except (json.JSONDecodeError, KeyError, IndexError):
            parsed = re.findall(r"\d*\.?\d+", response)
            if len(parsed) > 0:
                score = float(parsed[0])
                if score < 1:
                    score *= 100
                reason = re.findall(r"(?i)reason.*", response)
                if len(reason) > 0:
                    reason = reason[0].strip()[len("reason") :].replace(":", "").strip()
                else:
                    reason = "Unknown"
                break
            else:
                continue
    else:
        score = 0.0
        reason = None

    return score / 100, reason


def clair_mean(items: list[tuple[str, str, str]], make_call: MakeCall) -> tuple[float, list[str]]:
    """eval_clair.py's main loop over (image, prediction, reference): the printed
    ``score_accu / (len(json_list) - len(skipped))`` and the skipped images."""
    skipped = []
    score_accu = 0.0
    for image, pred, ref in items:
        score, reason = clair([pred], [ref], make_call, max_tokens=128)
        score_accu += score
        if reason == None:  # noqa: E711 - as written
            skipped.append(image)
    return score_accu / (len(items) - len(skipped)), skipped


def caparena_score_refs(model_name: str, caparena_auto_eval: list[dict[str, Any]]) -> dict[str, Any]:
    """caparena_auto_scores.py calculate_caparena_scores: one model's numbers from its battle file
    (the loop body over model_list; the "GPT judgment not 1 or 2 or tie" print dropped)."""
    score_refs: dict[str, Any] = {"GPT-4o-0806": [0, 0], "CogVLM2-llama3-chat-19B": [0, 0], "MiniCPM-V2.6-8B": [0, 0]}
    caption_length = []
    for data_item in caparena_auto_eval:
        if model_name == data_item["source1"]:
            caption_length.append(len(data_item["caption1"].split(" ")))
        else:
            caption_length.append(len(data_item["caption2"].split(" ")))

        if "judge" not in data_item:
            continue

        if data_item["judge"] not in ["Caption 1 is better.", "Caption 1 is better", "Caption 2 is better.", "Caption 2 is better", "Tie", "Tie."]:
            continue
        score_refs[data_item["ref_model"]][0] += 1

        if data_item["judge"] in "Caption 1 is better.":
            winner = data_item["source1"]
        elif data_item["judge"] in "Caption 2 is better.":
            winner = data_item["source2"]
        else:
            winner = "Tie"

        if winner == "Tie":
            pass
        elif winner == model_name:
            score_refs[data_item["ref_model"]][1] += 1
        else:
            score_refs[data_item["ref_model"]][1] -= 1

    avg_score = 0
    for k, v in score_refs.items():  # noqa: B007 - as written
        score_refs[k][1] = score_refs[k][1] / 2
        avg_score += score_refs[k][1]
    score_refs["Score_Avg"] = avg_score / 3
    score_refs["Length_Avg"] = sum(caption_length) / len(caption_length)
    return score_refs
