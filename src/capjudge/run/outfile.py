"""The ``--out`` file of a ``capjudge score`` or ``compare`` run: durable as answers arrive, in input
order when the run ends, and the starting point of a re-run.

- Each record is appended and flushed as soon as its answer is parsed (completion order), with
  ``row``: its 1-based position in the input. A run that is killed keeps every answered record.
- When the run ends (also on an error or Ctrl-C), the file is rewritten in ``row`` order
  (a temporary file, then an atomic rename).
- A re-run with the same ``--out`` keeps the records already there (:func:`plan_resume`) and asks
  only for the rest, with or without the response cache: rows with no record, and rows whose error
  record says the backend failed (``details.resumable``: server gone, retries exhausted, budget).
- An error record of a failure that other options may cure (a prompt over the model's context, a
  reasoning cut off by the token budget: :data:`capjudge.data.types.BUDGET_FAILURES`) carries
  ``details.options_digest``, a digest of the run's options that change an answer
  (:func:`capjudge.run.runner.options_digest`); a re-run whose digest differs asks it again
  (``ResumePlan.changed``), one with the same options keeps it (``ResumePlan.kept_budget``).
- A record that says ``ok`` but breaks what an ``ok`` record holds (a null, NaN or out-of-scale
  score, a pair with no valid verdict: :func:`capjudge.data.recordcheck.record_problem`; written by an
  older capjudge) is not kept: it is asked again, bypassing cached answers, as ``--retry-errors``
  asks error records (``ResumePlan.invalid`` says which and why).

A record is matched to an input row by what the row says: ``id``, ``image``, ``caption`` and
``references`` (pairs: ``id``, ``image``, ``caption_a``, ``caption_b``); ids default to the row
number. The run must be the same run: a file written with another method, template, backend or
comparison mode, or holding scored records for rows that are no longer in the input, is refused
(:class:`ResumeConflict`) rather than mixed or silently cut; ``--overwrite`` starts it over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from capjudge.core.errors import UsageError
from capjudge.core.redact import scrub_record
from capjudge.data.io import iter_jsonl, write_atomically
from capjudge.data.recordcheck import record_problem
from capjudge.data.types import BUDGET_FAILURES, PairResult, ScoreResult

Key = tuple[Any, ...]


class ResumeConflict(UsageError, ValueError):
    """``--out`` holds results that this run cannot continue (another method, backend, input)."""


def score_key(item: dict[str, Any]) -> Key:
    """How a scoring row and its record are matched: id, image, caption, references."""
    refs = item.get("references") or ()
    return ("score", str(item.get("id")), str(item.get("image")), str(item.get("caption")), tuple(str(r) for r in refs))


def pair_key(item: dict[str, Any]) -> Key:
    """How a pairs row and its record are matched: id, image, caption_a, caption_b."""
    return ("pair", str(item.get("id")), str(item.get("image")), str(item.get("caption_a")), str(item.get("caption_b")))


@dataclass
class ResumePlan:
    """What a re-run does with the records already in ``--out``.

    ``kept``: input position -> record kept as it is (not asked again); ``retry``: positions whose
    error record is asked again bypassing the cache (``--retry-errors``); rows whose error record
    says ``resumable`` (the backend failed, not the sample) are in neither and asked again;
    ``dropped``: error records that match no input row (a row since fixed or removed);
    ``unmatched``: ok records that match no input row, when the caller keeps them
    (``plan_resume(..., unmatched="keep")``); ``invalid``: position -> why, for records that
    said ``ok`` without a valid score or verdict (also in ``retry``: asked again); ``changed``:
    budget failures (:func:`budget_failure`) made with other options, asked again;
    ``kept_budget``: budget failures kept (made with this run's options).
    """

    kept: dict[int, dict[str, Any]] = field(default_factory=dict)
    retry: set[int] = field(default_factory=set)
    dropped: int = 0
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    invalid: dict[int, str] = field(default_factory=dict)
    changed: int = 0
    kept_budget: int = 0

    @property
    def kept_errors(self) -> int:
        """Error records kept as they are (``--retry-errors`` asks them again)."""
        return sum(1 for r in self.kept.values() if r.get("status") != "ok")


OPTIONS_DIGEST = "options_digest"
"""``details`` key of a budget failure's record: the digest of the options it was made with."""


def budget_failure(details: Mapping[str, Any] | None) -> bool:
    """Whether an error record's ``details`` say it failed for the token budget, which other
    options may cure (:data:`capjudge.data.types.BUDGET_FAILURES`)."""
    return bool(details) and any((details or {}).get(key) for key in BUDGET_FAILURES)


def stamp_options(result: Any, digest: str) -> None:
    """Write ``digest`` (the run's options) into the ``details`` of ``result`` (a record object or
    dict) when it is a budget failure, so that a re-run with other options asks it again."""
    details = result.get("details") if isinstance(result, dict) else getattr(result, "details", None)
    ok = (result.get("status") if isinstance(result, dict) else getattr(result, "status", "ok")) == "ok"
    if not ok and isinstance(details, dict) and budget_failure(details):
        details[OPTIONS_DIGEST] = digest


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The JSON-object lines of a results file (a half-written last line, from a kill, is skipped)."""
    return [rec for _, rec, _, _ in iter_jsonl(path) if isinstance(rec, dict)]


def plan_resume(
    path: str | Path,
    rows: Sequence[dict[str, Any] | None],
    key: Callable[[dict[str, Any]], Key],
    run: dict[str, Any],
    *,
    retry_errors: bool = False,
    unmatched: Literal["refuse", "keep"] = "refuse",
    options: Mapping[str, Any] | None = None,
    digest: str | None = None,
) -> ResumePlan:
    """Match the records of ``path`` to ``rows`` (``None`` for unreadable rows, always redone).

    ``run`` holds the fields every record of this run carries (method, backend, template_hash,
    ...); a record that differs is a :class:`ResumeConflict`, as is a scored record that matches no
    row, unless ``unmatched="keep"`` (``capjudge arena``: battles of a smaller plan stay in the
    file, in ``ResumePlan.unmatched``). ``options``: the method options of this run (score records
    carry theirs in ``details.method_options``); an ok record made with others is a conflict too.
    ``digest``: this run's :func:`capjudge.run.runner.options_digest`; a budget failure made with
    another is asked again. Nothing to resume when the file does not exist or is empty.
    """
    plan = ResumePlan()
    p = Path(path)
    if not p.is_file():
        return plan
    records = read_records(p)
    for rec in records:
        differs = {k: rec.get(k) for k, v in run.items() if rec.get(k) != v}
        if differs:
            shown = ", ".join(f"{k} {rec.get(k)!r} (this run: {run[k]!r})" for k in differs)
            raise ResumeConflict(
                f"{p} holds results of another run: {shown}. Continue that run with its own options, "
                "write to another --out, or pass --overwrite to start this file over"
            )
        if options is not None and rec.get("status") == "ok":
            made = (rec.get("details") or {}).get("method_options") or {}
            if made != dict(options):
                raise ResumeConflict(
                    f"{p} holds results made with method options {made or 'none'} (this run: {dict(options) or 'none'}). "
                    "Continue that run with its own options, write to another --out, or pass --overwrite to start this file over"
                )
    by_key: dict[Key, list[dict[str, Any]]] = {}
    for rec in records:
        by_key.setdefault(key(rec), []).append(rec)
    for pos, row in enumerate(rows):
        if row is None:
            continue
        matches = by_key.get(key(row))
        if not matches:
            continue
        rec = matches.pop(0)
        problem = record_problem(rec)
        if problem is not None:
            # Never kept: an "ok" record without a valid score would be summed and reported.
            plan.invalid[pos] = problem
            plan.retry.add(pos)
        elif rec.get("status") == "ok":
            plan.kept[pos] = rec
        elif retry_errors:
            plan.retry.add(pos)
        elif budget_failure(rec.get("details")) and digest is not None and (rec.get("details") or {}).get(OPTIONS_DIGEST) != digest:
            plan.changed += 1  # the prompt did not fit, or the reasoning was cut: this run's options may cure it
        elif not (rec.get("details") or {}).get("resumable"):
            plan.kept[pos] = rec
            plan.kept_budget += budget_failure(rec.get("details"))
        # else: a backend failure (server gone, retries exhausted, budget spent): asked again
    leftovers = [r for recs in by_key.values() for r in recs]
    scored = [r for r in leftovers if r.get("status") == "ok"]
    if scored and unmatched == "keep":
        plan.unmatched = scored
        plan.dropped = len(leftovers) - len(scored)
        return plan
    if scored:
        first = scored[0]
        raise ResumeConflict(
            f"{p} holds {len(scored)} result(s) for rows that are not in this input (first: id {first.get('id')!r}, "
            f"image {first.get('image')!r}); write to another --out, or pass --overwrite to start this file over"
        )
    plan.dropped = len(leftovers)
    return plan


class ResultsFile:
    """Appends records as they complete (flushed, each with its 1-based input ``row``) and, on
    :meth:`close`, rewrites the file in row order through a temporary file and an atomic rename.

    ``kept`` records (from a previous run) are written first, replacing the old file atomically.
    """

    def __init__(self, path: str | Path, kept: Iterable[tuple[int, dict[str, Any]]] = ()) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rewrite(sorted(((row, dict(rec, row=row)) for row, rec in kept), key=lambda t: t[0]))
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
        self.written = 0

    def write(self, row: int, result: ScoreResult | PairResult | dict[str, Any]) -> None:
        """Append one record for input row ``row`` (1-based) and flush it to the OS."""
        assert self._fh is not None, "the results file is closed"
        record = scrub_record(result) if isinstance(result, dict) else result.to_dict()
        record["row"] = row
        self._fh.write(json.dumps(record, ensure_ascii=False, default=float) + "\n")
        self._fh.flush()
        self.written += 1

    def _rewrite(self, records: Sequence[tuple[int, dict[str, Any]]]) -> None:
        def write(fh: IO[str]) -> None:
            for _, rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, default=float) + "\n")

        write_atomically(self.path, write)

    def close(self) -> None:
        """Close the file and put its records in input row order (atomically)."""
        if self._fh is None:
            return
        self._fh.close()
        self._fh = None
        records = read_records(self.path)
        self._rewrite(sorted(((int(r.get("row") or 0), r) for r in records), key=lambda t: t[0]))

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
