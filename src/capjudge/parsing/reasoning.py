"""Splitting a thinking model's answer into its reasoning and its final answer (pure text).

A thinking model writes ``<think>...</think>`` (or its own markers) before the answer. The split:

- the answer starts (after white space) with the opening marker: the reasoning runs to the first
  closing marker after it; with no closing marker the reasoning was cut off (``cut_off``);
- the backend knows the prompt ended with the opening marker (``opened``: the chat template opened
  the reasoning, as Qwen3-VL-Thinking's ends the prompt with ``<think>``): the reasoning runs from
  the start to the first closing marker; with none the reasoning was cut off;
- otherwise there is no reasoning: markers in the middle of an answer are answer text, a bare
  closing marker included (a caption quoted in the answer may hold ``</think> 100``; only the
  backend, which saw the prompt, can say that the template opened the reasoning).

The final answer's ``\\boxed{...}`` (the last one, braces balanced; LLaVA-Critic-R1) is what is
read when present, else its last ``<|begin_of_box|>...<|end_of_box|>`` (GLM-4.1V-Thinking and
GLM-4.5V box their final answer so, inside ``<answer>...</answer>``) (:func:`boxed`).
"""

from __future__ import annotations

import re
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
    prompt ended with the opening marker (the chat template opened the reasoning), which only the
    backend knows (``Completion.meta["reasoning_opened"]``); without it a closing marker with no
    opening one is answer text."""
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
    if not opened:
        return TextSplit(reasoning=None, answer=body, answer_start=0)
    end = body.find(closing)
    if end < 0:
        return TextSplit(reasoning=body.strip(), answer="", answer_start=len(body), cut_off=True)
    after = end + len(closing)
    return TextSplit(reasoning=body[:end].strip(), answer=body[after:], answer_start=after)


BOXED = "\\boxed{"
_BRACE = re.compile(r"[{}]")
GLM_BOX = ("<|begin_of_box|>", "<|end_of_box|>")
"""GLM-4.1V-Thinking's / GLM-4.5V's answer box."""


def boxed(answer: str) -> tuple[int, int] | None:
    """The span of the content of the last ``\\boxed{...}`` in ``answer`` (braces balanced), else
    of its last ``<|begin_of_box|>...<|end_of_box|>``; ``None`` when it holds neither.

    Linear in the answer: every brace is matched once (a stack of the open ones), then the last
    ``\\boxed{`` whose brace closes is taken, as scanning each one from its brace would find
    (braces before it never close it), without the quadratic rescans of unbalanced ones."""
    if BOXED in answer:
        closes: dict[int, int] = {}
        open_at: list[int] = []
        for m in _BRACE.finditer(answer):
            if m.group() == "{":
                open_at.append(m.start())
            elif open_at:
                closes[open_at.pop()] = m.start()
        start = answer.rfind(BOXED)
        while start >= 0:
            brace = start + len(BOXED) - 1
            if brace in closes:
                return (brace + 1, closes[brace])
            start = answer.rfind(BOXED, 0, start)  # unbalanced: an earlier one
    close = answer.rfind(GLM_BOX[1])
    opening = answer.rfind(GLM_BOX[0], 0, close) if close >= 0 else -1
    if opening >= 0:
        return (opening + len(GLM_BOX[0]), close)
    return None


__all__ = ["BOXED", "DEFAULT_MARKERS", "GLM_BOX", "KNOWN_MARKERS", "TextSplit", "boxed", "markers_of", "split_text"]
