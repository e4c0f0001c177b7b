"""Continuous batching for long answers on the HF backend: no slot idles while others still decode.

A padded batch of long answers (a thinking judge's reasoning, a description, a list of facts)
waits for its longest answer: with lengths that vary tenfold most rows decode padding. Here the
requests share ``slots`` rows of one key/value buffer per layer
(:class:`~capjudge.backends.hf.slots.SlotCache`): each row holds one request's prompt and answer so
far; every step decodes one token for every busy row (one forward of the busy rows, each at its own
position, an attention mask per row hiding the columns it does not own). When a request stops (end
of sequence, or ``max_new_tokens``), its row is freed and the next queued request takes a row: that
request's prompt is computed alone (batch 1, image included, as a one-request ``generate`` computes
it), its keys and values are copied in and its first token read from that forward. Once the queue
is empty the tail decodes at the batch size it has, not the one it started with.

Rows are kept longest first (finished rows close up, a new request goes to its place by length):
attention is computed in contiguous groups of rows of similar length, each over the columns of its
own longest row (:mod:`capjudge.backends.hf.slot_attention`), so a step reads about each row's own
columns rather than every row as many as the longest answer holds.

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

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from capjudge.backends.base import Completion, ContextLengthError, Request
from capjudge.backends.hf.adapters import adapter_for, attention_layout, text_decoder
from capjudge.backends.hf.genconfig import generation_config_change
from capjudge.backends.hf.graphs import USED as GRAPHS_USED
from capjudge.backends.hf.graphs import GraphSteps, cuda_capture, eager_capture
from capjudge.backends.hf.graphs import mode as graphs_mode
from capjudge.backends.hf.prefix_host import PrefixHost
from capjudge.backends.hf.slot_attention import grouped, plan_groups
from capjudge.backends.hf.slots import SlotCache
from capjudge.backends.hf.stops import rule_reached
from capjudge.core.redact import get_logger

log = get_logger(__name__)

LONG_ANSWER = 128
"""Smallest ``max_new_tokens`` of a request decoded with slot refill (shorter ones: prefix path)."""

USED = "used"
"""``Completion.meta["refill"]`` of an answer decoded with slot refill."""


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

    def __init__(self, host: PrefixHost, slots: int, decode_graphs: str = "auto") -> None:
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
        # Attention in groups of rows of similar length (slot_attention) where the model uses SDPA.
        self.grouping = self.unsupported is None and (getattr(self.text_config, "_attn_implementation", None) or "sdpa") == "sdpa"
        self.forwards = 0
        self.prefills = 0
        self.grouped_calls = 0  # attention calls (layers x steps) computed in several groups
        # Fixed-shape steps replayed as CUDA graphs (graphs.py): on CUDA by default.
        on_cuda = getattr(host.device, "type", str(host.device)) == "cuda"
        self.graphs_mode = graphs_mode(decode_graphs)
        self.use_graphs = self.graphs_mode == "on" or (self.graphs_mode == "auto" and on_cuda)
        self.graph_steps: GraphSteps | None = None  # of the last call (its counters and failure)

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
            slot.logits.append(logits)  # a fresh tensor every step (graph outputs are copied first)
        if token in self.host.eos_ids or len(slot.gen) >= slot.request.config.max_new_tokens or rule_reached(slot.request, slot.gen, self.host.tokenizer):
            slot.done = True

    def _finish(self, slot: _Slot, out: RefillOutcome) -> None:
        torch = self._torch
        cfg = slot.request.config
        logits = torch.stack(slot.logits) if cfg.top_logprobs > 0 and slot.logits else None
        answer = self.host.completion_from_ids(slot.gen, logits, cfg, slot.n_prompt)
        answer.meta["refill"] = USED
        if self.graph_steps is not None:
            failed = self.graph_steps.failed
            answer.meta["decode_graphs"] = GRAPHS_USED if failed is None else f"fallback: {failed}"
        out.answers[slot.index] = answer

    def _start(self, queue: deque[int], requests: Sequence[Request], out: RefillOutcome) -> tuple[_Slot, Any] | None:
        """Prefill queued requests until one needs decoding steps: that one and its prompt's cache
        (None: queue empty)."""
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
            return slot, cache
        return None

    @staticmethod
    def _insert(busy: list[_Slot], kv: SlotCache, slot: _Slot, cache: Any, slots: int, capacity: int) -> None:
        """Put ``slot`` in the row that keeps the rows longest first (later rows move down one)."""
        at = next((k for k, s in enumerate(busy) if s.length < slot.length), len(busy))
        for k in range(len(busy) - 1, at - 1, -1):
            kv.move(k, k + 1, busy[k].length)
        kv.fill(at, cache, slots, max(capacity, slot.n_prompt + slot.request.config.max_new_tokens))
        busy.insert(at, slot)

    def _decode(self, requests: Sequence[Request], mine: list[int], out: RefillOutcome) -> None:
        torch = self._torch
        dev = self.host.device
        queue = deque(mine)
        slots = min(self.slots, len(mine))
        # Columns: room for the longest answer after a prompt (grown when a longer prompt comes).
        capacity = max(requests[i].config.max_new_tokens for i in mine) + 256
        kv = SlotCache(int(getattr(self.text_config, "num_hidden_layers", 0) or 0))
        busy: list[_Slot] = []  # busy[k] decodes in row k; rows longest first
        self.graph_steps = None  # not the last call's: answers finished at their prefill say nothing
        self._refill_rows(busy, kv, queue, requests, slots, capacity, out)
        dtype = self.host.net.get_input_embeddings().weight.dtype

        decoder = text_decoder(self.host.net)

        def forward(ids: Any, mask: Any, positions: Any) -> Any:
            kwargs = {"input_ids": ids, "attention_mask": self._masks(mask), "position_ids": self.adapter.positions(positions), "past_key_values": kv.cache, "use_cache": True}
            if decoder is None:
                return self._float(self.host.net(**kwargs).logits[:, -1])
            lm, head = decoder  # text tokens only: the language model and its head, not the wrapper
            return self._float(head(lm(**kwargs).last_hidden_state[:, -1]))

        if self.use_graphs:
            capture = cuda_capture(torch, dev) if getattr(dev, "type", None) == "cuda" else eager_capture
            self.graph_steps = GraphSteps(torch, kv, slots, forward, dtype, dev, capture, config=self.text_config, grouped=self.grouping)
        groups: tuple[tuple[int, int], ...] = ()
        while busy:
            m = len(busy)
            lengths = [s.length for s in busy]
            logits = None
            if self.graph_steps is not None and self.graph_steps.failed is None:
                logits = self.graph_steps.logits([s.gen[-1] for s in busy], lengths, [s.length + s.offset for s in busy])
                logits = None if logits is None else logits.clone()  # the graph rewrites its output
            if logits is None:
                if not groups:  # rows changed: plan again
                    groups = plan_groups(lengths) if self.grouping else ((0, m),)
                staged = torch.tensor([lengths, [s.length + s.offset for s in busy], [s.gen[-1] for s in busy]], device=dev)
                columns, positions, ids = staged[0], staged[1, :, None], staged[2, :, None]
                width = max(lengths) + 1
                mask = kv.mask(columns, width, dtype)
                kv.step(m, columns, width)
                with grouped(self.text_config, groups, lengths) as plan:
                    logits = forward(ids, mask, positions)
                self.grouped_calls += plan.calls
            self.forwards += 1
            for s, row, token in zip(busy, logits.unbind(0), logits.argmax(-1).tolist()):
                s.length += 1
                self._push(s, row, token)
            if any(s.done for s in busy):
                self._drop_finished(busy, kv, out)
                self._refill_rows(busy, kv, queue, requests, slots, capacity, out)
                groups = ()
        if self.graph_steps is not None:
            self.graph_steps.release()  # the buffers are the call's (counters stay for the record)

    def _drop_finished(self, busy: list[_Slot], kv: SlotCache, out: RefillOutcome) -> None:
        """Answer the finished rows and close the gaps (the others move up, keeping their order)."""
        kept = 0
        for k, s in enumerate(list(busy)):
            if s.done:
                self._finish(s, out)
                continue
            if k != kept:
                kv.move(k, kept, s.length)
            busy[kept] = s
            kept += 1
        del busy[kept:]

    def _refill_rows(self, busy: list[_Slot], kv: SlotCache, queue: deque[int], requests: Sequence[Request], slots: int, capacity: int, out: RefillOutcome) -> None:
        """Fill free rows from the queue, each new request in its place by length."""
        while len(busy) < slots:
            got = self._start(queue, requests, out)
            if got is None:
                return
            self._insert(busy, kv, got[0], got[1], slots, capacity)

    def _masks(self, mask: Any) -> Any:
        """The one mask, or one per layer kind where the model maps layers to kinds."""
        return dict.fromkeys(self.layout.windows, mask) if self.layout.mapping else mask
