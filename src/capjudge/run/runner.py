"""The one resumable runner behind ``score``, ``compare``, ``arena`` and batch mode's planning pass.

Rows are split by what ``--out`` already holds (:func:`capjudge.run.outfile.plan_resume`): kept (not
asked again), retried (their error record is asked again bypassing cached answers), new, and bad
(input rows that could not be read: their error record is made without the backend). The rows to
ask are streamed through the caller's ``stream`` function; each record is written to the results
file as it arrives (:class:`capjudge.run.outfile.ResultsFile`), and the file ends in input order
whatever happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from capjudge.data.io import BadRow
from capjudge.run.outfile import ResultsFile, ResumePlan, plan_resume, stamp_options

Stream = Callable[[list[Any]], Iterator[tuple[int, Any]]]
"""Judges a list of rows: yields ``(index in the list, record)`` as answers arrive."""

Progress = Callable[[Iterator[tuple[int, Any]], int, int], Iterable[tuple[int, Any]]]
"""``progress(items, total, done)`` may wrap the stream of new records (a progress bar)."""


@dataclass
class Todo:
    """The input positions a run asks: ``retry`` (bypassing the cache), ``fresh``, and ``bad``
    (unreadable rows, whose error record needs no backend)."""

    retry: list[int]
    fresh: list[int]
    bad: list[int]


def resume_plan(
    out: str | Path,
    rows: Sequence[Any],
    key: Callable[[dict[str, Any]], Any],
    run: dict[str, Any],
    *,
    overwrite: bool = False,
    retry_errors: bool = False,
    unmatched: Literal["refuse", "keep"] = "refuse",
    options: Mapping[str, Any] | None = None,
    digest: str | None = None,
) -> ResumePlan:
    """What is kept from ``out`` (nothing with ``overwrite``). Raises
    :class:`~capjudge.run.outfile.ResumeConflict` when ``out`` was written by another run (other
    ``run`` fields, or, given ``options``, other method options). ``digest``
    (:func:`options_digest`): budget failures made with other options are asked again."""
    if overwrite:
        return ResumePlan()
    return plan_resume(out, [None if isinstance(r, BadRow) else r for r in rows], key, run, retry_errors=retry_errors, unmatched=unmatched, options=options, digest=digest)


def options_digest(judge: Any) -> str | None:
    """A digest of what a change of options may change in a judge's answers: its backend's
    identity (the cache key's: the model and its settings, a thinking budget given), its
    ``max_new_tokens`` and its method's options. ``None`` when the judge cannot say (a server's
    judge through ``--remote``, a panel)."""
    import hashlib
    import json

    try:
        identity = judge.backend.identity()
    except Exception:  # noqa: BLE001 - no identity: no digest, budget failures kept as they are
        return None
    if not isinstance(identity, dict) or getattr(judge, "members", None) is not None:
        return None
    what = {"backend": identity, "max_new_tokens": getattr(judge, "max_new_tokens", None), "method_options": dict(getattr(judge.method, "options", {}) or {})}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def split_rows(rows: Sequence[Any], plan: ResumePlan) -> Todo:
    """The positions of ``rows`` that ``plan`` does not keep, split into retry, fresh and bad."""
    todo = [pos for pos in range(len(rows)) if pos not in plan.kept]
    retry = [pos for pos in todo if pos in plan.retry and not isinstance(rows[pos], BadRow)]
    fresh = [pos for pos in todo if pos not in plan.retry and not isinstance(rows[pos], BadRow)]
    bad = [pos for pos in todo if isinstance(rows[pos], BadRow)]
    return Todo(retry, fresh, bad)


def ask(backend: Any, rows: Sequence[Any], todo: Todo, stream: Stream, bad_row: Callable[[Any], Any] | None = None) -> Iterator[tuple[int, Any]]:
    """``(input position, record)`` of every row of ``todo``: bad rows first (``bad_row(row)``),
    then the retried rows with ``backend``'s cache bypassed, then the new rows."""
    from capjudge.backends.cache import bypass_cache

    if bad_row is not None:
        for pos in todo.bad:
            yield pos, bad_row(rows[pos])
    if todo.retry:
        with bypass_cache(backend):
            for k, res in stream([rows[pos] for pos in todo.retry]):
                yield todo.retry[k], res
    for k, res in stream([rows[pos] for pos in todo.fresh]):
        yield todo.fresh[k], res


def run_rows(
    backend: Any,
    rows: Sequence[Any],
    plan: ResumePlan,
    stream: Stream,
    *,
    out: str | Path | None,
    bad_row: Callable[[Any], Any] | None = None,
    progress: Progress | None = None,
    extra: Sequence[dict[str, Any]] = (),
    digest: str | None = None,
) -> Iterator[tuple[int, Any]]:
    """Judge the rows ``plan`` does not keep and write each record to ``out`` as it completes
    (none written without ``out``); yields ``(input position, record)`` for every new record.
    ``extra`` records (of ``out``, outside this run's rows) are kept after the rows. The file
    ends in input order whatever happens. ``digest`` (:func:`options_digest`) goes into every
    budget failure's record (:func:`capjudge.run.outfile.stamp_options`)."""
    todo = split_rows(rows, plan)
    asked = ask(backend, rows, todo, stream, bad_row)
    # The bar counts answers as they arrive (records kept from out are already done).
    items: Iterable[tuple[int, Any]] = progress(asked, len(rows), len(plan.kept)) if progress is not None else asked
    kept = [*((pos + 1, rec) for pos, rec in plan.kept.items()), *((len(rows) + k + 1, rec) for k, rec in enumerate(extra))]
    sink = ResultsFile(out, kept) if out is not None else None
    try:
        for pos, res in items:
            if digest is not None:
                stamp_options(res, digest)
            if sink is not None:
                sink.write(pos + 1, res)
            yield pos, res
    finally:
        if sink is not None:
            sink.close()


def planning_pass(backend: Any, rows: Sequence[Any], plan: ResumePlan, stream: Stream) -> Callable[[], None]:
    """The pass a batch session runs with its planning backend in place: the rows the final pass
    will judge (as :func:`run_rows` selects them, bad rows aside), their records discarded."""
    todo = split_rows(rows, plan)
    todo = Todo(todo.retry, todo.fresh, [])

    def run() -> None:
        for _ in ask(backend, rows, todo, stream):
            pass

    return run


def kept_results(plan: ResumePlan, kind: Any) -> Iterator[Any]:
    """The records kept from ``out`` as results of ``kind`` (``ScoreResult``, ``PairResult``), for
    the summary (their cache flags are the old run's, so they are dropped: cache hits count this
    run's answers)."""
    for rec in plan.kept.values():
        res = kind.from_dict(rec)
        res.details.pop("cached", None)
        res.details.pop("row", None)
        yield res
