"""Prefix reuse for the HF backend: judge K captions of one image at about one image prefill.

The prompts of the captions of one image share a long prefix (system sentence, 576 image tokens,
the instructions up to the caption). :class:`PrefixReuser` computes that prefix's KV cache once
(batch 1), copies it over the K requests of the group and runs the K suffixes in one batched
forward, then decodes greedily from the shared cache until every row has stopped.

Layout of one chunk of rows in the KV cache (slots, left to right)::

    [ shared prefix (P) | left padding | suffix_i | draft ] [ decoded tokens ... ]

Padding and rejected draft slots are masked out with the 2D attention mask; every row carries its
own position ids, so each row sees exactly the tokens (and RoPE positions) of its own prompt.

Answer drafts: judge answers of one run share their first tokens (FLEUR: ``0.``). The longest
common prefix of the last chunk's greedy answers is appended to every suffix as a draft and checked
against the model's own greedy choice at each position, as in speculative decoding: a draft token
counts only where it equals the argmax at the step before, so the answer and the per-step
probabilities are those of plain greedy decoding. For FLEUR this yields the digit distribution of
the first decimal from the suffix forward itself; an answer that is not ``0.x`` just rejects the
draft at its first differing token and decodes on as usual.

Requests the fast path does not cover (several images, sampling, multi-turn, non-LLaVA models,
groups of one) are left to the backend's ordinary batched ``generate``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capjudge.backends.base import Completion, ContextLengthError, Request

if TYPE_CHECKING:  # pragma: no cover
    from capjudge.backends.hf import HFBackend

log = logging.getLogger(__name__)

MAX_ROWS = 16
"""Rows decoded together from one copy of a prefix cache (larger groups are chunked)."""

MAX_DRAFT = 4
"""Longest answer draft appended to the suffixes."""

# Generation-config settings that change greedy decoding; the fast path decodes without any
# logits processor, so a model that sets one of these goes through ``generate``.
_PROCESSOR_SETTINGS = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "sequence_bias": None,
    "encoder_repetition_penalty": 1.0,
    "renormalize_logits": False,
}


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

    ``max_rows`` bounds the rows that share one copy of the prefix cache (memory grows with it);
    ``min_group`` is the smallest group worth a separate prefix pass (smaller groups are left to the
    backend's batched path, which batches across images).
    """

    def __init__(self, backend: HFBackend, *, max_rows: int = MAX_ROWS, min_group: int = 2) -> None:
        self.backend = backend
        self.max_rows = max(1, int(max_rows))
        self.min_group = max(1, int(min_group))
        self.stats = PrefixStats()
        self.draft: tuple[int, ...] = ()
        self._head_cache: tuple[tuple[int, ...], list[tuple[Any, Any]]] | None = None
        self._supported = self._model_supported()

    # ------------------------------------------------------------------ eligibility
    def _model_supported(self) -> bool:
        net = self.backend.net
        if getattr(net.config, "model_type", "") != "llava":
            return False
        gc = getattr(net, "generation_config", None)
        for name, neutral in _PROCESSOR_SETTINGS.items():
            value = getattr(gc, name, neutral)
            if value not in (neutral, None) and not (isinstance(value, (list, tuple)) and not value):
                log.info("prefix reuse off: the model's generation config sets %s=%r", name, value)
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
        if not self._supported:
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
                log.info("prefix reuse failed for a group of %d (%s: %s); using plain generate", len(group), type(exc).__name__, exc)
                continue
            if answers is None:
                continue
            for i, a in zip(group, answers):
                out[i] = a
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
            layers = self._prefix_cache(seqs[fits[0]][:p], pixel_values, seqs[fits[0]].index(image_id))
            self.stats.groups += 1
            self.stats.prefix_forwards += 1
            for start in range(0, len(fits), self.max_rows):
                chunk = fits[start : start + self.max_rows]
                rows = [
                    _Row(index=i, request=reqs[i], suffix=seqs[i][p:], n_prompt=len(seqs[i]), gen=[], logits=[])
                    for i in chunk
                ]
                self._decode_chunk(layers, p, rows)
                for row in rows:
                    cfg = row.request.config
                    logits = torch.stack(row.logits) if cfg.top_logprobs > 0 and row.logits else None
                    answers[row.index] = be.completion_from_ids(row.gen, logits, cfg, row.n_prompt)
                self._learn_draft(rows)
        return answers  # type: ignore[return-value]

    def _prefix_cache(self, prefix: list[int], pixel_values: Any, first_image: int) -> list[tuple[Any, Any]]:
        """Per-layer (keys, values) of the shared prefix, batch 1.

        The tokens before the image (system sentence, ``USER:``) are the same for every image of a
        run: their keys and values are kept from the previous group and only the rest (image and
        instructions) is computed. Causal attention makes this exact.
        """
        from transformers import DynamicCache

        be = self.backend
        torch = be._torch
        dev = be.device
        head = tuple(prefix[:first_image])
        cache = None
        start = 0
        if head and self._head_cache is not None and self._head_cache[0] == head:
            cache = DynamicCache(ddp_cache_data=self._head_cache[1], config=be.net.config)
            start = len(head)
            self.stats.head_reused += 1
        elif head:
            ids = torch.tensor([list(head)], device=dev)
            out = be.net(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1)
            self._head_cache = (head, [(k, v) for k, v, *_ in out.past_key_values])
            cache = DynamicCache(ddp_cache_data=self._head_cache[1], config=be.net.config)
            start = len(head)
        ids = torch.tensor([prefix[start:]], device=dev)
        out = be.net(
            input_ids=ids,
            pixel_values=pixel_values,
            attention_mask=torch.ones((1, len(prefix)), dtype=torch.long, device=dev),
            position_ids=torch.arange(start, len(prefix), device=dev).unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return [(k, v) for k, v, *_ in out.past_key_values]

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

    def _forward(self, ids: Any, mask: Any, pos: Any, cache: Any, keep: int) -> Any:
        self.stats.forwards += 1
        out = self.backend.net(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits.float()

    def _decode_chunk(self, layers: Sequence[tuple[Any, Any]], p: int, rows: list[_Row]) -> None:
        """Suffix forward (with the answer draft) and greedy decoding of one chunk of rows."""
        from transformers import DynamicCache

        be = self.backend
        torch = be._torch
        dev = be.device
        b = len(rows)
        draft = list(self.draft)
        width = max(len(r.suffix) for r in rows) + len(draft)
        pad = int(be.tokenizer.pad_token_id)
        ids = torch.full((b, width), pad, dtype=torch.long)
        seg = torch.zeros((b, width), dtype=torch.long)
        pos = torch.full((b, width), p, dtype=torch.long)
        for k, row in enumerate(rows):
            seq = row.suffix + draft
            n = len(seq)
            ids[k, width - n :] = torch.tensor(seq)
            seg[k, width - n :] = 1
            pos[k, width - n :] = torch.arange(p, p + n)
        mask = torch.cat([torch.ones((b, p), dtype=torch.long), seg], dim=1).to(dev)
        cache = DynamicCache(
            ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in layers],
            config=be.net.config,
        )
        self.stats.rows += b
        logits = self._forward(ids.to(dev), mask, pos.to(dev), cache, len(draft) + 1)  # (b, d+1, V)
        greedy = logits.argmax(-1).tolist()
        for k, row in enumerate(rows):
            a = 0
            while a < len(draft) and greedy[k][a] == draft[a]:
                a += 1
            self.stats.draft_tokens_accepted += a
            if a < len(draft):  # rejected draft tokens leave the row's context
                mask[k, p + width - len(draft) + a :] = 0
            for j in range(a + 1):
                self._push(row, int(greedy[k][j]), logits[k, j])
                if row.done:
                    break
            row.next_pos = p + len(row.suffix) + a
        active = [k for k, r in enumerate(rows) if not r.done]
        if len(active) < b:
            sel = torch.tensor(active, dtype=torch.long, device=dev)
            cache.batch_select_indices(sel)
            mask = mask[sel]
        while active:
            step_ids = torch.tensor([[rows[k].gen[-1]] for k in active], device=dev)
            step_pos = torch.tensor([[rows[k].next_pos] for k in active], device=dev)
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=dev)], dim=1)
            logits = self._forward(step_ids, mask, step_pos, cache, 1)[:, -1]
            greedy_step = logits.argmax(-1).tolist()
            for j, k in enumerate(active):
                rows[k].next_pos += 1
                self._push(rows[k], int(greedy_step[j]), logits[j])
            keep = [j for j, k in enumerate(active) if not rows[k].done]
            if len(keep) < len(active):
                if keep:
                    sel = torch.tensor(keep, dtype=torch.long, device=dev)
                    cache.batch_select_indices(sel)
                    mask = mask[sel]
                active = [active[j] for j in keep]

    def _push(self, row: _Row, token: int, logits: Any) -> None:
        """Append one greedy token (and its logits when asked for) and mark the row done at the
        end of sequence or at ``max_new_tokens``."""
        row.gen.append(token)
        if row.request.config.top_logprobs > 0:
            row.logits.append(logits.clone())
        if token in self.backend.eos_ids or len(row.gen) >= row.request.config.max_new_tokens:
            row.done = True
