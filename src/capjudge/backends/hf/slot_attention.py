"""Attention of slot-refill rows over their own columns, in groups of rows of similar length.

In a decoding step of :mod:`capjudge.backends.hf.refill` every busy row attends to its own prompt
and answer so far. One attention call over all rows reads, for every row, as many columns as the
longest row holds (the mask hides the rest): with answers of tenfold different lengths most of
what it reads is masked. Rows are kept longest first (:mod:`capjudge.backends.hf.slots`), so
:func:`plan_groups` can cut them into contiguous groups, each computed by its own call over the
columns its longest row holds: the work follows each row's own length, at the price of a few more
calls (the plan weighs both).

The grouped function is registered with transformers' ``AttentionInterface`` under
:data:`NAME` and is in force only inside :func:`grouped` (the text config's attention
implementation is switched for the step and restored after). Each group is computed by
transformers' own SDPA attention on slices of the step's keys, values and 4D mask, so the results
are those of the one-call step (the mask already hides what a row does not own); outside a step,
or without a plan, the function is plain SDPA.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Sequence
from typing import Any

NAME = "capjudge_slot_groups"
"""The attention implementation's name in transformers' registry."""

CALL_COST = 256
"""One more attention call weighs as much as this many (row x column) reads when groups are planned."""

Group = tuple[int, int]
"""Rows ``start:stop`` of one group (rows sorted by length, longest first)."""


class Plan:
    """The groups of one step, ``(start, stop, columns)`` each, and how many attention calls used them."""

    def __init__(self, groups: tuple[tuple[int, int, int], ...]) -> None:
        self.groups = groups
        self.calls = 0


_PLAN: contextvars.ContextVar[Plan | None] = contextvars.ContextVar(
    "capjudge_slot_plan", default=None
)


def plan_groups(lengths: Sequence[int], call_cost: int = CALL_COST) -> tuple[Group, ...]:
    """Contiguous groups of rows whose lengths are sorted longest first, minimising the columns
    read (each row reads its group's longest row's columns) plus ``call_cost`` per group."""
    m = len(lengths)
    if m <= 1:
        return ((0, m),) if m else ()
    best = [0] + [0] * m  # best[j]: cost of rows 0..j-1; cut[j]: where the last group starts
    cut = [0] * (m + 1)
    for j in range(1, m + 1):
        choice, start = None, 0
        for i in range(j):
            cost = best[i] + (j - i) * (int(lengths[i]) + 1) + call_cost
            if choice is None or cost < choice:
                choice, start = cost, i
        best[j], cut[j] = int(choice or 0), start
    groups: list[Group] = []
    j = m
    while j > 0:
        groups.append((cut[j], j))
        j = cut[j]
    return tuple(reversed(groups))


@functools.lru_cache(maxsize=1)
def register() -> str:
    """Register the grouped attention with transformers (once); returns its name."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def grouped_sdpa(
        module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
    ) -> tuple[Any, Any]:
        plan = _PLAN.get()
        if plan is None or len(plan.groups) == 1 and plan.groups[0][2] >= key.shape[-2]:
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        import torch

        plan.calls += 1
        outs = []
        for a, b, w in plan.groups:
            mask = None if attention_mask is None else attention_mask[a:b, ..., :w]
            out, _ = sdpa_attention_forward(
                module, query[a:b], key[a:b, :, :w], value[a:b, :, :w], mask, **kwargs
            )
            outs.append(out)
        return torch.cat(outs, dim=0), None

    AttentionInterface.register(NAME, grouped_sdpa)
    return NAME


def grouped(config: Any, groups: Sequence[Group], lengths: Sequence[int]) -> contextlib.AbstractContextManager[Plan]:
    """Within the block, the attention layers of ``config`` (the text config) compute the rows in
    ``groups``, each over the columns of its longest row (its length + 1, the new token included).
    Yields the plan (its ``calls``: the attention calls that used it)."""
    return planned(config, tuple((a, b, int(max(lengths[a:b])) + 1) for a, b in groups))


@contextlib.contextmanager
def planned(config: Any, groups: tuple[tuple[int, int, int], ...]) -> Iterator[Plan]:
    """:func:`grouped` with each group's columns given: ``(start, stop, columns)``."""
    plan = Plan(groups)
    token = _PLAN.set(plan)
    before = config._attn_implementation
    config._attn_implementation = register()
    try:
        yield plan
    finally:
        config._attn_implementation = before
        _PLAN.reset(token)
