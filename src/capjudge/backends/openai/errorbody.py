"""Error answers (4xx / 5xx) of an OpenAI-protocol server, read up to a cap.

The SDK reads an error answer's whole body to build its exception (the message a record's error
shows); a server that answers an error with gigabytes would have it held in memory. The SDK's
HTTP client here (:func:`sdk_http_client`, the SDK's own default client with its defaults) reads an
error body as it streams in (decoded), up to :func:`error_cap` bytes; a longer one is cut there and
ends with :data:`CUT_NOTE`, and the error describing it says it was cut (:func:`cut_note`). Successful answers are left
to their own cap (:func:`capjudge.backends.openai.transport.read_capped`).
"""

from __future__ import annotations

from typing import Any

MAX_ERROR_BODY_BYTES = 64 * 1024
"""An error answer's body is read up to this many bytes (or ``max_response_bytes``, when lower):
an error message never needs more."""

CUT_NOTE = " ... [cut by capjudge: the error answer ran over {cap:,} bytes]"
"""What ends an error body that was cut (``{cap}``: the bytes kept)."""

CUT_HEADER = "x-capjudge-error-body-cut"
"""Set (to the bytes kept) on an error answer whose body was cut: :func:`cut_note` reads it."""

_DROPPED = ("content-length", "content-encoding", "transfer-encoding")  # the body is rebuilt, decoded


def error_cap(max_response_bytes: int) -> int:
    """How many bytes of an error answer's body are read."""
    return max(1, min(int(max_response_bytes), MAX_ERROR_BODY_BYTES))


def _rebuilt(response: Any, body: bytes, cap: int, cut: bool) -> Any:
    """A response like ``response`` whose body is ``body`` (already read, decoded), cut at ``cap``
    and saying so when ``cut``."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
    if cut:
        body = body[:cap] + CUT_NOTE.format(cap=cap).encode("ascii")
        headers.append((CUT_HEADER, str(cap)))
    return type(response)(response.status_code, headers=headers, content=body, request=response.request, extensions=response.extensions)


def cut_note(exc: BaseException) -> str:
    """What an SDK error of an answer whose body was cut adds to its description (else ``""``)."""
    response = getattr(exc, "response", None)
    kept = getattr(response, "headers", {}).get(CUT_HEADER) if response is not None else None
    return f" (its body ran over {int(kept):,} bytes: read up to there, cut by capjudge)" if kept and str(kept).isdigit() else ""


def sdk_http_client(max_response_bytes: int, *, sync: bool) -> Any:
    """The SDK's default HTTP client (async, or ``sync`` for the files and batches APIs) with every
    error answer's body read up to :func:`error_cap` of ``max_response_bytes``."""
    import openai

    cap = error_cap(max_response_bytes)
    if sync:

        class CappedErrors(openai.DefaultHttpxClient):  # type: ignore[misc,valid-type]
            def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
                response = super().send(request, stream=True, **kwargs)
                if response.status_code >= 400:
                    body, cut = bytearray(), False
                    try:
                        for chunk in response.iter_bytes():
                            body += chunk
                            if len(body) > cap:
                                cut = True
                                break
                    finally:
                        response.close()
                    return _rebuilt(response, bytes(body), cap, cut)
                if not stream:
                    try:
                        response.read()
                    except BaseException:
                        response.close()
                        raise
                return response

        return CappedErrors()

    class AsyncCappedErrors(openai.DefaultAsyncHttpxClient):  # type: ignore[misc,valid-type]
        async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
            response = await super().send(request, stream=True, **kwargs)
            if response.status_code >= 400:
                body, cut = bytearray(), False
                try:
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > cap:
                            cut = True
                            break
                finally:
                    await response.aclose()
                return _rebuilt(response, bytes(body), cap, cut)
            if not stream:
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
            return response

    return AsyncCappedErrors()


__all__ = ["CUT_HEADER", "CUT_NOTE", "MAX_ERROR_BODY_BYTES", "cut_note", "error_cap", "sdk_http_client"]
