"""How far to trust a judge: confidence, calibration to people, cascades with a guaranteed
agreement, and system scores corrected by a few human labels (docs/trust.md).

Modules, one job each: :mod:`~capjudge.trust.calibration` (reliability diagram data, ECE, Brier,
the isotonic map to the human scale and its calibration file), :mod:`~capjudge.trust.cascade`
(Trust or Escalate: thresholds with a risk guarantee, the cascade of judges, its plan file),
:mod:`~capjudge.trust.ppi` (prediction-powered means: PPI, PPI++, classical, judge-only; clustered
intervals), :mod:`~capjudge.trust.ppi_bt` (Bradley-Terry strengths by prediction-powered logistic
regression), :mod:`~capjudge.trust.inputs` (results files and human labels joined by id, the
confidence of a pair record), :mod:`~capjudge.trust.run` (what ``capjudge calibrate`` and
``capjudge cascade`` compute), :mod:`~capjudge.trust.curves` (coverage-risk curves),
:mod:`~capjudge.trust.page` (their ``--html`` pages, drawn with matplotlib by the report kit),
:mod:`~capjudge.trust.apply` (a calibration file on records as they are
made: ``score|compare --calibration``), :mod:`~capjudge.trust.live` (a cascade plan run live:
``compare --cascade``) and :mod:`~capjudge.trust.system` (``score|arena --human``: the run's numbers
corrected by human labels). numpy and scipy otherwise; nothing is imported until used.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_LAZY = {
    "IsotonicMap": "capjudge.trust.calibration",
    "reliability": "capjudge.trust.calibration",
    "ece": "capjudge.trust.calibration",
    "brier": "capjudge.trust.calibration",
    "CascadePlan": "capjudge.trust.cascade",
    "calibrate": "capjudge.trust.cascade",
    "calibrate_judge": "capjudge.trust.cascade",
    "apply": "capjudge.trust.cascade",
    "ppi_mean": "capjudge.trust.ppi",
    "classical_mean": "capjudge.trust.ppi",
    "naive_mean": "capjudge.trust.ppi",
    "ppi_logistic": "capjudge.trust.ppi_bt",
    "bradley_terry": "capjudge.trust.ppi_bt",
    "read_results": "capjudge.trust.inputs",
    "read_human": "capjudge.trust.inputs",
    "calibration_report": "capjudge.trust.run",
    "cascade_report": "capjudge.trust.run",
    "selective_curve": "capjudge.trust.curves",
    "cascade_curve": "capjudge.trust.curves",
    "calibration_page": "capjudge.trust.page",
    "cascade_page": "capjudge.trust.page",
    "CalibratedJudge": "capjudge.trust.apply",
    "RecordCalibration": "capjudge.trust.apply",
    "LiveCascade": "capjudge.trust.live",
    "score_summary": "capjudge.trust.system",
    "arena_summary": "capjudge.trust.system",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
