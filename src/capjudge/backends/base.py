"""The backend contract: chat requests in, text and per-token log-probabilities out.

Backends know nothing of captions. A judge hands a backend a list of :class:`Request` (all the
captions of one image at once, so a backend may reuse the image prefix) and gets back, for each, a
:class:`Completion` or the exception that request raised: one failing request never loses the others.

Backends that run independent requests concurrently (API servers) say so with
``Capabilities.concurrency > 0`` and take requests one at a time through :meth:`Backend.submit`;
judges then keep that many in flight, starting a new one as soon as one finishes, instead of
handing over whole batches (one slow request would hold its whole batch).
"""

from __future__ import annotations

import abc
import concurrent.futures
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from capjudge.backends import kinds
from capjudge.backends.usage import Usage
from capjudge.core.errors import BackendError
from capjudge.data.images import LoadedImage

__all__ = [
    "DIGITS",
    "SPECIAL_SHAPED",
    "TEXT_AS_TEXT_KINDS",
    "Backend",
    "BackendError",
    "Capabilities",
    "Completion",
    "ContextLengthError",
    "DelegatingBackend",
    "GenerationConfig",
    "Message",
    "PromptTokens",
    "Request",
    "Role",
    "TokenStep",
    "Usage",
]

Role = Literal["system", "user", "assistant"]

DIGITS = tuple(str(d) for d in range(10))


class ContextLengthError(BackendError):
    """The prompt does not fit the model's context window. ``counts`` (when the backend knows
    them): ``prompt_tokens``, ``image_tokens``, ``max_new_tokens`` and ``limit``, the model's
    context in tokens; the error record of the sample carries them as ``details.context``."""

    def __init__(self, message: str, *, counts: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.counts = dict(counts or {})


@dataclass(frozen=True)
class Message:
    """One chat turn. ``images`` are shown before the text (the LLaVA convention).

    How an OpenAI-protocol body lays the turn out, where a method's official code fixed it
    (local backends show images first whatever these say): ``text_first`` puts the text part
    before the image parts, ``detail`` is the images' ``detail`` (``None``: the backend's option),
    ``parts`` sends a text-only turn as a list of one text part rather than a string.
    A turn with neither images nor these set is sent as before (a text-only request is a
    request whose turns hold no image)."""

    role: Role
    content: str
    images: tuple[LoadedImage, ...] = ()
    text_first: bool = False
    detail: str | None = None
    parts: bool = False

    def layout(self) -> dict[str, Any]:
        """The layout fields that differ from the defaults (in a request's fingerprint only then,
        so that existing requests keep their cache keys)."""
        out: dict[str, Any] = {}
        if self.text_first:
            out["text_first"] = True
        if self.detail is not None:
            out["detail"] = self.detail
        if self.parts:
            out["parts"] = True
        return out


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode. ``temperature=0`` is greedy; ``top_logprobs>0`` asks for per-step alternatives
    (and, where the backend can, the exact probabilities of the digit tokens 0-9)."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_logprobs: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    stop_rule: str = ""
    """A named rule of :mod:`capjudge.parsing.stopping` (``"score"``: stop once the answer's
    decimal score is complete) that ends the answer where the method has read all it needs; ""
    (the default): none. Backends that decode token by token (``hf``) apply it."""

    @property
    def deterministic(self) -> bool:
        """Greedy decoding: the same request always gives the same answer."""
        return self.temperature == 0.0


@dataclass(frozen=True)
class Request:
    """A chat to continue. ``sample_index`` distinguishes repeated stochastic draws (cache key)."""

    messages: tuple[Message, ...]
    config: GenerationConfig = GenerationConfig()
    sample_index: int | None = None

    @property
    def images(self) -> list[LoadedImage]:
        """Every image in the conversation, in order."""
        return [img for m in self.messages for img in m.images]

    def fingerprint(self) -> dict[str, Any]:
        """Everything about the request that changes the answer (image by content hash, not path)."""
        return {
            "messages": [
                {"role": m.role, "content": m.content, "images": [i.sha256 for i in m.images], **m.layout()}
                for m in self.messages
            ],
            "config": _config_fields(self.config),
            "sample_index": self.sample_index,
        }


def _config_fields(config: GenerationConfig) -> dict[str, Any]:
    """The config as a dict; an unset stop rule is left out, so fingerprints (cache keys) made
    before the field existed stay the same."""
    out = asdict(config)
    if not out["stop_rule"]:
        del out["stop_rule"]
    return out


@dataclass(frozen=True)
class TokenStep:
    """One generated token.

    ``logprob`` is the chosen token's log-probability; ``top`` the most likely alternatives as
    ``(token text, logprob)``; ``digits`` the log-probabilities of the tokens "0".."9" under the full
    softmax when the backend can compute them exactly (HF, llama.cpp), else ``None`` (API backends,
    where digits come from ``top`` and absent ones count as probability 0).
    """

    token: str
    logprob: float | None = None
    top: tuple[tuple[str, float], ...] = ()
    digits: tuple[float, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (cache and debugging)."""
        return {"token": self.token, "logprob": self.logprob, "top": [list(t) for t in self.top], "digits": list(self.digits) if self.digits is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenStep:
        """Inverse of :meth:`to_dict`."""
        digits = d.get("digits")
        return cls(
            token=d["token"],
            logprob=d.get("logprob"),
            top=tuple((str(t), float(lp)) for t, lp in d.get("top") or ()),
            digits=tuple(float(x) for x in digits) if digits is not None else None,
        )


@dataclass
class Completion:
    """What a backend answered to one request.

    ``steps`` is empty when the backend gave no log-probabilities (``logprobs=False``).
    ``steps_checked``: the backend that made it has checked its log-probabilities
    (:func:`capjudge.backends.logprobs.steps_problem`), so the response cache and the judge do not
    check them again; never stored (an answer read back from the cache is checked again), and not
    carried over by ``dataclasses.replace``.
    """

    text: str
    steps: list[TokenStep] = field(default_factory=list)
    logprobs: bool = False
    model: str = ""
    usage: Usage | None = None
    cached: bool = False
    finish_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    steps_checked: bool = field(default=False, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (what the cache stores)."""
        return {
            "text": self.text,
            "steps": [s.to_dict() for s in self.steps],
            "logprobs": self.logprobs,
            "model": self.model,
            "usage": self.usage.to_dict() if self.usage else None,
            "finish_reason": self.finish_reason,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        """Inverse of :meth:`to_dict`."""
        usage = d.get("usage")
        return cls(
            text=d["text"],
            steps=[TokenStep.from_dict(s) for s in d.get("steps") or ()],
            logprobs=bool(d.get("logprobs")),
            model=d.get("model", ""),
            usage=Usage(**usage) if usage else None,
            finish_reason=d.get("finish_reason"),
            meta=dict(d.get("meta") or {}),
        )


@dataclass(frozen=True)
class PromptTokens:
    """The token sequence a model reads for one request, as its backend sees it.

    ``ids`` and ``tokens`` (the tokenizer's token strings) are parallel; ``image_token_id`` marks
    image placeholders (a run of them stands for one image's features); ``source`` says where they
    come from (``"hf processor"``, ``"vllm /tokenize"``, ...). Backend parity checks compare two of
    these to find the first token where two backends' prompts part.
    """

    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    source: str = ""
    image_token_id: int | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; judges adapt (e.g. FLEUR falls back to a raw score without logprobs)."""

    logprobs: bool = False
    max_top_logprobs: int = 0
    exact_digit_probs: bool = False
    images: bool = True
    max_images: int | None = 1
    batching: bool = False
    prefix_reuse: bool = False
    system_prompt: bool = True
    # Requests the backend runs at once through submit(); 0: it takes whole batches through
    # generate(), and judges hand it whole image groups.
    concurrency: int = 0


class Backend(abc.ABC):
    """A VLM that continues chats: the backend contract.

    A backend must have:

    - :meth:`generate` (the one abstract method): every request answered, the i-th item the
      :class:`Completion` of ``requests[i]`` or the exception that request raised, never raising
      for one bad request;
    - the attributes ``kind`` (its key in :mod:`capjudge.backends.kinds`: what the kind is decides
      the rest, never a comparison of kind strings), ``spec`` (the string it was made from, as
      shown: no secrets), ``model`` (the model id written into results) and ``capabilities``
      (:class:`Capabilities`: what judges may ask of it).

    Optional, with defaults here:

    - :meth:`stream` (answers as they arrive; default: :meth:`generate`'s, in order) and
      :meth:`submit` (one request started; default: answered at once). A backend that runs
      requests concurrently says so with ``capabilities.concurrency > 0`` and overrides both;
    - :meth:`identity` (everything that changes an answer, never secrets: the cache key's part;
      default: kind and model): override it to add every setting that changes answers;
    - :meth:`prompt_tokens` (the tokens the model reads; default ``None``: it cannot show them);
    - :meth:`close` (release servers, GPU memory; default: nothing).

    :meth:`generate_one`, :meth:`cache_key` and the context-manager methods are derived from
    these and are not overridden. Usage and cost (API backends) travel in ``Completion.usage`` and
    ``Completion.meta``; anything more a caller reads off a backend (a usage tracker, batch mode's
    request bodies) belongs to that backend's own class, not to this contract.
    """

    kind: str = "base"
    spec: str = ""
    model: str = ""
    capabilities: Capabilities = Capabilities()

    @abc.abstractmethod
    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request; the i-th item is the completion of ``requests[i]`` or the exception
        that request raised. Must not raise for a single bad request."""

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """Yield ``(index, completion or exception)`` as answers arrive (default: in order)."""
        yield from enumerate(self.generate(requests))

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """Start one request; the future's result is its completion or the exception it raised
        (the future itself never fails). Backends with ``capabilities.concurrency > 0`` run
        submitted requests concurrently; the default answers at once through :meth:`generate`."""
        future: concurrent.futures.Future[Completion | BaseException] = concurrent.futures.Future()
        try:
            (out,) = self.generate([request])
        except Exception as exc:  # noqa: BLE001 - the request's failure, not the caller's
            out = exc
        future.set_result(out)
        return future

    def generate_one(self, request: Request) -> Completion:
        """Answer one request, raising its exception if it failed."""
        (out,) = self.generate([request])
        if isinstance(out, BaseException):
            raise out
        return out

    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The tokens the model reads for ``request``, where this backend can show them (the HF
        processor's input ids, a vLLM server's ``/tokenize``); ``None`` where it cannot."""
        return None

    def identity(self) -> dict[str, Any]:
        """What identifies this backend's answers for caching: kind, model and any setting that
        changes outputs (dtype, endpoint, API version); never secrets."""
        return {"kind": self.kind, "model": self.model}

    def cache_key(self, request: Request) -> str:
        """A stable hash of the backend identity and the request."""
        parts: dict[str, Any] = {"backend": self.identity(), "request": request.fingerprint()}
        if kinds.text_as_text(self.kind) and any(SPECIAL_SHAPED.search(m.content) for m in request.messages):
            parts["message_text"] = "text"
        payload = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (servers, GPU memory). Default: nothing."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec or self.model!r})"


TEXT_AS_TEXT_KINDS = kinds.text_as_text_kinds()
"""Backends that tokenize the prompt themselves and read message text spelling a special token
(``</s>``, ``<|im_end|>``, ``<image>``, ``[INST]``) as plain text (``backends/hf/specials.py``,
``backends/llamacpp/specials.py``)."""

SPECIAL_SHAPED = re.compile(r"<\|?/?[A-Za-z_][^<>\s]{0,40}\|?>|\[/?[A-Z_]{2,20}\]")
"""Text shaped like a special token. On the backends whose kind reads message text as text
(:func:`capjudge.backends.kinds.text_as_text`, :data:`TEXT_AS_TEXT_KINDS`), a request holding
such text gets a cache key of its own, so that an answer cached before message text was read as text
(when a caption could close the turn or fake an image) is never replayed; other requests keep their keys."""


class DelegatingBackend(Backend):
    """A backend that presents itself as ``inner``: kind, model, spec, capabilities, identity and
    cache keys are the wrapped backend's (so results and cache entries name the real model), and any
    other attribute (usage tracker, options) is read from it. Subclasses change how requests are
    answered (the response cache, the Batch API's planning and replay passes)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    @property  # type: ignore[override]
    def kind(self) -> str:  # type: ignore[override]
        """The wrapped backend's kind."""
        return self.inner.kind

    @property  # type: ignore[override]
    def model(self) -> str:  # type: ignore[override]
        """The wrapped backend's model id."""
        return self.inner.model

    @property  # type: ignore[override]
    def spec(self) -> str:  # type: ignore[override]
        """The wrapped backend's spec string."""
        return self.inner.spec

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """The wrapped backend's capabilities."""
        return self.inner.capabilities

    def identity(self) -> dict[str, Any]:
        """The wrapped backend's identity."""
        return self.inner.identity()

    def cache_key(self, request: Request) -> str:
        """The wrapped backend's key for ``request``."""
        return self.inner.cache_key(request)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the wrapper lacks; "inner" itself is refused so that a half-built
        # wrapper (before __init__) does not recurse.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
