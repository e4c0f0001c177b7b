"""Backend spec strings (``hf:<model>``, ``llamacpp:<gguf>?mmproj=<gguf>``, ``openai:<model>``,
``azure:<deployment>``, ``openai-compatible:<base_url>#<model>``) and the registry that maps a
kind to the module that builds it. A new backend is one module plus one entry of the table of kinds
(:mod:`capjudge.backends.kinds`), which says what each kind is."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from capjudge.backends import kinds
from capjudge.backends.base import Backend
from capjudge.backends.credentials import UrlAuth, mask_argv, mask_options, split_url
from capjudge.backends.options import as_int
from capjudge.core.errors import UsageError

JUDGE_OPTIONS = ("estimate_by_sampling",)
"""Options accepted beside any backend's (spec ``?key=value`` or ``--backend-opt``) that belong to the
judge, not the backend: the :class:`~capjudge.judges.judge.Judge` takes them out before it builds
the backend (``estimate_by_sampling=N``: the G-Eval sampling estimate, ``capjudge.judges.sampling``)."""


class UnknownBackendError(UsageError, ValueError):
    """The spec names no registered backend kind, or is malformed (a usage error: exit 2)."""


@dataclass(frozen=True)
class BackendSpec:
    """A parsed spec: ``kind:target?key=value&...``; for ``openai-compatible`` the target is
    ``base_url#model``.

    Credentials never stay in ``target`` or ``raw`` (see :mod:`capjudge.backends.credentials`):
    an ``openai-compatible`` base URL's user info and query are taken out into ``url_auth`` (the
    target keeps scheme, host, port and path), and ``raw`` is the spec as shown everywhere, with
    ``***`` for every credential (URL user info, credential query parameters, credential options
    such as ``?token=``). Credential options keep their values in ``options``."""

    kind: str
    target: str
    options: dict[str, str] = field(default_factory=dict)
    raw: str = ""
    url_auth: UrlAuth = field(default_factory=UrlAuth, compare=False)


# kind -> "module:factory"; the factory takes (spec: BackendSpec, **options) and returns a Backend.
_REGISTRY: dict[str, str | Callable[..., Backend]] = {k.name: k.factory for k in kinds.BUILTIN}


def register_backend(kind: str, factory: str | Callable[..., Backend]) -> None:
    """Register a backend kind: ``factory(spec: BackendSpec, **options) -> Backend`` or an import
    path ``"package.module:function"``. A kind new to :mod:`capjudge.backends.kinds` joins its
    table with every property off (not an API, not local, no presets)."""
    _REGISTRY[kind] = factory
    if kind not in kinds.KINDS:
        kinds.register_kind(kinds.BackendKind(kind, factory if isinstance(factory, str) else ""))


def list_backends() -> list[str]:
    """The registered backend kinds."""
    return sorted(_REGISTRY)


def parse_spec(spec: str) -> BackendSpec:
    """Split a spec string into kind, target and ``?key=value`` options."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UnknownBackendError(
            f"backend spec {mask_argv([str(spec)])[0]!r} is not of the form KIND:TARGET (known kinds: {', '.join(list_backends())})"
        )
    kind, rest = spec.split(":", 1)
    kind = kind.strip().lower()
    if kind not in _REGISTRY:
        raise UnknownBackendError(f"unknown backend kind {kind!r} in {mask_argv([spec])[0]!r} (known: {', '.join(list_backends())})")
    options: dict[str, str] = {}
    target = rest
    shown = spec
    url_auth = UrlAuth()
    if kinds.get(kind).url_target:
        # Credentials out of the base URL before anything uses it (the model follows '#').
        base, hash_, model = rest.rpartition("#") if "#" in rest else (rest, "", "")
        split = split_url(base)
        target, url_auth = split.url + hash_ + model, split.auth
        shown = f"{kind}:{split.shown}{hash_}{model}"
    elif kinds.get(kind).text_options is not None or "?" in rest:
        target, options = _split_options(rest, kinds.get(kind).text_options)
        masked = mask_options(options)
        if any(v != options[k] for k, v in masked):
            shown = f"{spec.split(':', 1)[0]}:{target}?" + "&".join(f"{k}={v}" for k, v in masked)
    if not target:
        raise UnknownBackendError(f"backend spec {shown!r} names no model")
    return BackendSpec(kind=kind, target=target, options=options, raw=shown, url_auth=url_auth)


def _split_options(rest: str, text_options: tuple[str, ...] | None) -> tuple[str, dict[str, str]]:
    """A spec's target and ``?key=value`` options. A target that is a name ends at its first
    ``?``. A free-text target (``text_options`` given, :attr:`kinds.BackendKind.text_options`) ends
    at the first ``?`` followed only by ``key=value`` pairs of those options (a ``?`` of the text
    stays text) and is percent-decoded, so that ``%3F`` writes a ``?`` that is never an option."""
    if text_options is None:
        target, query = rest.split("?", 1)
        return target, dict(parse_qsl(query, keep_blank_values=True))
    at = rest.find("?")
    while at != -1:
        query = rest[at + 1 :]
        parts = query.split("&")
        if all("=" in part and part.split("=", 1)[0] in text_options for part in parts):
            return unquote(rest[:at]), dict(parse_qsl(query, keep_blank_values=True))
        at = rest.find("?", at + 1)
    return unquote(rest), {}


def _module(parsed: BackendSpec, path: str) -> Any:
    module_name = path.split(":")[0]
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        hint = kinds.get(parsed.kind).install_hint()
        raise UnknownBackendError(f"backend {parsed.kind!r} is not available: {exc}{hint}") from exc


def check_backend(spec: str, **options: Any) -> BackendSpec:
    """Parse a spec and check its options without building the backend: nothing is loaded, no
    server is contacted. Raises what :func:`load_backend` would raise for a malformed spec, an
    unknown option, a value of the wrong kind or a missing model file. A kind whose module has no
    ``check_options(spec, **options)`` function is only parsed."""
    parsed = parse_spec(spec)
    factory = _REGISTRY[parsed.kind]
    merged = backend_options({**parsed.options, **options})
    if isinstance(factory, str):
        check = getattr(_module(parsed, factory), "check_options", None)
        if check is not None:
            check(parsed, **merged)
    return parsed


def backend_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the judge's (:data:`JUDGE_OPTIONS`), whose values are checked here:
    what a backend is built with."""
    for name in JUDGE_OPTIONS:
        if isinstance(options.get(name), str):
            as_int(options[name], name)
    return {k: v for k, v in options.items() if k not in JUDGE_OPTIONS}


def load_backend(spec: str | Backend, *, lazy: bool = False, **options: Any) -> Backend:
    """Build a backend from a spec string (a ready :class:`Backend` is returned unchanged).

    Keyword options go to the backend (e.g. ``dtype="float16"``, ``device="cuda"`` for ``hf``) and
    override ``?key=value`` options of the spec. ``lazy=True`` checks the options now but loads the
    model only when a request first needs it (:class:`~capjudge.backends.lazy.LazyBackend`), for
    backends whose module offers ``lazy_from_spec`` (HF, llama.cpp); others are built at once.
    """
    if isinstance(spec, Backend):
        return spec
    parsed = parse_spec(spec)
    factory = _REGISTRY[parsed.kind]
    if isinstance(factory, str):
        module = _module(parsed, factory)
        lazy_factory = getattr(module, "lazy_from_spec", None) if lazy else None
        factory = lazy_factory or getattr(module, factory.split(":")[1])
    merged: dict[str, Any] = backend_options({**parsed.options, **options})
    try:
        return factory(parsed, **merged)
    except TypeError as exc:
        if "unexpected keyword" in str(exc):
            bad = str(exc).rsplit(" ", 1)[-1]
            raise UnknownBackendError(f"backend {parsed.kind!r} has no option {bad} (given in {parsed.raw!r} or --backend-opt)") from None
        raise
