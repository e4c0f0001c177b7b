"""``vllm:MODEL``: a local vLLM server started, used and stopped by capjudge (:mod:`.backend`),
its options (:mod:`.options`) and the server process (:mod:`.process`). docs/vllm.md."""

from __future__ import annotations

from typing import Any

from capjudge.backends.base import Backend
from capjudge.backends.lazy import LazyBackend
from capjudge.backends.registry import BackendSpec
from capjudge.backends.vllm.backend import (
    VLLMBackend,
    client_identity,
    make_client,
)
from capjudge.backends.vllm.options import VLLMSettings
from capjudge.backends.vllm.options import check_options as settings_of
from capjudge.backends.vllm.process import ServerProcess, ServerStartError, free_port

__all__ = ["ServerProcess", "ServerStartError", "VLLMBackend", "VLLMSettings", "check_options", "free_port", "from_spec", "lazy_from_spec"]


def check_options(spec: BackendSpec, **options: Any) -> VLLMSettings:
    """The spec's options checked without starting anything (a bad one: an ``OptionError``)."""
    return settings_of(spec, **options)


def from_spec(spec: BackendSpec, **options: Any) -> VLLMBackend:
    """Start the server now and return the backend."""
    return VLLMBackend(settings_of(spec, **options), spec=spec.raw)


def lazy_from_spec(spec: BackendSpec, **options: Any) -> Backend:
    """The backend, with the server started at the first request the cache cannot answer."""
    settings = settings_of(spec, **options)
    probe = make_client(settings, 0, "")  # what the client will be, on a port still unknown
    identity, capabilities = client_identity(settings, probe), probe.capabilities
    probe.close()
    return LazyBackend(
        lambda: VLLMBackend(settings, spec=spec.raw),
        kind=VLLMBackend.kind,
        spec=spec.raw or f"vllm:{settings.model}",
        model=settings.model,
        identity=identity,
        capabilities=capabilities,
    )
