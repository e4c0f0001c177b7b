"""Where the answers of a batch run wait for the scoring flow, and the two backends that run the
flow over them.

- :class:`RunStore` (a :mod:`diskcache` folder beside ``--out``) holds every answer the run's batches
  (or ``--batch-import``) brought, keyed by the response-cache key, also those the response cache
  does not keep (sampled requests, ``--no-cache``); the errors the provider gave for single lines;
  how often each line expired or failed; the lines sent online instead.
- :class:`PlanningBackend` stands in for the judge's backend during a *planning pass*: the normal
  scoring flow runs over the rows, every answer already known comes from the store or the response
  cache, and every other request becomes one batch line (its answer an error the pass discards).
  Two-step methods need one pass per step: the first-step answers make the scoring requests.
- :class:`ReplayBackend` stands in for it during the *final pass*, the normal run that writes
  ``--out``: answers come from the store (priced at batch rates, counted once), then the response
  cache; a request neither holds goes online only where the run allows it (``--batch-failed
  online``), else it is a resumable error (never a silent second request).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from capjudge.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    Completion,
    ContextLengthError,
    DelegatingBackend,
    Request,
)
from capjudge.backends.cache import CachedBackend, cacheable
from capjudge.backends.openai.batch import JobWriter, LineTooLarge
from capjudge.backends.openai.retry import APIRequestError
from capjudge.core.redact import scrub, scrub_data


class Deferred(BackendError):
    """A planning pass's stand-in answer for a request that a batch (or an online request) will
    answer; its sample's record is discarded."""


class BatchNotAnswered(BackendError):
    """A request that the run's batches did not answer (expired or failed each time it was sent)."""

    resumable = True


class RunStore:
    """Answers, line errors and attempts of one batch run (safe with several processes)."""

    def __init__(self, directory: Path) -> None:
        from capjudge.backends.datadisk import open_data_cache

        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        # JSON data, never pickles (backends.datadisk): an entry planted in the folder is not run.
        self._db = open_data_cache(directory, timeout=60, size_limit=2**40, cull_limit=0)

    def _get(self, key: str, default: Any = None) -> Any:
        from capjudge.backends.datadisk import UnsafeEntry

        try:
            return self._db.get(key, default=default, retry=True)
        except UnsafeEntry:  # not JSON data (planted, or an older capjudge's pickle): never loaded
            return default

    def answer(self, key: str) -> Completion | None:
        """The answer stored for ``key`` (``cached=False``: this run asked for it)."""
        entry = self._get("a:" + key)
        return Completion.from_dict(entry) if isinstance(entry, dict) else None

    def error(self, key: str) -> BackendError | None:
        """The error a line ended with, as the exception an online request would have raised."""
        entry = self._get("e:" + key)
        return self.error_from(entry) if isinstance(entry, dict) else None

    @staticmethod
    def error_from(entry: dict[str, Any]) -> BackendError:
        """The exception of a stored line error."""
        message = str(entry.get("message") or "the batch line failed")
        if entry.get("kind") == "exhausted":
            return BatchNotAnswered(message)
        if entry.get("kind") == "request":
            return BackendError(message)
        if entry.get("code") == "context_length_exceeded":
            return ContextLengthError(message)
        return APIRequestError(message, status=entry.get("status"), code=entry.get("code"))

    def online(self, key: str) -> bool:
        """Whether the line goes online instead of into another batch."""
        return bool(self._get("o:" + key, False))

    def tried(self, key: str) -> list[str]:
        """The jobs the line expired or failed in."""
        value = self._get("t:" + key)
        return [str(v) for v in value] if isinstance(value, list) else []

    def tries(self, key: str) -> int:
        """How many batches the line expired or failed in."""
        return len(self.tried(key))

    def put(self, answers: Sequence[tuple[str, Completion]] = (), errors: Sequence[tuple[str, dict[str, Any]]] = (), online: Sequence[str] = (), tries: Sequence[tuple[str, str]] = ()) -> None:
        """Store outcomes in one transaction; ``tries`` are ``(key, job name)`` pairs (idempotent:
        collecting the same job twice counts it once)."""
        with self._db.transact(retry=True):
            for key, completion in answers:
                self._db.set("a:" + key, scrub_data(completion.to_dict()), retry=True)
            for key, err in errors:
                self._db.set("e:" + key, scrub_data(err), retry=True)
            for key in online:
                self._db.set("o:" + key, True, retry=True)
            for key, job in tries:
                seen = self._get("t:" + key)
                seen = list(seen) if isinstance(seen, list) else []
                if job not in seen:
                    self._db.set("t:" + key, [*seen, job], retry=True)

    def count_answers(self) -> int:
        """Answers stored."""
        return sum(1 for k in self._db.iterkeys() if isinstance(k, str) and k.startswith("a:"))

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def budget_spent(backend: Backend, answer: Completion, request: Request) -> BackendError | None:
    """The error of a batch answer that a reasoning model left empty because its reasoning spent
    the budget (as online: :meth:`.wire.ChatWire.budget_spent`); ``None`` for any other answer."""
    inner = backend.inner if isinstance(backend, CachedBackend) else backend
    wire = getattr(inner, "wire", None)
    if wire is None:
        return None
    return wire.budget_spent(answer, request.config.max_new_tokens + wire.reasoning_budget)  # type: ignore[no-any-return]


def _done(value: Completion | BaseException) -> concurrent.futures.Future[Completion | BaseException]:
    future: concurrent.futures.Future[Completion | BaseException] = concurrent.futures.Future()
    future.set_result(value)
    return future


class _StandIn(DelegatingBackend):
    """Looks like ``inner``, the judge's own backend (kind, model, spec, identity, cache keys), so
    records and keys are the same as the online run's."""

    def _cached(self, key: str, request: Request) -> Completion | None:
        """The response cache's answer, when the judge's backend reads one."""
        judge_backend = self.inner
        if isinstance(judge_backend, CachedBackend) and judge_backend.read and cacheable(request):
            return judge_backend.cache.get(key)
        return None

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Every request through :meth:`submit`."""
        return [self.submit(r).result() for r in requests]


class PlanningBackend(_StandIn):
    """The judge's backend during a planning pass (see the module docstring). ``writer`` receives
    the batch lines; ``importer`` (``--batch-import``) may answer a request from an output file."""

    def __init__(self, outer: Backend, api: Any, store: RunStore, writer: JobWriter | None, *, importer: Any = None) -> None:
        super().__init__(outer)
        self.api = api
        self.store = store
        self.writer = writer
        self.importer = importer
        self.bypass = False
        self.seen: set[str] = set()
        self.lines = 0
        self.resubmitted = 0
        self.known = 0
        self.too_large: list[tuple[str, str]] = []
        self.unsendable: list[tuple[str, str]] = []  # requests that cannot be built (as online)

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """The judge's backend's, with a window wide enough that the pass never waits."""
        return replace(self.inner.capabilities, concurrency=4096)

    @contextlib.contextmanager
    def bypass_reads(self) -> Iterator[None]:
        """``--retry-errors`` rows: the response cache's answers are not used (this run's are)."""
        old, self.bypass = self.bypass, True
        try:
            yield
        finally:
            self.bypass = old

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """A known answer or error at once; else one batch line and a :class:`Deferred`."""
        try:
            key = self.inner.cache_key(request)
        except Exception as exc:  # noqa: BLE001 - an unusable request is its own error
            return _done(exc)
        known: Completion | BaseException | None = self.store.answer(key) or self.store.error(key)
        if known is None and not self.bypass:
            known = self._cached(key, request)
        if known is None and self.importer is not None:
            known = self.importer.answer(key, request)
        if known is not None:
            self.known += 1
            return _done(known)
        if self.store.online(key) or key in self.seen:
            return _done(Deferred("answered later"))
        self.seen.add(key)
        if self.writer is None:
            return _done(Deferred("not in the imported file"))
        try:
            body = self.api.request_body(request)
            self.writer.add(key, body, cacheable=cacheable(request), wanted_logprobs=request.config.top_logprobs > 0)
        except LineTooLarge as exc:
            self.too_large.append((key, str(exc)))
            return _done(Deferred(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a request that cannot be built (no images on this model, ...)
            self.unsendable.append((key, scrub(str(exc))))
            return _done(exc)
        self.lines += 1
        self.resubmitted += self.store.tries(key) > 0
        return _done(Deferred("submitted in a batch"))


class ReplayBackend(_StandIn):
    """The judge's backend during the final pass (see the module docstring)."""

    def __init__(self, outer: Backend, store: RunStore, usage: Any, *, allow_online: bool) -> None:
        super().__init__(outer)
        self.store = store
        self.usage = usage
        self.allow_online = allow_online
        self._counted: set[str] = set()
        self.online = 0

    @contextlib.contextmanager
    def bypass_reads(self) -> Iterator[None]:
        """``--retry-errors`` rows: the judge's backend skips its cache (this run's answers stay)."""
        with contextlib.ExitStack() as stack:
            bypass = getattr(self.inner, "bypass_reads", None)
            if callable(bypass):
                stack.enter_context(bypass())
            yield

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """This run's answer or line error; else the response cache; else online (if allowed)."""
        try:
            key = self.inner.cache_key(request)
        except Exception as exc:  # noqa: BLE001
            return _done(exc)
        answer = self.store.answer(key)
        if answer is not None:
            if key not in self._counted:  # a duplicate row reuses the answer: one call, one cost
                self._counted.add(key)
                cost = answer.meta.get("cost_usd")
                self.usage.settle(0.0, answer.model or self.inner.model, answer.usage, cost if isinstance(cost, (int, float)) else None, batch=True)
            spent = budget_spent(self.inner, answer, request)  # billed, but no answer
            return _done(spent if spent is not None else answer)
        error = self.store.error(key)
        if error is not None:
            return _done(error)
        hit = self._cached(key, request)
        if hit is not None:
            return _done(hit)
        if self.allow_online or self.store.online(key):
            self.online += 1
            return self.inner.submit(request)
        return _done(BatchNotAnswered(scrub("the request was not answered by the run's batches; run the same command again")))


__all__ = ["BatchNotAnswered", "Deferred", "PlanningBackend", "ReplayBackend", "RunStore"]
