"""The official code's texts, copied (njucckevin/CapArena c251cdd vlm_as_a_judge.py; adobe-research/CapMAS ca2aa00
eval_factuality.py, eval_coverage.py, eval_clair.py) with the code that builds each request from them: the
tests compare what capjudge sends with what these build, byte for byte."""

from __future__ import annotations

from typing import Any

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


def a2l(answers: str) -> list[str]:
    """eval_factuality.py / eval_coverage.py a2l."""
    a = answers.replace("\n\n", "\n").strip().replace(". ", "\n")
    a = [b.split(")")[0] for b in a.split("\n")]
    a = [b.split()[0] for b in a]
    return a[1::2]
