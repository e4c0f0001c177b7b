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

from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from capjudge.backends.base import Backend, Completion, PromptTokens, Request
from capjudge.backends.openai.backend import OpenAIBackend
from capjudge.backends.vllm.options import VLLMSettings
from capjudge.backends.vllm.process import ServerProcess, free_port


def client_identity(settings: VLLMSettings, client: OpenAIBackend) -> dict[str, Any]:
    """The backend's identity: the server's settings and the client's, less what a fresh port
    changes (the endpoint)."""
    ident = {k: v for k, v in client.identity().items() if k not in ("kind", "model", "endpoint", "api_version")}
    return {**settings.identity(), **ident}


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
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def identity(self) -> dict[str, Any]:
        """The server's settings that change answers and the client's (no port)."""
        return client_identity(self.settings, self.client)

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request (concurrently, on the server)."""
        return self.client.generate(requests)

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """``(index, answer or error)`` in completion order."""
        return self.client.stream(requests)

    def submit(self, request: Request) -> Future[Completion | BaseException]:
        """Start one request; its future holds the answer or the error."""
        return self.client.submit(request)

    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The prompt tokens the server reads (vLLM's ``/tokenize``)."""
        return self.client.prompt_tokens(request)

    def close(self) -> None:
        """Close the client and stop the server with its engine processes."""
        try:
            self.client.close()
        finally:
            self.server.stop()

    def __repr__(self) -> str:
        return f"VLLMBackend({self.spec!r})"
