"""Prefix reuse for the HF backend: judge K captions of one image at about one image prefill.

The prompts of the captions of one image share a long prefix (system sentence, 576 image tokens,
the instructions up to the caption). :class:`PrefixReuser` computes that prefix's KV cache once
(batch 1) and runs the K suffixes after it *packed*: one sequence, still batch 1, in which a
custom 4D attention mask lets each suffix see the shared prefix and its own earlier tokens only,
each token with its own RoPE position. Then it decodes greedily the same way, one new token per
unfinished row per step. No padding is computed and the prefix cache is never copied per row
(the earlier layout, a batch of K rows each holding a copy of the prefix cache, spent ~1.6x the
time on the suffixes at K = 5 and held K copies of the cache in memory).

Layout of one chunk of rows in the (batch 1) KV cache, slots left to right::

    [ shared prefix (P) | suffix_1 + draft | suffix_2 + draft | ... ] [ step 1: one token per
    unfinished row ] [ step 2 ... ]

Every slot after the prefix has an owner row; a query sees the prefix and the slots its own row
owns (causally). Rejected draft slots get no owner and are seen by no one.

Answer drafts: judge answers of one run share their first tokens (FLEUR: ``0.``). The longest
common prefix of the last chunk's greedy answers is appended to every suffix as a draft and checked
against the model's own greedy choice at each position, as in speculative decoding: a draft token
counts only where it equals the argmax at the step before, so the answer and the per-step
probabilities are those of plain greedy decoding. For FLEUR this yields the digit distribution of
the first decimal from the suffix forward itself; an answer that is not ``0.x`` just rejects the
draft at its first differing token and decodes on as usual.

What differs between architectures (image token, image inputs, 1-D or M-RoPE positions) comes
from :mod:`capjudge.backends.hf.adapters`; sliding-window layers get one mask per layer kind with
the window applied. The path reaches the backend only through :class:`PrefixHost`
(:mod:`capjudge.backends.hf.prefix_host`, with what a run returns and counts).

Requests the fast path does not cover (several images, sampling, multi-turn, groups of one) are
left to the backend's ordinary batched ``generate`` and marked ``"not used: <why>"``; where it
would apply but cannot (an architecture whose attention makes it inexact, such as PaliGemma's
prefix-LM; attention implementations that take no custom 4D mask, such as FlashAttention-2; a
generation setting it does not reproduce; a group that failed) the fallback is logged and every
answer concerned carries ``"fallback: <why>"`` in ``Completion.meta["prefix_reuse"]`` (the
results' ``details["prefix_reuse"]``); answers of the fast path carry ``"used"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.backends.base import Completion, ContextLengthError, Request
from capjudge.backends.hf.adapters import (
    ADAPTERS,
    PrefixSupport,
    adapter_for,
    attention_layout,
    prefix_reuse_support,
)
from capjudge.backends.hf.genconfig import generation_config_change
from capjudge.backends.hf.graphs import USED as GRAPHS_USED
from capjudge.backends.hf.graphs import PackedSteps, cuda_capture, eager_capture
from capjudge.backends.hf.graphs import mode as graphs_mode
from capjudge.backends.hf.kv import KVArena
from capjudge.backends.hf.prefix_host import (
    PREFIX_REUSE_MODEL_TYPES,
    USED,
    PrefixHost,
    PrefixOutcome,
    PrefixStats,
    supports_prefix_reuse,
)
from capjudge.backends.hf.stops import rule_reached
from capjudge.core.redact import get_logger

__all__ = ["ADAPTERS", "PREFIX_REUSE_MODEL_TYPES", "PrefixHost", "PrefixOutcome", "PrefixReuser", "PrefixStats", "PrefixSupport", "generation_config_change", "prefix_reuse_support", "supports_prefix_reuse"]

log = get_logger(__name__)

MAX_ROWS = 32
"""Rows packed into one sequence after a prefix (larger groups are chunked; the attention mask
grows with the square of a chunk's tokens)."""

MAX_DRAFT = 4
"""Longest answer draft appended to the suffixes."""

HEAD_REUSE_MAX = 1024
"""Longest prefix after the text before the image for which that text's cached keys are reused.
The part computed after a kept head needs an explicit causal mask (its queries start past slot
0), which on CPU sends attention to SDPA's slower masked kernel; past ~1k tokens that costs more
than the few head tokens save (LLaVA-OneVision, 3.9k-token prefix: 3.4 s vs 2.5 s per image)."""

MAX_PACKED_TOKENS = 4096
"""Most suffix and draft tokens packed into one chunk (bounds the attention mask, and with eager
attention the score matrix, whatever the captions' length)."""

@dataclass
class _Row:
    """One request of a chunk while it is decoded."""

    index: int
    request: Request
    suffix: list[int]
    n_prompt: int
    gen: list[int]
    logits: list[Any]
    next_seq: int = 0  # sequence index of the row's next token (its position is next_seq + offset)
    done: bool = False


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs):
            return i
    return n


def _majority_prefix(answers: Sequence[Sequence[int]], limit: int) -> tuple[int, ...]:
    """The longest token prefix (up to ``limit``) that more than half of ``answers`` start with."""
    prefix: list[int] = []
    need = len(answers) // 2 + 1
    pool = list(answers)
    while len(prefix) < limit:
        j = len(prefix)
        counts: dict[int, int] = {}
        for a in pool:
            if len(a) > j:
                counts[a[j]] = counts.get(a[j], 0) + 1
        if not counts:
            break
        tok, n = max(counts.items(), key=lambda kv: kv[1])
        if n < need:
            break
        prefix.append(tok)
        pool = [a for a in pool if len(a) > j and a[j] == tok]
    return tuple(prefix)


class PrefixReuser:
    """Answers groups of single-image greedy requests that share an image from one prefix cache.

    ``host`` is the backend that owns the model (see :class:`PrefixHost`); the architecture's
    adapter is chosen from its model config. ``max_rows`` bounds the rows packed after one prefix
    (larger groups are chunked); ``min_group`` is the smallest group worth a separate prefix pass
    (smaller groups are left to the backend's batched path, which batches across images).
    """

    def __init__(self, host: PrefixHost, *, max_rows: int = MAX_ROWS, min_group: int = 2, decode_graphs: str = "auto") -> None:
        import torch

        self.host = host
        self._torch = torch
        self.max_rows = max(1, int(max_rows))
        self.min_group = max(1, int(min_group))
        self.stats = PrefixStats()
        self.draft: tuple[int, ...] = ()
        config = host.net.config
        self.text_config = getattr(config, "text_config", config)
        self.adapter = adapter_for(config)
        self.layout = attention_layout(self.text_config)
        self.unsupported = self._why_not()
        """Why this model cannot use the fast path (None: it can)."""
        if self.unsupported:
            log.warning("prefix reuse off for %s: %s; every caption is decoded on its own", host.model, self.unsupported)
        self._arena = KVArena(int(getattr(self.text_config, "num_hidden_layers", 0) or 0))
        self._head: tuple[int, ...] = ()  # the tokens whose keys and values open the arena
        # Fixed-shape decoding steps (graphs.PackedSteps) by chunk size: on CUDA by default, for
        # models without sliding-window layers (their masks are built per step on the host).
        graphs = graphs_mode(decode_graphs)
        windowless = all(w is None for w in self.layout.windows.values())
        self.use_graphs = windowless and (graphs == "on" or (graphs == "auto" and getattr(host.device, "type", None) == "cuda"))
        self.packed: dict[int, PackedSteps] = {}
        self._chunk_cache: Any = None
        self._logged: set[str] = set()

    # ------------------------------------------------------------------ eligibility
    def _why_not(self) -> str | None:
        """Why the model cannot take the packed path (None: it can)."""
        reason = self.adapter.why_not(self.host.net.config)
        if reason:
            return reason
        attn = getattr(self.text_config, "_attn_implementation", None) or "sdpa"
        if attn not in ("sdpa", "eager"):  # the packed layout needs a custom 4D attention mask
            return f"attention implementation {attn!r} takes no custom 4D attention mask (use sdpa or eager)"
        odd = [k for k in self.layout.windows if k not in ("full_attention", "sliding_attention")]
        if odd:
            return f"layer kind {odd[0]!r} has no packed mask"
        return None

    def _note(self, reason: str, level: str = "info") -> str:
        """A fallback's note for the records, logged once per reason."""
        if reason not in self._logged:
            self._logged.add(reason)
            getattr(log, level)("prefix reuse: %s; plain generate used", reason)
        return f"fallback: {reason}"

    @staticmethod
    def ineligible(request: Request) -> str | None:
        """Why a request is outside the fast path (None: one image in the first user turn,
        greedy, one answer, no assistant turn)."""
        cfg = request.config
        if not cfg.deterministic:
            return "sampled decoding"
        if cfg.n != 1 or cfg.max_new_tokens < 1:
            return "not one greedy answer"
        if any(m.role == "assistant" for m in request.messages):
            return "multi-turn conversation"
        if len(request.images) != 1:
            return f"{len(request.images)} images"
        return None

    def eligible(self, request: Request) -> bool:
        """One image in the first user turn, greedy, one answer, no assistant turn."""
        return self.ineligible(request) is None

    def plan(self, requests: Sequence[Request], notes: dict[int, str] | None = None) -> list[list[int]]:
        """Indices of the eligible requests grouped by image content (first-seen order); the
        reasons the others are left out go into ``notes``."""
        notes = {} if notes is None else notes
        blocker = self.unsupported
        note = None
        if blocker:
            note = f"fallback: {blocker}"
        else:
            change = generation_config_change(self.host.net)
            if change:
                note = self._note(change)
        if note:
            notes.update(dict.fromkeys(range(len(requests)), note))
            return []
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            why = self.ineligible(r)
            if why:
                notes[i] = f"not used: {why}"
            else:
                groups.setdefault(r.images[0].sha256, []).append(i)
        out = []
        for g in groups.values():
            if len(g) >= self.min_group:
                out.append(g)
            else:
                notes.update(dict.fromkeys(g, "not used: the only greedy request of its image in the batch"))
        return out

    # ------------------------------------------------------------------ public
    def run(self, requests: Sequence[Request]) -> PrefixOutcome:
        """Answer the requests the fast path covers (``outcome.answers``) and say why the others
        were left to the caller (``outcome.notes``).

        A group that fails for any reason is left out of the answers (noted as a fallback), so
        that the caller answers it on the ordinary path, which isolates the failing request.
        """
        outcome = PrefixOutcome()
        for group in self.plan(requests, outcome.notes):
            try:
                answers = self._run_group([requests[i] for i in group])
            except Exception as exc:  # noqa: BLE001 - the ordinary path retries the group
                self.release()  # free the buffers (an out-of-memory error) before the retry
                log.warning("prefix reuse failed for a group of %d (%s: %s); using plain generate", len(group), type(exc).__name__, exc)
                outcome.notes.update(dict.fromkeys(group, f"fallback: the packed path failed ({type(exc).__name__}: {str(exc)[:200]})"))
                continue
            if isinstance(answers, str):
                outcome.notes.update(dict.fromkeys(group, self._note(answers)))
                continue
            for i, a in zip(group, answers):
                if isinstance(a, Completion):
                    a.meta["prefix_reuse"] = USED
                outcome.answers[i] = a
        self._arena.trim()  # buffers grown by an unusually long call are not kept for the next
        return outcome

    # ------------------------------------------------------------------ tokenization
    def _tokenize_group(self, reqs: Sequence[Request]) -> tuple[list[list[int]], dict[str, Any]]:
        """Token ids of every request (as the processor makes them) and the first request's
        encoding (image inputs included), preprocessing the image once where the prompt text
        can be expanded as the processor does (the image placeholder repeated once per image
        token; checked on the first request), else with one processor call per request."""
        host = self.host
        first = host.encode([reqs[0]])
        ids0 = first["input_ids"][0][first["attention_mask"][0].bool()].tolist()
        image_id = self.adapter.image_token_id(host.net.config)
        n_img = ids0.count(image_id)
        token = getattr(host.processor, "image_token", None) or host.tokenizer.convert_ids_to_tokens(image_id)
        tok = host.prompt_tokenizer

        def ids_of(r: Request) -> list[int]:
            text = host.format_prompt(r.messages).replace(token, token * n_img)
            return list(tok(text)["input_ids"])

        if ids_of(reqs[0]) != ids0:  # the processor expands the image otherwise: ask it for each request
            seqs = [ids0]
            for r in reqs[1:]:
                enc = host.encode([r])
                seqs.append(enc["input_ids"][0][enc["attention_mask"][0].bool()].tolist())
        else:
            seqs = [ids0] + [ids_of(r) for r in reqs[1:]]
        return seqs, first

    # ------------------------------------------------------------------ decoding
    def _run_group(self, reqs: Sequence[Request]) -> list[Completion | BaseException] | str:
        """The answers of one image's requests, or why the group cannot take the packed path."""
        host = self.host
        torch = self._torch
        seqs, encoding = self._tokenize_group(reqs)
        answers: list[Completion | BaseException | None] = [None] * len(reqs)
        fits: list[int] = []
        image_id = self.adapter.image_token_id(host.net.config)
        for i, (r, s) in enumerate(zip(reqs, seqs)):
            try:
                host.check_length(len(s), r.config, s.count(image_id))
                fits.append(i)
            except ContextLengthError as exc:
                answers[i] = exc
        if not fits:
            return answers  # type: ignore[return-value]
        if fits[0] != 0:  # the image inputs belong to the first request's encoding
            encoding = host.encode([reqs[fits[0]]])
        p = min(_common_prefix_len([seqs[i] for i in fits]), min(len(seqs[i]) for i in fits) - 1)
        image_at = [j for j, t in enumerate(seqs[fits[0]]) if t == image_id]
        if not image_at:
            return "the prompt holds no image token"
        if p <= image_at[-1]:
            return "the captions' prompts share no prefix that holds the whole image"
        with torch.inference_mode():
            offset = self._prefix_cache(seqs[fits[0]][:p], encoding, image_at[0])
            self.stats.groups += 1
            self.stats.prefix_forwards += 1
            for chunk in self._chunks(fits, [len(seqs[i]) - p for i in fits]):
                rows = [
                    _Row(index=i, request=reqs[i], suffix=seqs[i][p:], n_prompt=len(seqs[i]), gen=[], logits=[])
                    for i in chunk
                ]
                graphs = self._decode_chunk(p, offset, rows)
                for row in rows:
                    cfg = row.request.config
                    logits = torch.stack(row.logits) if cfg.top_logprobs > 0 and row.logits else None
                    answers[row.index] = answer = host.completion_from_ids(row.gen, logits, cfg, row.n_prompt)
                    if graphs:
                        answer.meta["decode_graphs"] = graphs
                self._learn_draft(rows)
        return answers  # type: ignore[return-value]

    def _chunks(self, indices: list[int], suffix_lengths: list[int]) -> list[list[int]]:
        """Consecutive runs of at most ``max_rows`` requests and ``MAX_PACKED_TOKENS`` packed
        tokens (drafts counted at their longest); a run holds at least one request."""
        chunks: list[list[int]] = []
        tokens = 0
        for i, n in zip(indices, suffix_lengths):
            n += MAX_DRAFT
            if not chunks or len(chunks[-1]) >= self.max_rows or tokens + n > MAX_PACKED_TOKENS:
                chunks.append([])
                tokens = 0
            chunks[-1].append(i)
            tokens += n
        return chunks

    def _prefix_cache(self, prefix: list[int], encoding: Mapping[str, Any], first_image: int) -> int:
        """Fill the arena's first ``len(prefix)`` slots with the shared prefix's keys and values;
        returns the RoPE offset of text after the prefix (see ``Adapter.prefix_positions``).

        The tokens before the image (system sentence, ``USER:``) are the same for every image of a
        run: they stay at the start of the arena from the previous group and only the rest (image
        and instructions) is computed, when that rest is at most ``HEAD_REUSE_MAX`` tokens.
        Causal attention makes this exact.
        """
        net = self.host.net
        torch = self._torch
        dev = self.host.device
        p = len(prefix)
        positions, offset = self.adapter.prefix_positions(net, encoding, p)
        head = tuple(prefix[:first_image])
        if p - len(head) > HEAD_REUSE_MAX:
            head = ()  # one forward from slot 0: the causal kernel needs no explicit mask
        start = 0
        if not head:
            self._head = ()  # the prefix below is written from slot 0, over any kept head
        if head and head == self._head:
            self._arena.cache(len(head))
            if self._arena.length == len(head):  # else the buffers were replaced or released
                start = len(head)
                self.stats.head_reused += 1
        if head and not start:
            self._head = ()  # until the head's forward has completed
            ids = torch.tensor([list(head)], device=dev)
            net(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                position_ids=positions[..., : len(head)],
                past_key_values=self._arena.cache(0),
                use_cache=True,
                logits_to_keep=1,
            )
            self._head = head
            start = len(head)
        net(
            input_ids=torch.tensor([prefix[start:]], device=dev),
            attention_mask=torch.ones((1, p), dtype=torch.long, device=dev),
            position_ids=positions[..., start:p],
            past_key_values=self._arena.cache(start),
            use_cache=True,
            logits_to_keep=1,
            **self.adapter.prefix_inputs(encoding, p),
        )
        return offset

    def release(self) -> None:
        """Free the key/value buffers kept between calls."""
        self._arena.release()
        self._head = ()
        for steps in self.packed.values():
            steps.release()

    def _learn_draft(self, rows: Sequence[_Row]) -> None:
        """The longest start shared by more than half of the chunk's answers (end of sequence
        excluded, at most ``MAX_DRAFT`` tokens) becomes the next draft; kept when there is none."""
        eos = self.host.eos_ids
        answers = []
        for row in rows:
            ids = row.gen
            for t, tid in enumerate(ids):
                if tid in eos:
                    ids = ids[:t]
                    break
            answers.append(ids)
        draft = _majority_prefix(answers, MAX_DRAFT)
        if draft:
            self.draft = draft

    def _forward(self, ids: Any, mask: Any, seq: Any, offset: int, cache: Any, keep: Any) -> Any:
        """One forward of packed tokens at sequence indices ``seq`` (a ``(1, n)`` tensor)."""
        self.stats.forwards += 1
        out = self.host.net(
            input_ids=ids,
            attention_mask=mask,
            position_ids=self.adapter.positions(seq + offset),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        logits = out.logits
        return logits.to(self._torch.promote_types(logits.dtype, self._torch.float32))

    def _mask(self, allowed: Any, p: int, q_seq: Any, k_seq: Any) -> Any:
        """Additive 4D attention mask(s) (1, 1, queries, P + slots): every query sees the shared
        prefix, and of the slots after it those ``allowed`` marks; in sliding-window layers only
        keys less than the window behind the query, by sequence index (``q_seq`` of the queries,
        ``k_seq`` of the slots), as a plain forward over the query's own prompt masks them.
        One tensor when every layer is of one kind, else a dict by layer kind."""
        torch = self._torch
        dtype = self.host.net.get_input_embeddings().weight.dtype  # the dtype attention runs in
        lowest = torch.finfo(dtype).min
        base = torch.zeros((1, 1, allowed.shape[0], p + allowed.shape[1]), dtype=dtype, device=allowed.device)
        base[0, 0, :, p:].masked_fill_(~allowed, lowest)
        masks: dict[str, Any] = {}
        for kind, window in self.layout.windows.items():
            if window is None or int(q_seq.max()) < window:  # every key lies inside the window
                masks[kind] = base
                continue
            keys = torch.cat([torch.arange(p, device=allowed.device), k_seq])
            far = (q_seq[:, None] - keys[None, :]) >= window
            masks[kind] = base.masked_fill(far[None, None], lowest)
        return masks if self.layout.mapping else next(iter(masks.values()))

    def _decode_chunk(self, p: int, offset: int, rows: list[_Row]) -> str | None:
        """Suffix forward (with the answer draft) and greedy decoding of one chunk of rows, packed
        into one sequence after the shared prefix (see the module docstring); returns how its
        decoding steps ran where they were fixed-shape steps (``"used"``, ``"fallback: <why>"``)."""
        torch = self._torch
        dev = self.host.device
        b = len(rows)
        draft = list(self.draft)
        nd = len(draft)
        ids: list[int] = []
        seq: list[int] = []  # each slot's index in its own prompt (its position is seq + offset)
        owner: list[int] = []  # the row each slot after the prefix belongs to; -1: seen by no one
        keep: list[int] = []  # slots whose logits are read: the last prompt token and the draft
        for k, row in enumerate(rows):
            tokens = row.suffix + draft
            keep.extend(range(len(ids) + len(tokens) - nd - 1, len(ids) + len(tokens)))
            ids.extend(tokens)
            seq.extend(range(p, p + len(tokens)))
            owner.extend([k] * len(tokens))
        n = len(ids)
        own = torch.tensor(owner, device=dev)
        slot = torch.arange(n, device=dev)
        slot_seq = torch.tensor(seq, device=dev)
        causal_own = (own[:, None] == own[None, :]) & (slot[:, None] >= slot[None, :])
        # Slots past the prefix are overwritten; the prefix itself stays for the next chunk.
        cache = self._arena.cache(p)
        self.stats.rows += b
        logits = self._forward(
            torch.tensor([ids], device=dev),
            self._mask(causal_own, p, slot_seq, slot_seq),
            slot_seq.unsqueeze(0),
            offset,
            cache,
            torch.tensor(keep, device=dev),
        ).view(b, nd + 1, -1)
        greedy = logits.argmax(-1).tolist()
        end = 0
        for k, row in enumerate(rows):
            end += len(row.suffix) + nd
            a = 0
            while a < nd and greedy[k][a] == draft[a]:
                a += 1
            self.stats.draft_tokens_accepted += a
            for j in range(end - nd + a, end):  # rejected draft tokens leave the row's context
                owner[j] = -1
            for j in range(a + 1):
                self._push(row, int(greedy[k][j]), logits[k, j])
                if row.done:
                    break
            row.next_seq = p + len(row.suffix) + a
        active = [k for k, r in enumerate(rows) if not r.done]
        self._chunk_cache = cache  # what the fixed-shape steps' forward runs on
        packed = self._packed_steps(b) if active and self.use_graphs else None
        room = p + len(owner) + b * max((r.request.config.max_new_tokens for r in rows), default=0)
        replays = 0 if packed is None else packed.replays
        while active:
            if packed is not None and packed.failed is None:
                step_owner = [-1 if r.done else k for k, r in enumerate(rows)]
                logits = packed.logits([r.gen[-1] for r in rows], [r.next_seq + offset for r in rows], owner + step_owner, p, room)
                if logits is not None:
                    owner.extend(step_owner)
                    seq.extend(r.next_seq for r in rows)
                    self._take(rows, active, logits)
                    active = [k for k in active if not rows[k].done]
                    continue
            owner.extend(active)
            seq.extend(rows[k].next_seq for k in active)
            own = torch.tensor(owner, device=dev)
            allowed = own[None, :] == torch.tensor(active, device=dev)[:, None]
            q_seq = torch.tensor([rows[k].next_seq for k in active], device=dev)
            logits = self._forward(
                torch.tensor([[rows[k].gen[-1] for k in active]], device=dev),
                self._mask(allowed, p, q_seq, torch.tensor(seq, device=dev)),
                q_seq.unsqueeze(0),
                offset,
                cache,
                0,
            )[0]
            self._take(rows, active, logits, by_row=False)
            active = [k for k in active if not rows[k].done]
        if packed is None or packed.replays == replays and packed.failed is None:
            return None
        return GRAPHS_USED if packed.failed is None else f"fallback: {packed.failed}"

    def _take(self, rows: list[_Row], active: list[int], logits: Any, by_row: bool = True) -> None:
        """One step's greedy token for each active row (``logits`` by row, or by active row)."""
        greedy = logits.argmax(-1).tolist()
        for j, k in enumerate(active):
            at = k if by_row else j
            rows[k].next_seq += 1
            self._push(rows[k], int(greedy[at]), logits[at])

    def _packed_steps(self, b: int) -> PackedSteps:
        """The fixed-shape steps of chunks of ``b`` rows (made once per size)."""
        steps = self.packed.get(b)
        if steps is None:
            torch, dev = self._torch, self.host.device
            net, adapter, layout = self.host.net, self.adapter, self.layout

            def forward(ids: Any, mask: Any, positions: Any) -> Any:
                masks = dict.fromkeys(layout.windows, mask) if layout.mapping else mask
                out = net(input_ids=ids, attention_mask=masks, position_ids=adapter.positions(positions), past_key_values=self._chunk_cache, use_cache=True)
                return out.logits[0].to(torch.promote_types(out.logits.dtype, torch.float32))

            capture = cuda_capture(torch, dev) if getattr(dev, "type", None) == "cuda" else eager_capture
            dtype = net.get_input_embeddings().weight.dtype
            steps = self.packed[b] = PackedSteps(torch, self._arena, b, forward, dtype, dev, capture)
        return steps

    def _push(self, row: _Row, token: int, logits: Any) -> None:
        """Append one greedy token (and its logits when asked for) and mark the row done at the
        end of sequence or at ``max_new_tokens``."""
        row.gen.append(token)
        if row.request.config.top_logprobs > 0:
            row.logits.append(logits.clone())
        if token in self.host.eos_ids or len(row.gen) >= row.request.config.max_new_tokens or rule_reached(row.request, row.gen, self.host.tokenizer):
            row.done = True
