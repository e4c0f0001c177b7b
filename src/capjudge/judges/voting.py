"""Combining verdicts: the dual-sided vote of the GPT-4V evaluator paper and comparison by single grading."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from capjudge.data.types import Verdict

VERDICTS: tuple[str, ...] = ("A", "B", "tie")


def flip(verdict: str | None) -> str | None:
    """Map a verdict given with the captions swapped back to the original labels."""
    return {"A": "B", "B": "A"}.get(verdict, verdict) if verdict else verdict


def seeded_digest(*parts: object) -> bytes:
    """A seeded hash of ``parts`` (SHA-256 of their text joined by U+001F): the one source of the
    arena's and single-order comparison's seeded choices."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()


def seeded_first(seed: int, key: str, x: str, y: str) -> str:
    """Which of ``x`` and ``y`` is shown first: a seeded hash of ``key`` (the image) and the
    unordered pair, so the answer does not depend on the order they are given in. The arena calls it
    with two model names, single-order comparison with the two captions."""
    lo, hi = sorted((x, y))
    return lo if seeded_digest("first", seed, key, lo, hi)[0] & 1 else hi


def dual_sided_vote(first: str | None, second: str | None) -> Verdict:
    """Combine the verdicts of the two orders (both already mapped back to the original labels).

    The GPT-4V evaluator paper, Sec. 2: A twice, or A and tie -> A; B twice, or B and tie -> B; tie twice, or A and B
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


def position_bias(records: Sequence[tuple[str | None, Sequence[Any]]]) -> dict[str, Any]:
    """A pairwise judge's position-bias figures from its ``(verdict, votes)`` records.

    ``votes`` are the verdicts of the two orders asked, already mapped back to the original labels
    (``capjudge.judges.pairwise``): ``votes[0]`` from the order (A, B), ``votes[1]`` from (B, A).
    So a vote picked the caption *shown first* when ``votes[0] == "A"`` or ``votes[1] == "B"``.

    * ``first_position``: share (%) of the votes that picked a caption which picked the one shown
      first (50 = no position preference); ``tie_votes``: share of votes that were ties;
    * ``flip_rate``: share of records whose verdict changed when the order was swapped
      (``votes[0] != votes[1]``); ``position_flips``: share where the two orders picked opposite
      captions, i.e. the caption in the same position won both times;
    * ``tie_share``: share of final verdicts that are ties (over every record, voted or not).
    """
    n = len(records)
    voted = [(v[0], v[1]) for _, v in records if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] in VERDICTS and v[1] in VERDICTS]
    first = sum(v1 == "A" for v1, _ in voted) + sum(v2 == "B" for _, v2 in voted)
    second = sum(v1 == "B" for v1, _ in voted) + sum(v2 == "A" for _, v2 in voted)
    tie_votes = sum(v1 == "tie" for v1, _ in voted) + sum(v2 == "tie" for _, v2 in voted)
    flips = sum(v1 != v2 for v1, v2 in voted)
    position_flips = sum({v1, v2} == {"A", "B"} for v1, v2 in voted)
    pct = lambda k, d: 100.0 * k / d if d else math.nan  # noqa: E731
    return {
        "records": n,
        "two_order_records": len(voted),
        "first_position": pct(first, first + second),
        "votes_first": first,
        "votes_second": second,
        "tie_votes": pct(tie_votes, 2 * len(voted)),
        "flip_rate": pct(flips, len(voted)),
        "position_flips": pct(position_flips, len(voted)),
        "tie_share": pct(sum(verdict == "tie" for verdict, _ in records), n),
    }
