"""Backend parity: the same samples through two backends, score differences, rank agreement,
verdict flips and the first differing prompt token (see docs/backends.md, "Backend parity")."""

from capjudge.parity.compare import ParityReport, SampleDiff, run_parity
from capjudge.parity.tokens import TokenDiff, first_difference

__all__ = ["ParityReport", "SampleDiff", "TokenDiff", "first_difference", "run_parity"]
