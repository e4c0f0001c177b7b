"""Backend parity: the same samples through two backends, score differences, rank agreement,
verdict flips and the first differing prompt token (see docs/backends.md, "Backend parity").

Names are imported lazily, so that the CLI's ``parity`` subcommand registers without numpy/scipy.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ParityReport", "SampleDiff", "TokenDiff", "first_difference", "run_parity"]

_WHERE = {
    "ParityReport": "capjudge.parity.compare",
    "SampleDiff": "capjudge.parity.compare",
    "run_parity": "capjudge.parity.compare",
    "TokenDiff": "capjudge.parity.tokens",
    "first_difference": "capjudge.parity.tokens",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'capjudge.parity' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
