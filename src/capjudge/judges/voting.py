"""Combining verdicts: the dual-sided vote of the GPT-4V evaluator paper and comparison by single grading."""

from __future__ import annotations

from capjudge.types import Verdict


def flip(verdict: str | None) -> str | None:
    """Map a verdict given with the captions swapped back to the original labels."""
    return {"A": "B", "B": "A"}.get(verdict, verdict) if verdict else verdict


def dual_sided_vote(first: str | None, second: str | None) -> Verdict:
    """Combine the verdicts of the two orders (both already mapped back to the original labels).

    Seed 003, Sec. 2: A twice, or A and tie -> A; B twice, or B and tie -> B; tie twice, or A and B
    -> tie. A missing verdict (unparsable answer) counts as a tie here; callers that want to treat
    it as a failure check for ``None`` before voting.
    """
    a = first if first in ("A", "B") else "tie"
    b = second if second in ("A", "B") else "tie"
    if a == b:
        return a  # type: ignore[return-value]
    if "tie" in (a, b):
        return a if b == "tie" else b  # type: ignore[return-value]
    return "tie"


def verdict_from_scores(score_a: float | None, score_b: float | None) -> Verdict | None:
    """Seed 003's comparison by single grading: the higher score wins, equal scores tie.
    ``None`` when either score is missing."""
    if score_a is None or score_b is None:
        return None
    if score_a > score_b:
        return "A"
    if score_b > score_a:
        return "B"
    return "tie"
