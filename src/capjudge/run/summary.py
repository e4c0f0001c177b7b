"""What a ``score`` or ``compare`` run tells its user at the end: counts, smoothed against raw
scores, failures a re-run may cure, and the warnings that must not go unnoticed.

:class:`RunTally` takes every result as it is written (``add``) and gives the summary rows, the
warnings and whether the exit code should say "samples failed for backend reasons".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from capjudge.core.redact import stable
from capjudge.parsing.text import shorten

TOP_CAUSES = 3
"""How many failure causes the end of a run names."""
CAUSE_CHARS = 400
"""A failure cause named at the end of a run is cut (at a word, with an ellipsis) to this length."""

_SAMPLE_PREFIX = re.compile(r"^(?:sample|pair) [^:]*: (?:backend error: )?")
NO_LOGPROBS = "no token probabilities"  # in details.smoothing when the backend gave none


def count_text(value: float) -> str:
    """A micro aggregate's hits as shown: a count as it is, a sum of scores to 4 digits."""
    return str(value) if isinstance(value, int) else f"{value:.4g}"


@dataclass
class RunTally:
    """Counts over a run's results. ``smoothing``: the method smooths its scores (FLEUR family)."""

    method: str = ""
    smoothing: bool = False
    ok: int = 0
    failed: int = 0
    cached: int = 0
    score_sum: float = 0.0
    smoothed: int = 0
    raw: int = 0
    raw_no_logprobs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    resumable: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    # every failure's cause (the sample's name taken off), resumable or not: what the user reads first
    failure_causes: Counter[str] = field(default_factory=Counter)
    two_order: list[tuple[str | None, list[Any]]] = field(default_factory=list)
    # measure -> [hits, total] over ok records with details.counts (CapMAS: micro precision / recall;
    # CLAIR: the scores over the captions the code does not skip)
    micro: dict[str, list[float]] = field(default_factory=dict)
    # CAPability dimension -> its item scores (details.capability), for eval.py's metrics
    capability: dict[str, list[Any]] = field(default_factory=dict)
    # the models of the ok records, for the note of a method whose paper used another judge
    judge_models: set[str] = field(default_factory=set)
    # CaptionQA: every question's item (details.steps.questions), for qa.py's final summary
    qa_items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: Any) -> None:
        """Count one :class:`~capjudge.data.types.ScoreResult` or :class:`~capjudge.data.types.PairResult`."""
        details = result.details or {}
        cached = details.get("cached")
        self.cached += all(cached) if isinstance(cached, list) and cached else bool(cached)
        if not result.ok:
            self.failed += 1
            cause = _SAMPLE_PREFIX.sub("", stable(result.error or "unknown cause"))
            self.failure_causes[cause] += 1
            if details.get("resumable"):
                self.resumable += 1
                self.causes[cause] += 1
            return
        self.ok += 1
        self.judge_models.add(str(getattr(result, "model", "") or ""))
        verdict = getattr(result, "verdict", None)
        if verdict is not None:
            self.verdicts[verdict] += 1
            if getattr(result, "mode", None) == "pairwise":
                self.two_order.append((verdict, list(result.votes or [])))
            return
        self.score_sum += result.score or 0.0
        self.add_counts(details.get("counts"))
        for item in details.get("capability") or ():
            if isinstance(item, dict) and item.get("score") is not None:
                self.capability.setdefault(str(item.get("dimension")), []).append(item["score"])
        if self.method == "captionqa":
            self.qa_items.extend(q for q in (details.get("steps") or {}).get("questions") or () if isinstance(q, dict))
        if self.smoothing:
            if result.smoothed:
                self.smoothed += 1
            else:
                self.raw += 1
                self.raw_no_logprobs += NO_LOGPROBS in str(details.get("smoothing", ""))

    def add_counts(self, counts: Any) -> None:
        """Add a record's ``details.counts`` (``measure``, ``hits``, ``total``) to the run's
        micro aggregate, the official one of CapMAS's factuality (precision) and coverage (recall)
        and of CLAIR (``hits`` a score, ``total`` 0 for a caption the code skips but still adds up)."""
        if not isinstance(counts, dict):
            return
        hits, total, measure = counts.get("hits"), counts.get("total"), counts.get("measure")
        if isinstance(hits, (int, float)) and not isinstance(hits, bool) and isinstance(total, int) and isinstance(measure, str) and total >= 0:
            acc = self.micro.setdefault(measure, [0, 0])
            acc[0] += hits
            acc[1] += total

    def micro_rows(self) -> list[tuple[str, str]]:
        """The official aggregate beside the per-caption mean: hits / total over the whole run."""
        return [(f"{measure} (micro, official)", f"{hits / total:.4g} ({count_text(hits)}/{count_text(total)})") for measure, (hits, total) in sorted(self.micro.items()) if total]

    @property
    def main_cause(self) -> str | None:
        """The most common cause among the failures a re-run may cure."""
        return self.causes.most_common(1)[0][0] if self.causes else None

    @property
    def none_ok(self) -> bool:
        """Records were written and not one of them is ok: nothing of the run can be used."""
        return self.failed > 0 and self.ok == 0

    def top_causes(self, n: int = TOP_CAUSES) -> list[str]:
        """The ``n`` most common failure causes, each as ``"4x cause"`` (as the HTML report lists
        them), cut to :data:`CAUSE_CHARS` characters."""
        return [f"{count}x {shorten(text, CAUSE_CHARS)}" for text, count in self.failure_causes.most_common(n)]

    def failure_message(self) -> str | None:
        """What the end of a run says of its failed samples: how many, and why (the most common
        causes); ``None`` when none failed."""
        if not self.failed:
            return None
        lines = [f"{self.failed} of {self.ok + self.failed} sample(s) failed (their records have status \"error\"); most common causes:"]
        lines += [f"  {cause}" for cause in self.top_causes()]
        more = len(self.failure_causes) - TOP_CAUSES
        if more > 0:
            lines.append(f"  ... and {more} other cause(s): see the records' \"error\"")
        return "\n".join(lines)

    def score_rows(self) -> list[tuple[str, str]]:
        """Summary rows of a scoring run."""
        rows = [("scored", str(self.ok))]
        if self.smoothing:
            rows += [("  smoothed", str(self.smoothed)), ("  raw (not smoothed)", str(self.raw))]
        rows += self.failure_rows()
        rows += [("cache hits", str(self.cached)), ("mean score", f"{self.score_sum / self.ok:.4g}" if self.ok else "-")]
        return rows + self.micro_rows() + self.capability_rows() + self.captionqa_rows() + self.judge_rows()

    def capability_rows(self) -> list[tuple[str, str]]:
        """CAPability's official numbers (eval.py's ``calculate_metric`` per dimension, then the
        means over the dimensions run: 13 in a full run)."""
        from capjudge.parsing.capability import TASKS, average_metrics, dimension_metrics

        if not self.capability:
            return []
        order = [t for t in TASKS if t in self.capability] + sorted(set(self.capability) - set(TASKS))
        per = {t: dimension_metrics(self.capability[t]) for t in order}

        def f(v: Any, digits: int) -> str:
            return f"{v:.{digits}f}" if v is not None else "undefined"

        rows = [(f"{t} (CAPability)", f"precision {f(m['precision'], 1)}, recall {f(m['recall'], 1)}, f1 {f(m['f1_score'], 1)}, hit rate {f(m['hit_rate'], 1)} ({m['all']} items)") for t, m in per.items()]
        avg = average_metrics(per)
        rows.append((f"CAPability mean of {avg['dimensions']} dimension(s)", f"precision {f(avg['precision'], 3)}, recall {f(avg['recall'], 3)}, f1 {f(avg['f1_score'], 3)}, hit rate {f(avg['hit_rate'], 3)}"))
        return rows

    def captionqa_rows(self) -> list[tuple[str, str]]:
        """CaptionQA's numbers as ``qa.py`` prints them, per category and overall (none for other methods)."""
        if not self.qa_items:
            return []
        from capjudge.judges.captionqa import summary_rows

        return summary_rows(self.qa_items)

    def position_rows(self) -> list[tuple[str, str]]:
        """Position bias of a dual-sided comparison run: how often the caption shown first won a
        vote (50% = no preference), and how often swapping the order changed the verdict."""
        from capjudge.judges.voting import position_bias

        pb = position_bias(self.two_order)
        if not pb["two_order_records"]:
            return []
        decisive = pb["votes_first"] + pb["votes_second"]
        first = f"{pb['first_position']:.1f}% of {decisive} votes" if decisive else "- (every vote a tie)"
        return [
            ("first position won", first),
            ("order flips", f"{pb['flip_rate']:.1f}% of {pb['two_order_records']} pairs"),
            ("  same position won both", f"{pb['position_flips']:.1f}%"),
        ]

    def failure_rows(self) -> list[tuple[str, str]]:
        """``failed`` and, when there are any, how many of them a re-run may cure."""
        rows = [("failed", str(self.failed))]
        if self.resumable:
            rows.append(("  for backend reasons", str(self.resumable)))
        return rows

    def warnings(self) -> list[str]:
        """Loud warnings: a smoothing method that got no log-probabilities."""
        out = []
        if self.smoothing and self.raw_no_logprobs:
            out.append(
                f"WARNING: {self.method} smooths its score over the digit probabilities, but the backend returned no "
                f"log-probabilities for {self.raw_no_logprobs} of {self.ok} scored samples: those scores are the raw "
                "numbers the model wrote (smoothed: false), not FLEUR's smoothed score, and must not be compared with "
                "smoothed ones. Use a backend or server that returns logprobs (some servers, e.g. `transformers serve`, "
                "drop them), or estimate_by_sampling=N."
            )
        note = self.judge_note()
        if note is not None:
            out.append(note)
        return out

    @property
    def paper_judge(self) -> Any:
        """The judge behind the paper's numbers of the run's method (``Method.paper_judge``), or
        ``None`` (no such judge, or not a registered method)."""
        from capjudge.prompts.registry import paper_judge_of

        return paper_judge_of(self.method)

    def judge_note(self) -> str | None:
        """The note when the run's judge is not the one behind the paper's numbers (none for a
        method without a paper judge)."""
        judge = self.paper_judge
        return judge.note(self.method, self.judge_models) if judge is not None else None

    def judge_rows(self) -> list[tuple[str, str]]:
        """The summary's row on the paper's judge: for a method that has one, whether this run's
        judge is it (no row for other methods, or before any record is ok)."""
        judge = self.paper_judge
        if judge is None or not self.judge_models:
            return []
        others = judge.others(self.judge_models)
        said = f"not this run's ({', '.join(others)}): numbers not directly comparable" if others else "this run's"
        return [("paper's judge", f"{judge.model}, {said}")]

    def backend_failure_message(self) -> str | None:
        """The closing message when samples failed for backend reasons (exit code 3), else None."""
        if not self.resumable:
            return None
        return (
            f"{self.resumable} sample(s) failed for backend reasons ({self.main_cause}). Their records have "
            'status "error"; re-run the same command to resume.'
        )
