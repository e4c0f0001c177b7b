"""The ``capjudge html`` subcommand (a report from existing results files) and the ``--html FILE``
option the other commands share (:func:`add_html_option`, :func:`check_html`, :func:`emit`).

Only the standard library is imported here: building the parser (``capjudge --help``) stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capjudge.cli.aliases import add_alias
from capjudge.cli.terminal import visible

HTML_HELP = "also write a self-contained HTML report here (sortable sample table with thumbnails, plots)"


def add_html_option(p: argparse.ArgumentParser, *, images: bool = False) -> None:
    """Add ``--html FILE`` (and, for commands that judge no images, ``--images DIR`` for the
    report's thumbnails, with the old name ``--html-images`` as a hidden alias)."""
    p.add_argument("--html", default=None, metavar="FILE.html", help=HTML_HELP)
    if images:
        p.add_argument("--images", default=None, metavar="DIR", help="folder the results' relative image paths are resolved against, for the HTML report's thumbnails")
        add_alias(p, "--html-images", "--images", dest="images", metavar="DIR")


def command_line() -> str:
    """The command as typed (shown at the top of the report)."""
    from capjudge.core.redact import scrub

    return scrub("capjudge " + " ".join(shlex.quote(a) for a in sys.argv[1:])) if sys.argv[1:] else ""


def check_html(path: str | None, inputs: Sequence[str | None] = ()) -> None:
    """Before a run: the report file can be written, is none of the inputs and, if it exists, is a
    report capjudge wrote (raises :class:`~capjudge.run.preflight.PreflightError`)."""
    if path is None:
        return
    from capjudge.run.preflight import check_output

    check_output(path, inputs=inputs, what="--html", kind="html")


def emit(path: str | None, build: Callable[[], Any], *, quiet: bool = False) -> None:
    """Build the page (``build()``) and write it to ``path``; prints where on stderr. A report
    that fails to build is an error message, not a lost run: the results are already written."""
    if path is None:
        return
    from capjudge.report.html import write_html

    try:
        page = build()
        write_html(page, path)
    except (OSError, ValueError) as exc:
        from capjudge.core.redact import scrub

        print(visible(f"capjudge: error: the HTML report {path!r} could not be written: {scrub(str(exc))}"), file=sys.stderr)
        return
    if not quiet:
        print(visible(f"HTML report written to {path}"), file=sys.stderr)



# The `capjudge html` parser's help texts.
HTML_PARSER: dict[str, Any] = dict(
    help="a self-contained HTML report of results files (sortable table, thumbnails, plots)",
    description=(
        "Build one HTML file from results files (what capjudge score, compare or probe write): a summary per file "
        "(method, backend, counts, mean score, smoothed vs raw), a score histogram and a sortable, filterable "
        "table of every sample with its image, caption(s), score or verdict, raw answer, explanation and error. "
        "The file loads nothing from the network: thumbnails and plots are embedded."
    ),
)


def register(subparsers: Any) -> None:
    """Add ``html`` to an argparse subparsers object."""
    p = subparsers.add_parser("html", **HTML_PARSER)
    p.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="one or more results files")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--html", metavar="REPORT.html", help="the HTML file to write (as --html on the other commands)")
    add_alias(out, "--out", "--html (or -o)", dest="html", metavar="REPORT.html")
    p.add_argument("--images", default=None, metavar="DIR", help="folder relative image paths are resolved against (default: beside each results file, then the current folder); only images inside it (or, without it, inside the folders searched) are embedded")
    p.add_argument("--allow-outside-images", action="store_true", help="also embed image files outside the image folder(s): ../ paths, absolute paths, symlinks pointing outside")
    p.add_argument("--names", nargs="+", metavar="NAME", help="a name per results file (default: the file names)")
    p.add_argument("--title", default=None, help="the page title")
    p.add_argument("--agree", action="store_true", help="with two or more score files: add the judges' agreement (scatter, largest disagreements)")
    p.add_argument("--max-rows", type=int, default=5000, metavar="N", help="at most N rows per table (default 5000; 0: all)")
    p.add_argument("--thumb-size", type=int, default=160, metavar="PX", help="thumbnail size in pixels, longer side (default 160; 0: no thumbnails)")
    p.set_defaults(func=cmd_html)


def cmd_html(args: argparse.Namespace) -> int:
    """``capjudge html``: 0 written, 2 bad input (a missing or unusable results file, a bad option)."""
    from capjudge.core.errors import UsageError

    if args.max_rows < 0 or args.thumb_size < 0:
        raise UsageError("--max-rows and --thumb-size must be 0 or more")
    if args.images is not None and not Path(args.images).is_dir():
        raise UsageError(f"--images {args.images!r} is not a folder")
    check_html(args.html, args.results)
    from capjudge.metaeval.agree_load import AgreeInputError
    from capjudge.metaeval.agree_page import agree_lead
    from capjudge.report.html import write_html
    from capjudge.report.pages import results_page

    try:
        page = results_page(
            args.results,
            images=args.images,
            names=args.names,
            title=args.title,
            max_rows=args.max_rows,
            thumb_px=args.thumb_size,
            lead=agree_lead(args.results, args.names) if args.agree else None,
            command=command_line(),
            allow_outside_images=args.allow_outside_images,
            confine_searched=True,
        )
    except AgreeInputError as exc:
        raise UsageError(f"--agree: {exc}") from None
    out = write_html(page, args.html)
    n = sum(len(t.rows) for s in page.sections for t in s.tables)
    thumbs = len(page.thumbs.css_classes())
    print(visible(f"HTML report written to {out} ({n} rows, {thumbs} thumbnails, {out.stat().st_size / 1024:.0f} KB)"), file=sys.stderr)
    hint = thumbnail_hint(rows=n, thumbs=thumbs, thumb_px=args.thumb_size, images=args.images)
    if hint:
        print(f"capjudge: {visible(hint)}", file=sys.stderr)
    return 0


def thumbnail_hint(*, rows: int, thumbs: int, thumb_px: int, images: str | None) -> str | None:
    """What to do when a report of ``rows`` rows has no thumbnail (``None``: nothing to say)."""
    if thumbs or not rows or not thumb_px:
        return None
    if images is None:
        return "no thumbnails: give --images DIR, the folder the results' image paths are relative to (the run's --images)"
    return f"no thumbnails: none of the results' images was found under --images {images!r} (the run's --images is the folder they are relative to)"
