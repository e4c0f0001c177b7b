"""The options of ``openai:``, ``azure:`` and ``openai-compatible:`` specs: converted from text,
checked without building a client (:func:`check_options`, what ``registry.check_backend`` and
preflight run), and the factory the registry calls (:func:`from_spec`)."""

from __future__ import annotations

import inspect
import os
from typing import Any
from urllib.parse import urlsplit

from capjudge.backends import kinds
from capjudge.backends.base import BackendError
from capjudge.backends.credentials import is_secret_name, split_url
from capjudge.backends.openai.backend import DETAILS, OpenAIBackend
from capjudge.backends.openai.caps import REASONING_EFFORTS
from capjudge.backends.openai.wire import thinking_request
from capjudge.backends.options import (
    OptionError,
    as_bool,
    as_float,
    as_int,
    as_json_object,
    check_known,
)
from capjudge.backends.registry import BackendSpec

INT_OPTIONS = ("concurrency", "max_retries", "max_top_logprobs", "gone_after", "reasoning_budget", "thinking_budget", "max_response_bytes")
FLOAT_OPTIONS = ("timeout", "retry_base_delay", "retry_max_delay", "max_cost", "gone_grace")
POSITIVE = ("timeout",)
"""Numeric options above 0."""
NON_NEGATIVE = {
    "max_retries": "a number of retries",
    "max_top_logprobs": "a number of alternatives",
    "gone_after": "a number of failures (0: off)",
    "reasoning_budget": "a number of tokens",
    "thinking_budget": "a number of tokens",
    "retry_base_delay": "seconds",
    "retry_max_delay": "seconds",
    "gone_grace": "seconds",
    "max_cost": "US dollars",
}
"""Numeric options of 0 or more, with what they count."""
SECRET_OPTIONS = ("api_key", "azure_ad_token", "key", "token")
COMPATIBLE_ONLY = ("add_special_tokens", "neutral_penalties")
"""Options of OpenAI-compatible servers' own fields (vLLM, SGLang), refused for other kinds."""


def check_options(spec: BackendSpec, **options: Any) -> dict[str, Any]:
    """The options of an ``openai``/``azure``/``openai-compatible`` spec converted and checked
    without building a client: no credentials in the spec, known names, numbers and yes/no values,
    ``detail``, ``concurrency``, and for OpenAI-compatible servers ``http(s)://host/...#model``.
    Returns the keyword arguments of :class:`OpenAIBackend` (``model`` and ``base_url`` included)."""
    leaked = [k for k in spec.options if k.lower() in SECRET_OPTIONS or is_secret_name(k)]
    if leaked:
        raise BackendError(
            f"do not put credentials in the backend spec (it is written into results): remove {', '.join(leaked)}; "
            "use the environment (OPENAI_API_KEY, AZURE_OPENAI_API_KEY, or --backend-opt api_key_env=NAME) or --backend-opt api_key=..."
        )
    check_known(spec.kind, options, [p for p in inspect.signature(OpenAIBackend.__init__).parameters if p not in ("self", "model", "kind", "spec", "url_auth")])
    opts: dict[str, Any] = dict(options)
    for k in INT_OPTIONS:
        if isinstance(opts.get(k), str):
            opts[k] = as_int(opts[k], k)
    for k in FLOAT_OPTIONS:
        if isinstance(opts.get(k), str):
            opts[k] = as_float(opts[k], k)
    for k in ("logprobs", "add_special_tokens", "neutral_penalties", "reasoning"):
        if k in opts and opts[k] is not None:
            opts[k] = as_bool(opts[k], k)
    if not kinds.get(spec.kind).url_target:
        named = [k for k in COMPATIBLE_ONLY if opts.get(k)]
        if named:
            raise OptionError(f"option {named[0]} is for openai-compatible servers (vLLM, SGLang); {spec.kind} would refuse the field")
    opts = {k: v for k, v in opts.items() if v is not None}
    if opts.get("detail") is not None and opts["detail"] not in DETAILS:
        raise OptionError(f"option detail={opts['detail']!r} is not one of {', '.join(DETAILS)}")
    if opts.get("reasoning_effort") is not None and opts["reasoning_effort"] not in REASONING_EFFORTS:
        raise OptionError(f"option reasoning_effort={opts['reasoning_effort']!r} is not one of {', '.join(REASONING_EFFORTS)}")
    for k, v in opts.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (k in NON_NEGATIVE or k in POSITIVE):
            if k in POSITIVE and not v > 0:
                raise OptionError(f"option {k}={v!r}: a number above 0")
            if not v >= 0:
                raise OptionError(f"option {k}={v!r}: {NON_NEGATIVE.get(k, 'a number')}, 0 or more")
    if isinstance(opts.get("extra_body"), str):
        as_json_object(opts["extra_body"], "extra_body")  # a JSON object's text, else a ValueError naming it
    if isinstance(opts.get("default_headers"), str):  # from --backend-opt: the mapping the client takes
        opts["default_headers"] = {str(k): str(v) for k, v in as_json_object(opts["default_headers"], "default_headers").items()}
    if opts.get("thinking") is not None or opts.get("thinking_budget") is not None:
        # open thinking models on a vLLM / SGLang server; openai:/azure: are told what they take
        thinking_request(spec.kind, kinds.get(spec.kind).url_target, opts.get("thinking"), opts.get("thinking_budget"), {})
    if isinstance(opts.get("max_response_bytes"), int) and opts["max_response_bytes"] < 1:
        raise OptionError(f"option max_response_bytes={opts['max_response_bytes']!r}: a number of bytes, 1 or more")
    if isinstance(opts.get("concurrency"), int) and opts["concurrency"] < 1:
        raise OptionError(f"option concurrency={opts['concurrency']!r}: at least 1 request must be in flight")
    opts["model"] = spec.target
    if kinds.get(spec.kind).url_target:
        if "#" not in spec.target:
            raise BackendError(f"openai-compatible spec {spec.raw!r} needs base_url#model, e.g. openai-compatible:http://127.0.0.1:8000/v1#llava-hf/llava-1.5-7b-hf")
        base_url, model = spec.target.rsplit("#", 1)
        if not model:
            raise BackendError(f"openai-compatible spec {spec.raw!r} names no model after '#'")
        opts.setdefault("base_url", base_url)
        if not urlsplit(str(opts["base_url"])).scheme.startswith("http") or not urlsplit(str(opts["base_url"])).netloc:
            raise BackendError(f"openai-compatible spec {spec.raw!r}: the base URL {split_url(str(opts['base_url'])).shown!r} is not http(s)://host[:port]/...")
        opts["model"] = model
    check_credentials(spec, opts)
    return opts


def check_credentials(spec: BackendSpec, opts: dict[str, Any]) -> None:
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
