"""Backend parity: the same samples through two backends, score differences, rank agreement,
verdict flips and the first differing prompt token (see docs/backends.md, "Backend parity").

Names are imported lazily, so that the CLI's ``parity`` subcommand registers without numpy/scipy.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

__all__ = ["ParityReport", "SampleDiff", "TokenDiff", "first_difference", "run_parity"]

_WHERE = {
    "ParityReport": "capjudge.parity.compare",
    "SampleDiff": "capjudge.parity.compare",
    "run_parity": "capjudge.parity.compare",
    "TokenDiff": "capjudge.parity.tokens",
    "first_difference": "capjudge.parity.tokens",
}


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE)
