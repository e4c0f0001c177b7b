"""The HTTP calls of a :class:`~capjudge.serve.client.RemoteJudge`, bounded whatever the server does.

A client trusts no server: every call has a deadline over the whole request (connect, send, wait,
and read the entire answer: a server that trickles its answer a byte at a time is cut off all the
same), and the answer's body is read as it streams in, up to a cap (a larger one is refused before
it is held in memory). Calls run on a private event loop in a daemon thread, so that a deadline
cancels the call cleanly and a caller with an event loop of its own (a notebook) is not disturbed.
Before its first request a client may wait for the server's ``/health`` (a server started in the
same script may still be loading its model).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from capjudge.core.errors import BackendError
from capjudge.core.redact import get_logger, scrub
from capjudge.data.capped import OverCap, read_body_capped

log = get_logger("capjudge.serve")

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""A judge server's answer is read up to this many bytes (its records of one request)."""

DEFAULT_WAIT = 30.0
"""How long a client waits for a server to answer ``/health`` before its first request (seconds)."""


class RemoteError(BackendError):
    """The server could not be reached, or refused a request, or answered what a judge server never
    answers (resumable: a re-run asks again)."""

    resumable = True


@dataclass(frozen=True)
class Answer:
    """A server's answer: its status, headers and whole body (read within the caps)."""

    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``ValueError`` when it is not)."""
        return json.loads(self.body)

    def message(self) -> str:
        """The server's error message (``{"error": ...}``), else the start of its body; scrubbed."""
        try:
            data = self.json()
            text = data.get("error", self.body[:500].decode("utf-8", "replace")) if isinstance(data, dict) else self.body[:500].decode("utf-8", "replace")
        except ValueError:
            text = self.body[:500].decode("utf-8", "replace")
        return scrub(str(text)[:500])


class Caller:
    """HTTP calls to the server at ``url`` with ``headers``; ``timeout`` (seconds) bounds each call
    as a whole, ``max_response_bytes`` its answer's body (decoded)."""

    def __init__(self, url: str, headers: dict[str, str], *, timeout: float, max_response_bytes: int) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r}: a positive number of seconds")
        if max_response_bytes < 1:
            raise ValueError(f"max_response_bytes={max_response_bytes!r}: a positive number of bytes")
        self.url = url
        self.timeout = float(timeout)
        self.max_response_bytes = int(max_response_bytes)
        self._headers = headers
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capjudge-remote-loop", daemon=True)
        self._thread.start()
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Made on the loop's thread, at the first call (an httpx client belongs to one loop).
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self.timeout)
        return self._client

    def call(self, method: str, route: str, body: Any = None, *, timeout: float | None = None) -> Answer:
        """One request, its whole answer read within ``timeout`` (default: the caller's) and the
        body cap; :class:`RemoteError` naming the cause otherwise."""
        seconds = self.timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(self._bounded(method, route, body, seconds), self._loop)
        try:
            return future.result()
        except httpx.HTTPError as exc:
            raise RemoteError(f"the judge server at {self.url} cannot be reached: {type(exc).__name__}: {scrub(str(exc))}") from None

    async def _bounded(self, method: str, route: str, body: Any, seconds: float) -> Answer:
        try:
            return await asyncio.wait_for(self._read(method, route, body), timeout=seconds)
        except asyncio.TimeoutError:
            raise RemoteError(f"the judge server at {self.url} gave no complete answer to {route} within timeout={seconds:g} s (the whole request)") from None

    async def _read(self, method: str, route: str, body: Any) -> Answer:
        cap = self.max_response_bytes
        too_large = f"the judge server at {self.url} answered {route} with more than max_response_bytes={cap:,} bytes: refused (not read)"
        async with self._http().stream(method, route, json=body) as response:
            try:
                return Answer(response.status_code, response.headers, await read_body_capped(response, cap))
            except OverCap as exc:
                raise RemoteError(too_large + (f"; it announced {exc.announced:,} bytes" if exc.announced is not None else "")) from None

    def wait_ready(self, seconds: float) -> None:
        """Return once the server answers ``GET /health`` with 200, asking again for up to
        ``seconds`` (0: once), with one log line while waiting; :class:`RemoteError` after."""
        deadline = time.monotonic() + max(0.0, seconds)
        said = False
        while True:
            left = deadline - time.monotonic()
            try:
                answer = self.call("GET", "/health", timeout=min(self.timeout, max(1.0, min(left, 5.0))))
                if answer.status == 200:
                    return
                why = f"/health answered {answer.status}"
            except RemoteError as exc:
                why = str(exc)
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {seconds:g} s for it to answer /health; --remote-wait, or wait= in Python, sets how long)" if seconds > 0 else ""
                if why.startswith("the judge server"):
                    raise RemoteError(f"{why}{waited}")
                raise RemoteError(f"the judge server at {self.url} cannot be reached: {why}{waited}")
            if not said:
                log.warning("waiting for the judge server at %s to answer (up to %g s): %s", self.url, seconds, why)
                said = True
            time.sleep(min(0.2, left))

    def close(self) -> None:
        """Close the connections and stop the loop."""
        if self._loop.is_closed():
            return
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_WAIT", "Answer", "Caller", "RemoteError"]
