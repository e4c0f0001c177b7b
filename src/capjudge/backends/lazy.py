"""A backend that loads its model only when a request needs it.

A run whose every request is answered by the response cache never loads the model (a 13B
checkpoint takes minutes and GPU memory). :class:`LazyBackend` knows what it will be (kind, spec,
model, and the identity that cache keys are made of) without loading; the real backend is built by
``factory`` on the first request that reaches it, that is, the first cache miss. Backend modules
offer ``lazy_from_spec`` next to ``from_spec`` (:func:`capjudge.backends.registry.load_backend`
with ``lazy=True``); they check the options and files at once, so mistakes still fail at start.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from capjudge.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    PromptTokens,
    Request,
)

log = logging.getLogger(__name__)


class BackendLoadError(BackendError):
    """The model could not be loaded when the first request needed it (the run cannot go on)."""


class LazyBackend(Backend):
    """Stands for the backend ``factory()`` builds, and builds it on first use.

    ``identity`` must be what the built backend's :meth:`~Backend.identity` returns (checked when it
    is built: a difference is logged, and this object keeps the announced identity, so the cache
    keys of one run never change midway). ``loads`` counts the builds (0 or 1).
    """

    def __init__(
        self,
        factory: Callable[[], Backend],
        *,
        kind: str,
        spec: str,
        model: str,
        identity: dict[str, Any],
        capabilities: Capabilities | None = None,
    ) -> None:
        self._factory = factory
        self.kind = kind
        self.spec = spec
        self.model = model
        self._identity = dict(identity)
        self._announced = capabilities or Capabilities()
        self._inner: Backend | None = None
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self.loads = 0

    @property
    def loaded(self) -> bool:
        """Whether the real backend has been built."""
        return self._inner is not None

    def load(self) -> Backend:
        """The real backend, built now if it was not (a failure is raised, then and on every later
        call, as :class:`BackendLoadError`)."""
        with self._lock:
            if self._inner is not None:
                return self._inner
            if self._failure is not None:
                raise BackendLoadError(str(self._failure)) from self._failure
            log.info("loading %s (first request that the cache could not answer)", self.spec)
            try:
                inner = self._factory()
            except Exception as exc:
                self._failure = exc
                raise BackendLoadError(f"{self.spec}: {exc}") from exc
            self.loads += 1
            if inner.identity() != self._identity:
                log.warning("%s: identity after loading %s differs from the one announced %s; cache keys keep the announced one", self.spec, inner.identity(), self._identity)
            self._inner = inner
            return inner

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """The real backend's capabilities once loaded, else those announced."""
        return self._inner.capabilities if self._inner is not None else self._announced

    def identity(self) -> dict[str, Any]:
        """The identity announced at creation (no loading)."""
        return dict(self._identity)

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Load the model if needed, then answer (see :meth:`Backend.generate`)."""
        if not requests:
            return []
        return self.load().generate(requests)

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """Load the model if needed, then stream its answers."""
        if not requests:
            return iter(())
        return self.load().stream(requests)

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """Load the model if needed, then start the request."""
        return self.load().submit(request)

    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """Load the model if needed, then ask it (see :meth:`Backend.prompt_tokens`)."""
        return self.load().prompt_tokens(request)

    def __getattr__(self, name: str) -> Any:
        # Anything else (prefix statistics, the processor, ...) belongs to the loaded model. Looking
        # an attribute up never loads it (callers probe with getattr(backend, "usage", None)).
        inner = self.__dict__.get("_inner")
        if inner is None or name.startswith("_"):
            raise AttributeError(f"{name!r}: not an attribute of {type(self).__name__}, and the model is not loaded (call load() first)")
        return getattr(inner, name)

    def close(self) -> None:
        """Close the real backend if it was loaded."""
        if self._inner is not None:
            self._inner.close()

    def __repr__(self) -> str:
        state = "loaded" if self._inner is not None else "not loaded"
        return f"LazyBackend({self.spec!r}, {state})"
