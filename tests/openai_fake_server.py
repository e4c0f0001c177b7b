"""A scripted OpenAI-protocol server on 127.0.0.1 for the API backend tests (no internet).

It speaks ``POST /v1/chat/completions`` (OpenAI and OpenAI-compatible servers) and the Azure shape
``POST /openai/deployments/{name}/chat/completions?api-version=...``, records every request it
receives (path, query, headers, JSON body), and answers either from a queue of scripted replies
(:meth:`FakeOpenAIServer.push`) or from a default responder. Replies can carry log-probabilities,
be errors with ``retry-after`` headers, be slow, or be malformed JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TokenSpec = tuple[str, float, Sequence[tuple[str, float]]]
"""A served token: its text, its logprob and its top alternatives ``(text, logprob)``."""


@dataclass
class Reply:
    """One scripted answer: a JSON body (or raw bytes), a status, headers and a delay in seconds."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Received:
    """A request as the server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    @property
    def deployment(self) -> str | None:
        """The Azure deployment named in the path, if any."""
        parts = self.path.strip("/").split("/")
        if len(parts) >= 3 and parts[0] == "openai" and parts[1] == "deployments":
            return parts[2]
        return None

    def prompt_text(self) -> str:
        """All text parts of all messages, joined (for scripted responders)."""
        out: list[str] = []
        for m in (self.body or {}).get("messages", []):
            content = m.get("content")
            if isinstance(content, str):
                out.append(content)
            else:
                out.extend(p.get("text", "") for p in content or [] if p.get("type") == "text")
        return "\n".join(out)


def chat_body(
    text: str,
    *,
    tokens: Sequence[TokenSpec] | None = None,
    model: str = "fake-model",
    prompt_tokens: int = 100,
    completion_tokens: int | None = None,
    finish_reason: str = "stop",
    n: int = 1,
) -> dict[str, Any]:
    """A chat-completions response body; ``tokens`` fills ``choices[0].logprobs.content``."""
    logprobs = None
    if tokens is not None:
        logprobs = {
            "content": [
                {
                    "token": tok,
                    "logprob": lp,
                    "bytes": list(tok.encode()),
                    "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in top],
                }
                for tok, lp, top in tokens
            ],
            "refusal": None,
        }
    if completion_tokens is None:
        completion_tokens = len(tokens) if tokens is not None else max(1, len(text) // 4)
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }
        for i in range(n)
    ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(message: str, *, type_: str = "invalid_request_error", code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def digest_score(prompt: str) -> str:
    """A deterministic two-decimal score for a prompt (default responder's answer)."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    return f"0.{h % 100:02d}"


def default_responder(req: Received) -> Reply:
    """Answer with a deterministic score derived from the prompt, with log-probabilities when asked.

    The tokens are ``"0"``, ``"."``, ``"d1"``, ``"d2"`` with fixed alternatives, so smoothing is easy
    to compute by hand.
    """
    body = req.body or {}
    text = digest_score(req.prompt_text())
    tokens = None
    if body.get("logprobs"):
        k = int(body.get("top_logprobs") or 0)
        d1, d2 = text[2], text[3]
        alt1, alt2 = str((int(d1) + 1) % 10), str((int(d2) + 1) % 10)
        tokens = [
            ("0", -0.01, [("0", -0.01), ("1", -4.6)][:k]),
            (".", 0.0, [(".", 0.0)][:k]),
            (d1, -0.3567, [(d1, -0.3567), (alt1, -1.204)][:k]),
            (d2, -0.6931, [(d2, -0.6931), (alt2, -0.6931)][:k]),
        ]
    return Reply(body=chat_body(text, tokens=tokens, model=str(body.get("model") or "fake-model")))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many concurrent connections in the throughput test


class FakeOpenAIServer:
    """The scripted server; use :func:`running_server` or :meth:`start` / :meth:`stop`.

    ``delay`` is added before every answer; ``expected_key`` makes requests without that key fail
    with 401 (``Authorization: Bearer`` or Azure's ``api-key`` header); ``refuse_logprobs`` answers
    400 to any request that asks for log-probabilities (as gpt-4-vision-preview did);
    ``max_top_logprobs`` answers 400 to larger ``top_logprobs``; ``echo_key`` puts the key it got
    into its 401 message (to check that clients scrub it); ``drop_logprobs`` answers without
    log-probabilities even when asked (as ``transformers serve`` does); ``die_after=N`` answers N
    requests and then dies (:meth:`kill`: open connections dropped, new ones refused).
    """

    def __init__(
        self,
        *,
        responder: Callable[[Received], Reply] = default_responder,
        delay: float = 0.0,
        expected_key: str | None = None,
        refuse_logprobs: bool = False,
        max_top_logprobs: int | None = None,
        echo_key: bool = False,
        drop_logprobs: bool = False,
        die_after: int | None = None,
    ) -> None:
        self.responder = responder
        self.delay = delay
        self.expected_key = expected_key
        self.refuse_logprobs = refuse_logprobs
        self.max_top_logprobs = max_top_logprobs
        self.echo_key = echo_key
        self.drop_logprobs = drop_logprobs
        self.die_after = die_after
        self.answered = 0
        self.dead = False
        self._connections: set[Any] = set()
        self.received: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.concurrent = 0
        self.max_concurrent = 0

    # -- scripting -------------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (then the responder answers)."""
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        """Forget received requests and queued replies."""
        with self._lock:
            self.received.clear()
            self._script.clear()
            self.max_concurrent = 0

    @property
    def count(self) -> int:
        """Number of requests received so far."""
        with self._lock:
            return len(self.received)

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> str:
        """The Azure-style endpoint (the SDK appends ``/openai/deployments/...``)."""
        return f"http://127.0.0.1:{self.port}"

    # -- serving ---------------------------------------------------------------------------------
    def _answer(self, req: Received) -> Reply:
        with self._lock:
            self.received.append(req)
            scripted = self._script.popleft() if self._script else None
        if self.expected_key is not None:
            auth = req.headers.get("authorization", "")
            key = req.headers.get("api-key") or (auth[7:] if auth.lower().startswith("bearer ") else "")
            if key != self.expected_key:
                shown = f": {key}" if self.echo_key else "."
                return Reply(status=401, body=error_body(f"Incorrect API key provided{shown}", code="invalid_api_key"))
        if scripted is not None:
            return scripted
        body = req.body if isinstance(req.body, dict) else {}
        if self.drop_logprobs and body.get("logprobs"):
            req = Received(req.method, req.path, req.query, req.headers, {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")})
        if self.refuse_logprobs and body.get("logprobs"):
            return Reply(status=400, body=error_body("This model does not support 'logprobs'.", param="logprobs"))
        if self.max_top_logprobs is not None and int(body.get("top_logprobs") or 0) > self.max_top_logprobs:
            return Reply(
                status=400,
                body=error_body(f"top_logprobs must be less than or equal to {self.max_top_logprobs}.", param="top_logprobs"),
            )
        return self.responder(req)

    def start(self) -> FakeOpenAIServer:
        """Start serving on a free port in a background thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
            # client's delayed ACK add ~40 ms to every keep-alive answer.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                if server.dead:  # a dead server answers nothing
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(data) if data else None
                except ValueError:
                    body = data.decode("utf-8", "replace")
                split = urlsplit(self.path)
                req = Received(
                    method="POST",
                    path=split.path,
                    query=parse_qs(split.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                # The routes real servers have (a base URL without /v1 gets a 404, as from vLLM).
                known = split.path == "/v1/chat/completions" or (split.path.startswith("/openai/deployments/") and split.path.endswith("/chat/completions"))
                with server._lock:
                    server.concurrent += 1
                    server.max_concurrent = max(server.max_concurrent, server.concurrent)
                try:
                    reply = server._answer(req) if known else Reply(status=404, body=error_body(f"no route {split.path}"))
                    wait = server.delay + reply.delay
                    if wait:
                        time.sleep(wait)
                finally:
                    with server._lock:
                        server.concurrent -= 1
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # client gave up (timeout test), or the server was killed
                    self.close_connection = True
                if server.die_after is not None:
                    with server._lock:
                        server.answered += 1
                        dying = server.answered == server.die_after
                    if dying:
                        threading.Thread(target=server.kill, daemon=True).start()

        httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def kill(self) -> None:
        """Die as a killed process would: stop listening (new connections are refused) and drop
        every open connection without an answer (requests in flight see the connection close)."""
        self.dead = True
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


@contextmanager
def running_server(**kwargs: Any) -> Iterator[FakeOpenAIServer]:
    """Start a :class:`FakeOpenAIServer` for the ``with`` block and stop it after."""
    server = FakeOpenAIServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()
