"""The judge server's ASGI app (Starlette): routes, the bearer token, caps, JSON errors.

Routes: ``GET /health`` (the one route open without the token), ``GET /v1/info`` (what the judge
is: method, backend as records show it, template hash), ``POST /v1/score`` (``{"samples": [...]}``),
``POST /v1/compare`` (``{"pairs": [...], "mode": null | "pairwise" | "grading"}``), ``POST
/v1/reward`` (``{"completions": [...], "images": [...], "references": [...], "normalize": false}``) and ``GET /metrics``
(Prometheus text format). A judging route answers 200 with one record per row (``{"results":
[...]}``, a bad row an error record naming it), 400 for a body that is not what the route takes
(a row with a field of the wrong type or length: naming the row), 401 without the token, 408 for a
body that did not arrive in time, 413 for a body over the cap (or holding more than its rows need),
415 for a body not sent as ``application/json``, 421 for a ``Host`` the server does not answer to,
429 with ``Retry-After`` when the queue is full and 503 while shutting down; every answer is JSON
(ASCII: a character JSON cannot carry as UTF-8 is escaped, never the whole answer lost), no CORS
header is ever sent. The token is compared in constant time and never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from capjudge.core.redact import register_secret, scrub
from capjudge.data.recordcheck import unit_score
from capjudge.serve.batcher import Batcher, Closed, QueueFull
from capjudge.serve.body import BodyError, Uploads, read_json
from capjudge.serve.fetched import fetch_url_images
from capjudge.serve.hosts import LOOPBACK_RULE, HostGuard, HostRule
from capjudge.serve.metrics import Metrics
from capjudge.serve.rows import check_rows
from capjudge.serve.server import check_token
from capjudge.serve.wire import WireError, items_of, named, row_from_wire

log = logging.getLogger("capjudge.serve")

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_BODY_TIMEOUT = 60.0


@dataclass(frozen=True)
class ServeSettings:
    """How a server takes requests: the token (``None``: none asked, loopback only), the body cap
    in bytes, the inline image cap in bytes, the batching knobs, the ``Host`` names it answers to
    (:func:`capjudge.serve.hosts.host_rule`; default: loopback) and the seconds a body may take."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_image_bytes: int = 50 * 1024 * 1024
    max_batch: int = 64
    max_wait_ms: float = 10.0
    max_queue: int = 1024
    hosts: HostRule = LOOPBACK_RULE
    body_timeout: float = DEFAULT_BODY_TIMEOUT


class HTTPError(Exception):
    """An answer other than 200, with a message naming the cause."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class AsciiJSONResponse(JSONResponse):
    """JSON in ASCII: a character UTF-8 cannot carry (a lone surrogate a client sent) is escaped,
    as any other non-ASCII one, so that one row never costs the answer its other rows."""

    def render(self, content: Any) -> bytes:
        """The body's bytes."""
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"error": message}`` (scrubbed of secrets) with ``status``."""
    return AsciiJSONResponse({"error": scrub(message)}, status_code=status, headers=headers)


def authorized(request: Request, token: str | None) -> bool:
    """Whether the request carries the server's bearer token (constant-time compare)."""
    if token is None:
        return True
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


Handler = Callable[[Request], Awaitable[Response]]


def reward_of(record: dict[str, Any], normalize: bool) -> float | None:
    """A ``/v1/reward`` reward: an ok record's score on the method's scale, or with ``normalize``
    on ``[0, 1]`` (the scale mapped onto it and clipped, as ``make_reward`` gives it); ``None`` for
    a record that is not ok."""
    score = record.get("score")
    if record.get("status") != "ok" or not isinstance(score, (int, float)):
        return None
    if not normalize:
        return score
    low, high = record.get("scale") or (0.0, 0.0)
    return unit_score(score, (low, high))


def create_app(judge: Any, settings: ServeSettings, info: dict[str, Any], *, metrics: Metrics | None = None, batcher: Batcher | None = None) -> Starlette:
    """The ASGI app serving ``judge`` (a :class:`~capjudge.judges.judge.Judge`; ``info`` is what
    ``GET /v1/info`` answers). The batcher starts with the app and finishes the queued requests
    when the app shuts down (uvicorn's graceful shutdown: SIGTERM)."""
    register_secret(settings.token)
    check_token(settings.token, "ServeSettings.token")  # one no request can carry: ValueError
    metrics = metrics or Metrics()
    state: dict[str, Any] = {"batcher": batcher}
    uploads = Uploads(timeout=settings.body_timeout)

    def running() -> Batcher:
        if state["batcher"] is None:
            state["batcher"] = Batcher(judge, max_batch=settings.max_batch, max_wait_ms=settings.max_wait_ms, max_queue=settings.max_queue, metrics=metrics)
        b: Batcher = state["batcher"]
        return b

    def guarded(route: str, fn: Handler, *, open_route: bool = False) -> Handler:
        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if not open_route and not authorized(request, settings.token):
                    response: Response = error_response(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)", {"WWW-Authenticate": "Bearer"})
                else:
                    response = await fn(request)
            except HTTPError as exc:
                response = error_response(exc.status, str(exc), exc.headers)
            except BodyError as exc:  # the body was not read to its end: the connection is not reused
                response = error_response(exc.status, str(exc), {"Connection": "close"} if exc.status != 400 else None)
            except Exception as exc:  # noqa: BLE001 - a bug: a JSON 500 naming it, the server stays up
                log.exception("%s failed", route)
                response = error_response(500, f"the server failed on this request: {type(exc).__name__}: {exc}")
            metrics.requests.labels(route=route, status=str(response.status_code)).inc()
            if route.startswith("/v1/") and route != "/v1/info":
                metrics.latency.labels(route=route).observe(time.perf_counter() - t0)
            return response

        return endpoint

    async def judged(route: str, kind: str, rows: list[Any], mode: str | None = None) -> list[Any]:
        rows = [row_from_wire(r, settings.max_image_bytes) for r in rows]
        rows = await fetch_url_images(judge, rows)  # URL images downloaded before the queue, never on its worker
        try:
            future = running().submit(kind, rows, mode)
        except QueueFull as exc:
            raise HTTPError(429, str(exc), {"Retry-After": str(exc.retry_after)}) from None
        except Closed as exc:
            raise HTTPError(503, str(exc)) from None
        metrics.in_flight.inc()
        try:
            records = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001 - a judge bug: this request fails, the server stays up
            raise HTTPError(500, f"the judge failed on this batch: {type(exc).__name__}: {exc}") from None
        finally:
            metrics.in_flight.dec()
        out = [named(r.to_dict(), row) for r, row in zip(records, rows)]
        for rec in out:
            metrics.samples.labels(route=route, status=str(rec.get("status"))).inc()
        return out

    def checked_rows(body: Any, field: str) -> list[Any]:
        try:
            rows = items_of(body, field)
        except WireError as exc:
            raise HTTPError(400, str(exc)) from None
        if len(rows) > settings.max_queue:
            raise HTTPError(413, f"{len(rows)} {field} in one request: the server queues at most {settings.max_queue} (--max-queue); send fewer at a time")
        try:
            check_rows(rows, field)
        except WireError as exc:
            raise HTTPError(400, str(exc)) from None
        return rows

    async def body_of(request: Request) -> Any:
        return await read_json(request, settings.max_body_bytes, settings.max_queue, uploads)

    async def health(request: Request) -> Response:
        return AsciiJSONResponse({"status": "ok"})

    async def get_info(request: Request) -> Response:
        return AsciiJSONResponse(info)

    async def score(request: Request) -> Response:
        rows = checked_rows(await body_of(request), "samples")
        return AsciiJSONResponse({"results": await judged("/v1/score", "score", rows)})

    async def compare(request: Request) -> Response:
        body = await body_of(request)
        rows = checked_rows(body, "pairs")
        mode = body.get("mode")
        if mode not in (None, *info.get("compare_modes", {})):
            raise HTTPError(400, f"mode {mode!r}: this judge compares by {sorted(info.get('compare_modes', {}))} (or null: the method's own)")
        return AsciiJSONResponse({"results": await judged("/v1/compare", "compare", rows, mode)})

    async def reward(request: Request) -> Response:
        body = await body_of(request)
        completions = checked_rows(body, "completions")
        images = body.get("images")
        if not isinstance(images, list) or len(images) != len(completions):
            raise HTTPError(400, "'images' must be a list with one image per completion")
        refs = body.get("references")
        if refs is not None and (not isinstance(refs, list) or len(refs) != len(completions)):
            raise HTTPError(400, "'references' must be a list with one list of references per completion (or absent)")
        rows = []
        for k, (text, image) in enumerate(zip(completions, images)):
            row = dict(image) if isinstance(image, dict) else {"image": image}
            row.update(caption=text, id=str(k))
            if refs is not None:
                row["references"] = refs[k]
            rows.append(row)
        try:
            check_rows(rows, "completions")
        except WireError as exc:
            raise HTTPError(400, str(exc)) from None
        normalize = body.get("normalize", False)
        if not isinstance(normalize, bool):
            raise HTTPError(400, f"'normalize' must be true or false, got {type(normalize).__name__}")
        results = await judged("/v1/reward", "score", rows)
        return AsciiJSONResponse({"rewards": [reward_of(r, normalize) for r in results], "results": results})

    async def get_metrics(request: Request) -> Response:
        return Response(metrics.text(), media_type=metrics.content_type)

    routes = [
        Route("/health", guarded("/health", health, open_route=True), methods=["GET"]),
        Route("/v1/info", guarded("/v1/info", get_info), methods=["GET"]),
        Route("/v1/score", guarded("/v1/score", score), methods=["POST"]),
        Route("/v1/compare", guarded("/v1/compare", compare), methods=["POST"]),
        Route("/v1/reward", guarded("/v1/reward", reward), methods=["POST"]),
        Route("/metrics", guarded("/metrics", get_metrics), methods=["GET"]),
    ]

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        running()
        try:
            yield
        finally:
            # Graceful shutdown: uvicorn has answered every request in flight; the queue is empty.
            await asyncio.get_running_loop().run_in_executor(None, running().close)

    async def http_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):  # Starlette's own: 404, 405
            return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))
        return error_response(500, f"the server failed on this request: {type(exc).__name__}")

    app = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error, Exception: http_error},
        middleware=[Middleware(HostGuard, rule=settings.hosts)],  # before any route: the Host check
    )
    app.state.metrics = metrics
    app.state.batcher = running
    app.state.uploads = uploads
    return app


__all__ = ["AsciiJSONResponse", "DEFAULT_BODY_TIMEOUT", "DEFAULT_MAX_BODY_BYTES", "HTTPError", "ServeSettings", "authorized", "create_app", "error_response"]
