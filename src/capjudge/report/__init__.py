"""Self-contained HTML reports of capjudge results: one file to open in a browser, with the
samples in a sortable, filterable table (thumbnails embedded), a summary and the plots.

>>> from capjudge.report import results_page, write_html
>>> write_html(results_page(["out/fleur.jsonl"], images="examples/images"), "report.html")  # doctest: +SKIP

Modules: :mod:`~capjudge.report.thumbs` (thumbnails), :mod:`~capjudge.report.records` (results
files as summaries and tables), :mod:`~capjudge.report.figures` (plots),
:mod:`~capjudge.report.pages` (one page builder per command), :mod:`~capjudge.report.html`
(rendering), :mod:`~capjudge.report.commands` (the ``capjudge html`` subcommand and ``--html``).
Nothing heavy is imported until a report is built.
"""

from __future__ import annotations

from capjudge.lazyexport import lazy_attributes

_LAZY = {
    "results_page": "capjudge.report.pages",
    "agree_page": "capjudge.report.pages",
    "metaeval_page": "capjudge.report.pages",
    "probe_page": "capjudge.report.pages",
    "write_html": "capjudge.report.html",
    "render": "capjudge.report.html",
    "ReportInputError": "capjudge.report.records",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
