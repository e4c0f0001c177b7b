"""API judges: OpenAI (GPT-4o, GPT-4V, ...), Azure OpenAI and any OpenAI-compatible server.

Spec strings: ``openai:<model>``, ``azure:<deployment>``, ``openai-compatible:<base_url>#<model>``
(vLLM, SGLang, llama.cpp server, Ollama). Built on the official ``openai`` SDK's async client with
its own retries switched off: :mod:`capjudge.backends.openai.retry` retries with tenacity.

Requests run concurrently (``concurrency``, default 8) on a private event loop in a background
thread, so :meth:`OpenAIBackend.generate` works whether or not the caller has an event loop running,
and :meth:`OpenAIBackend.stream` yields answers in completion order. Log-probabilities come back as
:class:`~capjudge.backends.base.TokenStep` with ``top`` alternatives (``digits`` is ``None``), the
structure FLEUR smoothing reads. When a model refuses log-probabilities the backend asks again
without them, records ``meta["logprobs_refused"]`` and, with ``estimate_by_sampling=N``, estimates
the score distribution from N answers sampled at temperature 1 (G-Eval style; N more calls).

API keys are read from arguments or environment variables only, and are never part of
:meth:`identity`, results, cache entries, state files or log messages. Which variable each kind
reads (``api_key_env=NAME`` names another): ``openai:`` ``OPENAI_API_KEY``, ``azure:``
``AZURE_OPENAI_API_KEY``, ``openai-compatible:`` none unless asked (``api_key=`` or
``api_key_env=``), so a key meant for OpenAI never reaches another server unasked. A key sent to a
host that is not OpenAI's is said once per run (a warning). Credentials in an
``openai-compatible`` base URL (``http://user:password@host/v1?token=...``) are taken out of it
(:mod:`capjudge.backends.credentials`): the user info is sent as HTTP Basic authentication, the
query parameters as query parameters of every request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import json
import math
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from capjudge.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    GenerationConfig,
    PromptTokens,
    Request,
    TokenStep,
)
from capjudge.backends.credentials import UrlAuth, is_secret_name, split_url
from capjudge.backends.faults import DEFAULT_GRACE, DEFAULT_THRESHOLD, BackendGone, CircuitBreaker
from capjudge.backends.logprobs import InvalidLogprobError, as_logprob, steps_problem
from capjudge.backends.openai.caps import AZURE_MAX_TOP_LOGPROBS, ModelCaps, lookup_caps
from capjudge.backends.openai.retry import (
    APIRequestError,
    DeadlineExceeded,
    MalformedResponseError,
    RetryPolicy,
    describe,
    http_status,
    is_connection_failure,
    is_retryable,
    wait_seconds,
    within_deadline,
)
from capjudge.backends.options import OptionError, as_bool, as_float, as_int, check_known
from capjudge.backends.registry import BackendSpec
from capjudge.judges.smoothing import SCORE_PATTERN
from capjudge.parsing import parse_score
from capjudge.redact import get_logger, register_secret, scrub
from capjudge.usage import (
    PriceSource,
    PriceTable,
    UsageTracker,
    estimate_text_tokens,
    image_tokens,
    usage_from_report,
)

log = get_logger("capjudge.backends.openai")

DETAILS = ("low", "high", "auto")
KINDS = ("openai", "azure", "openai-compatible")
# The request options chat.completions.create passes (bearer auth only); older SDKs ignore them.
_POST_OPTIONS: Any = {"security": {"bearer_auth": True}}
# The environment variable each kind reads its key from when none is named (openai-compatible: none).
KEY_VARIABLE = {"openai": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY"}
PLACEHOLDER_KEY = "EMPTY"  # what servers without keys (vLLM without --api-key) are sent
OPENAI_HOSTS = ("api.openai.com",)
_said: set[tuple[str, ...]] = set()  # one-line notices already given in this process
_said_lock = threading.Lock()


def _say_once(*key: str) -> bool:
    """Whether the notice ``key`` is new in this process (and mark it said)."""
    with _said_lock:
        if key in _said:
            return False
        _said.add(key)
        return True


class _LoopThread:
    """A private asyncio loop in a daemon thread; coroutines are submitted from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="capjudge-openai-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def _clean_endpoint(url: str | None) -> str | None:
    """The endpoint without user info, query or fragment (never a secret in cache keys or results)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


class OpenAIBackend(Backend):
    """A judge served over the OpenAI chat-completions protocol.

    ``kind`` is ``"openai"``, ``"azure"`` or ``"openai-compatible"``; ``model`` the model id (the
    deployment name for Azure). Options:

    - ``base_url`` (OpenAI-compatible servers; user info and query are taken out of it: HTTP Basic
      authentication and query parameters of every request), ``api_key``, ``api_key_env`` (the
      name of the environment variable holding the key; default ``OPENAI_API_KEY`` for
      ``openai``, ``AZURE_OPENAI_API_KEY`` for ``azure``, none for compatible servers, which are
      sent ``"EMPTY"`` without one), ``organization``.
    - Azure: ``azure_endpoint`` (else ``AZURE_OPENAI_ENDPOINT``), ``api_version`` (else
      ``OPENAI_API_VERSION``; required), ``api_key`` (else ``AZURE_OPENAI_API_KEY``) or
      ``azure_ad_token_provider`` (Entra ID), ``model_name`` (the model behind the deployment, for
      the capability and price tables).
    - ``concurrency`` (8), ``timeout`` seconds per attempt as a whole (60: connect, send, wait and
      read the entire answer; a server trickling its body is cut off there), ``max_retries`` (6),
      ``retry_base_delay`` (1 s), ``retry_max_delay`` (60 s).
    - ``gone_after`` (5) and ``gone_grace`` (5 s): after that many connection failures in a row,
      over at least that many seconds, with no answer in between, the server is declared gone and
      every remaining request fails at once with :class:`~capjudge.backends.faults.BackendGone`
      (``gone_after=0``: never).
    - ``detail`` (``low`` | ``high`` | ``auto``; default: not sent, the server's default),
      ``extra_body`` (dict or JSON string merged into every request, e.g. ``{"repeat_penalty": 1.0}``).
    - OpenAI-compatible servers only: ``add_special_tokens`` (vLLM / SGLang: let the server's
      tokenizer add BOS to the rendered chat template; needed where the template has no ``<s>``,
      e.g. LLaVA-1.5's, see docs/vllm.md) and ``neutral_penalties`` (default on: send
      ``repetition_penalty`` 1 and presence / frequency penalties 0, so that a model's
      ``generation_config.json``, which vLLM applies as its default, cannot change greedy answers;
      dropped for the rest of the run if the server refuses the field).
    - ``logprobs`` (force on/off), ``max_top_logprobs`` (cap), ``estimate_by_sampling`` (N).
    - ``prices`` (dict, JSON file or :class:`~capjudge.usage.PriceTable`), ``max_cost`` (USD budget),
      ``usage`` (a shared :class:`~capjudge.usage.UsageTracker`).
    """

    def __init__(
        self,
        model: str,
        *,
        kind: str = "openai",
        spec: str = "",
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        organization: str | None = None,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        azure_ad_token_provider: Callable[[], Any] | None = None,
        model_name: str | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 6,
        retry_base_delay: float = 1.0,
        retry_max_delay: float = 60.0,
        detail: str | None = None,
        extra_body: Mapping[str, Any] | str | None = None,
        logprobs: bool | None = None,
        max_top_logprobs: int | None = None,
        estimate_by_sampling: int = 0,
        prices: PriceSource = None,
        max_cost: float | None = None,
        usage: UsageTracker | None = None,
        default_headers: Mapping[str, str] | None = None,
        gone_after: int = DEFAULT_THRESHOLD,
        gone_grace: float = DEFAULT_GRACE,
        add_special_tokens: bool | None = None,
        neutral_penalties: bool | None = None,
        url_auth: UrlAuth | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown OpenAI-protocol backend kind {kind!r} (known: {', '.join(KINDS)})")
        if detail is not None and detail not in DETAILS:
            raise ValueError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.kind = kind
        self.model = model
        # Credentials out of the base URL before it is used or shown (a Python caller or
        # --backend-opt base_url= may pass a URL with them; a parsed spec passes url_auth).
        shown_url = base_url
        self.url_auth = url_auth or UrlAuth()
        if base_url:
            split = split_url(base_url)
            base_url, shown_url = split.url, split.shown
            if split.auth:  # the spec's user info wins; both queries are sent
                user = self.url_auth if self.url_auth.username is not None else split.auth
                self.url_auth = UrlAuth(user.username, user.password, self.url_auth.query + split.auth.query)
        self.spec = spec or (f"{kind}:{shown_url}#{model}" if kind == "openai-compatible" else f"{kind}:{model}")
        self.model_name = model_name or model
        self.detail = detail
        self.extra_body = _as_dict(extra_body, "extra_body")
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_base_delay, max_delay=retry_max_delay)
        self.estimate_samples = int(estimate_by_sampling or 0)
        if kind != "openai-compatible" and (add_special_tokens is not None or neutral_penalties):
            raise ValueError(f"add_special_tokens and neutral_penalties are fields of OpenAI-compatible servers (vLLM, SGLang); {kind} would refuse them")
        self.add_special_tokens = add_special_tokens
        self.neutral_penalties = (kind == "openai-compatible") if neutral_penalties is None else bool(neutral_penalties)
        self._send_penalties = self.neutral_penalties  # off once a server refuses the field

        caps = lookup_caps(kind, self.model_name)
        if logprobs is not None:
            caps = replace(caps, logprobs=logprobs, max_top_logprobs=caps.max_top_logprobs if logprobs else 0)
            if logprobs and caps.max_top_logprobs == 0:
                caps = replace(caps, max_top_logprobs=AZURE_MAX_TOP_LOGPROBS if kind == "azure" else 20)
        if max_top_logprobs is not None:
            caps = replace(caps, max_top_logprobs=max_top_logprobs)
        self.model_caps: ModelCaps = caps
        self._logprobs_refused: str | None = None if caps.logprobs else (caps.note or "model returns no logprobs")
        self._top_cap = caps.max_top_logprobs
        self.capabilities = Capabilities(
            logprobs=caps.logprobs,
            max_top_logprobs=caps.max_top_logprobs if caps.logprobs else 0,
            exact_digit_probs=False,
            images=caps.images,
            max_images=None,
            batching=False,
            prefix_reuse=False,
            system_prompt=True,
            concurrency=concurrency,
        )

        self.prices = PriceTable.load(prices)
        self.usage = usage if usage is not None else UsageTracker(prices=self.prices)
        if max_cost is not None:
            self.usage.max_cost = float(max_cost)
        if self.usage.max_cost is not None and self.prices.lookup(self.model_name) is None:
            raise ValueError(
                f"max_cost is set but the price table has no entry for {self.model_name!r}: pass prices="
                f"{{{self.model_name!r}: {{'input': USD_per_1M, 'output': USD_per_1M}}}} (or a JSON file)"
                + (" or model_name= (the model behind the Azure deployment)" if kind == "azure" else "")
            )

        self.endpoint, self.api_version = self._resolve_endpoint(base_url, azure_endpoint, api_version)
        api_key, self.key_source = self._resolve_key(api_key, api_key_env, azure_ad_token_provider)
        register_secret(api_key)  # masked wherever a server might echo it (logs, records, messages)
        headers = dict(default_headers or {})
        basic = self.url_auth.basic_authorization
        if basic is not None:
            if self.key_source is not None:
                raise OptionError(
                    f"the base URL carries user:password (sent as HTTP Basic in the Authorization header) and an API key is given ({self.key_source}, "
                    "sent as Bearer in the same header): give one of them"
                )
            headers["Authorization"] = basic
        self._say_key_destination()
        self._client = self._make_client(api_key, organization, azure_ad_token_provider, headers)
        # What a synchronous client for the files and batches APIs needs (batch mode): the same
        # credentials, built only when asked for (batch_client()).
        self._client_args = (api_key, organization, azure_ad_token_provider, headers)
        self._breaker = CircuitBreaker(f"the server at {_clean_endpoint(self.endpoint)}", threshold=gone_after, grace=gone_grace)
        self._loop: _LoopThread | None = None
        self._loop_lock = threading.Lock()
        self._sem: asyncio.Semaphore | None = None
        self._prompt_scale = 1.0
        self._submitted = itertools.count()
        self._usage_warned: set[str] = set()  # usage fields this server reported badly (warned once)

    # -- construction ----------------------------------------------------------------------------
    def _resolve_key(self, api_key: str | None, api_key_env: str | None, token_provider: Callable[[], Any] | None) -> tuple[str | None, str | None]:
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
        variable = KEY_VARIABLE.get(self.kind)
        if variable is not None and not (self.kind == "azure" and token_provider is not None):
            value = os.environ.get(variable)
            return (value, f"${variable}") if value else (None, None)
        if self.kind == "openai-compatible" and os.environ.get("OPENAI_API_KEY") and _say_once("unsent", str(self.endpoint)):
            log.warning(
                "OPENAI_API_KEY is set but not sent to %s (not OpenAI's server); to send it: --backend-opt api_key_env=OPENAI_API_KEY",
                _clean_endpoint(self.endpoint),
            )
        return None, None

    def _say_key_destination(self) -> None:
        """One warning per run and host when an API key goes to a host that is not OpenAI's."""
        if self.key_source is None or self.kind == "azure":
            return
        host = urlsplit(self.endpoint or "").hostname or ""
        if host in OPENAI_HOSTS:
            return
        if _say_once("sent", str(_clean_endpoint(self.endpoint)), self.key_source):
            log.warning("sending the API key from %s to %s, which is not OpenAI's server", self.key_source, _clean_endpoint(self.endpoint))

    def credential_sources(self) -> dict[str, Any]:
        """Where this backend's credentials come from, by name only (never a value): ``api_key``
        (``"the api_key option"``, ``"$NAME"`` or ``None``) and ``url`` (``userinfo``,
        ``query token`` ...: credentials of the base URL). What a batch state file keeps."""
        return {"api_key": self.key_source, "url": self.url_auth.sources()}

    def _resolve_endpoint(self, base_url: str | None, azure_endpoint: str | None, api_version: str | None) -> tuple[str | None, str | None]:
        if self.kind == "azure":
            endpoint = azure_endpoint or base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
            version = api_version or os.environ.get("OPENAI_API_VERSION")
            if not endpoint:
                raise BackendError("Azure needs an endpoint: pass azure_endpoint=... or set AZURE_OPENAI_ENDPOINT")
            if not version:
                raise BackendError("Azure needs an API version: pass api_version=... (e.g. 2024-10-21) or set OPENAI_API_VERSION")
            return endpoint, version
        if self.kind == "openai-compatible":
            if not base_url:
                raise BackendError("openai-compatible needs a base URL: openai-compatible:http://host:port/v1#model")
            return base_url, None
        return base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1", None

    def _make_client(
        self,
        api_key: str | None,
        organization: str | None,
        token_provider: Callable[[], Any] | None,
        headers: Mapping[str, str] | None,
        *,
        sync: bool = False,
        max_retries: int = 0,
    ) -> Any:
        import openai

        common: dict[str, Any] = {"max_retries": max_retries, "timeout": self.timeout, "default_headers": dict(headers) if headers else None}
        if self.url_auth.query:
            common["default_query"] = dict(self.url_auth.query)
        if self.kind == "azure":
            key = api_key
            if not key and token_provider is None:
                raise BackendError("Azure needs credentials: pass api_key=..., set AZURE_OPENAI_API_KEY, or pass azure_ad_token_provider= (Entra ID)")
            assert self.endpoint is not None  # checked by _resolve_endpoint
            azure_cls: Any = openai.AzureOpenAI if sync else openai.AsyncAzureOpenAI
            # The files and batches APIs live under {endpoint}/openai, not under a deployment.
            deployment = {} if sync else {"azure_deployment": self.model}
            return azure_cls(
                azure_endpoint=self.endpoint,
                api_version=self.api_version,
                api_key=key,
                azure_ad_token_provider=token_provider,
                **deployment,
                **common,
            )
        key = api_key
        if self.kind == "openai-compatible":
            key = key or PLACEHOLDER_KEY
        elif not key:
            raise BackendError("OpenAI needs an API key: pass api_key=... or set OPENAI_API_KEY")
        client_cls: Any = openai.OpenAI if sync else openai.AsyncOpenAI
        return client_cls(api_key=key, base_url=self.endpoint, organization=organization, **common)

    def batch_client(self) -> Any:
        """A synchronous SDK client (``openai.OpenAI`` / ``openai.AzureOpenAI``) with this backend's
        credentials and endpoint, for the files and batches APIs (batch mode). It keeps the SDK's own
        retries (2) for these few, idempotent-by-design management calls."""
        return self._make_client(*self._client_args, sync=True, max_retries=2)

    @property
    def batch_url(self) -> str:
        """The ``url`` of a batch line and the ``endpoint`` of a batch: ``/chat/completions`` on
        Azure, ``/v1/chat/completions`` elsewhere."""
        return "/chat/completions" if self.kind == "azure" else "/v1/chat/completions"

    def identity(self) -> dict[str, Any]:
        """Everything about this backend that changes answers (no secrets, no concurrency)."""
        ident: dict[str, Any] = {
            "kind": self.kind,
            "model": self.model,
            "endpoint": _clean_endpoint(self.endpoint),
            "api_version": self.api_version,
            "detail": self.detail,
            "extra_body": json.dumps(self.extra_body, sort_keys=True, default=str) if self.extra_body else None,
            "logprobs": self.model_caps.logprobs,
            "max_top_logprobs": self.model_caps.max_top_logprobs,
        }
        if self.model_name != self.model:
            ident["model_name"] = self.model_name
        if self.add_special_tokens is not None:
            ident["add_special_tokens"] = self.add_special_tokens
        if self.neutral_penalties:
            ident["neutral_penalties"] = True
        if self.estimate_samples:
            ident["estimate_by_sampling"] = self.estimate_samples
        if self.url_auth.public_query:  # the base URL's query, credentials left out
            ident["query"] = json.dumps(self.url_auth.public_query, sort_keys=True)
        return ident

    # -- request building ------------------------------------------------------------------------
    def _messages(self, request: Request) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for m in request.messages:
            if not m.images:
                out.append({"role": m.role, "content": m.content})
                continue
            if not self.model_caps.images:
                raise BackendError(f"{self.model_name} reads no images ({self.model_caps.note})")
            parts: list[dict[str, Any]] = []
            for img in m.images:
                image_url: dict[str, Any] = {"url": img.data_url()}
                if self.detail:
                    image_url["detail"] = self.detail
                parts.append({"type": "image_url", "image_url": image_url})
            if m.content:
                parts.append({"type": "text", "text": m.content})
            out.append({"role": m.role, "content": parts})
        return out

    def _params(self, request: Request, *, with_logprobs: bool) -> dict[str, Any]:
        cfg = request.config
        params: dict[str, Any] = {"model": self.model, "messages": self._messages(request)}
        if self.model_caps.reasoning:
            params["max_completion_tokens"] = cfg.max_new_tokens
        else:
            params["max_tokens"] = cfg.max_new_tokens
            params["temperature"] = cfg.temperature
            if cfg.top_p != 1.0:
                params["top_p"] = cfg.top_p
        if cfg.seed is not None:
            params["seed"] = cfg.seed
        if cfg.stop:
            params["stop"] = list(cfg.stop)
        if cfg.n != 1:
            params["n"] = cfg.n
        if with_logprobs:
            params["logprobs"] = True
            params["top_logprobs"] = min(cfg.top_logprobs, self._top_cap)
        extra = self._server_fields()
        if extra:
            params["extra_body"] = extra
        return params

    def _server_fields(self) -> dict[str, Any]:
        """Fields outside the OpenAI protocol that this backend sends (``extra_body`` wins)."""
        extra: dict[str, Any] = {}
        if self._send_penalties:
            # vLLM takes unset sampling fields from the model's generation_config.json; a
            # repetition penalty there would change greedy answers without anyone asking for it.
            extra.update(repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
        if self.add_special_tokens is not None:
            extra["add_special_tokens"] = self.add_special_tokens
        extra.update(self.extra_body)
        return extra

    def _estimate_prompt_tokens(self, request: Request) -> int:
        """A generous prompt-token estimate: text at ~3 characters a token, images by OpenAI's rule
        (worst case when the size is unknown)."""
        prompt = 3
        for m in request.messages:
            prompt += estimate_text_tokens(m.content) + 4
            for img in m.images:
                pil = getattr(img, "_pil", None)
                w, h = pil.size if pil is not None else (None, None)
                prompt += image_tokens(w, h, self.detail, base=self.model_caps.image_base_tokens, tile=self.model_caps.image_tile_tokens)
        return prompt

    def _estimate_cost(self, prompt_estimate: int, request: Request) -> float:
        """Worst-case cost of a request, for the budget. The prompt estimate is scaled by the largest
        ratio of reported to estimated prompt tokens seen so far (self-calibrating)."""
        price = self.prices.lookup(self.model_name)
        if price is None:
            return 0.0
        prompt = math.ceil(prompt_estimate * self._prompt_scale)
        completion = request.config.max_new_tokens * max(1, request.config.n)
        return price.cost(prompt, completion)

    # -- calling ---------------------------------------------------------------------------------
    async def _send(self, params: dict[str, Any], label: str) -> dict[str, Any]:
        """One call with tenacity retries; the answer's JSON object, or a described
        :class:`BackendError`.

        The request goes through the SDK's client (``client.post``: its auth, Azure deployment
        routing, headers, timeouts and error classes) with the body capjudge built, which is what
        ``chat.completions.create(**params)`` sends; skipping ``create`` skips the SDK's walk over
        the messages' typed dicts and the answer's pydantic models (~1.5 ms of CPU per request
        with an image and 20 ``top_logprobs``, as much as the rest of the call)."""
        import httpx
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        body = dict(params)
        extra = body.pop("extra_body", None)
        if extra:
            body.update(extra)  # as the SDK merges extra_body: shallow, over the named fields
        attempts = 0

        def wait(state: Any) -> float:
            if state.attempt_number > self.retry.max_retries:
                return 0.0  # tenacity asks for the wait before it checks the stop: no retry follows
            exc: BaseException | None = state.outcome.exception() if state.outcome else None
            seconds = wait_seconds(exc, state.attempt_number - 1, self.retry) if exc else 0.0
            log.info("%s: retrying in %.2fs after %s (attempt %d of %d)", label, seconds, describe(exc) if exc else "an unknown failure", state.attempt_number + 1, self.retry.max_retries + 1)
            return seconds

        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.retry.max_retries + 1),
                wait=wait,
                retry=retry_if_exception(is_retryable),
                reraise=True,
                sleep=self._breaker.sleep,  # a back-off ends at once when the server is declared gone
            ):
                with attempt:
                    self._breaker.check()
                    attempts += 1
                    try:
                        # The SDK's timeout bounds each read; this bounds the attempt as a whole
                        # (connect, send, wait, read the entire body): a server that trickles its
                        # answer a byte at a time is cut off at `timeout` seconds all the same.
                        raw = await within_deadline(
                            self._client.post("/chat/completions", body=body, cast_to=httpx.Response, options=_POST_OPTIONS), self.timeout
                        )
                    except Exception as exc:
                        if is_connection_failure(exc):
                            self._breaker.failure(describe(exc))
                        elif http_status(exc) is not None:
                            self._breaker.success()  # the server answered, if only with an error
                        raise
                    self._breaker.success()
                    response = json.loads(raw.content)  # a JSONDecodeError is retried as malformed
                    if not isinstance(response, dict) or not response.get("choices") or not isinstance(response["choices"], list):
                        raise MalformedResponseError(f"answer holds no choices: {raw.text[:200]}")
            return response
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a described error
            if self._breaker.gone and is_connection_failure(exc):
                raise BackendGone(self._breaker.message) from exc  # one cause for every request
            raise describe(exc, attempts=attempts) from exc

    def _completion(self, response: dict[str, Any], *, asked_logprobs: bool) -> Completion:
        """The answer's JSON object as a :class:`Completion` (read as the SDK's models would)."""
        choices = response["choices"]
        choice = choices[0]
        message = choice.get("message") or {}
        text = message.get("content") or ""
        steps: list[TokenStep] = []
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        for t in content or ():
            # Values are kept as sent (numbers made floats) and checked below: a log-probability
            # that is not one fails this answer, never reaches the cache or a score.
            top = tuple((str(a["token"]), as_logprob(a.get("logprob"))) for a in t.get("top_logprobs") or ())
            lp = t.get("logprob")
            steps.append(TokenStep(token=str(t["token"]), logprob=as_logprob(lp) if lp is not None else None, top=top))
        problem = steps_problem(steps, who="the server")
        if problem:
            raise InvalidLogprobError(f"{problem}; the answer is not scored")
        u = response.get("usage")
        usage = usage_from_report(u, warned=self._usage_warned) if isinstance(u, dict) else None
        meta: dict[str, Any] = {}
        if response.get("id"):
            meta["response_id"] = response["id"]
        if response.get("system_fingerprint"):
            meta["system_fingerprint"] = response["system_fingerprint"]
        if len(choices) > 1:
            meta["choices"] = [((c.get("message") or {}).get("content")) or "" for c in choices]
        if asked_logprobs and not steps:
            meta["logprobs_missing"] = True  # asked, but the server sent none
        return Completion(
            text=text,
            steps=steps,
            logprobs=bool(steps),
            model=response.get("model") or self.model,
            usage=usage,
            finish_reason=choice.get("finish_reason"),
            meta=meta,
        )

    def request_body(self, request: Request) -> dict[str, Any]:
        """The JSON body that :meth:`generate` sends for ``request`` on its first attempt (with
        ``extra_body`` merged as the SDK merges it): what a batch line carries, so that a batch
        answer is the answer of the same request."""
        wants = request.config.top_logprobs > 0
        with_lp = wants and self._logprobs_refused is None and self._top_cap > 0
        body = self._params(request, with_logprobs=with_lp)
        extra = body.pop("extra_body", None)
        if extra:
            body.update(extra)
        return body

    def completion_from_body(self, response: dict[str, Any], request_body: dict[str, Any], *, wanted_logprobs: bool) -> Completion:
        """The :class:`Completion` of a chat-completions ``response`` to ``request_body`` (a batch
        output line's body), with the same metadata an online answer gets (cost aside)."""
        if not isinstance(response, dict) or not isinstance(response.get("choices"), list) or not response["choices"]:
            raise MalformedResponseError(f"answer holds no choices: {str(response)[:200]}")
        with_lp = bool(request_body.get("logprobs"))
        completion = self._completion(response, asked_logprobs=with_lp)
        if with_lp:
            completion.meta["top_logprobs"] = request_body.get("top_logprobs")
        if wanted_logprobs and not with_lp:
            completion.meta["logprobs_refused"] = True
            completion.meta["logprobs_refused_reason"] = self._logprobs_refused or "top_logprobs cap is 0"
        return completion

    async def _call(self, request: Request, label: str) -> Completion:
        """One request, with the logprobs fallback; no semaphore, no budget."""
        wants = request.config.top_logprobs > 0
        with_lp = wants and self._logprobs_refused is None and self._top_cap > 0
        while True:
            params = self._params(request, with_logprobs=with_lp)
            try:
                response = await self._send(params, label)
                break
            except BackendError as exc:
                status = getattr(exc, "status", None)
                msg = str(exc).lower()
                # Judged by what *this* request sent: requests in flight when the first refusal
                # arrives were sent with the fields too and are asked again without them.
                sent = "repetition_penalty" in (params.get("extra_body") or {}) and "repetition_penalty" not in self.extra_body
                if sent and status in (400, 422) and "repetition_penalty" in msg:
                    if self._send_penalties:
                        log.warning("%s: server refused repetition_penalty, sending no penalties from now on: %s", label, exc)
                        self._send_penalties = False
                    continue
                if not (with_lp and status in (400, 422) and "logprob" in msg):
                    raise
                if "top_logprobs" in msg and params["top_logprobs"] > AZURE_MAX_TOP_LOGPROBS:
                    log.warning("%s: server refused top_logprobs=%d, retrying with %d", label, params["top_logprobs"], AZURE_MAX_TOP_LOGPROBS)
                    self._top_cap = AZURE_MAX_TOP_LOGPROBS
                    continue
                log.warning("%s: server refused logprobs, answering without them: %s", label, exc)
                self._logprobs_refused = f"server refused logprobs: {exc}"
                with_lp = False
        completion = self._completion(response, asked_logprobs=with_lp)
        if with_lp:
            completion.meta["top_logprobs"] = params["top_logprobs"]
        if wants and not with_lp:
            completion.meta["logprobs_refused"] = True
            completion.meta["logprobs_refused_reason"] = self._logprobs_refused or "top_logprobs cap is 0"
        return completion

    async def _one(self, request: Request, label: str) -> Completion:
        """One request under the concurrency limit and the budget."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        async with self._sem:
            estimate = self._estimate_prompt_tokens(request)
            booked = self.usage.reserve(self._estimate_cost(estimate, request), what=label) if self.usage.max_cost is not None else 0.0
            try:
                completion = await self._call(request, label)
            except BaseException:
                self.usage.release(booked)
                raise
            cost = self.prices.cost(self.model_name, completion.usage)
            if cost is None and completion.model != self.model_name:
                cost = self.prices.cost(completion.model, completion.usage)
            self.usage.settle(booked, completion.model, completion.usage, cost)
            if completion.usage is not None and completion.usage.prompt_tokens > estimate:
                self._prompt_scale = max(self._prompt_scale, completion.usage.prompt_tokens / estimate)
            completion.meta["cost_usd"] = cost
        if self.estimate_samples and completion.meta.get("logprobs_refused"):
            completion.meta["sampling_estimate"] = (await self._sample_estimate(request, label)).to_dict()
        return completion

    async def _sample_estimate(self, request: Request, label: str) -> SamplingEstimate:
        samples = sampling_requests(request, self.estimate_samples)
        outs = await asyncio.gather(*(self._one(r, f"{label} sample {r.sample_index}") for r in samples), return_exceptions=True)
        return SamplingEstimate.from_outputs(list(outs))

    async def _safe(self, request: Request, index: int) -> Completion | BaseException:
        try:
            if not isinstance(request, Request):
                raise BackendError(f"request {index} is a {type(request).__name__}, not a Request")
            return await self._one(request, f"request {index}")
        except Exception as exc:  # noqa: BLE001 - one bad request never loses the others
            return self._scrub(exc if isinstance(exc, BackendError) else describe(exc))

    def _scrub(self, exc: BaseException) -> BaseException:
        """The error with any secret masked (servers sometimes echo the key they got), and with a
        hint when an OpenAI-compatible base URL without ``/v1`` answers 404."""
        text = scrub(str(exc))
        if getattr(exc, "status", None) == 404 and self.kind == "openai-compatible":
            base = (_clean_endpoint(self.endpoint) or "").rstrip("/")
            if not base.endswith("/v1"):
                text += f" (the base URL {base} does not end in /v1: did you mean {base}/v1?)"
        if text == str(exc):
            return exc
        if isinstance(exc, APIRequestError):
            return APIRequestError(text, status=exc.status, code=exc.code, retryable=exc.retryable, attempts=exc.attempts)
        try:
            return type(exc)(text)
        except Exception:  # noqa: BLE001 - an exception type with another signature
            return BackendError(text)

    def _loop_thread(self) -> _LoopThread:
        with self._loop_lock:
            if self._loop is None:
                self._loop = _LoopThread()
            return self._loop

    # -- public API ------------------------------------------------------------------------------
    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The prompt tokens the server will read for ``request``, from vLLM's ``/tokenize``
        endpoint (at the server's root, beside ``/v1``), rendered with the same messages and
        chat-template fields a chat request sends. ``None`` for OpenAI / Azure and for servers
        without that endpoint."""
        import httpx

        if self.kind != "openai-compatible" or not self.endpoint:
            return None
        root = (_clean_endpoint(self.endpoint) or "").rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        body: dict[str, Any] = {"model": self.model, "messages": self._messages(request), "add_generation_prompt": True, "return_token_strs": True}
        extra = self._server_fields()
        for k in ("add_special_tokens", "chat_template", "chat_template_kwargs", "continue_final_message", "add_generation_prompt", "mm_processor_kwargs"):
            if k in extra:
                body[k] = extra[k]
        key = getattr(self._client, "api_key", None)
        headers = {"Authorization": f"Bearer {key}"} if isinstance(key, str) and key else {}
        basic = self.url_auth.basic_authorization
        if basic is not None:
            headers["Authorization"] = basic
        try:
            # On the backend's loop, so that `timeout` bounds the whole call, as for chat requests.
            r = self._loop_thread().submit(within_deadline(self._post_json(root + "/tokenize", body, headers, dict(self.url_auth.query)), self.timeout)).result()
        except (httpx.HTTPError, DeadlineExceeded) as exc:
            raise BackendError(scrub(f"{root}/tokenize: {type(exc).__name__}: {exc}")) from exc
        if r.status_code in (404, 405):
            return None  # not a vLLM server
        if r.status_code != 200:
            raise BackendError(scrub(f"{root}/tokenize answered HTTP {r.status_code}: {r.text[:300]}"))
        data = r.json()
        ids = tuple(int(i) for i in data.get("tokens") or ())
        strs = data.get("token_strs")
        tokens = tuple(str(t) for t in strs) if isinstance(strs, list) and len(strs) == len(ids) else tuple(str(i) for i in ids)
        return PromptTokens(ids=ids, tokens=tokens, source="vllm /tokenize")

    async def _post_json(self, url: str, body: dict[str, Any], headers: dict[str, str], params: dict[str, str]) -> Any:
        """One POST of a JSON body outside the SDK (vLLM's ``/tokenize``); the response, read."""
        import httpx

        async with httpx.AsyncClient(timeout=self.timeout) as client:
            return await client.post(url, json=body, headers=headers, params=params)

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """Yield ``(index, completion or error)`` in completion order, up to ``concurrency`` at once."""
        loop = self._loop_thread()
        futures = {loop.submit(self._safe(req, i)): i for i, req in enumerate(requests)}
        try:
            for fut in concurrent.futures.as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.cancel()  # the consumer stopped early: do not send the rest

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """Start one request on the backend's loop (at most ``concurrency`` run at once); its
        future holds the completion or the described error."""
        return self._loop_thread().submit(self._safe(request, next(self._submitted)))

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request (concurrently); errors are returned in place, never raised."""
        out: list[Completion | BaseException | None] = [None] * len(requests)
        for i, item in self.stream(requests):
            out[i] = item
        return out  # type: ignore[return-value]

    async def agenerate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """:meth:`generate` for callers inside an event loop (runs on the backend's own loop)."""
        loop = self._loop_thread()
        futures = [asyncio.wrap_future(loop.submit(self._safe(r, i))) for i, r in enumerate(requests)]
        return list(await asyncio.gather(*futures))

    async def astream(self, requests: Sequence[Request]) -> AsyncIterator[tuple[int, Completion | BaseException]]:
        """:meth:`stream` for callers inside an event loop."""
        loop = self._loop_thread()

        async def tagged(i: int, r: Request) -> tuple[int, Completion | BaseException]:
            return i, await asyncio.wrap_future(loop.submit(self._safe(r, i)))

        for next_done in asyncio.as_completed([tagged(i, r) for i, r in enumerate(requests)]):
            yield await next_done

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop."""
        if self._loop is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                self._loop.submit(self._client.close()).result(timeout=10)
            self._loop.close()
            self._loop = None
            self._sem = None

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.spec!r})"


# -- sampling estimate (G-Eval style) ---------------------------------------------------------------
def fleur_score(text: str) -> float | None:
    """The 0.0-1.0 score of an answer (the default parser of sampling estimates)."""
    return parse_score(text, low=0.0, high=1.0)


def sampling_requests(request: Request, n: int, *, temperature: float = 1.0) -> list[Request]:
    """``n`` copies of ``request`` sampled at ``temperature`` without logprobs, each with its own
    ``sample_index`` (so each is cached separately)."""
    cfg: GenerationConfig = replace(request.config, temperature=temperature, top_logprobs=0, n=1)
    return [replace(request, config=cfg, sample_index=i) for i in range(n)]


@dataclass
class SamplingEstimate:
    """A score distribution estimated from sampled answers (G-Eval: ``sum p(s) * s``).

    ``mean`` is the average parsed score; ``first``/``second`` the empirical distributions of the
    first and second decimal digits over answers written as ``0.xy`` (FLEUR's format); ``calls`` the
    number of calls made (the cost, with ``cost_usd`` when the price is known).
    """

    n: int
    scores: list[float | None] = field(default_factory=list)
    mean: float | None = None
    first: list[float] | None = None
    second: list[float] | None = None
    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None

    @classmethod
    def from_outputs(cls, outputs: Sequence[Completion | BaseException], parse: Callable[[str], float | None] = fleur_score) -> SamplingEstimate:
        """Summarise sampled completions (errors are counted, not fatal)."""
        est = cls(n=len(outputs))
        firsts: list[int] = []
        seconds: list[int] = []
        costs: list[float] = []
        for out in outputs:
            if isinstance(out, BaseException):
                est.errors += 1
                est.scores.append(None)
                continue
            if not out.cached:
                est.calls += 1
            if out.usage:
                est.prompt_tokens += out.usage.prompt_tokens
                est.completion_tokens += out.usage.completion_tokens
            if isinstance(out.meta.get("cost_usd"), (int, float)):
                costs.append(float(out.meta["cost_usd"]))
            est.scores.append(parse(out.text))
            m = SCORE_PATTERN.search(out.text or "")
            if m and m.group(1) == "0":
                firsts.append(int(m.group(2)))
                if m.group(3) is not None:
                    seconds.append(int(m.group(3)))
        parsed = [s for s in est.scores if s is not None]
        est.mean = sum(parsed) / len(parsed) if parsed else None
        est.first = [firsts.count(d) / len(firsts) for d in range(10)] if firsts else None
        est.second = [seconds.count(d) / len(seconds) for d in range(10)] if seconds else None
        est.cost_usd = sum(costs) if costs else None
        return est

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored in ``Completion.meta["sampling_estimate"]``)."""
        return asdict(self)


def estimate_by_sampling(backend: Backend, request: Request, n: int = 20, *, temperature: float = 1.0, parse: Callable[[str], float | None] = fleur_score) -> SamplingEstimate:
    """Estimate a judge's score distribution by sampling ``n`` answers at ``temperature`` (G-Eval,
    the FLEUR paper Sec. 5.2.2): the fallback for models that give no log-probabilities. Costs ``n`` calls
    (fewer when a :class:`~capjudge.backends.cache.CachedBackend` holds some)."""
    return SamplingEstimate.from_outputs(backend.generate(sampling_requests(request, n, temperature=temperature)), parse)


# -- factory ----------------------------------------------------------------------------------------
_INT_OPTS = ("concurrency", "max_retries", "max_top_logprobs", "estimate_by_sampling", "gone_after")
_FLOAT_OPTS = ("timeout", "retry_base_delay", "retry_max_delay", "max_cost", "gone_grace")
_SECRET_OPTS = ("api_key", "azure_ad_token", "key", "token")


def _as_dict(value: Mapping[str, Any] | str | None, name: str) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} must be a JSON object, got {value!r}") from exc
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping, got {type(value).__name__}")
    return dict(value)


def check_options(spec: BackendSpec, **options: Any) -> dict[str, Any]:
    """The options of an ``openai``/``azure``/``openai-compatible`` spec converted and checked
    without building a client: no credentials in the spec, known names, numbers and yes/no values,
    ``detail``, ``concurrency``, and for OpenAI-compatible servers ``http(s)://host/...#model``.
    Returns the keyword arguments of :class:`OpenAIBackend` (``model`` and ``base_url`` included)."""
    leaked = [k for k in spec.options if k.lower() in _SECRET_OPTS or is_secret_name(k)]
    if leaked:
        raise BackendError(
            f"do not put credentials in the backend spec (it is written into results): remove {', '.join(leaked)}; "
            "use the environment (OPENAI_API_KEY, AZURE_OPENAI_API_KEY, or --backend-opt api_key_env=NAME) or --backend-opt api_key=..."
        )
    check_known(spec.kind, options, [p for p in inspect.signature(OpenAIBackend.__init__).parameters if p not in ("self", "model", "kind", "spec", "url_auth")])
    opts: dict[str, Any] = dict(options)
    for k in _INT_OPTS:
        if isinstance(opts.get(k), str):
            opts[k] = as_int(opts[k], k)
    for k in _FLOAT_OPTS:
        if isinstance(opts.get(k), str):
            opts[k] = as_float(opts[k], k)
    for k in ("logprobs", "add_special_tokens", "neutral_penalties"):
        if k in opts and opts[k] is not None:
            opts[k] = as_bool(opts[k], k)
    if spec.kind != "openai-compatible":
        named = [k for k in ("add_special_tokens", "neutral_penalties") if opts.get(k)]
        if named:
            raise OptionError(f"option {named[0]} is for openai-compatible servers (vLLM, SGLang); {spec.kind} would refuse the field")
    opts = {k: v for k, v in opts.items() if v is not None}
    if opts.get("detail") is not None and opts["detail"] not in DETAILS:
        raise OptionError(f"option detail={opts['detail']!r} is not one of {', '.join(DETAILS)}")
    if isinstance(opts.get("concurrency"), int) and opts["concurrency"] < 1:
        raise OptionError(f"option concurrency={opts['concurrency']!r}: at least 1 request must be in flight")
    opts["model"] = spec.target
    if spec.kind == "openai-compatible":
        if "#" not in spec.target:
            raise BackendError(f"openai-compatible spec {spec.raw!r} needs base_url#model, e.g. openai-compatible:http://127.0.0.1:8000/v1#llava-hf/llava-1.5-7b-hf")
        base_url, model = spec.target.rsplit("#", 1)
        if not model:
            raise BackendError(f"openai-compatible spec {spec.raw!r} names no model after '#'")
        opts.setdefault("base_url", base_url)
        if not urlsplit(str(opts["base_url"])).scheme.startswith("http") or not urlsplit(str(opts["base_url"])).netloc:
            raise BackendError(f"openai-compatible spec {spec.raw!r}: the base URL {split_url(str(opts['base_url'])).shown!r} is not http(s)://host[:port]/...")
        opts["model"] = model
    _check_credentials(spec, opts)
    return opts


def _check_credentials(spec: BackendSpec, opts: dict[str, Any]) -> None:
    """Usage errors of the credential options: ``api_key_env`` naming an unset variable, and URL
    user info (HTTP Basic) together with an API key (Bearer): both go in the Authorization header."""
    name = opts.get("api_key_env")
    if name and not os.environ.get(str(name)):
        raise OptionError(f"option api_key_env={name}: the environment variable {name} is not set (or empty)")
    base = opts.get("base_url")
    userinfo = spec.url_auth.username is not None or (isinstance(base, str) and "@" in urlsplit(base).netloc)
    if userinfo and (opts.get("api_key") or name):
        raise OptionError(
            "the base URL carries user:password (sent as HTTP Basic in the Authorization header) and an API key is given "
            f"({'api_key' if opts.get('api_key') else 'api_key_env'}, sent as Bearer in the same header): give one of them"
        )


def from_spec(spec: BackendSpec, **options: Any) -> OpenAIBackend:
    """Build the backend for ``openai:<model>``, ``azure:<deployment>`` or
    ``openai-compatible:<base_url>#<model>``; options as in :class:`OpenAIBackend` (strings from the
    spec's ``?key=value`` part are converted)."""
    opts = check_options(spec, **options)
    return OpenAIBackend(opts.pop("model"), kind=spec.kind, spec=spec.raw, url_auth=spec.url_auth, **opts)
