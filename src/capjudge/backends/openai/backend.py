"""API judges: OpenAI (GPT-4o, GPT-4V, ...), Azure OpenAI and any OpenAI-compatible server.

Spec strings: ``openai:<model>``, ``azure:<deployment>``, ``openai-compatible:<base_url>#<model>``
(vLLM, SGLang, llama.cpp server, Ollama). Built on the official ``openai`` SDK's async client with
its own retries switched off: :mod:`capjudge.backends.openai.retry` retries with tenacity.

Requests run concurrently (``concurrency``, default 8) on a private event loop in a background
thread, so :meth:`OpenAIBackend.generate` works whether or not the caller has an event loop running,
and :meth:`OpenAIBackend.stream` yields answers in completion order. Log-probabilities come back as
:class:`~capjudge.backends.base.TokenStep` with ``top`` alternatives (``digits`` is ``None``), the
structure FLEUR smoothing reads. When a model refuses log-probabilities the backend asks again
without them and records ``meta["logprobs_refused"]`` (a judge may then estimate the score by
sampling: ``capjudge.judges.sampling``).

The parts: :mod:`.wire` (request bodies, answers read), :mod:`.transport` (event loop, one call
with retries), :mod:`.client` (endpoint, key, SDK client), :mod:`.budget` (cost booked and
settled), :mod:`.options` (spec options checked; ``from_spec``); this module joins them.

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
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from capjudge.backends import kinds
from capjudge.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    PromptTokens,
    Request,
)
from capjudge.backends.credentials import UrlAuth, split_url
from capjudge.backends.faults import DEFAULT_GRACE, DEFAULT_THRESHOLD, CircuitBreaker
from capjudge.backends.openai.budget import RequestBudget
from capjudge.backends.openai.caps import (
    AZURE_MAX_TOP_LOGPROBS,
    REASONING,
    REASONING_EFFORTS,
    ModelCaps,
    lookup_caps,
)
from capjudge.backends.openai.caps import reasoning_budget as reasoning_budget_for
from capjudge.backends.openai.client import (
    KEY_VARIABLE,
    OPENAI_HOSTS,
    PLACEHOLDER_KEY,
    ClientConfig,
    clean_endpoint,
    resolve_endpoint,
    resolve_key,
    say_key_destination,
)
from capjudge.backends.openai.retry import (
    APIRequestError,
    DeadlineExceeded,
    RetryPolicy,
    describe,
    within_deadline,
)
from capjudge.backends.openai.transport import (
    DEFAULT_MAX_RESPONSE_BYTES,
    LoopThread,
    post_json,
    send_chat,
)
from capjudge.backends.openai.wire import ChatWire, merge_extra, refused_field, thinking_request
from capjudge.backends.options import OptionError, as_json_object
from capjudge.backends.usage import PriceSource, PriceTable, UsageTracker
from capjudge.core.lazyexport import moved_names
from capjudge.core.redact import get_logger, register_secret, scrub

log = get_logger("capjudge.backends.openai")

DETAILS = ("low", "high", "auto")
KINDS = kinds.api_kinds()
"""The OpenAI-protocol kinds (from :mod:`capjudge.backends.kinds`)."""

__all__ = ["DETAILS", "KEY_VARIABLE", "KINDS", "OPENAI_HOSTS", "PLACEHOLDER_KEY", "OpenAIBackend"]


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
      ``retry_base_delay`` (1 s), ``retry_max_delay`` (60 s), ``max_response_bytes`` (16 MiB: an
      answer's body is read up to that many bytes as it streams in, a larger one refused).
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
    - ``logprobs`` (force on/off), ``max_top_logprobs`` (cap).
    - Reasoning models (o1/o3/o4, gpt-5: :mod:`.caps`; ``reasoning=true|false`` overrides the
      table): ``reasoning_effort`` (``minimal`` | ``low`` | ``medium`` | ``high``, and ``none`` |
      ``xhigh`` | ``max`` where the model takes them; default: not sent, the provider's default)
      and ``reasoning_budget`` (tokens added to the method's answer budget in
      ``max_completion_tokens``; default by effort, :data:`~.caps.REASONING_BUDGETS`). They are
      sent no ``temperature``, ``top_p``, penalties or log-probabilities (they refuse them); an
      answer left empty because the reasoning spent the budget fails with
      :class:`~.wire.ReasoningBudgetExceeded`.
    - ``prices`` (dict, JSON file or :class:`~capjudge.backends.usage.PriceTable`), ``max_cost`` (USD budget),
      ``usage`` (a shared :class:`~capjudge.backends.usage.UsageTracker`).
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
        prices: PriceSource = None,
        max_cost: float | None = None,
        usage: UsageTracker | None = None,
        default_headers: Mapping[str, str] | None = None,
        gone_after: int = DEFAULT_THRESHOLD,
        gone_grace: float = DEFAULT_GRACE,
        add_special_tokens: bool | None = None,
        neutral_penalties: bool | None = None,
        reasoning: bool | None = None,
        reasoning_effort: str | None = None,
        reasoning_budget: int | None = None,
        url_auth: UrlAuth | None = None,
        thinking: str | None = None,
        thinking_budget: int | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if not kinds.is_api(kind):
            raise ValueError(f"unknown OpenAI-protocol backend kind {kind!r} (known: {', '.join(kinds.api_kinds())})")
        if detail is not None and detail not in DETAILS:
            raise ValueError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be at least 1, got {max_response_bytes}")
        self.max_response_bytes = int(max_response_bytes)
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
        compatible = kinds.get(kind).url_target  # openai-compatible: base_url#model
        self.spec = spec or (f"{kind}:{shown_url}#{model}" if compatible else f"{kind}:{model}")
        self.model_name = model_name or model
        self.detail = detail
        self.extra_body = as_json_object(extra_body, "extra_body")
        # open thinking models: chat_template_kwargs into extra_body, a budget on max_tokens (.wire)
        self.thinking, self.extra_body, thinking_tokens = thinking_request(kind, kinds.get(kind).url_target, thinking, thinking_budget, self.extra_body)
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_base_delay, max_delay=retry_max_delay)
        if not compatible and (add_special_tokens is not None or neutral_penalties):
            raise ValueError(f"add_special_tokens and neutral_penalties are fields of OpenAI-compatible servers (vLLM, SGLang); {kind} would refuse them")
        self.add_special_tokens = add_special_tokens
        self.neutral_penalties = compatible if neutral_penalties is None else bool(neutral_penalties)

        caps = lookup_caps(kind, self.model_name)
        if reasoning is not None and bool(reasoning) != caps.reasoning:
            caps = REASONING if reasoning else ModelCaps(images=caps.images, image_base_tokens=caps.image_base_tokens, image_tile_tokens=caps.image_tile_tokens)
            if kind == "azure":
                caps = replace(caps, max_top_logprobs=min(caps.max_top_logprobs, AZURE_MAX_TOP_LOGPROBS))
        if caps.reasoning:
            if logprobs:
                raise ValueError(f"logprobs=true: {self.model_name} is a reasoning model, which refuses log-probabilities (reasoning=false if it is not one)")
            if neutral_penalties:
                raise ValueError(f"neutral_penalties=true: {self.model_name} is a reasoning model, which refuses penalty fields (reasoning=false if it is not one)")
            if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
                raise ValueError(f"reasoning_effort={reasoning_effort!r} is not one of {', '.join(REASONING_EFFORTS)}")
            if reasoning_budget is not None and (isinstance(reasoning_budget, bool) or not isinstance(reasoning_budget, int) or reasoning_budget < 0):
                raise ValueError(f"reasoning_budget={reasoning_budget!r}: a number of tokens, 0 or more")
            self.neutral_penalties = False
        elif reasoning_effort is not None or reasoning_budget is not None:
            named = "reasoning_effort" if reasoning_effort is not None else "reasoning_budget"
            raise ValueError(f"{named} is for reasoning models (o1, o3, o4, gpt-5); {self.model_name} is not one (reasoning=true if it is)")
        self.reasoning_effort = reasoning_effort if caps.reasoning else None
        self.reasoning_budget = reasoning_budget_for(reasoning_effort, reasoning_budget) if caps.reasoning else 0
        if logprobs is not None:
            caps = replace(caps, logprobs=logprobs, max_top_logprobs=caps.max_top_logprobs if logprobs else 0)
            if logprobs and caps.max_top_logprobs == 0:
                caps = replace(caps, max_top_logprobs=AZURE_MAX_TOP_LOGPROBS if kind == "azure" else 20)
        if max_top_logprobs is not None:
            caps = replace(caps, max_top_logprobs=max_top_logprobs)
        self.model_caps: ModelCaps = caps
        self.wire = ChatWire(
            model=model,
            caps=caps,
            model_name=self.model_name,
            detail=detail,
            extra_body=self.extra_body,
            add_special_tokens=add_special_tokens,
            send_penalties=self.neutral_penalties,  # off once a server refuses the field
            top_cap=caps.max_top_logprobs,
            logprobs_refused=None if caps.logprobs else (caps.note or "model returns no logprobs"),
            reasoning_effort=self.reasoning_effort,
            reasoning_budget=self.reasoning_budget,
            thinking_budget=thinking_tokens,
        )
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

        self.budget = RequestBudget(self.prices, self.usage, self.model_name, caps, detail, extra_completion_tokens=self.reasoning_budget)
        self.endpoint, self.api_version = resolve_endpoint(kind, base_url, azure_endpoint, api_version)
        api_key, self.key_source = resolve_key(kind, self.endpoint, api_key, api_key_env, azure_ad_token_provider)
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
        say_key_destination(kind, self.endpoint, self.key_source)
        # The same credentials make the synchronous client of the files and batches APIs (batch
        # mode), built only when asked for (batch_client()).
        self._client_config = ClientConfig(
            kind, model, self.endpoint, self.api_version, timeout, self.url_auth, api_key, organization, azure_ad_token_provider, headers, self.max_response_bytes
        )
        self._client = self._client_config.make()
        self._breaker = CircuitBreaker(f"the server at {clean_endpoint(self.endpoint)}", threshold=gone_after, grace=gone_grace)
        self._loop: LoopThread | None = None
        self._loop_lock = threading.Lock()
        self._sem: asyncio.Semaphore | None = None
        self._submitted = itertools.count()

    def credential_sources(self) -> dict[str, Any]:
        """Where this backend's credentials come from, by name only (never a value): ``api_key``
        (``"the api_key option"``, ``"$NAME"`` or ``None``) and ``url`` (``userinfo``,
        ``query token`` ...: credentials of the base URL). What a batch state file keeps."""
        return {"api_key": self.key_source, "url": self.url_auth.sources()}

    def batch_client(self) -> Any:
        """A synchronous SDK client (``openai.OpenAI`` / ``openai.AzureOpenAI``) with this backend's
        credentials and endpoint, for the files and batches APIs (batch mode). It keeps the SDK's own
        retries (2) for these few, idempotent-by-design management calls."""
        return self._client_config.make(sync=True, max_retries=2)

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
            "endpoint": clean_endpoint(self.endpoint),
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
        if self.model_caps.reasoning:  # a different budget or effort is a different answer
            ident["reasoning"] = True
            ident["reasoning_effort"] = self.reasoning_effort
            ident["reasoning_budget"] = self.reasoning_budget
        ident.update(self.thinking.identity())  # non-default thinking settings only
        if self.url_auth.public_query:  # the base URL's query, credentials left out
            ident["query"] = json.dumps(self.url_auth.public_query, sort_keys=True)
        return ident

    # -- the wire format (:mod:`.wire`) -----------------------------------------------------------
    def _params(self, request: Request, *, with_logprobs: bool) -> dict[str, Any]:
        return self.wire.params(request, with_logprobs=with_logprobs)

    def request_body(self, request: Request) -> dict[str, Any]:
        """The JSON body that :meth:`generate` sends for ``request`` on its first attempt (with
        ``extra_body`` merged as the SDK merges it): what a batch line carries, so that a batch
        answer is the answer of the same request."""
        return self.wire.body(request)

    def completion_from_body(self, response: dict[str, Any], request_body: dict[str, Any], *, wanted_logprobs: bool) -> Completion:
        """The :class:`Completion` of a chat-completions ``response`` to ``request_body`` (a batch
        output line's body), with the same metadata an online answer gets (cost aside)."""
        return self.wire.completion_from_body(response, request_body, wanted_logprobs=wanted_logprobs)

    # -- calling ---------------------------------------------------------------------------------
    async def _call(self, request: Request, label: str) -> Completion:
        """One request, with the logprobs fallback; no semaphore, no budget."""
        wire = self.wire
        with_lp = wire.sends_logprobs(request)
        while True:
            params = wire.params(request, with_logprobs=with_lp)
            try:
                response = await send_chat(self._client, merge_extra(params), label=label, timeout=self.timeout, retry=self.retry, breaker=self._breaker, max_bytes=self.max_response_bytes)
                break
            except BackendError as exc:
                # Judged by what *this* request sent: requests in flight when the first refusal
                # arrives were sent with the fields too and are asked again without them.
                refused = refused_field(
                    getattr(exc, "status", None),
                    str(exc),
                    sent_penalties=wire.sent_penalties(params.get("extra_body") or {}),
                    sent_logprobs=with_lp,
                    top_logprobs=params.get("top_logprobs", 0),
                )
                if refused == "penalties":
                    if wire.send_penalties:
                        log.warning("%s: server refused repetition_penalty, sending no penalties from now on: %s", label, exc)
                        wire.send_penalties = False
                    continue
                if refused is None:
                    raise
                if refused == "top_logprobs":
                    log.warning("%s: server refused top_logprobs=%d, retrying with %d", label, params["top_logprobs"], AZURE_MAX_TOP_LOGPROBS)
                    wire.top_cap = AZURE_MAX_TOP_LOGPROBS
                    continue
                log.warning("%s: server refused logprobs, answering without them: %s", label, exc)
                wire.logprobs_refused = f"server refused logprobs: {exc}"
                with_lp = False
        completion = wire.read(response, asked_logprobs=with_lp)
        return wire.mark_logprobs(completion, sent=with_lp, top_logprobs=params.get("top_logprobs"), wanted=request.config.top_logprobs > 0)

    async def _one(self, request: Request, label: str) -> Completion:
        """One request under the concurrency limit and the budget."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        async with self._sem:
            estimate, booked = self.budget.book(request, label)
            try:
                completion = await self._call(request, label)
            except BaseException:
                self.budget.release(booked)
                raise
            self.budget.settle(booked, estimate, completion)  # billed, answered or not
        spent = self.wire.budget_spent(completion, request.config.max_new_tokens + self.wire.reasoning_budget)
        if spent is not None:
            raise spent
        return completion

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
        if getattr(exc, "status", None) == 404 and kinds.get(self.kind).url_target:
            base = (clean_endpoint(self.endpoint) or "").rstrip("/")
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

    def _loop_thread(self) -> LoopThread:
        with self._loop_lock:
            if self._loop is None:
                self._loop = LoopThread()
            return self._loop

    # -- public API ------------------------------------------------------------------------------
    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The prompt tokens the server will read for ``request``, from vLLM's ``/tokenize``
        endpoint (at the server's root, beside ``/v1``), rendered with the same messages and
        chat-template fields a chat request sends. ``None`` for OpenAI / Azure and for servers
        without that endpoint."""
        import httpx

        if not kinds.get(self.kind).url_target or not self.endpoint:
            return None
        root = (clean_endpoint(self.endpoint) or "").rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        body: dict[str, Any] = {"model": self.model, "messages": self.wire.messages(request), "add_generation_prompt": True, "return_token_strs": True}
        extra = self.wire.server_fields()
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
            r = self._loop_thread().submit(within_deadline(post_json(root + "/tokenize", body, headers, dict(self.url_auth.query), self.timeout), self.timeout)).result()
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


# Names that lived here before the split, for one release (imported lazily: options.py imports
# this module, and backends never import judges).
__getattr__ = moved_names(
    __name__,
    {
        "check_options": "capjudge.backends.openai.options",
        "from_spec": "capjudge.backends.openai.options",
        **{name: "capjudge.judges.sampling" for name in ("SamplingEstimate", "estimate_by_sampling", "sampling_requests", "fleur_score")},
    },
)
