"""Rendering a :class:`~capjudge.report.model.Page` to one self-contained HTML file.

The page is drawn by the jinja2 template ``templates/report.html.j2`` (package data) with
autoescape on: captions, raw answers and errors are untrusted text and are always escaped. The
file loads nothing: styles and the small sort/filter script are inline, thumbnails and plots are
``data:`` URIs.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any

from capjudge.report.model import Page

TEMPLATE = "report.html.j2"


def _num(v: Any) -> str:
    """A cell's number: integers as integers, others with 4 significant digits."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-" if v is None else str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def _sort_value(v: Any) -> str:
    """The ``data-v`` attribute the script sorts on (numbers in full precision)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    if isinstance(v, dict):
        return str(v.get("label", ""))
    if isinstance(v, list):
        return " ".join(str(x) for x in v)
    return str(v)


def _environment() -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("capjudge.report", "templates"),
        autoescape=True,  # every caption, answer and error is untrusted text
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["sortv"] = _sort_value
    return env


def render(page: Page) -> str:
    """The page as HTML text."""
    from capjudge._version import __version__

    env = _environment()
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return env.get_template(TEMPLATE).render(page=page, version=__version__, generated=generated, thumb_css=page.thumbs.css_classes())


def write_html(page: Page, path: str | Path) -> Path:
    """Render ``page`` and write it to ``path`` (parent folders are made)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render(page), encoding="utf-8")
    return p
