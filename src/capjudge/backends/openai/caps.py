"""What each OpenAI-protocol provider and model supports (log-probabilities, images, parameters).

The table is a best guess kept in one place; the backend still falls back at run time when a server
refuses log-probabilities, and every entry can be overridden with backend options
(``logprobs=false``, ``max_top_logprobs=5``).

Sources: OpenAI's chat-completions reference documents ``top_logprobs`` as an integer 0..20. Azure
OpenAI's older data-plane API versions (and the Azure SDKs built on them) document it as 0..5, so
Azure defaults to a cap of 5. gpt-4-vision-preview never returned log-probabilities; reasoning models
(o1/o3/o4, gpt-5) refuse them and also refuse ``temperature``/``top_p`` other than the defaults and
take ``max_completion_tokens`` instead of ``max_tokens``.

Reasoning models (``reasoning``) are the table's o1/o3/o4-mini/gpt-5 entries and any other name of
those families (:data:`REASONING_NAME`: ``o1*``, ``o3*``, ``o4*``, ``gpt-5*``); ``reasoning=true|false``
overrides it. Their hidden reasoning spends ``max_completion_tokens`` (counted in
``usage.completion_tokens_details.reasoning_tokens``), so they are given the method's answer budget
plus a reasoning budget (:func:`reasoning_budget`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelCaps:
    """Capabilities of one model behind one provider."""

    logprobs: bool = True
    max_top_logprobs: int = 20
    images: bool = True
    reasoning: bool = False
    image_base_tokens: int = 85
    image_tile_tokens: int = 170
    note: str = ""


# Matched on the model (or Azure deployment) name: exact, or the longest prefix followed by "-".
_TABLE: dict[str, ModelCaps] = {
    "gpt-4-vision-preview": ModelCaps(logprobs=False, max_top_logprobs=0, note="gpt-4-vision-preview returns no logprobs"),
    "gpt-4-1106-vision-preview": ModelCaps(logprobs=False, max_top_logprobs=0, note="gpt-4-vision-preview returns no logprobs"),
    "gpt-4": ModelCaps(images=False, note="gpt-4 (not turbo) reads no images"),
    "gpt-3.5-turbo": ModelCaps(images=False, note="gpt-3.5-turbo reads no images"),
    "gpt-4-turbo": ModelCaps(),
    "gpt-4o": ModelCaps(),
    "gpt-4o-mini": ModelCaps(image_base_tokens=2833, image_tile_tokens=5667),
    "gpt-4.1": ModelCaps(),
    "o1": ModelCaps(logprobs=False, max_top_logprobs=0, reasoning=True, note="o-series models return no logprobs"),
    "o3": ModelCaps(logprobs=False, max_top_logprobs=0, reasoning=True, note="o-series models return no logprobs"),
    "o4-mini": ModelCaps(logprobs=False, max_top_logprobs=0, reasoning=True, note="o-series models return no logprobs"),
    "gpt-5": ModelCaps(logprobs=False, max_top_logprobs=0, reasoning=True, note="gpt-5 reasoning models return no logprobs"),
}

AZURE_MAX_TOP_LOGPROBS = 5

REASONING_NAME = re.compile(r"^(o1|o3|o4|gpt-5)([-.]|$)")
"""Model names of OpenAI's reasoning families not in the table (``o3-pro``, ``o4``, ``gpt-5.1``...)."""

REASONING = ModelCaps(logprobs=False, max_top_logprobs=0, reasoning=True, note="reasoning models return no logprobs")
"""The capabilities of a reasoning model the table does not name (or one set ``reasoning=true``)."""

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""The values of ``reasoning_effort``, sent as is: the openai SDK's ``ReasoningEffort`` (3.57) and
vLLM's field (0.32) list these seven; not every model takes every one (``minimal``: gpt-5;
``none``: gpt-5.1 and later; o-series: ``low`` / ``medium`` / ``high``), the server says which."""

REASONING_BUDGETS: dict[str | None, int] = {"none": 1024, "minimal": 2048, "low": 4096, "medium": 8192, "high": 16384, "xhigh": 32768, "max": 32768, None: 8192}
"""Default reasoning tokens added to the answer budget, by ``reasoning_effort`` (``None``: not sent,
the provider's default, which is ``medium``). Generous on purpose: unused tokens cost nothing (only
tokens generated are billed), while a budget that runs out leaves the judge without an answer."""


def reasoning_budget(effort: str | None, budget: int | None = None) -> int:
    """The reasoning tokens given on top of a method's answer budget: ``budget`` when given, else
    the default for ``effort`` (:data:`REASONING_BUDGETS`)."""
    return int(budget) if budget is not None else REASONING_BUDGETS.get(effort, REASONING_BUDGETS[None])


def _match(model: str) -> ModelCaps | None:
    name = model.lower().rsplit("/", 1)[-1]
    if name in _TABLE:
        return _TABLE[name]
    best = None
    for key in _TABLE:
        if name.startswith(key + "-") and (best is None or len(key) > len(best)):
            best = key
    if best is not None:
        return _TABLE[best]
    return REASONING if REASONING_NAME.match(name) else None


def lookup_caps(kind: str, model: str) -> ModelCaps:
    """Capabilities for ``model`` served by ``kind`` (``openai``, ``azure``, ``openai-compatible``).

    Unknown models get optimistic defaults (logprobs with up to 20 alternatives, images): a refusal
    at run time is caught and recorded. Azure caps ``top_logprobs`` at 5.
    """
    caps = _match(model) or ModelCaps()
    if kind == "azure" and caps.max_top_logprobs > AZURE_MAX_TOP_LOGPROBS:
        caps = replace(caps, max_top_logprobs=AZURE_MAX_TOP_LOGPROBS)
    return caps
