"""What the HF prefix path and its backend exchange: the host interface the path reaches the backend
through (:class:`PrefixHost`), what a run of it returns (:class:`PrefixOutcome`) and counts
(:class:`PrefixStats`), and which architectures it runs for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from capjudge.backends.base import Completion, GenerationConfig, Message, Request
from capjudge.backends.hf.adapters import ADAPTERS

PREFIX_REUSE_MODEL_TYPES = frozenset(m for m, a in ADAPTERS.items() if a.unsupported is None)
"""HF ``model_type`` values whose prompts the fast path handles (its float64 equality with plain
decoding is tested for each); every other architecture falls back to the backend's batched
``generate``. Derived from :data:`capjudge.backends.hf.adapters.ADAPTERS` (with the reasons:
:func:`prefix_reuse_support`); the "Verified judges" table of docs/backends.md is checked against it."""


def supports_prefix_reuse(model_type: str) -> bool:
    """Whether the prefix-reuse path runs for models of this HF ``model_type``."""
    return model_type in PREFIX_REUSE_MODEL_TYPES


USED = "used"
"""``Completion.meta["prefix_reuse"]`` of an answer computed on the fast path."""


class PrefixHost(Protocol):
    """What the prefix path needs of the backend that owns the model (``HFBackend`` provides it)."""

    model: str
    net: Any
    processor: Any
    tokenizer: Any
    prompt_tokenizer: Any
    """Tokenizes :meth:`format_prompt`'s text as :meth:`encode` does (message text never special)."""
    device: Any
    eos_ids: set[int]

    def format_prompt(self, messages: Sequence[Message]) -> str:
        """The prompt text of a conversation, image placeholders unexpanded, as
        :attr:`prompt_tokenizer` reads it."""
        ...

    def encode(self, requests: Sequence[Request]) -> dict[str, Any]:
        """The processor's tensors for requests (token ids, mask, image inputs) on the model's device."""
        ...

    def check_length(self, n_prompt: int, cfg: GenerationConfig, image_tokens: int | None = None) -> None:
        """Raise :class:`ContextLengthError` (with the counts) when a prompt of ``n_prompt`` tokens
        (``image_tokens`` of them the image's) plus its new tokens exceed the context."""
        ...

    def completion_from_ids(self, gen_ids: list[int], logits: Any, cfg: GenerationConfig, n_prompt: int) -> Completion:
        """The answer for generated ids and, optionally, the logits of each step."""
        ...



@dataclass
class PrefixStats:
    """Counters of the fast path (for tests and benchmarks)."""

    groups: int = 0
    prefix_forwards: int = 0
    rows: int = 0
    forwards: int = 0
    draft_tokens_accepted: int = 0
    head_reused: int = 0

    def reset(self) -> None:
        """Set every counter to zero."""
        self.groups = self.prefix_forwards = self.rows = self.forwards = self.draft_tokens_accepted = self.head_reused = 0


@dataclass
class PrefixOutcome:
    """What :meth:`PrefixReuser.run` did with a batch: ``answers`` of the requests it answered, and
    for the others why not (``"fallback: ..."`` or ``"not used: ..."``), by request index."""

    answers: dict[int, Completion | BaseException] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)
