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

Requests the fast path does not cover (several images, sampling, multi-turn, non-LLaVA models,
attention implementations that take no custom 4D mask such as FlashAttention-2, groups of one)
are left to the backend's ordinary batched ``generate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capjudge.backends.base import Completion, ContextLengthError, Request
from capjudge.backends.hf.kv import KVArena
from capjudge.redact import get_logger

if TYPE_CHECKING:  # pragma: no cover
    from capjudge.backends.hf import HFBackend

log = get_logger(__name__)

PREFIX_REUSE_MODEL_TYPES = frozenset({"llava"})
"""HF ``model_type`` values whose prompts the fast path handles (its equality with plain decoding
is tested for each); every other architecture falls back to the backend's batched ``generate``.
The single source for the README's "Verified judges" table (see :func:`supports_prefix_reuse`)."""


def supports_prefix_reuse(model_type: str) -> bool:
    """Whether the prefix-reuse path runs for models of this HF ``model_type``."""
    return model_type in PREFIX_REUSE_MODEL_TYPES


MAX_ROWS = 32
"""Rows packed into one sequence after a prefix (larger groups are chunked; the attention mask
grows with the square of a chunk's tokens)."""

MAX_DRAFT = 4
"""Longest answer draft appended to the suffixes."""

MAX_PACKED_TOKENS = 4096
"""Most suffix and draft tokens packed into one chunk (bounds the attention mask, and with eager
attention the score matrix, whatever the captions' length)."""

# Generation-config fields that leave greedy decoding as the fast path does it (no logits
# processor, stop at an end-of-sequence id or ``max_new_tokens``); the backend's greedy call sets
# do_sample, num_beams and the sampling knobs itself. Any other field that differs from its default
# (a repetition penalty, a length penalty, stop strings, bad words, a watermark, ...) sends the
# request through ``generate``.
_NEUTRAL_GENERATION_FIELDS = frozenset(
    {
        "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
        "max_length", "max_new_tokens", "do_sample", "num_beams", "num_return_sequences",
        "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
        "use_cache", "cache_implementation", "output_scores", "output_logits", "return_dict_in_generate",
        "output_attentions", "output_hidden_states", "transformers_version", "_from_model_config",
    }
)  # fmt: skip


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
class _Row:
    """One request of a chunk while it is decoded."""

    index: int
    request: Request
    suffix: list[int]
    n_prompt: int
    gen: list[int]
    logits: list[Any]
    next_pos: int = 0
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

    ``max_rows`` bounds the rows packed after one prefix (larger groups are chunked);
    ``min_group`` is the smallest group worth a separate prefix pass (smaller groups are left to the
    backend's batched path, which batches across images).
    """

    def __init__(self, backend: HFBackend, *, max_rows: int = MAX_ROWS, min_group: int = 2) -> None:
        self.backend = backend
        self.max_rows = max(1, int(max_rows))
        self.min_group = max(1, int(min_group))
        self.stats = PrefixStats()
        self.draft: tuple[int, ...] = ()
        self._supported = self._model_supported()
        text_config = getattr(backend.net.config, "text_config", backend.net.config)
        self._arena = KVArena(int(getattr(text_config, "num_hidden_layers", 0) or 0))
        self._head: tuple[int, ...] = ()  # the tokens whose keys and values open the arena

    # ------------------------------------------------------------------ eligibility
    def _model_supported(self) -> bool:
        net = self.backend.net
        if not supports_prefix_reuse(getattr(net.config, "model_type", "")):
            return False
        text_config = getattr(net.config, "text_config", net.config)
        attn = getattr(text_config, "_attn_implementation", None) or "sdpa"
        if attn not in ("sdpa", "eager"):  # the packed layout needs a custom 4D attention mask
            log.info("prefix reuse off: attention implementation %r takes no custom 4D mask", attn)
            return False
        window = getattr(text_config, "sliding_window", None)
        layer_types = getattr(text_config, "layer_types", None) or ()
        if (window and getattr(text_config, "use_sliding_window", True)) or any("sliding" in str(t) for t in layer_types):
            log.info("prefix reuse off: the text model uses sliding-window attention")
            return False
        return True

    def _generation_config_neutral(self) -> bool:
        """Whether the model's generation config (read at every call: it may be changed) sets only
        fields that leave greedy decoding as the fast path does it."""
        gc = getattr(self.backend.net, "generation_config", None)
        if gc is None:
            return True
        try:
            changed = set(gc.to_diff_dict())
        except Exception:  # noqa: BLE001 - an unreadable config is not worth the risk
            return False
        odd = sorted(changed - _NEUTRAL_GENERATION_FIELDS)
        if odd:
            log.info("prefix reuse off for this call: the model's generation config sets %s", ", ".join(odd))
            return False
        return True

    def eligible(self, request: Request) -> bool:
        """One image in the first user turn, greedy, one answer, no assistant turn."""
        cfg = request.config
        if not cfg.deterministic or cfg.n != 1 or cfg.max_new_tokens < 1:
            return False
        if any(m.role == "assistant" for m in request.messages):
            return False
        return len(request.images) == 1

    def plan(self, requests: Sequence[Request]) -> list[list[int]]:
        """Indices of the eligible requests grouped by image content (first-seen order)."""
        if not self._supported or not self._generation_config_neutral():
            return []
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            if self.eligible(r):
                groups.setdefault(r.images[0].sha256, []).append(i)
        return [g for g in groups.values() if len(g) >= self.min_group]

    # ------------------------------------------------------------------ public
    def run(self, requests: Sequence[Request]) -> dict[int, Completion | BaseException]:
        """Answer the requests the fast path covers; returns ``{index: answer}`` for those only.

        A group that fails for any reason is left out of the result, so that the caller answers
        it on the ordinary path (which isolates the failing request).
        """
        out: dict[int, Completion | BaseException] = {}
        for group in self.plan(requests):
            try:
                answers = self._run_group([requests[i] for i in group])
            except Exception as exc:  # noqa: BLE001 - the ordinary path retries the group
                self.release()  # free the buffers (an out-of-memory error) before the retry
                log.info("prefix reuse failed for a group of %d (%s: %s); using plain generate", len(group), type(exc).__name__, exc)
                continue
            if answers is None:
                continue
            for i, a in zip(group, answers):
                out[i] = a
        self._arena.trim()  # buffers grown by an unusually long call are not kept for the next
        return out

    # ------------------------------------------------------------------ tokenization
    def _tokenize_group(self, reqs: Sequence[Request]) -> tuple[list[list[int]], Any] | None:
        """Token ids of every request (as the processor makes them) and the image's pixel values,
        preprocessing the image once."""
        be = self.backend
        first = be.encode([reqs[0]])
        ids0 = first["input_ids"][0][first["attention_mask"][0].bool()].tolist()
        image_id = int(be.net.config.image_token_index)
        n_img = ids0.count(image_id)
        token = getattr(be.processor, "image_token", "<image>")
        tok = be.tokenizer

        def ids_of(r: Request) -> list[int]:
            text = be.format_prompt(r.messages).replace(token, token * n_img)
            return list(tok(text)["input_ids"])

        if ids_of(reqs[0]) != ids0:  # the processor tokenizes differently: ask it for each request
            seqs = [ids0]
            for r in reqs[1:]:
                enc = be.encode([r])
                seqs.append(enc["input_ids"][0][enc["attention_mask"][0].bool()].tolist())
        else:
            seqs = [ids0] + [ids_of(r) for r in reqs[1:]]
        return seqs, first["pixel_values"]

    # ------------------------------------------------------------------ decoding
    def _run_group(self, reqs: Sequence[Request]) -> list[Completion | BaseException] | None:
        be = self.backend
        torch = be._torch
        tokenized = self._tokenize_group(reqs)
        if tokenized is None:
            return None
        seqs, pixel_values = tokenized
        answers: list[Completion | BaseException | None] = [None] * len(reqs)
        fits: list[int] = []
        for i, (r, s) in enumerate(zip(reqs, seqs)):
            try:
                be._check_length(len(s), r.config)
                fits.append(i)
            except ContextLengthError as exc:
                answers[i] = exc
        if not fits:
            return answers  # type: ignore[return-value]
        image_id = int(be.net.config.image_token_index)
        p = min(_common_prefix_len([seqs[i] for i in fits]), min(len(seqs[i]) for i in fits) - 1)
        last_image = max(j for j, t in enumerate(seqs[fits[0]]) if t == image_id)
        if p <= last_image:
            return None  # the image is not inside the shared prefix
        with torch.inference_mode():
            self._prefix_cache(seqs[fits[0]][:p], pixel_values, seqs[fits[0]].index(image_id))
            self.stats.groups += 1
            self.stats.prefix_forwards += 1
            for chunk in self._chunks(fits, [len(seqs[i]) - p for i in fits]):
                rows = [
                    _Row(index=i, request=reqs[i], suffix=seqs[i][p:], n_prompt=len(seqs[i]), gen=[], logits=[])
                    for i in chunk
                ]
                self._decode_chunk(p, rows)
                for row in rows:
                    cfg = row.request.config
                    logits = torch.stack(row.logits) if cfg.top_logprobs > 0 and row.logits else None
                    answers[row.index] = be.completion_from_ids(row.gen, logits, cfg, row.n_prompt)
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

    def _prefix_cache(self, prefix: list[int], pixel_values: Any, first_image: int) -> None:
        """Fill the arena's first ``len(prefix)`` slots with the shared prefix's keys and values.

        The tokens before the image (system sentence, ``USER:``) are the same for every image of a
        run: they stay at the start of the arena from the previous group and only the rest (image
        and instructions) is computed. Causal attention makes this exact.
        """
        be = self.backend
        torch = be._torch
        dev = be.device
        head = tuple(prefix[:first_image])
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
            be.net(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=self._arena.cache(0), use_cache=True, logits_to_keep=1)
            self._head = head
            start = len(head)
        ids = torch.tensor([prefix[start:]], device=dev)
        be.net(
            input_ids=ids,
            pixel_values=pixel_values,
            attention_mask=torch.ones((1, len(prefix)), dtype=torch.long, device=dev),
            position_ids=torch.arange(start, len(prefix), device=dev).unsqueeze(0),
            past_key_values=self._arena.cache(start),
            use_cache=True,
            logits_to_keep=1,
        )

    def release(self) -> None:
        """Free the key/value buffers kept between calls."""
        self._arena.release()
        self._head = ()

    def _learn_draft(self, rows: Sequence[_Row]) -> None:
        """The longest start shared by more than half of the chunk's answers (end of sequence
        excluded, at most ``MAX_DRAFT`` tokens) becomes the next draft; kept when there is none."""
        eos = self.backend.eos_ids
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

    def _forward(self, ids: Any, mask: Any, pos: Any, cache: Any, keep: Any) -> Any:
        self.stats.forwards += 1
        out = self.backend.net(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        logits = out.logits
        return logits.to(self.backend._torch.promote_types(logits.dtype, self.backend._torch.float32))

    def _mask(self, allowed: Any, p: int) -> Any:
        """Additive 4D attention mask (1, 1, queries, P + slots): every query sees the whole shared
        prefix, and of the slots after it those ``allowed`` marks."""
        torch = self.backend._torch
        dtype = self.backend.net.get_input_embeddings().weight.dtype  # the dtype attention runs in
        mask = torch.zeros((1, 1, allowed.shape[0], p + allowed.shape[1]), dtype=dtype, device=allowed.device)
        mask[0, 0, :, p:].masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask

    def _decode_chunk(self, p: int, rows: list[_Row]) -> None:
        """Suffix forward (with the answer draft) and greedy decoding of one chunk of rows, packed
        into one sequence after the shared prefix (see the module docstring)."""
        be = self.backend
        torch = be._torch
        dev = be.device
        b = len(rows)
        draft = list(self.draft)
        nd = len(draft)
        ids: list[int] = []
        pos: list[int] = []
        owner: list[int] = []  # the row each slot after the prefix belongs to; -1: seen by no one
        keep: list[int] = []  # slots whose logits are read: the last prompt token and the draft
        for k, row in enumerate(rows):
            seq = row.suffix + draft
            keep.extend(range(len(ids) + len(seq) - nd - 1, len(ids) + len(seq)))
            ids.extend(seq)
            pos.extend(range(p, p + len(seq)))
            owner.extend([k] * len(seq))
        n = len(ids)
        own = torch.tensor(owner, device=dev)
        slot = torch.arange(n, device=dev)
        causal_own = (own[:, None] == own[None, :]) & (slot[:, None] >= slot[None, :])
        # Slots past the prefix are overwritten; the prefix itself stays for the next chunk.
        cache = self._arena.cache(p)
        self.stats.rows += b
        logits = self._forward(
            torch.tensor([ids], device=dev),
            self._mask(causal_own, p),
            torch.tensor([pos], device=dev),
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
            row.next_pos = p + len(row.suffix) + a
        active = [k for k, r in enumerate(rows) if not r.done]
        while active:
            owner.extend(active)
            own = torch.tensor(owner, device=dev)
            allowed = own[None, :] == torch.tensor(active, device=dev)[:, None]
            logits = self._forward(
                torch.tensor([[rows[k].gen[-1] for k in active]], device=dev),
                self._mask(allowed, p),
                torch.tensor([[rows[k].next_pos for k in active]], device=dev),
                cache,
                0,
            )[0]
            greedy_step = logits.argmax(-1).tolist()
            for j, k in enumerate(active):
                rows[k].next_pos += 1
                self._push(rows[k], int(greedy_step[j]), logits[j])
            active = [k for k in active if not rows[k].done]

    def _push(self, row: _Row, token: int, logits: Any) -> None:
        """Append one greedy token (and its logits when asked for) and mark the row done at the
        end of sequence or at ``max_new_tokens``."""
        row.gen.append(token)
        if row.request.config.top_logprobs > 0:
            row.logits.append(logits.clone())
        if token in self.backend.eos_ids or len(row.gen) >= row.request.config.max_new_tokens:
            row.done = True
