"""Text from data made safe for the terminal: control characters written as escapes.

A file, model or caption name is data: a battle file named ``"\\x1b[2J..."`` printed raw clears the
screen, a ``"\\r"`` overwrites the line it is on, a bidirectional override (U+202E) reorders what
follows. :func:`visible` writes every such character as its Python escape (``\\x1b``, ``\\u202e``),
and the command line's printing paths go through it: error messages (``app._error``), log records
(:class:`VisibleFormatter`), the rich consoles (:func:`make_console`: every string they render, table
cells included) and the plain lines built from data. Tabs and newlines stay (``newlines=False``
escapes newlines too, for one-line fields); machine output (``--format json``) is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]
_ESCAPES: dict[int, str] = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROLS}
_KEEP_LINES = {k: v for k, v in _ESCAPES.items() if k not in (0x09, 0x0A)}
_ONE_LINE = {k: v for k, v in _ESCAPES.items() if k != 0x09}


def visible(text: object, *, newlines: bool = True) -> str:
    """``text`` (made a string) with its control characters written as escapes: C0 but tab and
    newline (``newlines=False``: but tab), DEL, C1, the bidirectional overrides and isolates, the
    line and paragraph separators."""
    return str(text).translate(_KEEP_LINES if newlines else _ONE_LINE)


class VisibleFormatter(logging.Formatter):
    """A log formatter whose lines hold no control character of the data they quote."""

    def format(self, record: logging.LogRecord) -> str:
        """The record formatted, then made :func:`visible`."""
        return visible(super().format(record))


def make_console(**kwargs: Any) -> Any:
    """A rich ``Console`` (``kwargs`` as rich's) whose every rendered string is :func:`visible`:
    ``print`` of a text and the cells of a table alike (rich writes its own styles after that)."""
    from rich.console import Console

    class VisibleConsole(Console):
        def render_str(self, text: str, **options: Any) -> Any:
            return super().render_str(visible(text), **options)

    return VisibleConsole(**kwargs)


__all__ = ["VisibleFormatter", "make_console", "visible"]
