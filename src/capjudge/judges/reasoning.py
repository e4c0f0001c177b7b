"""Reading the answer after the reasoning: a thinking model's answer split into its reasoning and
its final answer, on every backend.

The reasoning comes inline (``<think>...</think>`` or the model's own markers, named by
``Completion.meta["reasoning_markers"]``; a chat template that opened ``<think>`` leaves only the
closing marker, and the backend says so with ``meta["reasoning_opened"]``: only then is the text
before a bare closing marker reasoning (else it is answer text: a quoted caption may hold
``</think> 100``), and an answer without the closing marker a reasoning cut off;
:mod:`capjudge.parsing.reasoning`) or in a separate field of an OpenAI-protocol
server (``message.reasoning_content`` / ``message.reasoning``, carried by the backend as
``Completion.meta["reasoning"]``). Scores and verdicts are read from the final answer only (its
last ``\\boxed{...}`` when it has one), and FLEUR's digit smoothing from the token steps after the
reasoning (the steps up to and including the closing marker are skipped). A reasoning that never
closed is the error :func:`cut_off_message`, never a score read from the reasoning.

Answers without reasoning and without ``\\boxed{}`` are read exactly as before (the same
:class:`Completion`, the same record).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from capjudge.backends.base import Completion, TokenStep
from capjudge.parsing.reasoning import DEFAULT_MARKERS, boxed, markers_of, split_text
from capjudge.parsing.text import clean

REASONING_CHARS = 20_000
"""``details.reasoning`` keeps at most this many characters (the first ones; a longer reasoning
ends with :data:`TRUNCATED` and ``details.reasoning_chars`` gives its full length)."""

TRUNCATED = " [...]"

MAX_ANSWER_CHARS = 262_144
"""An answer longer than this (about 65,000 tokens: past any method's budget with the default
thinking budget) is cut to its first :data:`MAX_ANSWER_CHARS` characters, and its token steps to
those within them, before anything reads it; the record says so in ``details.answer_cut``
(``{"chars": full length, "kept": MAX_ANSWER_CHARS}``). Every reader is linear in the answer, so
the bound only keeps a runaway or hostile answer's reading (and record) small."""

META_KEYS = ("reasoning", "reasoning_markers", "reasoning_opened")
"""``Completion.meta`` keys read here (not repeated in ``details.backend_meta``)."""


@dataclass(frozen=True)
class FinalAnswer:
    """An answer split for reading.

    ``completion`` is what the readers read: its ``text`` is the final answer (the content of its
    ``\\boxed{}`` when it has one) and its ``steps`` the token steps of that text (none when they
    could not be matched); ``raw`` is the final answer as the record keeps it (after the reasoning,
    ``\\boxed{}`` included); ``reasoning`` is ``None`` when the answer had none; ``cut_off`` says
    the reasoning never closed."""

    completion: Completion
    raw: str
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    cut_off: bool = False
    markers: tuple[str, str] = DEFAULT_MARKERS
    steps_note: str | None = None
    answer_chars: int | None = None
    """The full length of an answer cut to :data:`MAX_ANSWER_CHARS` (``None``: not cut)."""

    @property
    def plain(self) -> bool:
        """No reasoning, no ``\\boxed{}``, not cut: the answer is read as it came."""
        return self.reasoning is None and not self.cut_off and self.completion.text == self.raw and self.answer_chars is None


def _decoded(steps: list[TokenStep]) -> tuple[str, list[int]]:
    """The steps' text (SentencePiece ``▁`` / byte-level ``Ġ`` as spaces) and each character's step."""
    parts: list[str] = []
    owner: list[int] = []
    for i, step in enumerate(steps):
        t = step.token.replace("\u2581", " ").replace("\u0120", " ")
        parts.append(t)
        owner.extend([i] * len(t))
    return "".join(parts), owner


def _answer_steps(steps: list[TokenStep], markers: tuple[str, str], answer: str, box: bool, opened: bool) -> tuple[list[TokenStep], int, str | None]:
    """The steps of the final answer (its ``\\boxed{}`` content when ``box``), how many steps the
    reasoning took, and why the steps could not be matched (then no steps); ``opened``: the
    template opened the reasoning (the steps start inside it)."""
    text, owner = _decoded(steps)
    split = split_text(text, markers, opened=opened)
    skipped = 0
    start = 0
    if split.reasoning is not None and not split.cut_off:
        start = split.answer_start
        skipped = owner[start - 1] + 1 if start > 0 else 0
    elif clean(text) != clean(answer):
        # A server that split the reasoning out may still send its tokens' log-probabilities:
        # the answer is the steps' text after them.
        at = text.rfind(answer.strip()) if answer.strip() else -1
        if at < 0:
            return [], 0, "the token log-probabilities do not match the final answer: not used"
        start = at
        skipped = owner[at - 1] + 1 if at > 0 else 0
    end = len(text)
    if box:
        span = boxed(text[start:])
        if span is None:
            return [], skipped, "the token log-probabilities do not hold the answer's \\boxed{}: not used"
        start, end = start + span[0], start + span[1]
        first = owner[start] if start < len(owner) else len(steps)
        first = max(first, skipped)
        last = owner[end - 1] + 1 if end > start else first
        return list(steps[first:last]), skipped, None
    return list(steps[skipped:]), skipped, None


def bounded(out: Completion) -> Completion:
    """``out`` cut to its first :data:`MAX_ANSWER_CHARS` characters and the token steps within
    them (``out`` itself when it is not longer)."""
    if len(out.text) <= MAX_ANSWER_CHARS:
        return out
    steps: list[TokenStep] = []
    length = 0
    for step in out.steps or []:
        length += len(step.token)
        if length > MAX_ANSWER_CHARS:
            break
        steps.append(step)
    cut = dataclasses.replace(out, text=out.text[:MAX_ANSWER_CHARS], steps=steps)
    cut.steps_checked = out.steps_checked
    return cut


def final_answer(out: Completion) -> FinalAnswer:
    """``out`` split into its reasoning and its final answer (module doc), cut first when it is
    longer than :data:`MAX_ANSWER_CHARS`."""
    full = len(out.text)
    out = bounded(out)
    chars = full if len(out.text) < full else None
    meta = out.meta or {}
    markers = markers_of(meta.get("reasoning_markers"))
    separate = meta.get("reasoning") if isinstance(meta.get("reasoning"), str) else None
    # A template-opened reasoning only counts inline: a server that split it out sent the answer.
    opened = bool(meta.get("reasoning_opened")) and separate is None
    split = split_text(out.text, markers, opened=opened)
    parts = [p.strip() for p in (separate, split.reasoning) if p and p.strip()]
    reasoning = "\n\n".join(parts) if parts else ("" if split.reasoning is not None else None)
    cut_off = split.cut_off or bool(separate and separate.strip() and not out.text.strip() and out.finish_reason == "length")
    answer = split.answer
    span = boxed(answer)
    read = answer[span[0] : span[1]] if span is not None else answer
    if reasoning is None and span is None:
        return FinalAnswer(completion=out, raw=out.text, markers=markers, answer_chars=chars)
    steps: list[TokenStep] = []
    skipped = 0
    note = None
    if out.steps and not cut_off:
        steps, skipped, note = _answer_steps(out.steps, markers, answer, span is not None, opened)
    elif out.steps:
        skipped = len(out.steps)
    count: int | None = None
    if reasoning is not None:
        usage = out.usage.reasoning_tokens if out.usage is not None else 0
        count = usage or skipped or None
    completion = dataclasses.replace(out, text=read, steps=steps)
    completion.steps_checked = out.steps_checked
    return FinalAnswer(completion=completion, raw=answer, reasoning=reasoning, reasoning_tokens=count, cut_off=cut_off, markers=markers, steps_note=note, answer_chars=chars)


def reasoning_details(fa: FinalAnswer) -> dict[str, Any]:
    """What a record says of the reasoning: ``reasoning`` (at most :data:`REASONING_CHARS`
    characters; ``reasoning_chars`` when cut), ``reasoning_tokens`` (the API's count, else the
    token steps it took, when known), ``answer_steps`` (why the token probabilities were not used),
    ``boxed`` (the score was read from the final answer's ``\\boxed{}``), ``answer_cut`` (the
    answer was cut to :data:`MAX_ANSWER_CHARS` before reading)."""
    details: dict[str, Any] = {}
    if fa.answer_chars is not None:
        details["answer_cut"] = {"chars": fa.answer_chars, "kept": MAX_ANSWER_CHARS}
    if fa.reasoning is not None:
        text = fa.reasoning
        if len(text) > REASONING_CHARS:
            details["reasoning_chars"] = len(text)
            text = text[: REASONING_CHARS - len(TRUNCATED)] + TRUNCATED
        details["reasoning"] = text
        if fa.reasoning_tokens is not None:
            details["reasoning_tokens"] = fa.reasoning_tokens
    if not fa.cut_off and fa.completion.text != fa.raw:
        details["boxed"] = True
    if fa.steps_note is not None:
        details["answer_steps"] = fa.steps_note
    return details


def cut_off_message(fa: FinalAnswer) -> str:
    """The error of a reasoning that did not finish within the token budget."""
    tokens = f" after {fa.reasoning_tokens} tokens" if fa.reasoning_tokens else ""
    return (
        f"the model's reasoning did not finish within the token budget (no closing {fa.markers[1]!r}{tokens}), so there is no answer to read; "
        "give it more tokens: an open thinking model (hf:, llamacpp:, openai-compatible:) with --thinking-budget N, "
        "any model with --max-new-tokens (max_new_tokens= in Python), an API reasoning model with --backend-opt reasoning_budget=N"
    )


def answer_text(out: Completion) -> str:
    """The text a parser reads from ``out``: its final answer (``\\boxed{}`` content when any);
    empty when the reasoning was cut off."""
    fa = final_answer(out)
    return "" if fa.cut_off else fa.completion.text


__all__ = ["MAX_ANSWER_CHARS", "META_KEYS", "REASONING_CHARS", "TRUNCATED", "FinalAnswer", "answer_text", "bounded", "cut_off_message", "final_answer", "reasoning_details"]
