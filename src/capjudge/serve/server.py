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

import contextlib
import ipaddress
import math
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capjudge.core.errors import UsageError
from capjudge.core.redact import register_secret

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


class TokenError(UsageError, ValueError):
    """A token no request could carry as it is (a usage error on the command line, a
    ``ValueError`` in Python); the message never shows the token."""


def check_token(token: str | None, where: str) -> str | None:
    """``token`` when it is one a client can send and a server can match: printable ASCII without
    white space at either end (HTTP drops that space, so such a token never matches; a header
    cannot carry other characters). :class:`TokenError` naming ``where`` it came from otherwise."""
    if token is None:
        return None
    if not token.strip():
        raise TokenError(f"the token ({where}) is empty")
    if token != token.strip():
        raise TokenError(f"the token ({where}) starts or ends with white space, which HTTP drops: it would match nothing; remove the spaces")
    if not (token.isascii() and token.isprintable()):
        raise TokenError(f"the token ({where}) holds characters other than printable ASCII, which an HTTP header cannot carry; choose another token")
    return token


def token_from(given: str | None) -> str | None:
    """The server's token: ``given``, else ``$CAPJUDGE_TOKEN``, else none (registered with
    :mod:`capjudge.core.redact`). An empty one is a usage error (it would let anybody in), and so is
    one :func:`check_token` refuses."""
    token = given if given is not None else os.environ.get(TOKEN_VARIABLE)
    register_secret(token)
    return check_token(token, f"--token or ${TOKEN_VARIABLE}")


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


def listening_url(server: Any, host: str) -> str:
    """The URL a started ``uvicorn.Server`` answers at (the port it bound: ``--port 0`` included)."""
    port = None
    for srv in getattr(server, "servers", None) or ():
        for sock in getattr(srv, "sockets", None) or ():
            port = sock.getsockname()[1]
            break
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port if port is not None else server.config.port}"


def announce_ready(server: Any, host: str, ready_file: Path, stop: threading.Event) -> None:
    """Write ``ready_file`` (the URL, one line; written whole, then renamed into place) once
    ``server`` listens, unless ``stop`` is set first."""
    while not stop.wait(0.02):
        if getattr(server, "started", False):
            part = ready_file.with_name(ready_file.name + ".part")
            part.write_text(listening_url(server, host) + "\n", encoding="utf-8")
            os.replace(part, ready_file)
            return


def serve(server: Any, *, ready_file: str | Path | None = None) -> None:
    """Run a ``uvicorn.Server`` until SIGTERM (or SIGINT) has stopped it gracefully. uvicorn raises
    the signal again once it has shut down (so that the process dies of it); SIGTERM's is caught
    here: a server that finished its requests in flight exits 0. SIGINT keeps its usual meaning
    (the command exits 130). ``ready_file`` is written (the server's URL) once the server listens,
    and removed when it stops."""
    stop = threading.Event()
    ready = Path(ready_file) if ready_file is not None else None
    watcher = None
    if ready is not None:
        watcher = threading.Thread(target=announce_ready, args=(server, server.config.host, ready, stop), name="capjudge-serve-ready", daemon=True)
        watcher.start()
    try:
        if threading.current_thread() is not threading.main_thread():
            server.run()
            return
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        try:
            server.run()
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(5)
        if ready is not None:
            ready.unlink(missing_ok=True)


class Terminated(Exception):
    """SIGTERM arrived before the server listened (see :func:`terminate_quietly`)."""


@contextlib.contextmanager
def terminate_quietly() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (while a judge loads,
    before :func:`serve` takes the signal over), so that ``kill`` of a server still starting ends it
    as ``kill`` of a running one does: the command exits 0, not 143 (killed by the signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["TOKEN_VARIABLE", "Terminated", "TokenError", "announce_ready", "check_binding", "check_token", "free_port", "is_loopback", "listening_url", "make_server", "serve", "terminate_quietly", "token_from"]
