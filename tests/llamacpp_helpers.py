"""Checks shared by the llama.cpp tests: the backend against llama-cpp-python's own chat path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest


def reference_chat(llm: Any, system: str, text: str, image_url: str) -> Any:
    """llama-cpp-python's greedy answer (``create_chat_completion``, up to 16 tokens) to a system
    message and one user turn holding an image then ``text``."""
    return llm.create_chat_completion(
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": text},
            ]},
        ],
        temperature=0.0, repeat_penalty=1.0, max_tokens=16,
    )


def assert_steps_match_scores(llm: Any, steps: Sequence[Any], n_prompt: int, digit_ids: Sequence[int]) -> None:
    """Each generated step's digit log-probabilities and top log-probability equal the ones computed
    from ``llm.scores`` (a ``logits_all`` model) at the same position, ``n_prompt`` being the
    position count of the prompt."""
    for k, step in enumerate(steps):
        logits = np.asarray(llm.scores[n_prompt - 1 + k], dtype=np.float64)
        logp = logits - np.logaddexp.reduce(logits)
        assert step.digits == pytest.approx(logp[list(digit_ids)].tolist(), abs=1e-4)
        assert step.logprob == pytest.approx(float(logp.max()), abs=1e-4)
