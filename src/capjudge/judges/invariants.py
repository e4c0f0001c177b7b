"""What a record with status ``ok`` always holds, checked where records are made
(the checks themselves: :mod:`capjudge.data.recordcheck`).

A score record that says ``ok`` has a finite score on its method's scale; a pair record that says
``ok`` has a verdict (``A``, ``B`` or ``tie``) and, when it was decided by grading, two finite
scores. Whatever the backend answered, a record that breaks this is turned into an error record
naming the cause (:func:`score_problem`, :func:`pair_problem`), so no status-``ok`` record holds a
score of 1e22 on a 0-1 scale, or none at all.

Two allowances: a score within :data:`SCALE_TOLERANCE` of the scale's range outside it is
rounding (probabilities from a float32 softmax can add up to a hair over 1) and is clipped to the
scale; methods that read the first integer keep numbers outside the scale as the VisCE2 code does
(``outside_ok``, recorded as ``details.outside_scale``), finite all the same.
"""

from __future__ import annotations

# The checks are pure and live beside the record types, so that a re-run (capjudge.run.outfile) can
# apply them to old records without importing the judges.
from capjudge.data.recordcheck import SCALE_TOLERANCE, checked_score, pair_problem

__all__ = ["SCALE_TOLERANCE", "checked_score", "pair_problem"]
