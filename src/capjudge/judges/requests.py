"""Building requests from a method: the messages (system turn, prompt, image), the decoding
settings, and the requests of each step (score, first step, listwise, follow-up question).

A :class:`RequestBuilder` holds what a judge decides about its requests (the method, the system
sentence, an answer-length override, how many alternatives to ask per token);
:class:`~capjudge.judges.judge.Judge` makes one from its settings when it builds a request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capjudge.backends.base import GenerationConfig, Message, Request
from capjudge.data.images import LoadedImage
from capjudge.data.types import normalize_caption
from capjudge.judges.prepare import Prepared
from capjudge.prompts.registry import Method, get_template


@dataclass(frozen=True)
class RequestBuilder:
    """The requests of ``method``: ``system`` turn (or none), ``max_new_tokens`` override of the
    method's answer length (``None``: the method's), ``top_logprobs`` alternatives per token when
    the method smooths. ``official``: the judge's system is ``"auto"`` and the method sends its
    official code's system turns (``Method.official_system``), on every backend; otherwise
    ``system`` replaces them (``None``: no system turn). ``choices``: the backend answers a request
    of ``n`` > 1 with ``n`` choices (an API kind: ``Completion.meta["choices"]``); otherwise a
    step that samples ``n`` answers (DCScore) asks ``n`` requests."""

    method: Method
    system: str | None = None
    max_new_tokens: int | None = None
    top_logprobs: int = 20
    official: bool = False
    choices: bool = False

    def system_turn(self, official_text: str | None, parts: bool = True) -> Message | None:
        """The system turn of a request whose official system text is ``official_text``: that
        text, sent as the official code sends it (a list of one text part; ``parts=False``: a
        string), when the judge's system is ``"auto"``; else the judge's own system sentence (or none)."""
        if self.official:
            return Message("system", official_text, parts=parts) if official_text is not None else None
        return Message("system", self.system) if self.system else None

    def method_system(self, references: Sequence[str] = ()) -> str | None:
        """The method's own system text (``Method.system_template`` rendered with the references,
        else ``Method.system``)."""
        name = self.method.system_template
        return get_template(name).render(references=list(references)) if name else self.method.system

    def messages(self, prompt: str, image: LoadedImage, history: Sequence[Message] = (), references: Sequence[str] = ()) -> tuple[Message, ...]:
        """The system turn, then ``prompt`` with ``image`` (or after ``history``, which holds it)."""
        msgs: list[Message] = []
        system = self.system_turn(self.method_system(references) if self.official else None)
        if system is not None:
            msgs.append(system)
        if history:
            msgs.extend(history)
            msgs.append(Message("user", prompt))
        else:
            msgs.append(Message("user", prompt, images=(image,), detail=self.method.image_detail))
        return tuple(msgs)

    def config(self, max_new_tokens: int, logprobs: bool, temperature: float = 0.0, stop_rule: str = "") -> GenerationConfig:
        """Decoding settings: ``max_new_tokens`` unless overridden, alternatives when ``logprobs``,
        the method's ``top_p``, and ``stop_rule`` (the scoring step's: the method's)."""
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens or max_new_tokens,
            temperature=temperature,
            top_p=self.method.top_p,
            top_logprobs=self.top_logprobs if logprobs else 0,
            stop_rule=stop_rule,
        )

    def step_request(self, system: str | None, prompt: str, image: LoadedImage | None = None, *, temperature: float, max_new_tokens: int, text_first: bool = False, parts: bool = True) -> Request:
        """One step of a multi-step method (``judges.steps``): its official ``system`` text (see
        :meth:`system_turn`), then ``prompt`` as the user turn, with ``image`` (after the text when
        ``text_first``) or as a text-only request (no image: one text part; ``parts=False``: a plain
        string, as CAPability's code sends it)."""
        msgs: list[Message] = []
        turn = self.system_turn(system, parts)
        if turn is not None:
            msgs.append(turn)
        images = (image,) if image is not None else ()
        msgs.append(Message("user", prompt, images=images, text_first=text_first and bool(images), detail=self.method.image_detail if images else None, parts=parts or bool(images)))
        return Request(tuple(msgs), self.config(max_new_tokens, False, temperature))

    def system_only_request(self, system: str, *, temperature: float, max_new_tokens: int) -> Request:
        """A text-only request of one system turn (CLAIR as CapMAS sends it); with the judge's
        own system (not ``"auto"``), the text goes as the user turn after it."""
        if self.official:
            msgs: tuple[Message, ...] = (Message("system", system, parts=True),)
        else:
            msgs = tuple(m for m in (self.system_turn(None), Message("user", system)) if m is not None)
        return Request(msgs, self.config(max_new_tokens, False, temperature))

    def caption(self, text: str) -> str:
        """The caption as the method's code puts it into the prompt: FLEUR's code collapses its
        whitespace, VisCE2's code passes it as it is. References go in as they are (both codes)."""
        return normalize_caption(text) if self.method.normalize_caption else str(text)

    def score_request(self, prep: Prepared) -> Request:
        """The scoring step of a prepared sample (its first step's answer in ``prep.context``)."""
        method = self.method
        tpl = get_template(method.template)
        prompt = tpl.render(caption=self.caption(prep.sample.caption), references=list(prep.sample.references), context=prep.context or "")
        assert prep.image is not None
        return Request(self.messages(prompt, prep.image), self.config(method.max_new_tokens, method.reads_logprobs, method.temperature, method.stop_rule))

    def request(self, prompt: str, image: LoadedImage, max_new_tokens: int, references: Sequence[str] = (), *, logprobs: bool = False) -> Request:
        """A request at the method's temperature: the system turn (an official one rendered with
        ``references``), then ``prompt`` with ``image``; ``logprobs``: the answer's alternatives
        asked (a pair verdict's confidence, ``confidence=on``)."""
        return Request(self.messages(prompt, image, references=references), self.config(max_new_tokens, logprobs, self.method.temperature))

    def context_request(self, prompt: str, image: LoadedImage) -> Request:
        """A two-step method's first step (asked once per image)."""
        method = self.method
        return Request(self.messages(prompt, image), self.config(method.context_max_new_tokens, False, method.context_temperature))

    def list_request(self, prompt: str, image: LoadedImage, captions: int) -> Request:
        """The listwise prompt of ``captions`` captions of one image (room for a score each)."""
        method = self.method
        return Request(self.messages(prompt, image), self.config(max(method.max_new_tokens, 16 * captions), False, method.temperature))

    def follow_up(self, first: Request, answer: str, prompt: str, image: LoadedImage) -> Request:
        """The follow-up question ``prompt`` after ``first`` was answered ``answer`` (the score's
        explanation), greedy, up to 512 new tokens."""
        history = [m for m in first.messages if m.role != "system"] + [Message("assistant", answer)]
        return Request(self.messages(prompt, image, history=history), self.config(512, False))


__all__ = ["RequestBuilder"]
