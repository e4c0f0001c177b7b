"""A scripted OpenAI-protocol server on 127.0.0.1 for the API backend tests (no internet).

It speaks ``POST /v1/chat/completions`` (OpenAI and OpenAI-compatible servers) and the Azure shape
``POST /openai/deployments/{name}/chat/completions?api-version=...``, records every request it
receives (path, query, headers, JSON body), and answers either from a queue of scripted replies
(:meth:`FakeOpenAIServer.push`) or from a default responder. Replies can carry log-probabilities,
be errors with ``retry-after`` headers, be slow, or be malformed JSON.

It also speaks the files and batches endpoints (under ``/v1`` and Azure's ``/openai``):
``POST /files`` (multipart, purpose ``batch``), ``GET /files``, ``GET /files/{id}/content``,
``POST /batches``, ``GET /batches``, ``GET /batches/{id}``, ``POST /batches/{id}/cancel``. A batch
is answered ``batch_delay`` seconds after it was created, line by line by the same responder;
``batch_fault(custom_id, body, batch_number)`` may fail a line with an HTTP status; batches whose
number (1-based, in creation order) is in ``expire_batches`` expire with half their lines answered.
``batch_line_counts`` counts every line the server ran, by ``custom_id``.

Hostile answers: :func:`answering` answers every request with one crafted body (log-probabilities
that are none, usage that is no token count: :func:`chat_body`'s ``tokens`` and ``usage``);
:class:`TricklingServer` (:func:`trickling_server`) sends its headers at once and then its body a
byte at a time.

Reasoning API: :func:`reasoning_api` answers as OpenAI's reasoning models (o-series, gpt-5) do: the
model "thinks" a number of hidden tokens (by ``reasoning_effort``) that spend
``max_completion_tokens`` before the answer does (too small a budget: empty content and
``finish_reason: "length"``), usage reports them in ``completion_tokens_details.reasoning_tokens``
(inside ``completion_tokens``), and ``max_tokens``, ``temperature``, ``top_p``, penalties and
log-probabilities are refused with HTTP 400.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import hashlib
import itertools
import json
import re
import socket
import threading
import time
from collections import Counter, deque
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
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat-completions response body; ``tokens`` fills ``choices[0].logprobs.content`` (any
    values, to craft log-probabilities that are none: ``5.0``, ``float("nan")``, ``"abc"``);
    ``usage`` replaces the usage object (to craft negative or non-numeric counts)."""
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
        "usage": usage if usage is not None else {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def answering(text: str, *, tokens: Sequence[TokenSpec] | None = None, **body: Any) -> Callable[[Received], Reply]:
    """A responder that answers every request with ``chat_body(text, tokens=tokens, **body)``,
    asked for log-probabilities or not (a hostile server sends what it likes)."""

    def respond(req: Received) -> Reply:
        return Reply(body=chat_body(text, tokens=tokens, model=str((req.body or {}).get("model") or "fake-model"), **body))

    return respond


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


REASONING_THINK = {"none": 0, "minimal": 40, "low": 600, "medium": 2500, "high": 7000, "xhigh": 12000, "max": 20000}
"""Hidden reasoning tokens the reasoning API spends, by ``reasoning_effort`` (not sent: medium)."""

_REASONING_REFUSED = {
    "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
    "temperature": "Unsupported value: 'temperature' does not support {value} with this model. Only the default (1) value is supported.",
    "top_p": "Unsupported parameter: 'top_p' is not supported with this model.",
    "presence_penalty": "Unsupported parameter: 'presence_penalty' is not supported with this model.",
    "frequency_penalty": "Unsupported parameter: 'frequency_penalty' is not supported with this model.",
    "repetition_penalty": "Unrecognized request argument supplied: repetition_penalty",
    "logprobs": "This model does not support 'logprobs'.",
    "top_logprobs": "Unsupported parameter: 'top_logprobs' is not supported with this model.",
}


def reasoning_answer(req: Received) -> str:
    """The reasoning API's answer: a 0-100 integer when the prompt asks for one, else a 0-1 score."""
    prompt = req.prompt_text()
    score = digest_score(prompt)
    return str(int(score[2:])) if "0 to 100" in prompt else score


def reasoning_api(*, think: dict[str, int] | None = None, answer: Callable[[Received], str] = reasoning_answer) -> Callable[[Received], Reply]:
    """A responder that behaves like a reasoning model's API (see the module docstring): ``think``
    maps ``reasoning_effort`` to the hidden tokens spent (default :data:`REASONING_THINK`)."""
    spend = {**REASONING_THINK, **(think or {})}

    def respond(req: Received) -> Reply:
        body = req.body or {}
        for name, message in _REASONING_REFUSED.items():
            if name in body:
                return Reply(status=400, body=error_body(message.format(value=body[name]), type_="invalid_request_error", code="unsupported_parameter", param=name))
        effort = body.get("reasoning_effort", "medium")
        if effort not in spend:
            return Reply(status=400, body=error_body(f"Unsupported value: 'reasoning_effort' does not support {effort!r}.", param="reasoning_effort"))
        budget = body.get("max_completion_tokens")
        if not isinstance(budget, int) or budget < 1:
            return Reply(status=400, body=error_body("max_completion_tokens must be a positive integer", param="max_completion_tokens"))
        text = answer(req)
        thought = min(spend[effort], budget)
        answer_tokens = max(1, len(text) // 2)
        if thought + answer_tokens <= budget:
            content, finish, used = text, "stop", thought + answer_tokens
        else:  # the budget ran out: what of the answer fits (nothing when the reasoning spent it all)
            room = budget - thought
            content, finish, used = text[: 2 * room] if room > 0 else "", "length", budget
        usage = {
            "prompt_tokens": 120,
            "completion_tokens": used,
            "total_tokens": 120 + used,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": thought, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
        }
        out = chat_body(content, model=str(body.get("model") or "fake-model"), finish_reason=finish, usage=usage)
        out["system_fingerprint"] = None
        return Reply(body=out)

    return respond


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
    requests and then dies (:meth:`kill`: open connections dropped, new ones refused);
    ``check_auth(received)`` returns ``None`` to accept a request (chat, files and batches alike)
    or a message that the server answers with 401 (a message may echo what it received, to check
    that clients mask it); ``auth_seen`` keeps the ``(Authorization header, query)`` of every
    request.
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
        batch_delay: float = 0.0,
        batch_fault: Callable[[str, dict[str, Any], int], int | None] | None = None,
        expire_batches: Sequence[int] = (),
        batch_call_delay: dict[str, float] | None = None,
        check_auth: Callable[[Received], str | None] | None = None,
    ) -> None:
        self.responder = responder
        self.check_auth = check_auth
        self.auth_seen: list[tuple[str, dict[str, list[str]]]] = []
        self.batch_delay = batch_delay
        self.batch_fault = batch_fault
        self.expire_batches = set(expire_batches)
        # Seconds an upload ("files") or a batch creation ("batches") waits after it is done and
        # before it answers: a client killed meanwhile has done it without knowing.
        self.batch_call_delay = dict(batch_call_delay or {})
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_line_counts: Counter[str] = Counter()
        self.batch_requests: list[tuple[str, str]] = []  # (method, path) of every files/batches call
        self._ids = itertools.count(1)
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
    def _auth_refusal(self, req: Received) -> Reply | None:
        """Record the request's credentials; a 401 when ``check_auth`` refuses them."""
        with self._lock:
            self.auth_seen.append((req.headers.get("authorization", ""), req.query))
        refusal = self.check_auth(req) if self.check_auth is not None else None
        return None if refusal is None else Reply(status=401, body=error_body(refusal, code="invalid_api_key"))

    def _answer(self, req: Received) -> Reply:
        with self._lock:
            self.received.append(req)
            scripted = self._script.popleft() if self._script else None
        refused = self._auth_refusal(req)
        if refused is not None:
            return refused
        if self.expected_key is not None:
            auth = req.headers.get("authorization", "")
            key = req.headers.get("api-key") or (auth[7:] if auth.lower().startswith("bearer ") else "")
            if key != self.expected_key:
                shown = f": {key}" if self.echo_key else "."
                return Reply(status=401, body=error_body(f"Incorrect API key provided{shown}", code="invalid_api_key"))
        if scripted is not None:
            return scripted
        return self._respond(req)

    def _respond(self, req: Received) -> Reply:
        """The answer of the server's settings and responder (online requests and batch lines)."""
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

    # -- files and batches ---------------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):04d}"

    def _file_object(self, fid: str) -> dict[str, Any]:
        f = self.files[fid]
        return {"id": fid, "object": "file", "bytes": len(f["data"]), "created_at": f["created_at"], "filename": f["filename"], "purpose": f["purpose"], "status": "processed"}

    def _batch_object(self, bid: str) -> dict[str, Any]:
        b = self.batches[bid]
        return {k: v for k, v in b.items() if not k.startswith("_")}

    def _upload(self, content_type: str, data: bytes) -> Reply:
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + data)
        fields: dict[str, Any] = {}
        filename = "upload.jsonl"
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if part.get_filename():
                filename = part.get_filename()
            fields[str(name)] = part.get_payload(decode=True)
        purpose = (fields.get("purpose") or b"").decode()
        if purpose != "batch" or "file" not in fields:
            return Reply(status=400, body=error_body(f"expected a file with purpose batch, got purpose {purpose!r}"))
        with self._lock:
            fid = self._new_id("file")
            self.files[fid] = {"data": fields["file"], "filename": filename, "purpose": purpose, "created_at": int(time.time())}
        return Reply(body=self._file_object(fid))

    def _create_batch(self, body: dict[str, Any]) -> Reply:
        fid = body.get("input_file_id")
        if fid not in self.files:
            return Reply(status=404, body=error_body(f"no file {fid}"))
        if body.get("completion_window") != "24h":
            return Reply(status=400, body=error_body("completion_window must be 24h"))
        with self._lock:
            bid = self._new_id("batch")
            number = len(self.batches) + 1
            total = sum(1 for line in self.files[fid]["data"].splitlines() if line.strip())
            self.batches[bid] = {
                "id": bid, "object": "batch", "endpoint": body.get("endpoint"), "input_file_id": fid,
                "completion_window": "24h", "status": "in_progress", "created_at": int(time.time()),
                "output_file_id": None, "error_file_id": None, "metadata": body.get("metadata"),
                "request_counts": {"total": total, "completed": 0, "failed": 0},
                "_number": number, "_created": time.monotonic(),
            }
        return Reply(body=self._batch_object(bid))

    def _run_batch(self, bid: str) -> None:
        """Answer a batch's lines (called once, when its delay is over)."""
        b = self.batches[bid]
        lines = [json.loads(line) for line in self.files[b["input_file_id"]]["data"].splitlines() if line.strip()]
        expire = b["_number"] in self.expire_batches
        done = lines[: len(lines) // 2] if expire else lines
        out: list[str] = []
        err: list[str] = []
        for n, line in enumerate(done):
            cid = line["custom_id"]
            self.batch_line_counts[cid] += 1
            status = self.batch_fault(cid, line["body"], b["_number"]) if self.batch_fault else None
            if status:
                resp = {"status_code": status, "request_id": f"req-{n}", "body": error_body(f"scripted failure {status}", type_="server_error" if status >= 500 else "invalid_request_error")}
                err.append(json.dumps({"id": f"{bid}-{n}", "custom_id": cid, "response": resp, "error": None}))
                continue
            req = Received("POST", line["url"], {}, {}, line["body"])
            reply = self._respond(req)
            resp = {"status_code": reply.status, "request_id": f"req-{n}", "body": reply.body}
            (out if reply.status == 200 else err).append(json.dumps({"id": f"{bid}-{n}", "custom_id": cid, "response": resp, "error": None}))
        for n, line in enumerate(lines[len(done):], start=len(done)):
            err.append(json.dumps({"id": f"{bid}-{n}", "custom_id": line["custom_id"], "response": None, "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}))
        for kind, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = self._new_id("file")
                self.files[fid] = {"data": ("\n".join(rows) + "\n").encode(), "filename": f"{bid}_{kind}.jsonl", "purpose": "batch_output", "created_at": int(time.time())}
                b[kind] = fid
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err) - (len(lines) - len(done))}
        b["status"] = "expired" if expire else "completed"

    def _get_batch(self, bid: str) -> Reply:
        with self._lock:
            b = self.batches.get(bid)
            if b is None:
                return Reply(status=404, body=error_body(f"no batch {bid}"))
            if b["status"] == "cancelling":
                b["status"] = "cancelled"
            elif b["status"] == "in_progress" and time.monotonic() - b["_created"] >= self.batch_delay:
                self._run_batch(bid)
            return Reply(body=self._batch_object(bid))

    def _cancel_batch(self, bid: str) -> Reply:
        with self._lock:
            b = self.batches.get(bid)
            if b is None:
                return Reply(status=404, body=error_body(f"no batch {bid}"))
            if b["status"] == "in_progress":
                b["status"] = "cancelling"
            return Reply(body=self._batch_object(bid))

    def _batch_route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], data: bytes) -> Reply | None:
        """The files and batches endpoints (``None``: not one of them)."""
        m = re.match(r"^/(?:v1|openai)(/(?:files|batches).*)$", path)
        if not m:
            return None
        route = m.group(1)
        with self._lock:
            self.batch_requests.append((method, route))
        refused = self._auth_refusal(Received(method, path, query, headers, None))
        if refused is not None:
            return refused
        if method == "POST" and route == "/files":
            reply = self._upload(headers.get("content-type", ""), data)
            time.sleep(self.batch_call_delay.get("files", 0.0))
            return reply
        if method == "GET" and route == "/files":
            purpose = (query.get("purpose") or [None])[0]
            with self._lock:
                rows = [self._file_object(f) for f in sorted(self.files, reverse=True) if purpose is None or self.files[f]["purpose"] == purpose]
            return Reply(body={"object": "list", "data": rows, "has_more": False})
        fm = re.match(r"^/files/([^/]+)/content$", route)
        if method == "GET" and fm:
            f = self.files.get(fm.group(1))
            return Reply(raw=f["data"]) if f else Reply(status=404, body=error_body("no such file"))
        if method == "POST" and route == "/batches":
            reply = self._create_batch(json.loads(data or b"{}"))
            time.sleep(self.batch_call_delay.get("batches", 0.0))
            return reply
        if method == "GET" and route == "/batches":
            with self._lock:
                rows = [self._batch_object(b) for b in sorted(self.batches, reverse=True)]
            return Reply(body={"object": "list", "data": rows, "has_more": False})
        bm = re.match(r"^/batches/([^/]+)(/cancel)?$", route)
        if bm and method == "GET" and not bm.group(2):
            return self._get_batch(bm.group(1))
        if bm and method == "POST" and bm.group(2):
            return self._cancel_batch(bm.group(1))
        return Reply(status=404, body=error_body(f"no route {method} {path}"))

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

            def _send(self, reply: Reply) -> None:
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/octet-stream" if reply.raw is not None else "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                if server.dead:
                    self.close_connection = True
                    return
                split = urlsplit(self.path)
                reply = server._batch_route("GET", split.path, parse_qs(split.query), {k.lower(): v for k, v in self.headers.items()}, b"")
                self._send(reply or Reply(status=404, body=error_body(f"no route {split.path}")))

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                if server.dead:  # a dead server answers nothing
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else b""
                split0 = urlsplit(self.path)
                batch_reply = server._batch_route("POST", split0.path, parse_qs(split0.query), {k.lower(): v for k, v in self.headers.items()}, data)
                if batch_reply is not None:
                    self._send(batch_reply)
                    return
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


class TricklingServer:
    """A raw HTTP server on 127.0.0.1 that answers every request at once with a ``200`` status line
    and headers announcing a ``body_size``-byte JSON body, then sends that body one byte every
    ``interval`` seconds (a hostile or broken server that holds a client with a per-read timeout
    forever). Every connection gets a thread; :meth:`stop` closes them all. ``connections``
    counts the requests it started to answer."""

    def __init__(self, *, interval: float = 1.0, body_size: int = 10_000) -> None:
        self.interval = interval
        self.body_size = body_size
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> TricklingServer:
        self._accepter.start()
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(0.5)
            data = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in data and not self._stop.is_set():
                    try:
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        return
                    data += chunk
                with self._lock:
                    self.connections += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(self.body_size).encode() + b"\r\n\r\n")
                for _ in range(self.body_size):
                    if self._stop.wait(self.interval):
                        return
                    conn.sendall(b" ")

    def stop(self) -> None:
        """Stop accepting, end every trickle and close the sockets."""
        self._stop.set()
        self._accepter.join(timeout=5)
        for t in self._threads:
            t.join(timeout=5)
        self._sock.close()


@contextmanager
def trickling_server(**kwargs: Any) -> Iterator[TricklingServer]:
    """A :class:`TricklingServer` for the ``with`` block, stopped after."""
    server = TricklingServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()
