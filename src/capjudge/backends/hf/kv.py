"""An in-place key/value cache for the HF backend's prefix path.

transformers' ``DynamicCache`` concatenates on every forward, so each forward copies the whole
cache: for the packed prefix path (a 680-token image prefix, then the suffixes, then a few decode
steps) that was ~8% of the time of judging 5 captions on a CPU. :class:`KVArena` keeps one buffer
per layer (batch 1), grows it geometrically, writes each forward's new keys and values in place
and hands attention a view of the filled slots.

Slots are never moved, so what a truncation leaves in place stays valid: the prefix path keeps
the tokens before the image (system sentence, ``USER:``) at the start of the arena across images
and the image prefix across chunks of one image, and only overwrites what lies after them.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=1)
def _layer_class() -> Any:
    """A transformers cache layer over a growable buffer (defined on first use: transformers is an
    optional dependency)."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):  # type: ignore[misc]
        """Keys and values of one attention layer in a buffer of ``capacity`` slots."""

        def __init__(self) -> None:
            super().__init__()
            self.buf_k: Any = None
            self.buf_v: Any = None
            self.length = 0
            self.peak = 0  # most slots filled since the arena's last trim
            self.write_at: Any = None  # fixed-shape steps: the slots (a tensor) the new keys go to
            self.view = 0  # ... and the slots handed to attention

        def truncate(self, length: int) -> None:
            """Keep the first ``length`` slots (at most those filled); later writes go after them."""
            self.length = max(0, min(int(length), self.length))
            if self.buf_k is not None:
                self.keys = self.buf_k[:, :, : self.length]
                self.values = self.buf_v[:, :, : self.length]

        def _fits(self, like: Any) -> bool:
            b = self.buf_k
            return b is not None and b.shape[:2] == like.shape[:2] and b.shape[-1] == like.shape[-1] and b.dtype == like.dtype and b.device == like.device

        def grow(self, like: Any, needed: int) -> None:
            """Buffers shaped like ``like`` with room for ``needed`` slots (geometric growth), the
            filled slots copied over."""
            old = 0 if self.buf_k is None else self.buf_k.shape[-2]
            shape = (*like.shape[:2], max(needed, old * 3 // 2), like.shape[-1])
            new_k, new_v = like.new_empty(shape), like.new_empty(shape)
            if self.length:
                new_k[:, :, : self.length] = self.buf_k[:, :, : self.length]
                new_v[:, :, : self.length] = self.buf_v[:, :, : self.length]
            self.buf_k, self.buf_v = new_k, new_v

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            """Write the new keys and values after the kept slots; return views of all of them."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            if self.write_at is not None:  # a fixed-shape step (graphs.PackedSteps): no growth
                self.buf_k[:, :, self.write_at] = key_states
                self.buf_v[:, :, self.write_at] = value_states
                self.keys = self.buf_k[:, :, : self.view]
                self.values = self.buf_v[:, :, : self.view]
                return self.keys, self.values
            if not self._fits(key_states):  # first use, or another batch size, width or dtype
                self.buf_k = self.buf_v = None
                self.length = 0
            n, m = self.length, key_states.shape[-2]
            if self.buf_k is None or self.buf_k.shape[-2] < n + m:
                self.grow(key_states, n + m)
            self.buf_k[:, :, n : n + m] = key_states
            self.buf_v[:, :, n : n + m] = value_states
            self.length = n + m
            self.peak = max(self.peak, self.length)
            self.keys = self.buf_k[:, :, : self.length]
            self.values = self.buf_v[:, :, : self.length]
            return self.keys, self.values

    return BufferLayer


def buffer_key(layers: Any) -> tuple[int, ...]:
    """Addresses and sizes of the layers' key/value buffers (those allocated): what a captured
    graph reads, compared before it is replayed (a new buffer may reuse an old address)."""
    return tuple(x for layer in layers if layer.buf_k is not None for x in (layer.buf_k.data_ptr(), layer.buf_v.data_ptr(), layer.buf_k.shape[-2]))


class KVArena:
    """Per-layer key/value buffers (batch 1), reused from one forward, group and call to the next."""

    def __init__(self, n_layers: int) -> None:
        self.n_layers = int(n_layers)
        self._layers: list[Any] = []

    def cache(self, length: int) -> Any:
        """A transformers ``Cache`` over the arena, its first ``length`` slots kept."""
        from transformers.cache_utils import Cache

        if not self._layers:
            cls = _layer_class()
            self._layers = [cls() for _ in range(self.n_layers)]
        for layer in self._layers:
            layer.truncate(length)
        return Cache(layers=list(self._layers))

    def reserve(self, slots: int) -> None:
        """Room for at least ``slots`` slots in every layer's buffers (kept slots copied), the
        slots after the filled ones zeroed: a fixed-shape step reads them (masked, but a masked
        NaN of never-written memory would still poison the attention sum)."""
        for layer in self._layers:
            if layer.buf_k is None:
                continue
            if layer.buf_k.shape[-2] < slots:
                layer.grow(layer.buf_k, slots)
            layer.buf_k[:, :, layer.length :].zero_()
            layer.buf_v[:, :, layer.length :].zero_()

    def fixed(self, write_at: Any, view: int) -> None:
        """The next forwards write their keys at the slots ``write_at`` (a tensor) and attend to
        the first ``view`` slots; ``fixed(None, 0)`` returns to appending."""
        for layer in self._layers:
            layer.write_at, layer.view = write_at, view

    def set_length(self, length: int) -> None:
        """Slots filled, after fixed-shape forwards wrote up to ``length``."""
        for layer in self._layers:
            layer.length = int(length)
            layer.peak = max(layer.peak, layer.length)

    def buffers(self) -> tuple[int, ...]:
        """The buffers' addresses and sizes (a fixed-shape graph reads them: it must be captured
        again after they move or grow, even where a new buffer reuses an old address)."""
        return buffer_key(self._layers)

    @property
    def length(self) -> int:
        """Slots filled (the same in every layer after a complete forward)."""
        return min((layer.length for layer in self._layers), default=0)

    @property
    def capacity(self) -> int:
        """Slots the buffers can hold without growing."""
        return max((layer.buf_k.shape[-2] for layer in self._layers if layer.buf_k is not None), default=0)

    def trim(self, factor: float = 2.0, slack: int = 1024) -> bool:
        """Free the buffers when they hold over ``factor`` times the most slots used since the last
        trim (plus ``slack``): one long-answer group must not pin its memory for a whole run. An
        arena unused since the last trim is kept. Returns whether the buffers were freed."""
        peak = max((layer.peak for layer in self._layers), default=0)
        if not peak:  # unused since the last trim: nothing to judge by
            return False
        for layer in self._layers:
            layer.peak = 0
        if self.capacity > factor * peak + slack:
            self.release()
            return True
        return False

    def release(self) -> None:
        """Free the buffers."""
        self._layers = []
