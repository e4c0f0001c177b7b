"""A request's JSON body, read under bounds: its media type, its size, its deadline, its shape.

A body must be ``application/json`` (a browser cannot send that cross-origin without a CORS
preflight, which the server never grants). It is read up to the byte cap and before a deadline
(the body timeout from the request's head; cut to the shutdown grace when the server stops, so a
half-sent upload never holds a shutdown). Before ``json.loads`` builds anything, a linear scan of
the bytes outside strings bounds the nesting depth and the number of strings, containers and values
by the rows a request may carry; a large body is then parsed in a worker thread, so that ``/health`` and
the other requests stay live.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request

MAX_DEPTH = 16
"""Nesting of arrays and objects a body may have (a row with references is 4 deep)."""

CONTAINERS_PER_ROW = 8
VALUES_PER_ROW = 64
"""Containers and values a body may hold, per row it may carry (plus a little for the envelope)."""

THREAD_PARSE_BYTES = 256 * 1024
"""A body this large or larger is scanned and parsed in a worker thread (smaller ones inline:
the judge's hot path of one-row requests pays no thread hop)."""

# A string once its escapes are gone; an unterminated one runs to the end (never a failed match
# to back out of: the scan stays linear whatever the bytes).
STRING = re.compile(rb'"[^"]*"?')
NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class BodyError(Exception):
    """A body refused: ``status`` (400, 408, 413, 415) and a message naming the cause."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Uploads:
    """The deadlines of the bodies being received, so that a shutdown can cut them short."""

    timeout: float = 60.0
    """Seconds a request's body may take to arrive, from its head."""
    grace: float = 5.0
    """Seconds an upload still arriving when shutdown starts may take to finish."""
    closing: bool = False
    scopes: set[anyio.CancelScope] = field(default_factory=set)

    def close(self, grace: float | None = None) -> None:
        """Shutdown: every body still arriving must end within ``grace`` seconds (default ``self.grace``)."""
        self.closing = True
        end = anyio.current_time() + (self.grace if grace is None else grace)
        for scope in list(self.scopes):
            scope.deadline = min(scope.deadline, end)


def media_type(request: Request) -> str:
    """The request's ``Content-Type`` without its parameters, lower case."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_body(request: Request, cap: int, uploads: Uploads) -> bytes:
    """The request's body: ``application/json`` (415 otherwise), up to ``cap`` bytes (413 beyond),
    arrived before its deadline (408 otherwise; the connection is then closed)."""
    if media_type(request) != "application/json":
        raise BodyError(415, f"the request body must be JSON sent as Content-Type: application/json (got {media_type(request) or 'none'!r})")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyError(413, f"request body of {int(declared):,} bytes is over the server's cap of {cap:,} bytes (--max-body-bytes)")
    chunks: list[bytes] = []
    size = 0
    budget = uploads.grace if uploads.closing else uploads.timeout
    with anyio.CancelScope(deadline=anyio.current_time() + budget) as scope:
        uploads.scopes.add(scope)
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    raise BodyError(413, f"request body is over the server's cap of {cap:,} bytes (--max-body-bytes)")
                chunks.append(chunk)
        except ClientDisconnect:
            raise BodyError(400, "the client closed the connection before sending the whole body") from None
        finally:
            uploads.scopes.discard(scope)
    if scope.cancelled_caught:
        why = "the server is shutting down" if uploads.closing else f"it took over {uploads.timeout:g} s (--body-timeout)"
        raise BodyError(408, f"the request body did not arrive in time: {why}")
    return b"".join(chunks)


def check_shape(data: bytes, max_rows: int) -> None:
    """Refuse (400 / 413) a body nested deeper than :data:`MAX_DEPTH`, or holding more strings,
    containers or values than ``max_rows`` rows need, by a linear scan of the bytes outside strings (nothing is
    built). A body that is not JSON passes here and fails in the parse."""
    values_cap = VALUES_PER_ROW * max_rows + 1024
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH and len(data) < values_cap:
        return  # too few brackets to nest too deep, too short to hold too many of anything (a one-row request)
    # Escapes first (pairs of backslashes, then an escaped quote: JSON's left-to-right reading), so
    # that every quote left opens or closes a string.
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = unescaped.count(b'"') // 2
    if strings > 2 * values_cap:  # keys and values; counted first, as each string costs the scan a match
        raise BodyError(413, f"the request body holds {strings:,} strings: more than {max_rows:,} rows need (--max-queue)")
    bare = STRING.sub(b"", unescaped)
    brackets = bare.translate(None, NOT_A_BRACKET)
    opened = brackets.count(b"[") + brackets.count(b"{")
    if opened > CONTAINERS_PER_ROW * max_rows + 64:
        raise BodyError(413, f"the request body holds {opened:,} arrays and objects: more than {max_rows:,} rows need (--max-queue)")
    if len(brackets) - opened > opened:
        raise BodyError(400, "the request body is not JSON: more closing brackets than opening ones")
    values = bare.count(b",") + 1
    if values > values_cap:
        raise BodyError(413, f"the request body holds {values:,} values: more than {max_rows:,} rows need (--max-queue)")
    depth = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        if depth > MAX_DEPTH:
            raise BodyError(400, f"the request body is nested over {MAX_DEPTH} levels deep")


def parse(data: bytes, max_rows: int) -> Any:
    """The body's JSON value, after :func:`check_shape` (400 if it is not JSON)."""
    check_shape(data, max_rows)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BodyError(400, f"the request body is not JSON: {exc}") from None


async def read_json(request: Request, cap: int, max_rows: int, uploads: Uploads) -> Any:
    """The request's JSON body under every bound of this module (:class:`BodyError` otherwise)."""
    data = await read_body(request, cap, uploads)
    if len(data) < THREAD_PARSE_BYTES:
        return parse(data, max_rows)
    return await anyio.to_thread.run_sync(parse, data, max_rows)


__all__ = ["BodyError", "MAX_DEPTH", "THREAD_PARSE_BYTES", "Uploads", "check_shape", "media_type", "parse", "read_body", "read_json"]
