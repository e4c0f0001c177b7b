"""Sending chat requests: the private event loop, one call with retries under a deadline, and the
gone-server breaker's part in it.

Requests run on a private asyncio loop in a daemon thread (:class:`LoopThread`), so that the
backend works whether or not its caller has an event loop running. :func:`send_chat` makes one
call through the SDK's client with tenacity's retries (:mod:`.retry` is the policy); the backend
(:mod:`.backend`) decides what to ask again without (log-probabilities, penalty fields).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from typing import Any

from capjudge.backends.base import BackendError
from capjudge.backends.faults import BackendGone, CircuitBreaker
from capjudge.backends.openai.retry import (
    MalformedResponseError,
    RetryPolicy,
    describe,
    http_status,
    is_connection_failure,
    is_retryable,
    wait_seconds,
    within_deadline,
)
from capjudge.core.redact import get_logger
from capjudge.data.capped import OverCap, read_body_capped

log = get_logger("capjudge.backends.openai")

# The request options chat.completions.create passes (bearer auth only); older SDKs ignore them.
POST_OPTIONS: Any = {"security": {"bearer_auth": True}}


class LoopThread:
    """A private asyncio loop in a daemon thread; coroutines are submitted from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="capjudge-openai-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the loop; its future, for any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop the loop and its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""An answer's body is read up to this many bytes (decoded; backend option ``max_response_bytes``)."""


class ResponseTooLarge(BackendError):
    """The server's answer is over ``max_response_bytes``: refused as it streamed in, never held
    whole (not retried: the same request would get the same answer)."""


async def read_capped(client: Any, body: dict[str, Any], max_bytes: int) -> bytes:
    """``POST /chat/completions`` through the SDK's client (its auth, routing, error classes),
    its body read as it streams in, up to ``max_bytes`` (decoded): :class:`ResponseTooLarge`
    beyond, or at once when the announced length is beyond."""
    import httpx

    response = await client.post("/chat/completions", body=body, cast_to=httpx.Response, options=POST_OPTIONS, stream=True)
    try:
        return await read_body_capped(response, max_bytes)
    except OverCap as exc:
        too_large = f"the server's answer is over max_response_bytes={max_bytes:,} bytes: refused (--backend-opt max_response_bytes=N raises the cap)"
        raise ResponseTooLarge(too_large + (f"; it announced {exc.announced:,} bytes" if exc.announced is not None else "")) from None
    finally:
        await response.aclose()


async def send_chat(
    client: Any, body: dict[str, Any], *, label: str, timeout: float, retry: RetryPolicy, breaker: CircuitBreaker, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
) -> dict[str, Any]:
    """One call with tenacity retries; the answer's JSON object, or a described
    :class:`BackendError`. The answer's body is read up to ``max_bytes`` (:func:`read_capped`).

    The request goes through the SDK's client (``client.post``: its auth, Azure deployment
    routing, headers, timeouts and error classes) with the body capjudge built, which is what
    ``chat.completions.create(**params)`` sends; skipping ``create`` skips the SDK's walk over
    the messages' typed dicts and the answer's pydantic models (~1.5 ms of CPU per request
    with an image and 20 ``top_logprobs``, as much as the rest of the call)."""
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

    attempts = 0

    def wait(state: Any) -> float:
        if state.attempt_number > retry.max_retries:
            return 0.0  # tenacity asks for the wait before it checks the stop: no retry follows
        exc: BaseException | None = state.outcome.exception() if state.outcome else None
        seconds = wait_seconds(exc, state.attempt_number - 1, retry) if exc else 0.0
        log.info("%s: retrying in %.2fs after %s (attempt %d of %d)", label, seconds, describe(exc) if exc else "an unknown failure", state.attempt_number + 1, retry.max_retries + 1)
        return seconds

    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(retry.max_retries + 1),
            wait=wait,
            retry=retry_if_exception(is_retryable),
            reraise=True,
            sleep=breaker.sleep,  # a back-off ends at once when the server is declared gone
        ):
            with attempt:
                breaker.check()
                attempts += 1
                try:
                    # The SDK's timeout bounds each read; this bounds the attempt as a whole
                    # (connect, send, wait, read the entire body): a server that trickles its
                    # answer a byte at a time is cut off at `timeout` seconds all the same.
                    raw = await within_deadline(read_capped(client, body, max_bytes), timeout)
                except Exception as exc:
                    if isinstance(exc, ResponseTooLarge):
                        breaker.success()  # the server answered, if too much
                    elif is_connection_failure(exc):
                        breaker.failure(describe(exc))
                    elif http_status(exc) is not None:
                        breaker.success()  # the server answered, if only with an error
                    raise
                breaker.success()
                response = json.loads(raw)  # a JSONDecodeError is retried as malformed
                if not isinstance(response, dict) or not response.get("choices") or not isinstance(response["choices"], list):
                    raise MalformedResponseError(f"answer holds no choices: {raw[:200].decode('utf-8', 'replace')}")
        return response
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes a described error
        if breaker.gone and is_connection_failure(exc):
            raise BackendGone(breaker.message) from exc  # one cause for every request
        raise describe(exc, attempts=attempts) from exc


async def post_json(url: str, body: dict[str, Any], headers: dict[str, str], params: dict[str, str], timeout: float) -> Any:
    """One POST of a JSON body outside the SDK (vLLM's ``/tokenize``); the response, read."""
    import httpx

    async with httpx.AsyncClient(timeout=timeout) as client:
        return await client.post(url, json=body, headers=headers, params=params)
