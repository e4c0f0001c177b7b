"""A backend that is gone: detect it once, then fail every request at once with one clear cause.

When a server dies mid-run, every request would otherwise go through all its retries (about 36 s
each with the default back-off) and a run of 200 samples would take many minutes to write 200
identical errors. :class:`CircuitBreaker` is shared by all requests of one backend: connection-level
failures (refused, reset, dropped before an answer) count up, any answer from the server (even an
HTTP error) resets the count, and after ``threshold`` failures in a row spanning at least ``grace``
seconds the backend is declared gone: every pending retry and every new request then raises
:class:`BackendGone` at once, and no further request is sent.

Errors that a re-run may cure (a gone server, retries exhausted, a spent budget) carry
``resumable = True``; the command line exits 3 when samples failed that way.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from capjudge.core.errors import BackendError
from capjudge.core.redact import get_logger

log = get_logger(__name__)

DEFAULT_THRESHOLD = 5
DEFAULT_GRACE = 5.0


class BackendGone(BackendError):
    """The backend stopped answering; requests are no longer sent (re-run to resume)."""

    resumable = True


def is_resumable(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may succeed when the run is repeated (backend
    gone, retries exhausted, budget reached), as opposed to a failure of the sample itself."""
    return bool(getattr(exc, "resumable", False))


def failure_details(exc: BaseException) -> dict[str, object]:
    """What an error record says about a backend failure: ``{"resumable": bool}``, and a prompt
    too long for the context's token counts as ``context`` (``ContextLengthError.counts``)."""
    counts = getattr(exc, "counts", None)
    return {"resumable": is_resumable(exc), **({"context": dict(counts)} if counts else {})}


class CircuitBreaker:
    """Declares a backend gone after ``threshold`` consecutive connection failures, with no answer
    in between, the first of them at least ``grace`` seconds before the last.

    ``threshold=0`` disables it. ``what`` names the backend in the error (``"the server at
    http://host:8000/v1"``). Thread-safe; cheap enough to consult before every attempt.
    """

    def __init__(self, what: str, *, threshold: int = DEFAULT_THRESHOLD, grace: float = DEFAULT_GRACE, clock: Callable[[], float] = time.monotonic) -> None:
        if threshold < 0:
            raise ValueError(f"gone_after must be 0 (off) or a positive number of failures, got {threshold}")
        if grace < 0:
            raise ValueError(f"gone_grace must be a number of seconds >= 0, got {grace}")
        self.what = what
        self.threshold = threshold
        self.grace = grace
        self._clock = clock
        self._lock = threading.Lock()
        self._streak = 0
        self._since: float | None = None
        self._gone = False

    @property
    def gone(self) -> bool:
        """True once the backend has been declared gone."""
        return self._gone

    @property
    def message(self) -> str:
        """The one cause every failed request reports (the same text in every record and run)."""
        return (
            f"{self.what} stopped answering: {self.threshold} connection attempts in a row failed with no answer in between; "
            "no further requests were sent (re-run the same command to resume)"
        )

    def success(self) -> None:
        """The server answered (with anything, even an HTTP error): it is there."""
        with self._lock:
            self._streak = 0
            self._since = None

    def failure(self, exc: BaseException | None = None) -> None:
        """A connection-level failure; may declare the backend gone."""
        if self.threshold == 0:
            return
        with self._lock:
            if self._gone:
                return
            now = self._clock()
            if self._streak == 0:
                self._since = now
            self._streak += 1
            since = self._since if self._since is not None else now
            if self._streak >= self.threshold and now - since >= self.grace:
                self._gone = True
                log.warning("%s is gone (%d connection failures in %.1f s; last: %s): failing the remaining requests at once", self.what, self._streak, now - since, exc)

    def check(self) -> None:
        """Raise :class:`BackendGone` if the backend is gone."""
        if self._gone:
            raise BackendGone(self.message)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a retry back-off), but raise :class:`BackendGone` as soon as the
        backend is declared gone, so that waiting requests do not outlive the server."""
        deadline = time.monotonic() + seconds
        while True:
            self.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))
