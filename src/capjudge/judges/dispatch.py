"""How a judge's requests reach its backend: in whole batches, or through a sliding window.

A judge turns the samples it reads into requests, each with a callback that receives the answer
(a :class:`Completion` or the exception of that request) and may add more requests (the scoring step
of a two-step method, once the image's first step is answered). An executor decides when requests
are sent:

- :class:`BatchExecutor` hands every queued request to ``backend.generate`` in one call. For
  backends that batch and reuse an image prefix (HF, llama.cpp): the judge fills a batch with whole
  image groups.
- :class:`WindowExecutor` keeps up to ``limit`` requests in flight through ``backend.submit`` and
  starts a new one as soon as one finishes (API backends, ``capabilities.concurrency > 0``): a slow
  request holds one slot, never a whole batch.

Every answer is checked on its way to its callback (:func:`capjudge.backends.logprobs.checked`):
one whose token log-probabilities are not log-probabilities arrives as that request's error.

:func:`drive` runs a judge's work through an executor and yields results as they are made;
:func:`in_input_order` turns such a stream of ``(input index, result)`` back into input order.
"""

from __future__ import annotations

import abc
import concurrent.futures
import logging
import queue
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from capjudge.backends.base import Backend, Completion, Request
from capjudge.backends.lazy import BackendLoadError
from capjudge.backends.logprobs import checked

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Answer = Completion | BaseException
Callback = Callable[[Answer], None]


def generate_all(backend: Backend, requests: Sequence[Request]) -> list[Answer]:
    """``backend.generate(requests)``, with a backend that raises for the whole batch, or answers
    the wrong number of requests, turned into that error for every request."""
    if not requests:
        return []
    try:
        outs = backend.generate(requests)
    except BackendLoadError:
        raise  # no model, no run: the caller stops (the CLI exits 1, results written so far kept)
    except Exception as exc:  # noqa: BLE001 - a backend that fails a whole batch fails its samples
        log.exception("backend failed on a batch of %d requests", len(requests))
        return [exc] * len(requests)
    if len(outs) != len(requests):
        err = RuntimeError(f"backend returned {len(outs)} answers for {len(requests)} requests")
        return [err] * len(requests)
    return list(outs)


def _run_callback(callback: Callback, answer: Answer) -> None:
    # Every answer of every backend (and of the response cache) passes here: one whose token
    # log-probabilities are not log-probabilities becomes that request's error, never a score.
    answer = checked(answer)
    try:
        callback(answer)
    except Exception:  # a bug in one sample's handling must not stop the others
        log.exception("handling an answer failed")


class Executor(abc.ABC):
    """Sends requests to a backend and hands each answer to its callback, in the caller's thread."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._queue: deque[tuple[Request, Callback]] = deque()

    def add(self, request: Request, callback: Callback) -> None:
        """Queue a request; ``callback`` gets its answer during a later :meth:`step`."""
        self._queue.append((request, callback))

    @property
    @abc.abstractmethod
    def idle(self) -> bool:
        """Nothing queued and nothing running."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the judge should start more samples now (rather than wait for answers)."""

    @abc.abstractmethod
    def step(self) -> None:
        """Send what can be sent and run the callbacks of at least one answer (blocks)."""


class BatchExecutor(Executor):
    """Every queued request goes to ``backend.generate`` in one call."""

    @property
    def idle(self) -> bool:
        """Nothing queued."""
        return not self._queue

    def ready(self) -> bool:
        """Only when every request of the batch was answered (the next batch is another call)."""
        return self.idle

    def step(self) -> None:
        """One ``generate`` call with everything queued; callbacks may queue the next round."""
        batch = list(self._queue)
        self._queue.clear()
        for (_, callback), out in zip(batch, generate_all(self.backend, [r for r, _ in batch])):
            _run_callback(callback, out)


class WindowExecutor(Executor):
    """Up to ``limit`` requests in flight through ``backend.submit``; a new one starts as soon as
    one finishes. ``max_in_flight`` records the most that were ever in flight at once."""

    def __init__(self, backend: Backend, limit: int) -> None:
        super().__init__(backend)
        self.limit = max(1, int(limit))
        self._running: dict[concurrent.futures.Future[Answer], Callback] = {}
        # Futures put themselves here when done: waiting for the next answer costs the same with
        # 64 requests in flight as with one (concurrent.futures.wait registers with every future).
        self._finished: queue.SimpleQueue[concurrent.futures.Future[Answer]] = queue.SimpleQueue()
        self.max_in_flight = 0

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self._queue and not self._running

    def _pump(self) -> None:
        while self._queue and len(self._running) < self.limit:
            request, callback = self._queue.popleft()
            try:
                future = self.backend.submit(request)
            except BackendLoadError:
                raise
            except Exception as exc:  # noqa: BLE001 - a request that cannot start is its own error
                future = concurrent.futures.Future()
                future.set_result(exc)
            self._running[future] = callback
            self.max_in_flight = max(self.max_in_flight, len(self._running))
            future.add_done_callback(self._finished.put)

    def ready(self) -> bool:
        """When a slot is free and nothing waits for one."""
        self._pump()
        return not self._queue and len(self._running) < self.limit

    def step(self) -> None:
        """Fill the free slots, wait for the first answer(s), run their callbacks."""
        self._pump()
        if not self._running:
            return
        done = [self._finished.get()]
        while True:
            try:
                done.append(self._finished.get_nowait())
            except queue.Empty:
                break
        for future in done:
            callback = self._running.pop(future, None)
            if callback is None:
                continue  # cancelled by cancel() (the run stopped early)
            try:
                out: Answer = future.result()
            except BaseException as exc:  # noqa: BLE001 - a cancelled or broken future
                out = exc
            _run_callback(callback, out)

    def cancel(self) -> None:
        """Drop what is queued and cancel what has not started (the consumer stopped early)."""
        self._queue.clear()
        for future in self._running:
            future.cancel()
        self._running.clear()


def make_executor(backend: Backend) -> Executor:
    """A :class:`WindowExecutor` for backends that run concurrent requests, else a :class:`BatchExecutor`."""
    concurrency = int(getattr(backend.capabilities, "concurrency", 0) or 0)
    return WindowExecutor(backend, concurrency) if concurrency > 0 else BatchExecutor(backend)


def drive(executor: Executor, batches: Iterator[T], start: Callable[[T], None], done: deque[R]) -> Iterator[R]:
    """Start each batch of work when the executor is ready for more, step it otherwise, and yield
    every result that ``start`` or the callbacks put in ``done``, as soon as it is there.

    When the input itself fails (``batches`` raises), the work already started is finished and
    its results yielded before the exception is re-raised.
    """
    failure: Exception | None = None
    try:
        while True:
            if executor.ready():
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except Exception as exc:  # noqa: BLE001 - re-raised once the started work is done
                    failure = exc
                    break
                start(batch)
            else:
                executor.step()
            while done:
                yield done.popleft()
        while not executor.idle:
            executor.step()
            while done:
                yield done.popleft()
        while done:
            yield done.popleft()
    finally:
        if isinstance(executor, WindowExecutor) and not executor.idle:
            executor.cancel()  # the consumer stopped early: send nothing more
    if failure is not None:
        raise failure


def in_input_order(stream: Iterator[tuple[int, R]], first: int = 0) -> Iterator[R]:
    """The results of a stream of ``(input index, result)`` in input order, each as soon as it
    and every result before it are there (the stream keeps being read meanwhile)."""
    pending: dict[int, R] = {}
    nxt = first
    try:
        for index, result in stream:
            pending[index] = result
            while nxt in pending:
                yield pending.pop(nxt)
                nxt += 1
    except Exception:
        # The stream failed after finishing what it had started (a broken input): the results
        # held behind an index that never came are not lost.
        for index in sorted(pending):
            yield pending.pop(index)
        raise
    for index in sorted(pending):  # indices the stream skipped: never expected, never lost
        yield pending.pop(index)


__all__ = [
    "Answer",
    "BatchExecutor",
    "Callback",
    "Executor",
    "WindowExecutor",
    "drive",
    "generate_all",
    "in_input_order",
    "make_executor",
]
