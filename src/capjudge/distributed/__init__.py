"""Judging at scale: many judges at once, each in its own process, through Ray Data.

This is not a backend: every Ray actor holds one ordinary :class:`~capjudge.judges.judge.Judge`
with any backend (a local model per GPU, or a client of an OpenAI-protocol server), and the
samples are split between them in units of whole image groups. Ray is an optional extra
(``pip install 'capjudge[ray]'``) and is imported only when one of these names is used:

- :func:`score_list` / :func:`score_stream`: samples in memory (``capjudge score --ray``);
- :func:`score_dataset`: a ``ray.data.Dataset`` of samples in, a Dataset of results out;
- :class:`RayOptions`, :class:`JudgeConfig`: the cluster side and the judge side of a run.

See docs/ray.md.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_EXPORTS = {
    "JudgeConfig": "capjudge.distributed.config",
    "RayOptions": "capjudge.distributed.ray_run",
    "RayPlanError": "capjudge.distributed.ray_run",
    "RayUnavailable": "capjudge.distributed.ray_run",
    "score_dataset": "capjudge.distributed.ray_run",
    "score_list": "capjudge.distributed.ray_run",
    "score_stream": "capjudge.distributed.ray_run",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
