"""The method's stop rule (:mod:`capjudge.parsing.stopping`) on the HF backend's decoding paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from capjudge.backends.base import Request
from capjudge.parsing.stopping import reached


def without_stop_rule(request: Request) -> Request:
    """``request`` with no stop rule (a thinking model's reasoning may hold a number)."""
    return dataclasses.replace(request, config=dataclasses.replace(request.config, stop_rule=""))


def rule_reached(request: Request, gen: Sequence[int], tokenizer: Any) -> bool:
    """Whether the request's stop rule holds once the last of ``gen`` is generated."""
    rule = request.config.stop_rule
    return bool(rule) and reached(rule, gen, lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=True)))


__all__ = ["rule_reached", "without_stop_rule"]
