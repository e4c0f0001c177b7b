"""Self-contained HTML reports of capjudge results: one file to open in a browser, with the
samples in a sortable, filterable table (thumbnails embedded), a summary and the plots.

>>> from capjudge.report import results_page, write_html
>>> write_html(results_page(["out/fleur.jsonl"], images="examples/images"), "report.html")  # doctest: +SKIP

Modules: :mod:`~capjudge.report.thumbs` (thumbnails), :mod:`~capjudge.report.records` (results
files as summaries and tables), :mod:`~capjudge.report.figures` (plots),
:mod:`~capjudge.report.pages` (the results page of score and compare, the base each feature's
page builds on), :mod:`~capjudge.report.model` (the page model), :mod:`~capjudge.report.html`
(rendering). Each feature's page lives with the feature (``capjudge.probes.page``,
``capjudge.metaeval.pages``, ``capjudge.metaeval.agree_page``, ``capjudge.arena.report``).
Nothing heavy is imported until a report is built.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_LAZY = {
    "results_page": "capjudge.report.pages",
    "write_html": "capjudge.report.html",
    "render": "capjudge.report.html",
    "ReportInputError": "capjudge.report.records",
}

__all__ = sorted(_LAZY)


# Pages that moved to their features (one release).
_MOVED = {"agree_page": "capjudge.metaeval.agree_page", "metaeval_page": "capjudge.metaeval.pages", "probe_page": "capjudge.probes.page"}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, moved=_MOVED)
