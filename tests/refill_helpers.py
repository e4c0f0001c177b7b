"""Helpers of the slot-refill and decode-graph tests: long requests of planted lengths, and the
log-probabilities one plain forward gives an answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.backends.base import GenerationConfig, Message, Request
from capjudge.data.images import load_image


def requests_of(example_images: list[Path], lengths: list[int]) -> list[Request]:
    """One request per planted length, the two example images in turn."""
    imgs = [load_image(p) for p in example_images]
    return [
        Request((Message("user", f"describe {i}: a cat on a bed", images=(imgs[i % 2],)),), GenerationConfig(max_new_tokens=n, top_logprobs=3))
        for i, n in enumerate(lengths)
    ]


def plain_logprobs(be: Any, req: Request, gen: list[int]) -> Any:
    """Log-probabilities of every answer position from one forward over prompt + answer."""
    torch = be._torch
    enc = be.encode([req])
    n = enc["input_ids"].shape[1]
    ids = torch.cat([enc["input_ids"], torch.tensor([gen], dtype=torch.long)], dim=1)
    extra = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
    if "mm_token_type_ids" in enc:
        extra["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"], torch.zeros((1, len(gen)), dtype=enc["mm_token_type_ids"].dtype)], dim=1)
    with torch.inference_mode():
        logits = be.net(input_ids=ids, attention_mask=torch.ones_like(ids), **extra).logits[0, n - 1 :]
    return torch.log_softmax(logits.double(), dim=-1)
