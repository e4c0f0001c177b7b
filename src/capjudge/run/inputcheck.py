"""An input file read whole before a run starts, and refused (a usage error, exit 2) when it cannot
make a sensible run: it holds no rows at all, or two rows share an id.

Repeated ids are refused up front because the results would carry them: ``capjudge agree`` and
``capjudge arena`` refuse a file in which an id occurs twice, and a run would have been spent on a
file no later step accepts. Rows that cannot be read are not refused here: each becomes its own
error record, and the other rows are judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.data.io import BadRow, read_numbered_items
from capjudge.run.preflight import PreflightError

SHOWN = 5
"""How many repeated ids a message lists."""


def load_items(path: str | Path, *, pairs: bool = False, unique_ids: bool = True, what: str = "--input") -> list[dict[str, Any] | BadRow]:
    """Every sample (``pairs``: pair) of ``path``, as :func:`capjudge.data.io.read_samples` reads them.

    Raises :class:`PreflightError` when the file holds no rows (an empty file, blank lines only,
    a CSV header only) and, with ``unique_ids``, when an id occurs twice (rows without an id take
    their row number). The message lists the first repeated ids with their lines.
    """
    numbered = list(read_numbered_items(path, pairs=pairs))
    if not numbered:
        raise PreflightError(f"{what} {str(path)!r} holds no rows (an empty file, blank lines only, or a CSV header only): nothing to judge")
    if unique_ids:
        check_unique_ids(path, numbered, what=what)
    return [item for _, item in numbered]


def _id(item: dict[str, Any] | BadRow) -> str | None:
    return item.id if isinstance(item, BadRow) else item.get("id")


def check_unique_ids(path: str | Path, numbered: list[tuple[int, dict[str, Any] | BadRow]], *, what: str = "--input") -> None:
    """Raise :class:`PreflightError` when two of the ``(line, item)`` rows share an id."""
    lines: dict[str, list[int]] = {}
    for line, item in numbered:
        rid = _id(item)
        if rid is not None:
            lines.setdefault(rid, []).append(line)
    repeated = [(rid, at) for rid, at in lines.items() if len(at) > 1]
    if not repeated:
        return
    shown = ", ".join(f"{rid!r} (lines {', '.join(str(n) for n in at[:4])}{', ...' if len(at) > 4 else ''})" for rid, at in repeated[:SHOWN])
    more = f" and {len(repeated) - SHOWN} more" if len(repeated) > SHOWN else ""
    raise PreflightError(
        f"{what} {str(path)!r} holds the same id more than once: {shown}{more}. Every row needs its own id "
        "(`capjudge agree` and `arena` refuse results with a repeated id; a row without an id takes its row number): "
        "fix the ids, or drop the id field to number the rows"
    )
