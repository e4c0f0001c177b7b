"""``vllm:MODEL``: capjudge starts vLLM's OpenAI-compatible server for a model, talks to it through
the OpenAI-protocol backend, and stops it at the end.

The server listens on a free port of 127.0.0.1, with what the judge needs (prefix caching, enough
``--max-logprobs`` for the alternatives the client asks, the preset's chat template and reasoning
parser) and the spec's vLLM flags (:mod:`.options`). It is started when the first request needs it
(a run answered from the cache starts none) and waited for up to ``startup_timeout``; it is stopped,
with its engine processes, by :meth:`VLLMBackend.close`, when the backend is collected, and when
the interpreter exits (Ctrl-C and errors included: :mod:`.process`).
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from capjudge.backends.base import Backend, Completion, PromptTokens, Request
from capjudge.backends.openai.backend import OpenAIBackend
from capjudge.backends.vllm.options import VLLMSettings
from capjudge.backends.vllm.process import ServerProcess, free_port
from capjudge.data.images import LoadedImage, pad_to_square

SQUARED_MEMO = 64
"""Padded images kept (by content hash): the captions of one image send the same bytes, encoded once."""


def client_identity(settings: VLLMSettings, client: OpenAIBackend) -> dict[str, Any]:
    """The backend's identity: the server's settings and the client's, less what a fresh port
    changes (the endpoint)."""
    ident = {k: v for k, v in client.identity().items() if k not in ("kind", "model", "endpoint", "api_version")}
    return {**settings.identity(), **ident}


def squared(image: LoadedImage, fill: tuple[int, ...]) -> LoadedImage:
    """``image`` padded to a square with ``fill``, as PNG (lossless: the server decodes the pixels
    the HF backend's processor gets); a square image unchanged."""
    pil = image.pil()
    if pil.width == pil.height:
        return image
    out = pad_to_square(pil, fill)
    buf = io.BytesIO()
    out.save(buf, format="PNG")
    data = buf.getvalue()
    return LoadedImage(sha256=hashlib.sha256(data).hexdigest(), label=image.label, data=data, mime="image/png", _pil=out)


def make_client(settings: VLLMSettings, port: int, spec: str) -> OpenAIBackend:
    """The OpenAI-protocol client of a server on ``port`` (no request is sent)."""
    return OpenAIBackend(settings.model, kind="openai-compatible", spec=spec, base_url=f"http://127.0.0.1:{port}/v1", **settings.client)


class VLLMBackend(Backend):
    """A vLLM server this process started, used through :class:`OpenAIBackend`.

    Construction starts the server and waits for it (:class:`~.process.ServerStartError` with the
    log's tail if it dies or is not ready in ``settings.startup_timeout``); ``close()`` stops it.
    ``server`` is the :class:`~.process.ServerProcess`, ``client`` the OpenAI-protocol backend.
    """

    kind = "vllm"

    def __init__(self, settings: VLLMSettings, *, spec: str = "") -> None:
        self.settings = settings
        self.spec = spec or f"vllm:{settings.model}"
        self.model = settings.model
        port = free_port()
        self.server = ServerProcess(settings.command(port), f"http://127.0.0.1:{port}/health", env=settings.env())
        self.server.start(settings.startup_timeout, what=f"the vLLM server for {settings.model}")
        try:
            self.client = make_client(settings, port, self.spec)
        except BaseException:
            self.server.stop()
            raise
        self.capabilities = self.client.capabilities
        self._memo: OrderedDict[str, LoadedImage] = OrderedDict()
        self._memo_lock = threading.Lock()
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def identity(self) -> dict[str, Any]:
        """The server's settings that change answers and the client's (no port)."""
        return client_identity(self.settings, self.client)

    def _sent(self, request: Request) -> Request | BaseException:
        """The request as sent: its images padded to a square when the settings say so (LLaVA-1.5's
        preprocessing, which vLLM's processor does not do), or the error of an image that cannot be read."""
        fill = self.settings.pad_fill
        if fill is None or not request.images:
            return request
        try:
            messages = tuple(replace(m, images=tuple(self._squared(i, fill) for i in m.images)) if m.images else m for m in request.messages)
        except Exception as exc:  # noqa: BLE001 - this request's error, not the batch's
            return exc
        return replace(request, messages=messages)

    def _squared(self, image: LoadedImage, fill: tuple[int, ...]) -> LoadedImage:
        with self._memo_lock:
            hit = self._memo.get(image.sha256)
            if hit is not None:
                self._memo.move_to_end(image.sha256)
                return hit
        out = squared(image, fill)
        with self._memo_lock:
            self._memo[image.sha256] = out
            while len(self._memo) > SQUARED_MEMO:
                self._memo.popitem(last=False)
        return out

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request (concurrently, on the server)."""
        out: list[Completion | BaseException | None] = [None] * len(requests)
        for i, item in self.stream(requests):
            out[i] = item
        return out  # type: ignore[return-value]

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """``(index, answer or error)`` in completion order."""
        sent = [self._sent(r) for r in requests]
        ready = [(i, r) for i, r in enumerate(sent) if isinstance(r, Request)]
        for i, r in enumerate(sent):
            if not isinstance(r, Request):
                yield i, r
        for j, item in self.client.stream([r for _, r in ready]):
            yield ready[j][0], item

    def submit(self, request: Request) -> Future[Completion | BaseException]:
        """Start one request; its future holds the answer or the error."""
        sent = self._sent(request)
        if isinstance(sent, Request):
            return self.client.submit(sent)
        failed: Future[Completion | BaseException] = Future()
        failed.set_result(sent)
        return failed

    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The prompt tokens the server reads (vLLM's ``/tokenize``)."""
        sent = self._sent(request)
        if not isinstance(sent, Request):
            raise sent
        return self.client.prompt_tokens(sent)

    def close(self) -> None:
        """Close the client and stop the server with its engine processes."""
        try:
            self.client.close()
        finally:
            self.server.stop()

    def __repr__(self) -> str:
        return f"VLLMBackend({self.spec!r})"
