"""The response cache shared by every backend: an answer already paid for is never paid for again.

:class:`ResponseCache` is a :mod:`diskcache` store (SQLite underneath, safe with several processes
reading and writing at once) of raw completions (text, token log-probabilities, usage), so scores
can be re-parsed without calling the model. :class:`CachedBackend` wraps any backend: requests whose
key is in the cache are answered from it (``cached=True``); the others go to the wrapped backend in
one batch, and their answers are stored as they arrive, so a run that dies resumes where it stopped.

Keys come from :meth:`Backend.cache_key`: the backend's :meth:`~Backend.identity` (kind, endpoint or
deployment, model, API version, settings such as image ``detail``; never secrets) plus the request
fingerprint (rendered prompt, which fixes the caption order of a pair, image content hashes, every
generation setting, the sample index). Only deterministic requests (temperature 0) are cached,
unless the request carries a ``sample_index``; errors are never cached, nor are answers whose token
log-probabilities are not log-probabilities (:func:`capjudge.backends.logprobs.steps_problem`): such
an answer is an error for this run and asked again on the next, and one already in the cache (an
older capjudge stored it) is a miss.

Entries are JSON data (:mod:`capjudge.backends.datadisk`), never pickles: an entry that is not
(an older capjudge's pickled entry, or one planted in the folder) is a miss, logged, and its
request is asked again; it is never loaded.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from capjudge.backends.base import Backend, Completion, DelegatingBackend, PromptTokens, Request
from capjudge.backends.logprobs import steps_problem
from capjudge.core.redact import scrub_data

FORMAT_VERSION = 2  # 2: JSON data (1: pickled by diskcache; such entries miss once)
_log = logging.getLogger(__name__)
_WRITE_BATCH = 256  # most answers stored in one transaction


def default_cache_dir() -> Path:
    """``$CAPJUDGE_CACHE_DIR``, else ``~/.cache/capjudge``."""
    env = os.environ.get("CAPJUDGE_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "capjudge"


def bypass_cache(backend: Any) -> contextlib.AbstractContextManager[Any]:
    """Within the block, a cached backend asks again even what it has cached (``--retry-errors``);
    the new answers replace the cached ones. Any other backend: nothing changes."""
    bypass = getattr(backend, "bypass_reads", None)
    return bypass() if callable(bypass) else contextlib.nullcontext()


def cacheable(request: Request) -> bool:
    """Whether a request's answer may be cached: greedy, or a numbered sample."""
    return request.config.deterministic or request.sample_index is not None


def storable(completion: Completion) -> bool:
    """Whether an answer may be stored for later runs: its token log-probabilities (if any) are
    log-probabilities. One that is not is this run's error, and must not be replayed by the next."""
    return not completion.steps or completion.steps_checked or steps_problem(completion.steps) is None


def _pack(values: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")


def _unpack(text: str) -> list[float]:
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 8:
        raise ValueError("packed floats: length is not a multiple of 8")
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def _packed(completion: dict[str, Any]) -> dict[str, Any]:
    """``Completion.to_dict()`` with each step's top log-probabilities and digit probabilities
    packed as base64 little-endian doubles: as JSON text, the 80 floats of one FLEUR answer cost
    several times what the rest of the entry costs to write and read."""
    steps = []
    for step in completion.get("steps") or ():
        top = step.get("top") or ()
        packed: dict[str, Any] = {"token": step["token"], "logprob": step.get("logprob"), "top_tokens": [t for t, _ in top], "top_logprobs": _pack([lp for _, lp in top])}
        if step.get("digits") is not None:
            packed["digits"] = _pack(step["digits"])
        steps.append(packed)
    return {**completion, "steps": steps}


def _unpacked(completion: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`_packed` (raises ``KeyError``, ``TypeError`` or ``ValueError`` on a
    malformed entry: a miss)."""
    steps = []
    for step in completion.get("steps") or ():
        tokens = step["top_tokens"]
        logprobs = _unpack(step["top_logprobs"])
        if len(tokens) != len(logprobs):
            raise ValueError("packed steps: tokens and log-probabilities differ in number")
        digits = step.get("digits")
        steps.append({"token": step["token"], "logprob": step.get("logprob"), "top": list(zip(tokens, logprobs, strict=True)), "digits": _unpack(digits) if digits is not None else None})
    return {**completion, "steps": steps}


class ResponseCache:
    """Completions on disk, keyed by :meth:`Backend.cache_key`. Safe for several processes."""

    def __init__(self, directory: str | Path | None = None) -> None:
        from capjudge.backends.datadisk import open_data_cache

        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        # A generous SQLite timeout: several processes may write at once. Nothing is ever evicted
        # (no expiry, a 1 TiB size limit), so culling is off: it cost two queries per write.
        self._cache = open_data_cache(self.directory, timeout=60, size_limit=2**40, cull_limit=0)
        self._lock = threading.Lock()
        self.unsafe = 0  # entries not stored as data (pickled): never loaded, counted as misses
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def get(self, key: str) -> Completion | None:
        """The cached completion for ``key`` (marked ``cached=True``), or ``None``."""
        from capjudge.backends.datadisk import UnsafeEntry

        try:
            entry = self._cache.get(key, default=None, retry=True)
        except UnsafeEntry as exc:
            entry = None
            with self._lock:
                self.unsafe += 1
                first = self.unsafe == 1
            # Once at warning level (an old cache has many such entries), then at debug level.
            _log.log(logging.WARNING if first else logging.DEBUG, "cache %s: an entry was not read (%s); it is asked again and replaced", self.directory, exc)
        except Exception:  # noqa: BLE001 - a broken entry is a miss, never a crash
            entry = None
        completion = None
        if isinstance(entry, dict) and entry.get("v") == FORMAT_VERSION:
            try:
                completion = Completion.from_dict(_unpacked(entry["completion"]))
                completion.cached = True
            except (KeyError, TypeError, ValueError, struct.error):
                completion = None
            if completion is not None and not storable(completion):
                completion = None  # stored by an older capjudge: asked again (and replaced)
        with self._lock:
            if completion is None:
                self.misses += 1
            else:
                self.hits += 1
        return completion

    def set(self, key: str, completion: Completion, *, metadata: dict[str, Any] | None = None) -> None:
        """Store ``completion.to_dict()`` (the raw answer) with when and by what it was made;
        an answer that is not :func:`storable` is not stored."""
        if not storable(completion):
            return
        self._cache.set(key, self._entry(completion, scrub_data(metadata or {})), retry=True)
        with self._lock:
            self.writes += 1

    def set_many(self, items: Sequence[tuple[str, Completion]], *, metadata: dict[str, Any] | None = None) -> int:
        """Store several answers in one transaction (one commit); returns how many were stored.

        If the transaction fails (a full disk, a broken entry), each answer is tried on its own,
        so that one that cannot be written does not lose the others. Answers that are not
        :func:`storable` are left out."""
        items = [(key, completion) for key, completion in items if storable(completion)]
        if not items:
            return 0
        meta = scrub_data(metadata or {})
        entries = [(key, self._entry(completion, meta)) for key, completion in items]
        stored = 0
        try:
            with self._cache.transact(retry=True):
                for key, entry in entries:
                    self._cache.set(key, entry, retry=True)
            stored = len(entries)
        except Exception:  # noqa: BLE001 - rolled back: one by one
            for key, entry in entries:
                with contextlib.suppress(Exception):
                    self._cache.set(key, entry, retry=True)
                    stored += 1
        with self._lock:
            self.writes += stored
        return stored

    @staticmethod
    def _entry(completion: Completion, meta: dict[str, Any]) -> dict[str, Any]:
        # Scrubbed: an answer's metadata can quote a server message that echoed the API key.
        return {"v": FORMAT_VERSION, "completion": _packed(scrub_data(completion.to_dict())), "created": time.time(), "meta": meta}

    def __contains__(self, key: str) -> bool:
        return key in self._cache

    def __len__(self) -> int:
        return len(self._cache)

    def stats(self) -> dict[str, Any]:
        """Entries, size on disk (bytes), and this process's hits, misses and writes."""
        with self._lock:
            return {
                "directory": str(self.directory),
                "entries": len(self._cache),
                "size_bytes": int(self._cache.volume()),
                "hits": self.hits,
                "misses": self.misses,
                "writes": self.writes,
            }

    def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        return int(self._cache.clear(retry=True))

    def close(self) -> None:
        """Close the underlying database handles."""
        self._cache.close()


class CachedBackend(DelegatingBackend):
    """Answers cached requests from a :class:`ResponseCache` and sends only the misses to ``inner``.

    ``read=False`` ignores cached answers (but still stores new ones); ``write=False`` never stores.
    """

    def __init__(self, inner: Backend, cache: ResponseCache | str | Path, *, read: bool = True, write: bool = True) -> None:
        super().__init__(inner)
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.read = read
        self.write = write
        # Answers of submit() are stored by one writer thread, off the backend's own threads: each
        # time it runs, it stores every answer that arrived meanwhile in one transaction.
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._writer_lock = threading.Lock()
        self._pending: deque[tuple[str, concurrent.futures.Future[Completion | BaseException], concurrent.futures.Future[Completion | BaseException]]] = deque()
        self._draining = False

    def prompt_tokens(self, request: Request) -> PromptTokens | None:
        """The wrapped backend's prompt tokens (never cached)."""
        return self.inner.prompt_tokens(request)

    def _key(self, request: Request) -> str | None:
        try:
            return self.inner.cache_key(request) if cacheable(request) else None
        except Exception:  # noqa: BLE001 - an unhashable request is simply not cached
            return None

    def stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Completion | BaseException]]:
        """Yield cache hits first, then the wrapped backend's answers as they arrive (each stored)."""
        keys = [self._key(r) if isinstance(r, Request) else None for r in requests]
        misses: list[int] = []
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if key is not None and self.read else None
            if hit is not None:
                yield i, hit
            else:
                misses.append(i)
        if not misses:
            return
        batch = [requests[i] for i in misses]
        for j, out in self.inner.stream(batch):
            i = misses[j]
            self._store(keys[i], out)
            yield i, out

    def _store(self, key: str | None, out: Completion | BaseException) -> None:
        if key is not None and self.write and isinstance(out, Completion):
            # A full disk must not lose the answer: it is still returned.
            with contextlib.suppress(Exception):
                self.cache.set(key, out, metadata={"backend": self.inner.identity()})

    def submit(self, request: Request) -> concurrent.futures.Future[Completion | BaseException]:
        """A cache hit as a finished future; a miss goes to the wrapped backend, and its future
        finishes once the answer is stored (so an answer a caller sees is already in the cache).

        Answers are stored by one writer thread, in batches: every answer that arrives while a
        batch is being written goes into the next one, in one transaction (one commit for many
        answers, instead of one each). An answer waits for nothing but the batch it is in."""
        key = self._key(request) if isinstance(request, Request) else None
        hit = self.cache.get(key) if key is not None and self.read else None
        if hit is not None:
            done: concurrent.futures.Future[Completion | BaseException] = concurrent.futures.Future()
            done.set_result(hit)
            return done
        inner = self.inner.submit(request)
        if key is None or not self.write:
            return inner
        outer: concurrent.futures.Future[Completion | BaseException] = concurrent.futures.Future()
        inner.add_done_callback(lambda fut: self._enqueue(key, fut, outer))
        outer.add_done_callback(lambda fut: inner.cancel() if fut.cancelled() else None)  # caller gave up
        return outer

    def _enqueue(self, key: str, inner: concurrent.futures.Future[Completion | BaseException], outer: concurrent.futures.Future[Completion | BaseException]) -> None:
        """Hand an answered request to the writer (which starts a batch unless one is running)."""
        with self._writer_lock:
            self._pending.append((key, inner, outer))
            if self._draining:
                return  # the running batch picks it up when it is done
            self._draining = True
        self._writer_pool().submit(self._drain)

    def _drain(self) -> None:
        """Store everything pending, batch after batch, then finish the callers' futures."""
        while True:
            with self._writer_lock:
                if not self._pending:
                    self._draining = False
                    return
                batch = [self._pending.popleft() for _ in range(min(len(self._pending), _WRITE_BATCH))]
            outs: list[Completion | BaseException] = []
            for _, inner, _ in batch:
                try:
                    outs.append(inner.result())
                except BaseException as exc:  # noqa: BLE001 - cancelled or broken: the request's error
                    outs.append(exc)
            answers = [(key, out) for (key, _, _), out in zip(batch, outs) if isinstance(out, Completion)]
            if answers:
                # A full disk must not lose the answers: they are still returned.
                with contextlib.suppress(Exception):
                    self.cache.set_many(answers, metadata={"backend": self.inner.identity()})
            for (_, _, outer), out in zip(batch, outs):
                with contextlib.suppress(concurrent.futures.InvalidStateError):  # the caller cancelled it
                    outer.set_result(out)

    def _writer_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._writer_lock:
            if self._writer is None:
                self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="capjudge-cache-writer")
            return self._writer

    @contextlib.contextmanager
    def bypass_reads(self) -> Iterator[None]:
        """Within the block, ask the wrapped backend even when an answer is cached (new answers
        replace the cached ones): how a run asks again for answers that led to errors."""
        old = self.read
        self.read = False
        try:
            yield
        finally:
            self.read = old

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request, from the cache where possible."""
        out: list[Completion | BaseException | None] = [None] * len(requests)
        for i, item in self.stream(requests):
            out[i] = item
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Close the wrapped backend and the cache (after the answers still being stored)."""
        self.inner.close()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        self.cache.close()

    def __repr__(self) -> str:
        return f"CachedBackend({self.inner!r}, {str(self.cache.directory)!r})"
