"""The kit's base page: results files (``capjudge html``, ``score``/``compare --html``, the demo),
a :class:`~capjudge.report.model.Page` that :func:`capjudge.report.html.write_html` renders; and
what the features' pages build on (:func:`thumb_cache`, :func:`file_section`). The features' pages
live with them: :mod:`capjudge.metaeval.agree_page` (``agree --html``, ``html --agree``),
:mod:`capjudge.metaeval.pages` (``meta-eval`` / ``report`` / ``run-benchmark --html``),
:mod:`capjudge.probes.page` (``probe --html``), :mod:`capjudge.arena.report` (``arena --html``).

Thumbnails are looked up under ``images`` (the run's ``--images`` folder) and then beside each
results file and in the current folder, the places a relative image path usually means.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from capjudge.core.lazyexport import moved_names
from capjudge.report import figures
from capjudge.report.model import Page, Section
from capjudge.report.random_model import random_model_warnings
from capjudge.report.records import (
    DEFAULT_MAX_ROWS,
    ResultsFile,
    load_results_file,
    results_section,
    score_values,
)
from capjudge.report.thumbs import DEFAULT_MAX_PX, ThumbCache

LeadSections = Callable[[Sequence[ResultsFile], ThumbCache], list[Section]]
"""Sections a feature puts before the files of :func:`results_page` (given the loaded files and
the page's thumbnails), e.g. :func:`capjudge.metaeval.agree_page.agree_lead`."""


def thumb_cache(
    images: str | Path | None,
    results: Sequence[str | Path] = (),
    max_px: int = DEFAULT_MAX_PX,
    *,
    allow_outside: bool = False,
    confine_searched: bool = False,
) -> ThumbCache:
    """Thumbnails resolved under ``images``, then the results files' folders, then the current folder.

    Embedded only from inside ``images`` when it is given; with ``confine_searched`` (``capjudge
    html``: the results may be someone else's) and no ``images``, only from the folders searched;
    ``allow_outside`` embeds any file found."""
    roots: list[Path] = [Path(images)] if images else []
    for r in results:
        parent = Path(r).resolve().parent
        if parent not in roots:
            roots.append(parent)
    if Path.cwd() not in roots:
        roots.append(Path.cwd())
    allowed: list[Path] | None = None
    if not allow_outside:
        if images:
            allowed = [Path(images)]
        elif confine_searched:
            allowed = list(roots)
    return ThumbCache(roots, max_px, allowed)


def _scale_of(rf: ResultsFile) -> tuple[float, float] | None:
    for _, r in rf.records:
        s = r.get("scale")
        if isinstance(s, list) and len(s) == 2 and all(isinstance(x, (int, float)) for x in s):
            return float(s[0]), float(s[1])
    return None


def file_section(rf: ResultsFile, thumbs: ThumbCache, n: int, title: str | None = None, max_rows: int = DEFAULT_MAX_ROWS, histogram: bool = True) -> Section:
    """One results file: its summary, the score histogram (``histogram``, two scores or more) and
    the sample table (id ``f{n}``)."""
    section = results_section(rf, thumbs, title=title, table_id=f"f{n}", max_rows=max_rows)
    values = score_values(rf)
    if histogram and len(values) >= 2:
        section.figures.append(figures.score_histogram(values, title or Path(rf.path).name, _scale_of(rf)))
    return section


def paper_judge_notes(files: Sequence[ResultsFile], labels: Sequence[str]) -> list[str]:
    """For each results file whose ok records were made by a method with a paper judge
    (``Method.paper_judge``) on another judge: the note that its numbers are not directly
    comparable with the paper's, naming the file."""
    from capjudge.prompts.registry import paper_judge_of

    notes = []
    for rf, label in zip(files, labels, strict=True):
        models: dict[str, set[str]] = {}  # method -> the models of its ok records
        for _, r in rf.records:
            if r.get("status") == "ok" and isinstance(r.get("method"), str):
                models.setdefault(r["method"], set()).add(str(r.get("model") or ""))
        for method, seen in models.items():
            judge = paper_judge_of(method)
            note = judge.note(method, seen) if judge is not None else None
            if note is not None:
                notes.append(f"{label}: {note}")
    return notes


# ------------------------------------------------------------------------------ results files
def results_page(
    paths: Sequence[str | Path],
    *,
    images: str | Path | None = None,
    names: Sequence[str] | None = None,
    title: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    thumb_px: int = DEFAULT_MAX_PX,
    command: str = "",
    allow_outside_images: bool = False,
    confine_searched: bool = False,
    lead: LeadSections | None = None,
) -> Page:
    """One section per results file (summary, score histogram, sample table), after the sections
    of ``lead`` (``capjudge html --agree``: :func:`capjudge.metaeval.agree_page.agree_lead`, the
    judges' agreement). Raises :class:`~capjudge.report.records.ReportInputError` for a missing or
    unusable file. Thumbnails come only from inside ``images`` (or, with ``confine_searched``, the
    folders searched) unless ``allow_outside_images`` (:func:`thumb_cache`)."""
    if names is not None and len(names) != len(paths):
        from capjudge.report.records import ReportInputError

        raise ReportInputError(f"{len(names)} names for {len(paths)} results files")
    files = [load_results_file(p) for p in paths]
    thumbs = thumb_cache(images, paths, thumb_px, allow_outside=allow_outside_images, confine_searched=confine_searched)
    labels = list(names) if names else [Path(p).name for p in paths]
    page = Page(title=title or ("capjudge report: " + ", ".join(labels)), thumbs=thumbs, command=command)
    page.facts = [("results files", str(len(files))), ("records", str(sum(len(f.records) for f in files)))]
    page.warnings = random_model_warnings((label, (r for _, r in rf.records)) for rf, label in zip(files, labels, strict=True))
    page.warnings += paper_judge_notes(files, labels)
    if lead is not None:
        page.sections += lead(files, thumbs)
    for n, (rf, label) in enumerate(zip(files, labels, strict=True), start=1):
        page.sections.append(file_section(rf, thumbs, n, label, max_rows))
    return page


# The pages of the features, moved beside them (docs/architecture.md); imported only when used.
__getattr__ = moved_names(
    __name__,
    {
        "agree_page": "capjudge.metaeval.agree_page",
        "agree_sections": "capjudge.metaeval.agree_page",
        "DISAGREEMENT_COLUMNS": "capjudge.metaeval.agree_page",
        "metaeval_page": "capjudge.metaeval.pages",
        "probe_page": "capjudge.probes.page",
        "PROBE_COLUMNS": "capjudge.probes.page",
    },
)
