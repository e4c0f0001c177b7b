"""Where an OpenAI-protocol backend sends its requests and with which credentials: the endpoint,
the API key (from an option or the environment variable of the kind's entry in
:mod:`capjudge.backends.kinds`, never from anywhere else), the one-line notices about where a key
goes, and the SDK client built from them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from capjudge.backends import kinds
from capjudge.backends.base import BackendError
from capjudge.backends.credentials import UrlAuth
from capjudge.backends.openai.errorbody import sdk_http_client
from capjudge.backends.openai.transport import DEFAULT_MAX_RESPONSE_BYTES
from capjudge.backends.options import OptionError
from capjudge.core.redact import get_logger

log = get_logger("capjudge.backends.openai")

# The environment variable each kind reads its key from when none is named (openai-compatible: none).
KEY_VARIABLE = {name: variable for name in kinds.api_kinds() if (variable := kinds.key_variable(name))}
PLACEHOLDER_KEY = "EMPTY"  # what servers without keys (vLLM without --api-key) are sent
OPENAI_HOSTS = ("api.openai.com",)
_said: set[tuple[str, ...]] = set()  # one-line notices already given in this process
_said_lock = threading.Lock()


def say_once(*key: str) -> bool:
    """Whether the notice ``key`` is new in this process (and mark it said)."""
    with _said_lock:
        if key in _said:
            return False
        _said.add(key)
        return True


def clean_endpoint(url: str | None) -> str | None:
    """The endpoint without user info, query or fragment (never a secret in cache keys or results)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def resolve_endpoint(kind: str, base_url: str | None, azure_endpoint: str | None, api_version: str | None) -> tuple[str | None, str | None]:
    """The endpoint and API version a backend of ``kind`` talks to (options, else environment)."""
    if kind == "azure":
        endpoint = azure_endpoint or base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
        version = api_version or os.environ.get("OPENAI_API_VERSION")
        if not endpoint:
            raise BackendError("Azure needs an endpoint: pass azure_endpoint=... or set AZURE_OPENAI_ENDPOINT")
        if not version:
            raise BackendError("Azure needs an API version: pass api_version=... (e.g. 2024-10-21) or set OPENAI_API_VERSION")
        return endpoint, version
    if kinds.get(kind).url_target:
        if not base_url:
            raise BackendError("openai-compatible needs a base URL: openai-compatible:http://host:port/v1#model")
        return base_url, None
    return base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1", None


def resolve_key(kind: str, endpoint: str | None, api_key: str | None, api_key_env: str | None, token_provider: Callable[[], Any] | None) -> tuple[str | None, str | None]:
    """The API key to send and where it came from (``None, None``: none). ``openai`` reads
    ``OPENAI_API_KEY``, ``azure`` ``AZURE_OPENAI_API_KEY``, ``openai-compatible`` no variable
    unless ``api_key_env`` names one."""
    if api_key:
        return api_key, "the api_key option"
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise OptionError(f"option api_key_env={api_key_env}: the environment variable {api_key_env} is not set (or empty)")
        return value, f"${api_key_env}"
    variable = kinds.key_variable(kind)
    if variable is not None and not (kind == "azure" and token_provider is not None):
        value = os.environ.get(variable)
        return (value, f"${variable}") if value else (None, None)
    if kinds.get(kind).url_target and os.environ.get("OPENAI_API_KEY") and say_once("unsent", str(endpoint)):
        log.warning(
            "OPENAI_API_KEY is set but not sent to %s (not OpenAI's server); to send it: --backend-opt api_key_env=OPENAI_API_KEY",
            clean_endpoint(endpoint),
        )
    return None, None


def say_key_destination(kind: str, endpoint: str | None, key_source: str | None) -> None:
    """One warning per run and host when an API key goes to a host that is not OpenAI's."""
    if key_source is None or kind == "azure":
        return
    host = urlsplit(endpoint or "").hostname or ""
    if host in OPENAI_HOSTS:
        return
    if say_once("sent", str(clean_endpoint(endpoint)), key_source):
        log.warning("sending the API key from %s to %s, which is not OpenAI's server", key_source, clean_endpoint(endpoint))


@dataclass(frozen=True)
class ClientConfig:
    """What an SDK client of one backend is built from (credentials included: never shown)."""

    kind: str
    model: str
    endpoint: str | None
    api_version: str | None
    timeout: float
    url_auth: UrlAuth
    api_key: str | None
    organization: str | None
    token_provider: Callable[[], Any] | None
    headers: Mapping[str, str] | None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # an error answer is read up to errorbody.error_cap of it

    def __repr__(self) -> str:
        return f"ClientConfig({self.kind!r}, {clean_endpoint(self.endpoint)!r})"  # never the key

    def make(self, *, sync: bool = False, max_retries: int = 0) -> Any:
        """The SDK's client: async for chat requests, ``sync`` for the files and batches APIs."""
        import openai

        common: dict[str, Any] = {
            "max_retries": max_retries, "timeout": self.timeout, "default_headers": dict(self.headers) if self.headers else None,
            "http_client": sdk_http_client(self.max_response_bytes, sync=sync),  # error answers read up to a cap
        }
        if self.url_auth.query:
            common["default_query"] = dict(self.url_auth.query)
        if self.kind == "azure":
            key = self.api_key
            if not key and self.token_provider is None:
                raise BackendError("Azure needs credentials: pass api_key=..., set AZURE_OPENAI_API_KEY, or pass azure_ad_token_provider= (Entra ID)")
            assert self.endpoint is not None  # checked by resolve_endpoint
            azure_cls: Any = openai.AzureOpenAI if sync else openai.AsyncAzureOpenAI
            # The files and batches APIs live under {endpoint}/openai, not under a deployment.
            deployment = {} if sync else {"azure_deployment": self.model}
            return azure_cls(
                azure_endpoint=self.endpoint,
                api_version=self.api_version,
                api_key=key,
                azure_ad_token_provider=self.token_provider,
                **deployment,
                **common,
            )
        key = self.api_key
        if kinds.get(self.kind).url_target:
            key = key or PLACEHOLDER_KEY
        elif not key:
            raise BackendError("OpenAI needs an API key: pass api_key=... or set OPENAI_API_KEY")
        client_cls: Any = openai.OpenAI if sync else openai.AsyncOpenAI
        return client_cls(api_key=key, base_url=self.endpoint, organization=self.organization, **common)
