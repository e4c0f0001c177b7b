"""What an HTML report holds, independent of how it is drawn: a :class:`Page` of :class:`Section`
objects, each with summary facts, figures, small fixed tables and sortable sample tables.

The builders (:mod:`capjudge.report.records`, :mod:`capjudge.report.pages`) fill these; the
template (``templates/report.html.j2``) draws them. Every text here is untrusted data and is
escaped by the template (jinja2 autoescape), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from capjudge.report.thumbs import ThumbCache

ColumnKind = Literal["text", "num", "image", "long", "folded", "list", "status"]


@dataclass(frozen=True)
class Column:
    """A column of a sample table. ``kind`` chooses how cells are drawn and sorted: ``num`` sorts
    numerically, ``image`` draws a thumbnail, ``long`` a scrolling text block, ``folded`` one collapsed
    behind its length (a reasoning), ``list`` a bullet
    list, ``status`` an ok/error badge; everything else sorts as text."""

    key: str
    label: str
    kind: ColumnKind = "text"
    title: str = ""  # tooltip on the header


@dataclass
class SampleTable:
    """A sortable, filterable table: one row per record (a dict of column key -> value; the key
    ``_status`` gives the row's ``ok``/``error`` state for the status filter)."""

    id: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    total: int = 0  # records before ``max_rows`` cut the list (0: all are shown)
    note: str = ""


@dataclass
class StatTable:
    """A small fixed table of figures (measures, per-kind results): texts only, not sortable."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    """A plot embedded as a ``data:`` URI (``uri``), or why it could not be drawn (``error``)."""

    title: str
    uri: str | None = None
    alt: str = ""
    error: str | None = None
    caption: str = ""


@dataclass
class Section:
    """One part of the page: a results file, an agreement between two judges, a probe run ..."""

    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    stats: list[StatTable] = field(default_factory=list)
    tables: list[SampleTable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Page:
    """The whole report. ``thumbs`` holds every embedded thumbnail (each image once, as a CSS
    class, however many rows show it)."""

    title: str
    thumbs: ThumbCache
    subtitle: str = ""
    facts: list[tuple[str, str]] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    command: str = ""
    warnings: list[str] = field(default_factory=list)  # shown first, in a box: e.g. a random model
