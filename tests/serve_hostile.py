"""A hostile judge server on 127.0.0.1 for the client tests: it answers ``/health`` and ``/v1/info``
as ``capjudge serve`` does (the info of a real vanilla judge), and ``POST /v1/score`` with whatever
the test scripts: bad records, too few or too many, a body trickled a byte at a time, an oversize
body. uvicorn in a thread, started and stopped by the test; every endless answer ends when the
server stops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from capjudge.backends.scripted import ScriptedBackend
from capjudge.serve.served import ServedJudge, judge_info
from capjudge.serve.server import free_port, make_server
from serve_helpers import ANSWER, IMAGES

Answer = Callable[[list[dict[str, Any]], "Hostile"], Response]


def vanilla_info() -> dict[str, Any]:
    """``/v1/info`` of ``capjudge serve --method vanilla --backend scripted:ANSWER``."""
    return judge_info(ServedJudge("vanilla", ScriptedBackend(ANSWER), images_root=IMAGES))


def pairwise_info() -> dict[str, Any]:
    """``/v1/info`` of ``capjudge serve --method gpt4v-pairwise --backend scripted:...``."""
    return judge_info(ServedJudge("gpt4v-pairwise", ScriptedBackend("Caption A is better. [[A]]"), images_root=IMAGES))


def pair_record(info: dict[str, Any], row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The ok pair record (verdict A, both orders) of ``row`` by the served pairwise judge, with ``changes``."""
    fields = info["compare_modes"][info["default_mode"]]
    rec = {
        "id": row.get("id"), "image": row.get("image"), "caption_a": row.get("caption_a"), "caption_b": row.get("caption_b"), "verdict": "A",
        "model": info["model"], "votes": ["A", "A"], "raw": ["[[A]]", "[[B]]"], "status": "ok", "error": None, "details": {}, **fields,
    }
    rec.update(changes)
    return rec


def record(info: dict[str, Any], row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The ok record the served vanilla judge writes for ``row`` (score 85), with ``changes``."""
    rec = {
        "id": row.get("id"), "image": row.get("image"), "caption": row.get("caption"), "score": 85.0, "method": info["method"]["name"],
        "backend": info["backend"], "model": info["model"], "template_hash": info["method"]["template_hash"], "references": [],
        "raw": ANSWER, "raw_score": 85.0, "status": "ok", "error": None, "scale": list(info["method"]["scale"]), "smoothed": False, "details": {},
    }
    rec.update(changes)
    return rec


def json_bytes(value: Any) -> Response:
    """A 200 JSON answer as Python's json writes it (NaN and Infinity included)."""
    return Response(json.dumps(value).encode(), media_type="application/json")


class Hostile:
    """The server's state: ``answer(rows, state)`` makes the answer of each ``/v1/score`` request;
    ``requests`` counts them; ``stopping`` ends endless answers."""

    def __init__(self, answer: Answer, info: dict[str, Any] | None = None) -> None:
        self.answer = answer
        self.info = info or vanilla_info()
        self.requests = 0
        self.stopping = threading.Event()

    def records(self, sent: list[dict[str, Any]], **changes: Any) -> Response:
        """The good record of every row sent (with ``changes``)."""
        return json_bytes({"results": [record(self.info, row, **changes) for row in sent]})

    async def trickle(self, interval: float = 0.2) -> AsyncIterator[bytes]:
        """A body a byte every ``interval`` seconds, until the server stops (or 60 s: a client that
        waits for every byte ends all the same)."""
        yield b'{"results": ['
        for _ in range(int(60 / interval)):
            if self.stopping.is_set():
                return
            await asyncio.sleep(interval)
            yield b" "

    async def endless(self, chunk: int = 256 * 1024) -> AsyncIterator[bytes]:
        """A body of ``chunk``-byte pieces (no length announced), until the server stops or 256 MiB."""
        yield b'{"results": ["'
        for _ in range(1024):
            if self.stopping.is_set():
                return
            yield b"x" * chunk
            await asyncio.sleep(0)

    async def stall(self) -> AsyncIterator[bytes]:
        """Nothing after the headers, until the server stops (or 60 s)."""
        yield b""
        for _ in range(600):
            if self.stopping.is_set():
                return
            await asyncio.sleep(0.1)

    def app(self) -> Starlette:
        async def health(request: Request) -> Response:
            return JSONResponse({"status": "ok"})

        async def info(request: Request) -> Response:
            return JSONResponse(self.info)

        async def score(request: Request) -> Response:
            self.requests += 1
            body = await request.json()
            return self.answer(body["samples"], self)

        async def compare(request: Request) -> Response:
            self.requests += 1
            body = await request.json()
            return self.answer(body["pairs"], self)

        routes = [Route("/health", health), Route("/v1/info", info), Route("/v1/score", score, methods=["POST"]), Route("/v1/compare", compare, methods=["POST"])]
        return Starlette(routes=routes)


def streaming(body: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> Response:
    """A 200 answer streamed from ``body`` (``headers`` may announce a length it never sends)."""
    return StreamingResponse(body, media_type="application/json", headers=headers)


@contextlib.contextmanager
def hostile_server(answer: Answer, *, info: dict[str, Any] | None = None, port: int | None = None, delay: float = 0.0) -> Iterator[tuple[str, Hostile]]:
    """A :class:`Hostile` server on 127.0.0.1 (``port``, else a free one; it starts listening after
    ``delay`` seconds), stopped at the end of the block: ``(url, state)``."""
    state = Hostile(answer, info)
    port = port or free_port()
    server = make_server(state.app(), "127.0.0.1", port, graceful_seconds=1)

    def run() -> None:
        if not state.stopping.wait(delay):
            server.run()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30 + delay
    if delay == 0:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the hostile server did not start")
            time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        state.stopping.set()
        server.should_exit = True
        thread.join(30)
