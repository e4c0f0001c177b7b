"""Retry policy for OpenAI-protocol calls (tenacity; the SDK's own retries are switched off).

Retried: rate limits (429, except ``insufficient_quota``), 408, 409, every 5xx, timeouts (the
SDK's per-read ones and :class:`DeadlineExceeded`, the request timeout over a whole attempt), dropped
connections and unreadable (malformed JSON) answers. Not retried: other 4xx (bad request, auth,
permission, not found, quota exhausted); they are reported at once with their status and message.
The wait honours the server's ``retry-after-ms`` / ``retry-after`` headers, else grows exponentially
with full jitter.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from capjudge.backends.base import BackendError
from capjudge.backends.openai.context import context_error
from capjudge.backends.openai.errorbody import cut_note
from capjudge.core.errors import CapjudgeError
from capjudge.core.redact import scrub

RETRY_STATUS = frozenset({408, 409, 429})

T = TypeVar("T")


class APIRequestError(BackendError):
    """A call that failed for good; ``status`` is the HTTP status (``None`` for network errors)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None, retryable: bool = False, attempts: int = 1) -> None:
        super().__init__(scrub(message))
        self.status = status
        self.code = code
        self.retryable = retryable
        self.resumable = retryable  # retries ran out on a transient failure: a re-run may succeed
        self.attempts = attempts


class MalformedResponseError(BackendError):
    """The server answered 2xx with a body that is not a chat completion."""


class DeadlineExceeded(CapjudgeError, TimeoutError):
    """One attempt ran past the request timeout as a whole (connect, send, wait and read the whole
    answer): a timeout, retried as one; a slow server is not a gone one."""


async def within_deadline(call: Awaitable[T], seconds: float) -> T:
    """``await call``, cancelled (and the connection closed) after ``seconds`` in all:
    :class:`DeadlineExceeded` then."""
    try:
        return await asyncio.wait_for(call, timeout=seconds)
    except asyncio.TimeoutError as exc:
        raise DeadlineExceeded(f"no complete answer within timeout={seconds:g} s (the whole request)") from exc


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. ``base_delay * 2**attempt`` (capped at ``max_delay``) with full
    jitter, unless the server says how long to wait (then that, capped at ``max_retry_after``)."""

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 120.0

    def backoff(self, attempt: int) -> float:
        """The jittered exponential wait before retry number ``attempt`` (0-based)."""
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed call (``None`` when no answer came)."""
    status = getattr(exc, "status_code", None)
    return int(status) if isinstance(status, int) else None


def is_connection_failure(exc: BaseException) -> bool:
    """Refused, reset or dropped before an answer: the server may be gone. Timeouts are not
    counted: a slow server is still there."""
    import openai

    return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed call is worth repeating."""
    import openai

    if isinstance(exc, (MalformedResponseError, json.JSONDecodeError, DeadlineExceeded)):
        return True
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    status = http_status(exc)
    if status is None:
        return isinstance(exc, openai.APIResponseValidationError)
    if status == 429 and getattr(exc, "code", None) == "insufficient_quota":
        return False  # quota exhausted: waiting will not help
    return status in RETRY_STATUS or status >= 500


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``retry-after`` seconds or date)."""
    response = getattr(exc, "response", None)
    headers: Any = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def wait_seconds(exc: BaseException, attempt: int, policy: RetryPolicy) -> float:
    """How long to wait before retrying after ``exc`` on retry number ``attempt``."""
    hinted = retry_after(exc)
    if hinted is not None:
        return min(hinted, policy.max_retry_after)
    return policy.backoff(attempt)


def describe(exc: BaseException, *, attempts: int = 1) -> BackendError:
    """A clear, secret-free error for a failed call: status code, error code and server message."""
    import openai

    if isinstance(exc, BackendError):
        return exc
    tried = f" (after {attempts} attempts)" if attempts > 1 else ""
    if isinstance(exc, (MalformedResponseError, json.JSONDecodeError)):
        return APIRequestError(f"server answered with malformed JSON{tried}: {exc}", retryable=True, attempts=attempts)
    if isinstance(exc, openai.APITimeoutError):
        return APIRequestError(f"request timed out{tried}", retryable=True, attempts=attempts)
    if isinstance(exc, DeadlineExceeded):
        return APIRequestError(f"request timed out{tried}: {exc}", retryable=True, attempts=attempts)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {cause}" if cause else ""
        return APIRequestError(f"connection error{tried}{detail}", retryable=True, attempts=attempts)
    status = http_status(exc)
    if status is not None:
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        message = message or getattr(exc, "message", None) or str(exc)
        code = getattr(exc, "code", None)
        code_part = f" [{code}]" if code else ""
        text = f"HTTP {status}{code_part}{tried}: {message}{cut_note(exc)}"
        too_long = context_error(status, code, str(message), reported=text)  # counts, where the server gave them
        if too_long is not None:
            return too_long
        return APIRequestError(text, status=status, code=code, retryable=is_retryable(exc), attempts=attempts)
    return APIRequestError(f"{type(exc).__name__}{tried}: {exc}", attempts=attempts)
