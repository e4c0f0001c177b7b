"""Splitting a thinking model's answer into its reasoning and its final answer (pure text).

A thinking model writes ``<think>...</think>`` (or its own markers) before the answer. The split:

- the answer starts (after white space) with the opening marker: the reasoning runs to the first
  closing marker after it; with no closing marker the reasoning was cut off (``cut_off``);
- the answer holds a closing marker and no opening marker before it: the chat template opened the
  reasoning (Qwen3-style templates end the prompt with ``<think>``), which runs from the start to
  that closing marker;
- the backend knows the prompt ended with the opening marker (``opened``) and the answer holds no
  closing marker: the reasoning was cut off;
- otherwise there is no reasoning (markers in the middle of an answer, e.g. a quoted caption, are
  answer text).

The final answer's ``\\boxed{...}`` (the last one, braces balanced; LLaVA-Critic-R1) is what is
read when present, else its last ``<|begin_of_box|>...<|end_of_box|>`` (GLM-4.1V-Thinking and
GLM-4.5V box their final answer so, inside ``<answer>...</answer>``) (:func:`boxed`).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MARKERS = ("<think>", "</think>")
"""The reasoning markers of Qwen3(-VL), DeepSeek-R1, GLM-4.1V Thinking and LLaVA-Critic-R1."""

KNOWN_MARKERS: dict[str, tuple[str, str]] = {
    "think": DEFAULT_MARKERS,
    "seed": ("<seed:think>", "</seed:think>"),
    "kimi": ("\u25c1think\u25b7", "\u25c1/think\u25b7"),
}
"""Reasoning markers by name (``Completion.meta["reasoning_markers"]`` takes a name or a pair)."""


@dataclass(frozen=True)
class TextSplit:
    """Where the reasoning of ``text`` ends and the final answer starts.

    ``reasoning`` is ``None`` when there is none; ``answer_start`` is the index in ``text`` where
    the final answer starts (after the closing marker; 0 without reasoning); ``cut_off`` says the
    reasoning opened and never closed (then ``answer`` is empty)."""

    reasoning: str | None
    answer: str
    answer_start: int
    cut_off: bool = False


def markers_of(value: object) -> tuple[str, str]:
    """The markers a name (:data:`KNOWN_MARKERS`) or an ``(open, close)`` pair stands for; the
    defaults for anything else."""
    if isinstance(value, str) and value in KNOWN_MARKERS:
        return KNOWN_MARKERS[value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) and v for v in value):
        return (value[0], value[1])
    return DEFAULT_MARKERS


def split_text(text: str, markers: tuple[str, str] = DEFAULT_MARKERS, *, opened: bool = False) -> TextSplit:
    """The reasoning and the final answer of ``text`` (module doc for the rules); ``opened``: the
    prompt ended with the opening marker (the chat template opened the reasoning)."""
    opening, closing = markers
    body = text or ""
    lead = len(body) - len(body.lstrip())
    if body.startswith(opening, lead):
        start = lead + len(opening)
        end = body.find(closing, start)
        if end < 0:
            return TextSplit(reasoning=body[start:].strip(), answer="", answer_start=len(body), cut_off=True)
        after = end + len(closing)
        return TextSplit(reasoning=body[start:end].strip(), answer=body[after:], answer_start=after)
    end = body.find(closing)
    if end >= 0 and opening not in body[:end]:
        after = end + len(closing)
        return TextSplit(reasoning=body[:end].strip(), answer=body[after:], answer_start=after)
    if opened and end < 0:
        return TextSplit(reasoning=body.strip(), answer="", answer_start=len(body), cut_off=True)
    return TextSplit(reasoning=None, answer=body, answer_start=0)


BOXED = "\\boxed{"
GLM_BOX = ("<|begin_of_box|>", "<|end_of_box|>")
"""GLM-4.1V-Thinking's / GLM-4.5V's answer box."""


def boxed(answer: str) -> tuple[int, int] | None:
    """The span of the content of the last ``\\boxed{...}`` in ``answer`` (braces balanced), else
    of its last ``<|begin_of_box|>...<|end_of_box|>``; ``None`` when it holds neither."""
    start = answer.rfind(BOXED)
    while start >= 0:
        begin = start + len(BOXED)
        depth = 1
        for i in range(begin, len(answer)):
            if answer[i] == "{":
                depth += 1
            elif answer[i] == "}":
                depth -= 1
                if depth == 0:
                    return (begin, i)
        start = answer.rfind(BOXED, 0, start)  # unbalanced: an earlier one
    close = answer.rfind(GLM_BOX[1])
    opening = answer.rfind(GLM_BOX[0], 0, close) if close >= 0 else -1
    if opening >= 0:
        return (opening + len(GLM_BOX[0]), close)
    return None


__all__ = ["BOXED", "DEFAULT_MARKERS", "GLM_BOX", "KNOWN_MARKERS", "TextSplit", "boxed", "markers_of", "split_text"]
