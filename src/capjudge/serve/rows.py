"""Rows checked at the server's door: the JSON type and the length of each field a row carries.

The same checks run in the client (:class:`~capjudge.serve.client.RemoteJudge`) before a row is
sent, so that a Python caller's bad row is that row's error record, not a refused request.

A row whose field has a type no client of the wire sends (a caption that is a number, references
that are not a list of strings, an id that is an object) or a text over its length cap is refused
before it is queued (a 400 naming the row and the field), so that it never reaches a batch shared
with other clients' rows. A row the judge answers with an error record of its own (no caption, an
empty one, not an object) is left to the judge, as in a local run.
"""

from __future__ import annotations

from typing import Any

from capjudge.serve.wire import WireError

MAX_TEXT_CHARS = 100_000
"""A caption or a reference longer than this (characters) is refused."""

MAX_REFERENCES = 1000
"""References one row may carry."""

MAX_NAME_CHARS = 4096
"""An ``id``, or an ``image`` that is a path or an ``http(s)`` URL: characters at most."""

TEXT_FIELDS = ("caption", "caption_a", "caption_b")


def _label(row: dict[str, Any], where: str) -> str:
    rid = row.get("id")
    return f"{where} (id {rid!r})" if isinstance(rid, (str, int)) and not isinstance(rid, bool) and len(str(rid)) <= 200 else where


def _text(value: Any, field: str, cap: int) -> str | None:
    """What is wrong with a text field's value (``None``: nothing; a missing value is the judge's)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{field!r} must be a string, got {type(value).__name__}"
    if len(value) > cap:
        return f"{field!r} is {len(value):,} characters long, over the server's cap of {cap:,}"
    return None


def row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with the fields of one row (an object), or ``None``."""
    for field in TEXT_FIELDS:
        if field in row and (problem := _text(row[field], field, MAX_TEXT_CHARS)):
            return problem
    image = row.get("image")
    if image is not None:
        if not isinstance(image, str):
            return f"'image' must be a string (a path, a URL or the name of image_b64), got {type(image).__name__}"
        if len(image) > MAX_NAME_CHARS and not image.startswith("data:"):  # a data: URL is capped as an image
            return f"'image' is {len(image):,} characters long, over the server's cap of {MAX_NAME_CHARS:,}"
    rid = row.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int, type(None))):
        return f"'id' must be a string or an integer, got {type(rid).__name__}"
    if isinstance(rid, str) and len(rid) > MAX_NAME_CHARS:
        return f"'id' is {len(rid):,} characters long, over the server's cap of {MAX_NAME_CHARS:,}"
    refs = row.get("references")
    if refs is not None:
        if not isinstance(refs, list):
            return f"'references' must be a list of strings, got {type(refs).__name__}"
        if len(refs) > MAX_REFERENCES:
            return f"'references' has {len(refs):,} entries, over the server's cap of {MAX_REFERENCES:,}"
        for k, ref in enumerate(refs):
            if ref is None or (problem := _text(ref, f"references[{k}]", MAX_TEXT_CHARS)):
                return problem or f"'references[{k}]' must be a string, got null"
    first = row.get("shown_first")
    if first is not None and (not isinstance(first, str) or first not in ("", "A", "B")):
        return f"'shown_first' must be 'A' or 'B' (or null), got {str(first)[:20]!r}"
    for field in ("image_b64", "image_error"):  # image_error is cut to its cap where it is read
        if row.get(field) is not None and not isinstance(row[field], str):
            return f"{field!r} must be a string, got {type(row[field]).__name__}"
    return None


def check_rows(rows: list[Any], field: str) -> None:
    """Refuse (:class:`~capjudge.serve.wire.WireError`, a 400) a request one of whose rows has a
    field of the wrong type or length, naming the row (``field[index]`` and its id)."""
    for k, row in enumerate(rows):
        if isinstance(row, dict) and (problem := row_problem(row)):
            raise WireError(f"{_label(row, f'{field}[{k}]')}: {problem}")


__all__ = ["MAX_NAME_CHARS", "MAX_REFERENCES", "MAX_TEXT_CHARS", "check_rows", "row_problem"]
