"""What the prefix-reuse path must know of each model architecture: one adapter per architecture.

The packed prefix path (:mod:`capjudge.backends.hf.prefix`) is the same for every model: one
forward over the prompt's shared prefix (with the image), then the captions' suffixes packed into
one sequence under a custom attention mask, each token at the position it has in its own prompt.
What differs between architectures is small and lives here:

* which token id marks image positions (``image_token_id``);
* which processor outputs the prefix forward needs besides the token ids (pixel values, and
  ``image_sizes`` for LLaVA-NeXT / OneVision / Mistral 3, ``image_grid_thw`` for Qwen-VL,
  ``pixel_attention_mask`` for Idefics3, ``token_type_ids`` for Gemma 3's bidirectional image
  attention ...): every processor output that is not per-token text goes in;
* the RoPE positions: one axis for most models; three (temporal, height, width) for the Qwen-VL
  family's M-RoPE, where text after the image continues from the image's largest position + 1 on
  all three axes (:class:`MRopeAdapter`);
* whether prefix reuse can be exact at all: PaliGemma's prefix-LM attention lets every prompt
  token, the caption included, attend to the whole prompt, so the part before the caption is not
  a shared prefix (:data:`ADAPTERS` records the reason and the backend falls back to ``generate``).

Sliding-window layers (Gemma 3, Mistral, Qwen2 with ``use_sliding_window``) are not an adapter
matter: :func:`attention_layout` reads them from the text config and the prefix path builds one
mask per layer kind.

A new architecture is one adapter (often the plain :class:`Adapter`) and one entry in
:data:`ADAPTERS`, plus its float64 equality test in ``tests/test_hf_prefix_archs.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Processor outputs with one value per token of the prompt: not image inputs.
_TEXT_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})


class Adapter:
    """The prefix path's view of one architecture; this base class covers every model whose text
    part uses one-axis RoPE positions and whose image inputs are processor outputs passed to the
    forward as they are (LLaVA-1.5, LLaVA-NeXT, LLaVA-OneVision, Idefics3 / SmolVLM, InternVL,
    Mistral 3)."""

    rope_axes = 1
    """Rows of the position ids the text model takes (3 for M-RoPE)."""

    position_inputs: tuple[str, ...] = ()
    """Per-token processor outputs the prefix forward needs from the start of the sequence."""

    unsupported: str | None = None
    """Why prefix reuse cannot be exact on this architecture (None: it can)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def why_not(self, config: Any) -> str | None:
        """Why prefix reuse cannot be exact for this model's configuration (None: it can)."""
        return self.unsupported

    def image_token_id(self, config: Any) -> int:
        """The token id the processor repeats at the image's positions."""
        for name in ("image_token_id", "image_token_index"):
            value = getattr(config, name, None)
            if value is not None:
                return int(value)
        raise AttributeError(f"{type(config).__name__} names no image token (image_token_id)")

    def prefix_inputs(self, encoding: Mapping[str, Any], p: int) -> dict[str, Any]:
        """Keyword arguments of the prefix forward besides ids, mask, positions and cache: the
        image inputs as the processor made them, and the per-token inputs of
        :attr:`position_inputs` for the prefix's first ``p`` tokens."""
        out = {k: v for k, v in encoding.items() if k not in _TEXT_INPUTS}
        for name in self.position_inputs:
            if name in encoding:
                out[name] = encoding[name][:, :p]
        return out

    def prefix_positions(self, net: Any, encoding: Mapping[str, Any], p: int) -> tuple[Any, int]:
        """RoPE position ids of the prefix's ``p`` tokens, shaped as the model takes them
        (``(1, p)``, or ``(3, 1, p)`` for M-RoPE), and the offset of text after the prefix: the
        token at sequence index ``s`` has position ``s + offset`` (on every axis)."""
        import torch

        return torch.arange(p, device=encoding["input_ids"].device).unsqueeze(0), 0

    def positions(self, values: Any) -> Any:
        """Position ids for text tokens at the given positions (a ``(1, n)`` long tensor), in the
        shape the model takes (``(3, 1, n)`` for M-RoPE)."""
        return values if self.rope_axes == 1 else values.unsqueeze(0).expand(self.rope_axes, -1, -1)


class MRopeAdapter(Adapter):
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL: 3-D multimodal RoPE (temporal, height, width).

    Positions come from the model's own ``get_rope_index`` over the prefix (which holds the image
    and ``image_grid_thw`` describes); text after it continues from the largest position + 1,
    the same on all three axes, i.e. at ``s + delta`` for sequence index ``s``.
    """

    rope_axes = 3

    def prefix_positions(self, net: Any, encoding: Mapping[str, Any], p: int) -> tuple[Any, int]:
        """3-D positions of the prefix from ``get_rope_index`` and the text offset after it."""
        import torch

        ids = encoding["input_ids"][:, :p]
        kwargs: dict[str, Any] = {"image_grid_thw": encoding.get("image_grid_thw"), "attention_mask": torch.ones_like(ids)}
        if "mm_token_type_ids" in encoding:
            kwargs["mm_token_type_ids"] = encoding["mm_token_type_ids"][:, :p]
        position_ids, deltas = _inner_model(net).get_rope_index(ids, **kwargs)
        return position_ids, int(deltas.flatten()[0])


class Gemma3Adapter(Adapter):
    """Gemma 3: bidirectional attention among image tokens (inside the prefix: the model builds
    that mask itself from ``token_type_ids`` in the prefix forward), sliding-window layers (the
    packed masks apply the window, see :func:`attention_layout`)."""

    position_inputs = ("token_type_ids",)

    def why_not(self, config: Any) -> str | None:
        """Embedding-style Gemma 3 models attend bidirectionally over the whole text."""
        text = getattr(config, "text_config", config)
        if getattr(text, "use_bidirectional_attention", False):
            return "bidirectional attention over the whole text (use_bidirectional_attention): no prompt prefix is shared"
        return None


class Unsupported(Adapter):
    """An architecture on which prefix reuse cannot be exact; :attr:`unsupported` says why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name)
        self.unsupported = reason


def _inner_model(net: Any) -> Any:
    """The ``*Model`` inside a ``*ForConditionalGeneration`` (which holds ``get_rope_index``)."""
    inner = getattr(net, "model", net)
    return inner if hasattr(inner, "get_rope_index") else net


def text_decoder(net: Any) -> tuple[Any, Any] | None:
    """The language model inside a vision-language model and its output head, for decoding steps
    that feed text tokens only (the wrapper's image merging has nothing to do there); None where
    the wrapper does more to text (a final logit soft-cap or scale) or the parts are not found."""
    text = getattr(net.config, "text_config", net.config)
    if getattr(text, "final_logit_softcapping", None) or getattr(text, "logit_scale", None) not in (None, 1, 1.0):
        return None
    lm, head = getattr(getattr(net, "model", None), "language_model", None), getattr(net, "lm_head", None)
    return None if lm is None or head is None else (lm, head)


_PREFIX_LM = (
    "prefix-LM attention: the whole prompt, caption included, is attended bidirectionally, so the "
    "tokens before the caption depend on it and are not a shared prefix"
)

ADAPTERS: dict[str, Adapter] = {
    "llava": Adapter("LLaVA-1.5"),
    "llava_next": Adapter("LLaVA-NeXT"),
    "llava_onevision": Adapter("LLaVA-OneVision"),
    "idefics3": Adapter("Idefics3"),
    "smolvlm": Adapter("SmolVLM"),
    "internvl": Adapter("InternVL"),
    "mistral3": Adapter("Mistral 3"),
    "qwen2_vl": MRopeAdapter("Qwen2-VL"),
    "qwen2_5_vl": MRopeAdapter("Qwen2.5-VL"),
    "qwen3_vl": MRopeAdapter("Qwen3-VL"),
    "gemma3": Gemma3Adapter("Gemma 3"),
    "paligemma": Unsupported("PaliGemma", _PREFIX_LM),
}
"""Adapters by ``config.model_type``: the single source of truth of which architectures reuse
the prefix (see :func:`prefix_reuse_support`)."""


@dataclass(frozen=True)
class PrefixSupport:
    """Whether an architecture reuses the image prefix, and if not, why."""

    model_type: str
    name: str
    supported: bool
    reason: str = ""

    @property
    def status(self) -> str:
        """``"yes"`` or ``"fallback: <reason>"`` (what result records say)."""
        return "yes" if self.supported else f"fallback: {self.reason}"


def adapter_for(config: Any) -> Adapter:
    """The adapter of a model config (:class:`Unsupported` for an architecture not in :data:`ADAPTERS`)."""
    model_type = str(getattr(config, "model_type", "") or "")
    adapter = ADAPTERS.get(model_type)
    if adapter is None:
        return Unsupported(model_type or "unknown", f"no prefix-reuse adapter for model type {model_type!r}")
    return adapter


def prefix_reuse_support(model_type: str | None = None) -> PrefixSupport | dict[str, PrefixSupport]:
    """Prefix-reuse support of one architecture (``config.model_type``), or of every known one
    when ``model_type`` is None (architecture -> :class:`PrefixSupport`, in :data:`ADAPTERS` order).

    This says what the architecture allows; a given model may still fall back at load time (an
    attention implementation without custom masks, see the backend's log) or for a request."""
    if model_type is None:
        return {m: _support(m, a) for m, a in ADAPTERS.items()}
    adapter = ADAPTERS.get(model_type)
    if adapter is None:
        return PrefixSupport(model_type, model_type, False, f"no prefix-reuse adapter for model type {model_type!r}")
    return _support(model_type, adapter)


def _support(model_type: str, adapter: Adapter) -> PrefixSupport:
    return PrefixSupport(model_type, adapter.name, adapter.unsupported is None, adapter.unsupported or "")


@dataclass(frozen=True)
class AttentionLayout:
    """The attention kinds of a text model's layers: ``windows`` maps each layer kind (the keys
    transformers uses: ``full_attention``, ``sliding_attention``) to its window (None: unbounded).
    With one kind the model takes one 4D mask; with several, a dict of masks by kind."""

    windows: dict[str, int | None]

    @property
    def mapping(self) -> bool:
        """Whether the model needs one mask per layer kind."""
        return len(self.windows) > 1


def attention_layout(text_config: Any) -> AttentionLayout:
    """The layer kinds of a text config and their sliding windows (``layer_types`` when the
    config has them, else one kind for every layer: windowed when ``sliding_window`` is set and
    not switched off by ``use_sliding_window``, as in Mistral)."""
    window = getattr(text_config, "sliding_window", None)
    window = int(window) if window else None
    kinds = getattr(text_config, "layer_types", None)
    if kinds:
        return AttentionLayout({str(k): (window if "sliding" in str(k) else None) for k in dict.fromkeys(kinds)})
    if window and getattr(text_config, "use_sliding_window", True):
        return AttentionLayout({"sliding_attention": window})
    return AttentionLayout({"full_attention": None})
