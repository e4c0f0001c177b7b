"""The server's connections, bounded: how many, how long a request head may take, and shutdown.

uvicorn reads a request head with no deadline of its own (a connection that never finishes its
headers stays open), and takes every connection the operating system hands it. Here uvicorn's HTTP
protocol (whichever it picks) is subclassed to refuse a connection beyond ``max_connections`` at
once (503, closed), and the server's tick closes a connection that has waited over
``header_timeout`` seconds for a complete request head (from its opening, or from its last
answer). The body's deadline is the app's (:class:`capjudge.serve.body.Uploads`): at shutdown the
server cuts every upload still arriving to the grace period, so that a half-sent body never holds
the process.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from capjudge.serve.body import Uploads

log = logging.getLogger("capjudge.serve")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_UPLOAD_GRACE = 5.0
"""Seconds an upload still arriving at shutdown may take, when ``--graceful-seconds`` is not given."""
TICKS_PER_CHECK = 5  # uvicorn ticks every 0.1 s: the head deadlines are checked twice a second


def default_max_connections() -> int:
    """1000, or half the process's open-file limit where that is lower (the rest: the model, logs)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1000
    return 1000 if soft == resource.RLIM_INFINITY else max(16, min(1000, soft // 2))


def _refusal(message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode() + body


def guarded_protocol(max_connections: int) -> type[Any]:
    """uvicorn's HTTP protocol that refuses a connection beyond ``max_connections`` and notes since
    when each connection waits for a request head (:func:`waiting_since`)."""
    refusal = _refusal(f"the server holds its maximum of {max_connections} connections (--max-connections): retry later")

    class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        head_since: float | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.head_since = time.monotonic()
            if len(self.connections) > max_connections:
                transport.write(refusal)
                transport.close()

        def on_response_complete(self) -> None:
            self.head_since = time.monotonic()
            super().on_response_complete()

    return GuardedProtocol


def waiting_since(connection: Any) -> float | None:
    """Since when ``connection`` waits for a request head (``None``: a request is under way)."""
    cycle = getattr(connection, "cycle", None)
    if cycle is not None and not cycle.response_complete:
        return None
    since: float | None = getattr(connection, "head_since", None)
    return since


class GuardedServer(uvicorn.Server):  # type: ignore[misc]
    """A ``uvicorn.Server`` that closes connections slow to send a request head, and cuts the
    uploads under way to ``upload_grace`` seconds when it shuts down."""

    def __init__(self, config: Any, *, header_timeout: float, uploads: Uploads | None, upload_grace: float) -> None:
        super().__init__(config)
        self.header_timeout = header_timeout
        self.uploads = uploads
        self.upload_grace = upload_grace

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s), plus the request-head deadline."""
        if counter % TICKS_PER_CHECK == 0:
            self.close_slow_heads()
        result: bool = await super().on_tick(counter)
        return result

    def close_slow_heads(self) -> int:
        """Close every connection that has waited over ``header_timeout`` for a request head."""
        now, closed = time.monotonic(), 0
        for connection in list(self.server_state.connections):
            since = waiting_since(connection)
            transport = getattr(connection, "transport", None)
            if since is not None and now - since > self.header_timeout and transport is not None and not transport.is_closing():
                transport.close()
                closed += 1
        if closed:
            log.info("closed %d connection(s) that sent no complete request head in %g s", closed, self.header_timeout)
        return closed

    async def shutdown(self, sockets: Any = None) -> None:
        """uvicorn's graceful shutdown, the uploads under way cut to the grace period first."""
        if self.uploads is not None:
            self.uploads.close(self.upload_grace)
        await super().shutdown(sockets=sockets)


__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_UPLOAD_GRACE", "GuardedServer", "default_max_connections", "guarded_protocol", "waiting_since"]
