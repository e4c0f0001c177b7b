"""Decoding helpers of the llama.cpp backend: where a stop string cuts an answer, one sampled
token (temperature, top-p), and the order that runs requests of one image one after another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from capjudge.backends.base import Request


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the first of ``stops`` found in ``text`` starts (``None``: none is in it)."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token drawn from ``logits`` at ``temperature``, within the ``top_p`` nucleus."""
    z = logits / max(temperature, 1e-6)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    if top_p < 1.0:
        cum = np.cumsum(p[order])
        order = order[: int(np.searchsorted(cum, top_p)) + 1]
    q = p[order] / p[order].sum()
    return int(order[rng.choice(len(order), p=q)])


def image_group_key(requests: Sequence[Request]) -> Any:
    """Sort key that keeps requests of one image together, groups in order of first appearance."""
    first: dict[str, int] = {}
    for i, r in enumerate(requests):
        imgs = r.images
        first.setdefault(imgs[0].sha256 if imgs else "", i)

    def key(i: int) -> tuple[int, int]:
        imgs = requests[i].images
        return (first[imgs[0].sha256 if imgs else ""], i)

    return key
