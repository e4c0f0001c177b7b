"""The key/value buffers of slot refill (:mod:`capjudge.backends.hf.refill`): one row per slot.

:class:`SlotCache` holds, per attention layer, a ``(slots, heads, columns, dim)`` buffer in which
row ``r`` holds the prompt and answer so far of the request decoded in slot ``r``. Each decoding
step writes every busy row's new key and value at that row's own column. Rows are kept in order of
length, longest first (the refiller removes finished rows and inserts new ones at their place), so
that the attention of rows of similar length can be computed in contiguous groups
(:mod:`capjudge.backends.hf.slot_attention`).
"""

from __future__ import annotations

import functools
from typing import Any

from capjudge.backends.hf.kv import buffer_key


@functools.lru_cache(maxsize=1)
def _slot_layer_class() -> Any:
    """A transformers cache layer over a ``(slots, heads, columns, dim)`` buffer in which every row
    writes its new key at its own column (defined on first use: transformers is optional)."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):  # type: ignore[misc]
        """Keys and values of one attention layer, one row per slot."""

        def __init__(self) -> None:
            super().__init__()
            self.buf_k: Any = None
            self.buf_v: Any = None
            self.rows = 0  # rows (0..rows-1) in the next forward
            self.row_index: Any = None  # arange(rows)
            self.columns: Any = None  # (rows,) long: the column each row's new key goes to
            self.width = 0  # columns handed to attention

        def put(self, slot: int, keys: Any, values: Any, capacity: int) -> None:
            """Write a prompt's keys and values ``(1, heads, n, dim)`` at the start of ``slot``."""
            n = keys.shape[-2]
            b = self.buf_k
            if (
                b is None
                or b.shape[1] != keys.shape[1]
                or b.shape[-1] != keys.shape[-1]
                or b.dtype != keys.dtype
                or b.device != keys.device
            ):
                raise RuntimeError("slot buffers not allocated for these keys")
            if b.shape[-2] < capacity:
                self.grow(capacity)
            self.buf_k[slot, :, :n] = keys[0]
            self.buf_v[slot, :, :n] = values[0]

        def allocate(self, slots: int, like: Any, capacity: int) -> None:
            """Empty buffers of ``slots`` rows and ``capacity`` columns shaped like ``like``."""
            shape = (slots, like.shape[1], capacity, like.shape[-1])
            self.buf_k, self.buf_v = like.new_zeros(shape), like.new_zeros(shape)

        def grow(self, capacity: int) -> None:
            """At least ``capacity`` columns (geometric growth), keeping what is written."""
            old = self.buf_k.shape[-2]
            shape = (*self.buf_k.shape[:2], max(capacity, old * 3 // 2), self.buf_k.shape[-1])
            new_k, new_v = self.buf_k.new_zeros(shape), self.buf_v.new_zeros(shape)
            new_k[:, :, :old] = self.buf_k
            new_v[:, :, :old] = self.buf_v
            self.buf_k, self.buf_v = new_k, new_v

        def move(self, src: int, dst: int, n: int) -> None:
            """Copy the first ``n`` columns of slot ``src`` into slot ``dst``."""
            self.buf_k[dst, :, :n] = self.buf_k[src, :, :n]
            self.buf_v[dst, :, :n] = self.buf_v[src, :, :n]

        def update(
            self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
        ) -> tuple[Any, Any]:
            """Write each row's new key and value at its column; return the rows' first ``width``
            columns (the mask hides those a row does not own)."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.buf_k[self.row_index, :, self.columns] = key_states[:, :, 0]
            self.buf_v[self.row_index, :, self.columns] = value_states[:, :, 0]
            self.keys = self.buf_k[: self.rows, :, : self.width]
            self.values = self.buf_v[: self.rows, :, : self.width]
            return self.keys, self.values

    return SlotLayer


class SlotCache:
    """One slot layer per attention layer, and the transformers ``Cache`` over them."""

    def __init__(self, n_layers: int) -> None:
        from transformers.cache_utils import Cache

        cls = _slot_layer_class()
        self.layers = [cls() for _ in range(n_layers)]
        self.cache = Cache(layers=list(self.layers))
        self.slots = 0

    @property
    def capacity(self) -> int:
        """Columns each row can hold without growing (0 before the first fill)."""
        first = self.layers[0].buf_k if self.layers else None
        return 0 if first is None else int(first.shape[-2])

    def fill(self, slot: int, prompt_cache: Any, slots: int, capacity: int) -> None:
        """Copy a batch-1 ``DynamicCache`` (a prompt's forward) into ``slot``."""
        for layer, src in zip(self.layers, prompt_cache.layers, strict=True):
            if layer.buf_k is None:
                layer.allocate(slots, src.keys, capacity)
            layer.put(slot, src.keys, src.values, capacity)
        self.slots = slots

    def move(self, src: int, dst: int, n: int) -> None:
        """Slot ``src``'s first ``n`` columns into slot ``dst``."""
        for layer in self.layers:
            layer.move(src, dst, n)

    def buffers(self) -> tuple[int, ...]:
        """The buffers' addresses and sizes (:func:`~capjudge.backends.hf.kv.buffer_key`)."""
        return buffer_key(self.layers)

    @staticmethod
    def mask(columns: Any, width: int, dtype: Any) -> Any:
        """Additive attention mask ``(rows, 1, 1, width)``: row ``r`` sees its columns
        ``0..columns[r]`` (its new key included), none after."""
        import torch

        mask = torch.full((columns.shape[0], 1, 1, width), torch.finfo(dtype).min, dtype=dtype, device=columns.device)
        return mask.masked_fill_(torch.arange(width, device=columns.device)[None, None, None, :] <= columns[:, None, None, None], 0.0)

    def step(self, rows: int, columns: Any, width: int, index: Any = None) -> Any:
        """The cache for a forward of ``rows`` rows writing at ``columns`` (``index``: the rows'
        ``arange``, made here when not given)."""
        import torch

        if index is None:
            index = torch.arange(rows, device=columns.device)
        for layer in self.layers:
            layer.rows, layer.columns, layer.width, layer.row_index = rows, columns, width, index
        return self.cache
