"""Checks a run makes before any backend is built: a 13B model takes minutes to load, and a typo in
``--out`` must not cost them.

Each check raises :class:`PreflightError` (a usage error: the command line exits 2) with a message
that names the item and the cause. None of them writes anything: ``--out`` is checked by creating
and removing a probe file in its folder, never by opening (and emptying) the file itself.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capjudge.core.errors import UsageError


class PreflightError(UsageError, ValueError):
    """A run cannot start: a path, a column, or the backend spec is wrong."""


def check_input(path: str | Path, what: str = "--input") -> Path:
    """The input file exists and is a file."""
    p = Path(path)
    if not p.exists():
        raise PreflightError(f"{what} {str(p)!r} not found")
    if not p.is_file():
        raise PreflightError(f"{what} {str(p)!r} is not a file")
    return p


def check_images(path: str | Path | None, what: str = "--images") -> None:
    """The image folder, when given, exists and is a folder."""
    if path is None:
        return
    p = Path(path)
    if not p.exists():
        raise PreflightError(f"{what} folder {str(p)!r} not found")
    if not p.is_dir():
        raise PreflightError(f"{what} {str(p)!r} is not a folder")


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_output(path: str | Path, *, inputs: Iterable[str | Path | None] = (), what: str = "--out", kind: str | None = None) -> None:
    """The results file can be written, and is none of ``inputs`` (which it would overwrite).

    The nearest existing folder on the way to the file must be a writable folder (the missing ones
    are created when the run starts); an existing file must be a writable regular file. With
    ``kind`` (a key of :data:`capjudge.run.outguard.KINDS`), an existing file must also be one capjudge
    wrote for that kind of output, or empty (:func:`capjudge.run.outguard.replace_refusal`).
    """
    p = Path(path)
    for src in inputs:
        if src is not None and _same_file(p, Path(src)):
            raise PreflightError(f"{what} {str(p)!r} is the input file {str(src)!r}: the run would overwrite its own input; write the results elsewhere")
    if p.exists():
        if p.is_dir():
            raise PreflightError(f"{what} {str(p)!r} is a folder, not a file")
        if not os.access(p, os.W_OK):
            raise PreflightError(f"{what} {str(p)!r} cannot be written (permission denied)")
        if kind is not None:
            from capjudge.run.outguard import KINDS, replace_refusal

            why = replace_refusal(p, kind)
            if why is not None:
                hint = " (--overwrite only starts over a capjudge results file)" if kind in ("score", "pair") else ""
                raise PreflightError(f"{what} {str(p)!r} exists and is not {KINDS[kind]} ({why}): the run would replace it. Choose another path, or delete the file first if it may go{hint}")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise PreflightError(f"{what} {str(p)!r} cannot be created: {str(folder)!r} is a file, not a folder")
    try:
        # A real write, not os.access: it also catches read-only file systems and root users.
        fd, probe = tempfile.mkstemp(prefix=".capjudge-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise PreflightError(f"{what} {str(p)!r} cannot be written: folder {str(folder)!r}: {exc.strerror or exc}") from None


def check_columns(path: str | Path, required: Sequence[str]) -> None:
    """The input holds the ``required`` columns.

    A CSV file must name them in its header. In JSONL/JSON at least one row must have them all (a
    row without them becomes that row's error record, as any malformed row does); when none does,
    the file is the wrong file, and the message lists the fields found. Reading stops at the first
    row that has them all.
    """
    from capjudge.data.io import read_rows

    p = Path(path)
    if p.suffix.lower() == ".csv":
        from capjudge.data.rowtext import HeaderError, csv_header

        try:
            header = csv_header(p)  # a byte-order mark is not part of the first column's name
        except HeaderError as exc:
            raise PreflightError(f"{str(p)!r}: {exc}") from None
        if not header:
            raise PreflightError(f"{str(p)!r} holds no rows: not even a header line (an empty file, or a blank first line)")
        missing = [c for c in required if c not in header]
        if missing:
            found = ", ".join(h for h in header if h) or "none (empty file?)"
            raise PreflightError(f"{str(p)!r} has no column(s) {', '.join(missing)}: columns found: {found}")
        return
    seen: list[str] = []
    objects = 0
    for row in read_rows(p):
        if not isinstance(row, Mapping):
            continue
        if all(c in row for c in required):
            return
        objects += 1
        seen.extend(str(k) for k in row if str(k) not in seen)
    if objects:
        raise PreflightError(f"{str(p)!r}: no row has the field(s) {', '.join(required)}: fields found: {', '.join(seen)}")


def check_backend(spec: str, options: Mapping[str, Any]) -> None:
    """The backend spec parses and its options are known and well-formed (nothing is loaded)."""
    from capjudge.backends.base import BackendError
    from capjudge.backends.credentials import mask_argv
    from capjudge.backends.registry import check_backend as check

    try:
        check(spec, **dict(options))
    except (BackendError, ValueError, FileNotFoundError, TypeError) as exc:
        raise PreflightError(f"--backend {mask_argv([spec])[0]!r}: {exc}") from None
