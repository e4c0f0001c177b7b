"""A server process started by capjudge: on a free port of 127.0.0.1, in a process group of its
own, waited for (bounded, its log's tail in the error when it dies or never answers), and stopped
with every process it spawned (the whole group: a vLLM server's engine and workers too).

The ``vllm:`` backend kind runs vLLM's OpenAI-compatible server this way, and so do the tests
(:mod:`capjudge.testing.vllm_server`). The group is also stopped when the object is collected and
when the interpreter exits (Ctrl-C and uncaught exceptions included); and the group's leader, a
small watchdog that runs the server, stops the group when capjudge dies without doing so (killed,
even by ``SIGKILL``). A run leaves no server behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from capjudge.core.errors import BackendError
from capjudge.core.redact import get_logger

log = get_logger("capjudge.backends.vllm")

TERM_GRACE = 30.0
"""Seconds a stopped server's process group has to exit after ``SIGTERM`` before ``SIGKILL``."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WATCHDOG = """
import os, signal, subprocess, sys, time
parent = int(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, not SIG_IGN: the server gets the default back at exec
server = subprocess.Popen(sys.argv[2:])
while server.poll() is None:
    if os.getppid() != parent:  # capjudge is gone, however it ended: take the group down
        os.killpg(0, signal.SIGTERM)
        try:
            server.wait(timeout=GRACE)
        finally:
            os.killpg(0, signal.SIGKILL)
    time.sleep(0.5)
code = server.returncode
sys.exit(code if code >= 0 else 128 - code)
""".replace("GRACE", repr(TERM_GRACE))
"""The group's leader: it runs the server and, should capjudge die without stopping it (even by
``SIGKILL``), stops the whole group. It outlives the server's ``SIGTERM`` so that the server has its
grace period, and exits with the server's code."""


def read_tail(path: str | Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ("(no log)" when it cannot be read)."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerStartError(BackendError):
    """The server did not start: it exited, or it did not answer in time (the message ends with
    the tail of its log)."""


def stop_group(proc: subprocess.Popen[bytes], grace: float = TERM_GRACE) -> None:
    """End ``proc`` and every process of its group: ``SIGTERM``, up to ``grace`` seconds, then
    ``SIGKILL`` (for the leader if it lingers, and for children that outlived it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # engine processes that outlived the server
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # until the group is gone (its last members reaped), briefly
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def _cleanup(proc: subprocess.Popen[bytes], log_path: Path | None) -> None:
    """Stop a server nobody stopped (collected, or the interpreter exiting) and remove its
    temporary log."""
    stop_group(proc)
    if log_path is not None:
        with contextlib.suppress(OSError):
            log_path.unlink()


class ServerProcess:
    """One server process: ``command`` run with ``env`` in a new session, ready when
    ``health_url`` answers 200. Its output goes to ``log_path`` (default: a temporary file,
    removed when the server stops)."""

    def __init__(self, command: Sequence[str], health_url: str, *, env: Mapping[str, str] | None = None, log_path: str | Path | None = None) -> None:
        self.command = [str(c) for c in command]
        self.health_url = health_url
        self.env = dict(os.environ if env is None else env)
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="capjudge-server-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.startup_s: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def pid(self) -> int | None:
        """The server's pid (its process group's id), while it runs."""
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float, *, what: str = "the server") -> None:
        """Start the process and wait until the health URL answers 200: at most ``timeout``
        seconds, polling every half second. A process that exits first, a timeout and an
        interruption (Ctrl-C) stop the whole group; the first two raise :class:`ServerStartError`
        with the log's tail."""
        import httpx

        t0 = time.monotonic()
        with open(self.log_path, "wb") as out:  # the child keeps its own copy of the descriptor
            # A session of its own: stop() ends the server with the processes it spawns, and a
            # Ctrl-C at the terminal reaches capjudge only (which then stops the server itself).
            argv = [sys.executable, "-I", "-S", "-c", WATCHDOG, str(os.getpid()), *self.command]
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        # Stopped when this object goes, or at the interpreter's exit (atexit) at the latest.
        self._finalizer = weakref.finalize(self, _cleanup, self.proc, self.log_path if self._own_log else None)
        log.info("started %s (pid %d), log %s", what, self.proc.pid, self.log_path)
        try:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise ServerStartError(f"{what} exited with code {code} before it was ready; the end of its log ({self.log_path}):\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(self.health_url, timeout=2.0).status_code == 200:
                        break
                if time.monotonic() - t0 > timeout:
                    raise ServerStartError(f"{what} was not ready after {timeout:.0f} s (option startup_timeout); the end of its log ({self.log_path}):\n{self.log_tail()}")
                time.sleep(0.5)
        except BaseException:
            self.stop(keep_log=True)
            raise
        self.startup_s = time.monotonic() - t0

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        return read_tail(self.log_path, lines)

    def stop(self, *, keep_log: bool = False) -> None:
        """Stop the server and the processes it spawned (its process group); the temporary log
        is removed unless ``keep_log``. Safe to call twice."""
        proc, self.proc = self.proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is not None:
            stop_group(proc)
        if self._own_log and not keep_log:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
