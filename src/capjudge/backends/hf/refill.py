"""Continuous batching for long answers on the HF backend: no slot idles while others still decode.

A padded batch of long answers (a thinking judge's reasoning, a description, a list of facts)
waits for its longest answer: with lengths that vary tenfold most rows decode padding. Here the
requests share ``slots`` rows of one key/value buffer per layer (:class:`SlotCache`): each slot
holds one request's prompt and answer so far; every step decodes one token for every busy slot
(one forward of batch ``slots``, each row at its own position, an attention mask per row hiding
the columns it does not own). When a request stops (end of sequence, or ``max_new_tokens``), its slot is reset and refilled with the
next queued request: that request's prompt is computed alone (batch 1, image included, as a
one-request ``generate`` computes it), its keys and values are copied into the slot and its first
token read from that forward. Once the queue is empty, the last busy slot moves into a freed one,
so the tail decodes at the batch size it has, not the one it started with.

Tokens and per-step logits are those of one-request greedy decoding (float64 on CPU to 1e-9,
``tests/test_hf_refill.py``). Memory is bounded by ``slots`` rows of (longest prompt + longest
answer) key/value columns, ``slots`` being the backend's ``batch_size``.

Requests it takes: greedy, one answer, at most one image, ``max_new_tokens`` of at least
:data:`LONG_ANSWER` (short-answer methods keep the packed prefix path of
:mod:`capjudge.backends.hf.prefix`). Architectures whose attention the packed path cannot mask
(see :meth:`capjudge.backends.hf.adapters.Adapter.why_not`), attention implementations without
custom 4D masks, sliding-window layers and generation settings that change greedy decoding fall
back to the batched ``generate`` (noted in ``Completion.meta["refill"]``).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from capjudge.backends.base import Completion, ContextLengthError, Request
from capjudge.backends.hf.adapters import adapter_for, attention_layout
from capjudge.backends.hf.prefix import generation_config_change
from capjudge.backends.hf.prefix_host import PrefixHost
from capjudge.backends.hf.stops import rule_reached
from capjudge.core.redact import get_logger

log = get_logger(__name__)

LONG_ANSWER = 128
"""Smallest ``max_new_tokens`` of a request decoded with slot refill (shorter ones: prefix path)."""

USED = "used"
"""``Completion.meta["refill"]`` of an answer decoded with slot refill."""


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
            self.rows = 0  # busy slots (rows 0..rows-1) in the next forward
            self.row_index: Any = None  # arange(rows), made once per step
            self.columns: Any = None  # (rows,) long: the column each row's new key goes to
            self.width = 0  # columns handed to attention

        def put(self, slot: int, keys: Any, values: Any, capacity: int) -> None:
            """Write a prompt's keys and values ``(1, heads, n, dim)`` at the start of ``slot``."""
            n = keys.shape[-2]
            b = self.buf_k
            if b is None or b.shape[1] != keys.shape[1] or b.shape[-1] != keys.shape[-1] or b.dtype != keys.dtype or b.device != keys.device:
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

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            """Write each row's new key and value at its column; return the busy rows' first
            ``width`` columns (the mask hides those a row does not own)."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.buf_k[self.row_index, :, self.columns] = key_states[:, :, 0]
            self.buf_v[self.row_index, :, self.columns] = value_states[:, :, 0]
            self.keys = self.buf_k[: self.rows, :, : self.width]
            self.values = self.buf_v[: self.rows, :, : self.width]
            return self.keys, self.values

    return SlotLayer


class SlotCache:
    """One :func:`_slot_layer_class` layer per attention layer, and the transformers ``Cache`` over them."""

    def __init__(self, n_layers: int) -> None:
        from transformers.cache_utils import Cache

        cls = _slot_layer_class()
        self.layers = [cls() for _ in range(n_layers)]
        self.cache = Cache(layers=list(self.layers))
        self.slots = 0

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

    def step(self, rows: int, columns: Any, width: int) -> Any:
        """The cache for a forward of ``rows`` busy slots writing at ``columns``."""
        import torch

        index = torch.arange(rows, device=columns.device)
        for layer in self.layers:
            layer.rows, layer.columns, layer.width, layer.row_index = rows, columns, width, index
        return self.cache


@dataclass
class _Slot:
    """A request while it is decoded in a slot."""

    index: int
    request: Request
    n_prompt: int
    offset: int  # RoPE: the token at sequence index s has position s + offset
    length: int  # columns filled (prompt + tokens fed back so far)
    gen: list[int] = field(default_factory=list)
    logits: list[Any] = field(default_factory=list)
    done: bool = False


@dataclass
class RefillOutcome:
    """Answers by request index, and for requests it left to ``generate`` why (``"fallback: ..."``)."""

    answers: dict[int, Completion | BaseException] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)


class Refiller:
    """Decodes long greedy answers in ``slots`` rows refilled from a queue (module doc)."""

    def __init__(self, host: PrefixHost, slots: int) -> None:
        import torch

        self.host = host
        self._torch = torch
        self.slots = max(1, int(slots))
        config = host.net.config
        self.text_config = getattr(config, "text_config", config)
        self.adapter = adapter_for(config)
        self.layout = attention_layout(self.text_config)
        self.unsupported = self._why_not()
        if self.unsupported:
            log.info("slot refill off for %s: %s; long answers use batched generate", host.model, self.unsupported)
        self.forwards = 0
        self.prefills = 0

    def _why_not(self) -> str | None:
        reason = self.adapter.why_not(self.host.net.config)
        if reason:
            return reason
        attn = getattr(self.text_config, "_attn_implementation", None) or "sdpa"
        if attn not in ("sdpa", "eager"):
            return f"attention implementation {attn!r} takes no custom 4D attention mask (use sdpa or eager)"
        if any(w is not None for w in self.layout.windows.values()):
            return "sliding-window layers"
        return None

    @staticmethod
    def takes(request: Request) -> bool:
        """Greedy, one answer, at most one image, ``max_new_tokens`` of at least :data:`LONG_ANSWER`."""
        cfg = request.config
        return cfg.deterministic and cfg.n == 1 and cfg.max_new_tokens >= LONG_ANSWER and len(request.images) <= 1

    def run(self, requests: Sequence[Request]) -> RefillOutcome:
        """Answer the requests :meth:`takes` (all at once, ``slots`` at a time)."""
        out = RefillOutcome()
        mine = [i for i, r in enumerate(requests) if self.takes(r)]
        if not mine:
            return out
        blocker = self.unsupported or generation_config_change(self.host.net)
        if blocker:
            out.notes.update(dict.fromkeys(mine, f"fallback: {blocker}"))
            return out
        try:
            with self._torch.inference_mode():
                self._decode(requests, mine, out)
        except Exception as exc:  # noqa: BLE001 - the batched path answers them again
            log.warning("slot refill failed (%s: %s); using batched generate", type(exc).__name__, exc)
            note = f"fallback: slot refill failed ({type(exc).__name__}: {str(exc)[:200]})"
            for i in mine:
                if not isinstance(out.answers.get(i), BaseException):
                    out.answers.pop(i, None)
                    out.notes[i] = note
        return out

    # ------------------------------------------------------------------ internals
    def _prefill(self, index: int, request: Request) -> tuple[_Slot, Any, Any] | ContextLengthError:
        """Compute one request's prompt alone; its slot state, batch-1 cache and last logits."""
        from transformers.cache_utils import DynamicCache

        host, torch = self.host, self._torch
        enc = host.encode([request])
        ids = enc["input_ids"]
        n = int(ids.shape[1])
        image_id = self.adapter.image_token_id(host.net.config)
        n_img = int((ids[0] == image_id).sum()) if isinstance(image_id, int) else 0
        try:
            host.check_length(n, request.config, n_img)
        except ContextLengthError as exc:
            return exc
        positions, offset = self.adapter.prefix_positions(host.net, enc, n)
        cache = DynamicCache()
        out = host.net(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **self.adapter.prefix_inputs(enc, n),
        )
        self.prefills += 1
        slot = _Slot(index=index, request=request, n_prompt=n, offset=offset, length=n)
        return slot, cache, self._float(out.logits[0, -1])

    def _float(self, logits: Any) -> Any:
        return logits.to(self._torch.promote_types(logits.dtype, self._torch.float32))

    def _push(self, slot: _Slot, logits: Any, token: int | None = None) -> None:
        """Append the greedy token of ``logits`` (one step; ``token``: its argmax when already
        known) and decide whether the slot is done."""
        token = int(logits.argmax()) if token is None else token
        slot.gen.append(token)
        if slot.request.config.top_logprobs > 0:
            slot.logits.append(logits.clone())
        if token in self.host.eos_ids or len(slot.gen) >= slot.request.config.max_new_tokens or rule_reached(slot.request, slot.gen, self.host.tokenizer):
            slot.done = True

    def _finish(self, slot: _Slot, out: RefillOutcome) -> None:
        torch = self._torch
        cfg = slot.request.config
        logits = torch.stack(slot.logits) if cfg.top_logprobs > 0 and slot.logits else None
        answer = self.host.completion_from_ids(slot.gen, logits, cfg, slot.n_prompt)
        answer.meta["refill"] = USED
        out.answers[slot.index] = answer

    def _start(self, queue: deque[int], requests: Sequence[Request], kv: SlotCache, at: int, slots: int, capacity: int, out: RefillOutcome) -> _Slot | None:
        """Prefill queued requests into slot ``at`` until one needs decoding steps (None: queue empty)."""
        while queue:
            i = queue.popleft()
            got = self._prefill(i, requests[i])
            if isinstance(got, ContextLengthError):
                out.answers[i] = got
                continue
            slot, cache, logits = got
            self._push(slot, logits)
            if slot.done:
                self._finish(slot, out)
                continue
            need = slot.n_prompt + slot.request.config.max_new_tokens
            kv.fill(at, cache, slots, max(capacity, need))
            return slot
        return None

    def _decode(self, requests: Sequence[Request], mine: list[int], out: RefillOutcome) -> None:
        torch = self._torch
        dev = self.host.device
        queue = deque(mine)
        slots = min(self.slots, len(mine))
        # Columns: room for the longest answer after a prompt (grown when a longer prompt comes).
        capacity = max(requests[i].config.max_new_tokens for i in mine) + 256
        kv = SlotCache(int(getattr(self.text_config, "num_hidden_layers", 0) or 0))
        busy: list[_Slot] = []
        for at in range(slots):
            s = self._start(queue, requests, kv, at, slots, capacity, out)
            if s is None:
                break
            busy.append(s)
        dtype = self.host.net.get_input_embeddings().weight.dtype
        lowest = torch.finfo(dtype).min
        while busy:
            m = len(busy)
            lengths = torch.tensor([s.length for s in busy], device=dev)
            width = int(lengths.max()) + 1
            mask = torch.full((m, 1, 1, width), lowest, dtype=dtype, device=dev)
            mask.masked_fill_(torch.arange(width, device=dev)[None, None, None, :] <= lengths[:, None, None, None], 0.0)
            positions = torch.tensor([[s.length + s.offset] for s in busy], device=dev)
            ids = torch.tensor([[s.gen[-1]] for s in busy], device=dev)
            cache = kv.step(m, lengths, width)
            logits = self.host.net(
                input_ids=ids,
                attention_mask=self._masks(mask),
                position_ids=self.adapter.positions(positions),
                past_key_values=cache,
                use_cache=True,
            ).logits
            self.forwards += 1
            logits = self._float(logits[:, -1])
            for k, (s, token) in enumerate(zip(busy, logits.argmax(-1).tolist())):
                s.length += 1
                self._push(s, logits[k], token)
            at = 0
            while at < len(busy):
                s = busy[at]
                if not s.done:
                    at += 1
                    continue
                self._finish(s, out)
                nxt = self._start(queue, requests, kv, at, slots, capacity, out)
                if nxt is not None:
                    busy[at] = nxt
                    at += 1
                    continue
                last = busy.pop()  # queue empty: the last busy slot moves into this one
                if last is not s:  # examined again at ``at`` (it may have stopped too)
                    kv.move(len(busy), at, last.length)
                    busy[at] = last

    def _masks(self, mask: Any) -> Any:
        """The one mask, or one per layer kind where the model maps layers to kinds."""
        return dict.fromkeys(self.layout.windows, mask) if self.layout.mapping else mask
