"""Thinking models on local and OpenAI-compatible backends: ``thinking=on|off|auto``, the thinking
budget and the reasoning markers (options of ``hf:``, ``llamacpp:`` and ``openai-compatible:``).

- ``thinking=on``: the chat template renders with ``enable_thinking=True`` (Qwen3-style hybrid
  templates; ``chat_template_kwargs`` on a vLLM / SGLang server) and the thinking budget
  (``thinking_budget``, default :data:`DEFAULT_THINKING_BUDGET` tokens) is added to the method's
  ``max_new_tokens``;
- ``thinking=off``: ``enable_thinking=False``, no budget added;
- ``thinking=auto`` (default): nothing is passed to the template (its own default); the budget is
  added when the model thinks by default: its template writes reasoning markers, or its judge
  preset says it thinks (local backends), or ``thinking_budget`` was given (servers).

``on``/``off`` on a local model whose chat template has no ``enable_thinking`` switch is a usage
error naming the model. The markers (``reasoning_markers=think|seed|kimi``, else the preset's,
else the first known opening marker the template text holds, else ``<think>``) go to the reader
as ``Completion.meta["reasoning_markers"]`` (only when not ``<think>``); a prompt that ends with
the opening marker (the template opened the reasoning) is ``meta["reasoning_opened"]``, so that an
answer without the closing marker is read as reasoning cut off by the budget
(:mod:`capjudge.judges.reasoning`). Non-default settings only enter the backend's identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capjudge.backends.base import Completion, Message, Request
from capjudge.backends.options import OptionError, as_int
from capjudge.parsing.reasoning import DEFAULT_MARKERS, KNOWN_MARKERS

THINKING_MODES = ("auto", "on", "off")
DEFAULT_THINKING_BUDGET = 4096
"""Tokens added to a method's answer budget for the reasoning of a thinking model (``thinking_budget``)."""

SWITCH = "enable_thinking"
"""The chat-template variable of hybrid models (Qwen3, Qwen3-VL Instruct/Thinking hybrids, GLM-4.5V)."""

OPTIONS = ("thinking", "thinking_budget", "reasoning_markers")


@dataclass(frozen=True)
class Thinking:
    """The thinking settings asked for (module doc); ``budget``/``markers`` ``None``: the defaults."""

    mode: str = "auto"
    budget: int | None = None
    markers: str | None = None

    @property
    def default(self) -> bool:
        """Nothing asked for: the backend runs as it did before these options existed."""
        return self.mode == "auto" and self.budget is None and self.markers is None

    def identity(self) -> dict[str, Any]:
        """The identity (cache key) entries of the non-default settings."""
        out: dict[str, Any] = {}
        if self.mode != "auto":
            out["thinking"] = self.mode
        if self.budget is not None:
            out["thinking_budget"] = self.budget
        if self.markers is not None:
            out["reasoning_markers"] = self.markers
        return out


def parse(options: Mapping[str, Any]) -> Thinking:
    """The settings of ``options`` (``thinking``, ``thinking_budget``, ``reasoning_markers``),
    checked (:class:`OptionError` naming the bad one)."""
    mode = str(options.get("thinking") or "auto").strip().lower()
    if mode in ("true", "yes", "1"):
        mode = "on"
    if mode in ("false", "no", "0"):
        mode = "off"
    if mode not in THINKING_MODES:
        raise OptionError(f"option thinking={options.get('thinking')!r} is not one of {', '.join(THINKING_MODES)}")
    budget = as_int(options.get("thinking_budget"), "thinking_budget")
    if budget is not None and budget < 0:
        raise OptionError(f"option thinking_budget={budget!r}: a number of tokens, 0 or more")
    markers = options.get("reasoning_markers")
    if markers is not None and markers != "":
        markers = str(markers).strip()
        if markers not in KNOWN_MARKERS and not _pair(markers):
            raise OptionError(f"option reasoning_markers={markers!r} is not one of {', '.join(KNOWN_MARKERS)} nor 'OPEN,CLOSE'")
    else:
        markers = None
    return Thinking(mode, budget, markers)


def split_options(options: Mapping[str, Any]) -> tuple[Thinking, dict[str, Any]]:
    """The thinking settings of ``options`` and the other options."""
    return parse(options), {k: v for k, v in options.items() if k not in OPTIONS}


def _pair(text: str) -> tuple[str, str] | None:
    parts = [p.strip() for p in text.split(",")]
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def marker_pair(name: str | None) -> tuple[str, str]:
    """The markers a name (``think``, ``seed``, ``kimi``) or an ``OPEN,CLOSE`` text stands for."""
    if name is None:
        return DEFAULT_MARKERS
    return KNOWN_MARKERS.get(name) or _pair(name) or DEFAULT_MARKERS


def template_markers(source: str | None) -> str | None:
    """The name of the first known reasoning markers whose opening marker the chat template's text
    holds (``None``: none)."""
    for name, (opening, _closing) in KNOWN_MARKERS.items():
        if source and opening in source:
            return name
    return None


def has_switch(source: str | None) -> bool:
    """Whether the chat template's text reads ``enable_thinking``."""
    return bool(source) and SWITCH in str(source)


@dataclass
class Plan:
    """What a backend does for thinking: the template variables, the tokens added to
    ``max_new_tokens``, and the markers handed to the reader."""

    settings: Thinking = field(default_factory=Thinking)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    extra_tokens: int = 0
    markers: str | None = None
    watch_prompt: bool = False
    """The opening marker is in the template: check whether a prompt ends with it."""
    fitted_from: int | None = None
    """The default budget was lowered to fit the model's context (:func:`fit_default_budget`):
    the budget it would have been; ``None`` when it was not."""

    @property
    def pair(self) -> tuple[str, str]:
        """The (opening, closing) markers."""
        return marker_pair(self.markers)

    def budgeted(self, requests: Sequence[Request]) -> list[Request]:
        """``requests`` with the thinking budget added to their ``max_new_tokens``."""
        if not self.extra_tokens:
            return list(requests)
        return [dataclasses.replace(r, config=dataclasses.replace(r.config, max_new_tokens=r.config.max_new_tokens + self.extra_tokens)) for r in requests]

    def annotate(self, out: Completion | BaseException | None, render: Callable[[Sequence[Message]], str], messages: Sequence[Message]) -> None:
        """Tell the reader the markers (when not ``<think>``) and whether the prompt opened the
        reasoning (``render(messages)`` is the prompt; called only when the template holds the
        opening marker)."""
        if not isinstance(out, Completion):
            return
        if self.markers is not None and self.pair != DEFAULT_MARKERS:
            out.meta["reasoning_markers"] = list(self.pair)
        if self.watch_prompt:
            try:
                opened = render(messages).rstrip().endswith(self.pair[0])
            except Exception:  # noqa: BLE001 - the answer stands; the reader splits it as text
                opened = False
            if opened:
                out.meta["reasoning_opened"] = True


def fit_default_budget(context: int | None) -> int:
    """The default thinking budget on a model whose context holds ``context`` tokens:
    :data:`DEFAULT_THINKING_BUDGET`, or half the context when that is less (the prompt and the
    method's answer need the rest); ``None``: the context is unknown."""
    if context is None or context <= 0:
        return DEFAULT_THINKING_BUDGET
    return min(DEFAULT_THINKING_BUDGET, context // 2)


def plan(
    settings: Thinking, template: str | None, model: str, *, preset_thinks: bool = False, preset_markers: str | None = None, local: bool = True, context: int | None = None
) -> Plan:
    """The plan of a backend whose chat template's text is ``template`` (``None``: no template).

    ``local``: ``on``/``off`` need the template's ``enable_thinking`` switch (else
    :class:`OptionError` naming ``model``) and ``auto`` adds the budget when the model thinks by
    default; a server (``local=False``) gets ``chat_template_kwargs`` whatever its template, and
    in ``auto`` the budget only when one was given. ``context``: the model's context in tokens,
    which the default budget is fitted to (:func:`fit_default_budget`; a budget given is kept)."""
    markers = settings.markers or preset_markers or template_markers(template)
    kwargs: dict[str, Any] = {}
    if settings.mode != "auto":
        if local and not has_switch(template):
            raise OptionError(
                f"thinking={settings.mode}: the chat template of {model!r} has no {SWITCH} switch, so thinking cannot be turned "
                f"{settings.mode} (leave thinking=auto; a model that always thinks is read after its reasoning anyway)"
            )
        kwargs[SWITCH] = settings.mode == "on"
    budget = fit_default_budget(context) if settings.budget is None else settings.budget
    if settings.mode == "on":
        extra = budget
    elif settings.mode == "off":
        extra = 0
    elif local:
        extra = budget if (preset_thinks or template_markers(template) is not None or settings.budget is not None) else 0
    else:
        extra = settings.budget or 0
    opening = marker_pair(markers)[0]
    fitted = DEFAULT_THINKING_BUDGET if settings.budget is None and extra and budget < DEFAULT_THINKING_BUDGET else None
    return Plan(settings, kwargs, extra, markers, watch_prompt=bool(template) and opening in str(template), fitted_from=fitted)


__all__ = [
    "DEFAULT_THINKING_BUDGET",
    "OPTIONS",
    "SWITCH",
    "THINKING_MODES",
    "Plan",
    "Thinking",
    "fit_default_budget",
    "has_switch",
    "marker_pair",
    "parse",
    "plan",
    "split_options",
    "template_markers",
]
