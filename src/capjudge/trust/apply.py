"""A saved calibration applied to records as a judge makes them (``score|compare --calibration FILE``).

:class:`RecordCalibration` reads a calibration file (:class:`~capjudge.trust.calibration.IsotonicMap`'s
format), checks that it fits the run (:meth:`RecordCalibration.check`: fitted on the same method,
on the same scale, for the same kind of record) and adds ``details.calibration`` to each ok record:

- score records: ``{"of": "score", "raw": score, "calibrated": value on the human scale,
  "human_scale": [low, high], ...}``; the record's ``score`` stays the raw one (on its ``scale``);
- pair records: ``{"of": "confidence", "raw": confidence, "calibrated": chance of agreeing with
  people, "confidence_rule": ...}`` (the confidence as the trust tools read it:
  ``details.confidence``, else the agreement of the two votes; a record without one gets
  ``{"calibrated": null, "note": ...}``);

and in both ``"file"`` (the file's name), ``"digest"`` (``sha256:`` of its bytes), ``"method"``
(``isotonic``) and ``"fitted_on"`` (what it was fitted on). :class:`CalibratedJudge` wraps a
:class:`~capjudge.judges.judge.Judge` so that its ``score*`` / ``compare*`` records carry it too
(a wrapper, since the judges layer sits under this package: a ``Judge`` cannot import it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from capjudge.trust.calibration import IsotonicMap
from capjudge.trust.inputs import pair_confidence

PAIR_TARGET = "agreement with the human verdict"
"""``fitted_on.target`` of a calibration fitted on pair records (``capjudge calibrate`` writes it)."""


class CalibrationMismatch(ValueError):
    """A calibration file that does not fit the run (another method, scale or kind of record)."""


class RecordCalibration:
    """A calibration file ready to apply to records: its ``map``, ``digest`` and ``kind``
    (``score``: a map from the judge's score to the human scale; ``pair``: from a pair verdict's
    confidence to the chance of agreeing with people)."""

    def __init__(self, fmap: IsotonicMap, *, name: str = "", digest: str = "") -> None:
        self.map = fmap
        self.name = name
        self.digest = digest
        self.kind = "pair" if fmap.fitted_on.get("target") == PAIR_TARGET or "confidence_rule" in fmap.fitted_on else "score"

    @classmethod
    def load(cls, path: str | Path) -> RecordCalibration:
        """Read a calibration file; ``ValueError`` naming the file and the cause."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        fmap = IsotonicMap.load(p)
        return cls(fmap, name=p.name, digest="sha256:" + hashlib.sha256(data).hexdigest())

    def check(self, *, method: str, kind: str, scale: tuple[float, float] | None = None) -> None:
        """:class:`CalibrationMismatch` when the file was fitted on another ``method``, another
        ``kind`` of record (``score`` / ``pair``) or, for scores, another ``scale``."""
        where = f"calibration {self.name or 'file'}"
        if kind != self.kind:
            raise CalibrationMismatch(f"{where} was fitted on {self.kind} records, not {kind} records")
        fitted = self.map.fitted_on.get("method")
        if fitted is not None and fitted != method:
            raise CalibrationMismatch(f"{where} was fitted on method {fitted!r}, not {method!r}")
        fscale = self.map.fitted_on.get("scale")
        if kind == "score" and scale is not None and fscale is not None and [float(v) for v in fscale] != [float(v) for v in scale]:
            raise CalibrationMismatch(f"{where} was fitted on the scale {list(fscale)}, not {list(scale)}")

    def backend_note(self, backend: str) -> str | None:
        """A warning when the file was fitted on another backend than ``backend`` (a spec as
        records show it): another model's scores map otherwise. ``None`` when the same or unsaid."""
        fitted = self.map.fitted_on.get("backend")
        if fitted is None or fitted == backend:
            return None
        return f"calibration {self.name or 'file'} was fitted on backend {fitted!r}, this run's is {backend!r}: the map is another judge's"

    def _stamp(self) -> dict[str, Any]:
        return {"file": self.name, "digest": self.digest, "method": self.map.method, "fitted_on": dict(self.map.fitted_on)}

    def annotate(self, record: Any) -> Any:
        """Add ``details.calibration`` to an ok record (a :class:`~capjudge.data.types.ScoreResult` or
        :class:`~capjudge.data.types.PairResult`) and return it; failed records are left alone."""
        if getattr(record, "status", "ok") != "ok":
            return record
        details = record.details if isinstance(record.details, dict) else {}
        if hasattr(record, "verdict"):
            entry: dict[str, Any] = {"of": "confidence"}
            try:
                raw, rule = pair_confidence(record.to_dict(), details)
            except ValueError as exc:
                entry.update(raw=None, calibrated=None, note=str(exc))
            else:
                entry.update(raw=raw, calibrated=float(self.map([raw])[0]), confidence_rule=rule)
        else:
            raw_score = getattr(record, "score", None)
            entry = {"of": "score", "raw": raw_score, "calibrated": None if raw_score is None else float(self.map([raw_score])[0])}
            if self.map.fitted_on.get("human_scale") is not None:
                entry["human_scale"] = list(self.map.fitted_on["human_scale"])
        details["calibration"] = {**entry, **self._stamp()}
        record.details = details
        return record

    def stream(self, stream: Any) -> Any:
        """A judging stream (``rows -> iterator of (position, record)``) whose records are
        annotated as they are made."""

        def run(items: Any, *args: Any, **kwargs: Any) -> Iterator[tuple[int, Any]]:
            for pos, rec in stream(items, *args, **kwargs):
                yield pos, self.annotate(rec)

        return run


class CalibratedJudge:
    """A judge whose records carry ``details.calibration`` (:class:`RecordCalibration`): the
    calibration is checked against the judge's method when wrapped (:class:`CalibrationMismatch`).
    Every other attribute is the judge's.

    >>> judge = CalibratedJudge(Judge("fleur", "hf:..."), "cal.json")  # doctest: +SKIP
    >>> judge.score({"image": "a.jpg", "caption": "..."}).details["calibration"]["calibrated"]  # doctest: +SKIP
    """

    def __init__(self, judge: Any, calibration: RecordCalibration | str | Path) -> None:
        cal = calibration if isinstance(calibration, RecordCalibration) else RecordCalibration.load(calibration)
        method = judge.method
        cal.check(method=method.name, kind="pair" if method.pairwise else "score", scale=getattr(method, "scale", None))
        self.judge = judge
        self.calibration = cal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.judge, name)

    def __enter__(self) -> CalibratedJudge:
        self.judge.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.judge.__exit__(*exc)

    def score(self, *args: Any, **kwargs: Any) -> Any:
        """The judge's ``score``, annotated."""
        return self.calibration.annotate(self.judge.score(*args, **kwargs))

    def compare(self, *args: Any, **kwargs: Any) -> Any:
        """The judge's ``compare``, annotated."""
        return self.calibration.annotate(self.judge.compare(*args, **kwargs))

    def score_many(self, samples: Iterable[Any]) -> Iterator[Any]:
        """The judge's ``score_many``, annotated."""
        return (self.calibration.annotate(r) for r in self.judge.score_many(samples))

    def compare_many(self, pairs: Iterable[Any], **kwargs: Any) -> Iterator[Any]:
        """The judge's ``compare_many``, annotated."""
        return (self.calibration.annotate(r) for r in self.judge.compare_many(pairs, **kwargs))

    def score_stream(self, samples: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """The judge's ``score_stream``, annotated."""
        return self.calibration.stream(self.judge.score_stream)(samples)  # type: ignore[no-any-return]

    def compare_stream(self, pairs: Iterable[Any], **kwargs: Any) -> Iterator[tuple[int, Any]]:
        """The judge's ``compare_stream``, annotated."""
        return self.calibration.stream(self.judge.compare_stream)(pairs, **kwargs)  # type: ignore[no-any-return]
