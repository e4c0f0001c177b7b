"""The Ray actor of a distributed run: one :class:`~capjudge.judges.judge.Judge` per process.

Ray Data builds one :class:`JudgeWorker` per actor (``map_batches`` with an actor pool), so the
model loads once per actor (at its first cache miss), and calls it with batches of units (whole
image groups, see :mod:`capjudge.distributed.config`). This module does not import Ray.

A batch's answer has three columns: ``row`` (input index), ``result`` (the pickled
:class:`~capjudge.data.types.ScoreResult`, exactly what one process makes) and ``load_error`` (the
model could not be loaded: the driver stops the run, as a single process does). A sample that
fails is an error record, as in one process; a bug that stops a unit midway turns that unit's
unanswered samples into error records that say so.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

from capjudge.core.redact import get_logger

if TYPE_CHECKING:
    from capjudge.data.types import ScoreResult
    from capjudge.distributed.config import JudgeConfig
    from capjudge.judges.judge import Judge

log = get_logger(__name__)


def lost_record(judge: Judge, index: int, sample: Any, message: str, *, resumable: bool = True) -> ScoreResult:
    """The error record of a sample that was never judged (its worker failed), made as the judge
    makes every record; ``resumable`` marks it for a re-run to ask again."""
    from capjudge.data.types import Sample
    from capjudge.judges.prepare import Prepared, sample_id

    if isinstance(sample, Sample):
        s = sample
    else:
        try:
            s = Sample(image=sample["image"], caption=sample["caption"], references=sample.get("references") or (), id=sample.get("id"))
        except (KeyError, TypeError, ValueError, AttributeError):
            s = Sample(image="<invalid>", caption="")
    prep = Prepared(index, s)
    result = judge.error_record(prep, f"sample {sample_id(s, index)}: {message}")
    result.details["resumable"] = resumable
    return result


RESULT_COLUMNS = ("row", "id", "image", "caption", "score", "status", "error", "record")


def result_rows(rows: list[int], results: list[ScoreResult]) -> dict[str, list[Any]]:
    """Results as the columns of a results Dataset: ``row`` (1-based input position), ``id``,
    ``image``, ``caption``, ``score``, ``status``, ``error``, and ``record``: the results-file record
    as JSON text (its ``details`` differ from sample to sample, which a table column cannot hold)."""
    import json

    cols: dict[str, list[Any]] = {k: [] for k in RESULT_COLUMNS}
    for row, result in zip(rows, results):
        rec = result.to_dict()
        cols["row"].append(int(row) + 1)
        for k in RESULT_COLUMNS[1:-1]:
            cols[k].append(rec.get(k))
        cols["record"].append(json.dumps(rec, ensure_ascii=False, default=float))
    return cols


class JudgeWorker:
    """Holds one judge for the life of the actor; judges units of samples."""

    def __init__(self, config: JudgeConfig, records: bool = False) -> None:
        self.judge = config.build()
        self.records = records

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        """Judge every unit of ``batch["unit"]`` (pickled ``[(index, sample), ...]``); with
        ``records``, answer result rows (:func:`result_rows`) instead of pickled results."""
        out = self._judge(batch)
        if not self.records:
            return out
        from capjudge.backends.lazy import BackendLoadError

        if any(out["load_error"]):
            raise BackendLoadError(next(e for e in out["load_error"] if e))
        return result_rows(out["row"], [pickle.loads(b) for b in out["result"]])

    def _judge(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from capjudge.backends.lazy import BackendLoadError
        from capjudge.judges.scoring import ScoringRun

        rows: list[int] = []
        results: list[bytes] = []
        for blob in batch["unit"]:
            unit = pickle.loads(blob)
            answered: set[int] = set()
            try:
                # The input's own indices: default ids and error texts as in one process.
                for index, result in ScoringRun(self.judge).run_items(unit):
                    answered.add(index)
                    rows.append(index)
                    results.append(pickle.dumps(result))
            except BackendLoadError as exc:
                return {"row": [-1], "result": [b""], "load_error": [str(exc)]}
            except Exception as exc:  # noqa: BLE001 - a bug must not lose the unit's other samples
                log.exception("judging a unit of %d samples failed", len(unit))
                for index, sample in unit:
                    if index not in answered:
                        rec = lost_record(self.judge, index, sample, f"not judged: the Ray worker failed: {type(exc).__name__}: {exc}")
                        rows.append(index)
                        results.append(pickle.dumps(rec))
        return {"row": rows, "result": results, "load_error": [""] * len(rows)}

    def __repr__(self) -> str:
        return f"JudgeWorker({self.judge!r})"


__all__ = ["RESULT_COLUMNS", "JudgeWorker", "lost_record", "result_rows"]
