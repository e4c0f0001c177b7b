"""Running the judge server: the binding rules and uvicorn.

A server listens on loopback unless it has a token: :func:`check_binding` refuses any other host
without one. Its connections are bounded (:mod:`capjudge.serve.connections`: how many, the request
head's deadline). uvicorn's graceful shutdown (SIGTERM, SIGINT) stops taking connections, drops the
uploads still arriving after the grace period, answers every request in flight, then the app's
batcher finishes its queue. uvicorn logs through the standard
``logging`` module (no logging config of its own: the command line's handlers, which scrub
secrets); its access log line names the client, method and path, never a header.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
from typing import Any

from capjudge.errors import UsageError
from capjudge.redact import register_secret

TOKEN_VARIABLE = "CAPJUDGE_TOKEN"
"""The environment variable a server and its clients read the token from."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name) is only reachable from this machine."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_from(given: str | None) -> str | None:
    """The server's token: ``given``, else ``$CAPJUDGE_TOKEN``, else none (registered with
    :mod:`capjudge.redact`). An empty one is a usage error (it would let anybody in)."""
    token = given if given is not None else os.environ.get(TOKEN_VARIABLE)
    if token is not None and not token.strip():
        raise UsageError(f"the token (--token or ${TOKEN_VARIABLE}) is empty")
    register_secret(token)
    return token


def check_binding(host: str, token: str | None) -> None:
    """Refuse (usage error) to listen beyond loopback without a token."""
    if token is None and not is_loopback(host):
        raise UsageError(
            f"--host {host} listens beyond this machine: give a token (--token or ${TOKEN_VARIABLE}); "
            "without one the server listens on loopback only (127.0.0.1, ::1)"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (tests and benchmarks)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def make_server(
    app: Any, host: str, port: int, *, log_level: str = "warning", graceful_seconds: float | None = None,
    header_timeout: float | None = None, max_connections: int | None = None,
) -> Any:
    """A ``uvicorn.Server`` for ``app`` (``server.run()`` serves until SIGTERM / SIGINT or
    ``server.should_exit = True``; signals are handled only in the main thread). It takes at most
    ``max_connections`` at once (default: :func:`~capjudge.serve.connections.default_max_connections`),
    closes a connection whose request head takes over ``header_timeout`` seconds (default 10), and
    at shutdown gives the uploads under way ``graceful_seconds`` (default 5) to arrive."""
    import uvicorn

    from capjudge.serve.connections import (
        DEFAULT_HEADER_TIMEOUT,
        DEFAULT_UPLOAD_GRACE,
        GuardedServer,
        default_max_connections,
        guarded_protocol,
    )

    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, log_level=log_level, lifespan="on", server_header=False,
        timeout_graceful_shutdown=None if graceful_seconds is None else max(1, math.ceil(graceful_seconds)),
        http=guarded_protocol(max_connections or default_max_connections()),
    )
    state = getattr(app, "state", None)
    return GuardedServer(
        config, header_timeout=DEFAULT_HEADER_TIMEOUT if header_timeout is None else header_timeout,
        uploads=getattr(state, "uploads", None), upload_grace=DEFAULT_UPLOAD_GRACE if graceful_seconds is None else graceful_seconds,
    )


def serve(server: Any) -> None:
    """Run a ``uvicorn.Server`` until SIGTERM (or SIGINT) has stopped it gracefully. uvicorn raises
    the signal again once it has shut down (so that the process dies of it); SIGTERM's is caught
    here: a server that finished its requests in flight exits 0. SIGINT keeps its usual meaning
    (the command exits 130)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        server.run()
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["TOKEN_VARIABLE", "check_binding", "free_port", "is_loopback", "make_server", "serve", "token_from"]
