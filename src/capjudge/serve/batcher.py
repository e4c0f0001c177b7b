"""Requests arriving together, judged together: one worker thread per judge.

The worker takes the requests waiting in the queue (at least one; more until ``max_batch`` rows
or ``max_wait_ms`` after the first arrived): every queued request of the first one's image (an
image's group stays whole, past ``max_batch`` if need be, as the judge packs a local run's groups),
then others in order of arrival up to ``max_batch`` rows. It hands their rows to the judge's stream API in one call
(the judge groups them by image, so captions of one image share its prefix whichever client sent
them), and resolves each request's future when its last record is made; a batch the judge fails on
is judged again request by request, so that the failure reaches only the requests that cause it. The queue is bounded by
rows: a request that would overflow it is refused (:class:`QueueFull`, answered 429 with
Retry-After). :meth:`Batcher.close` finishes every request already queued.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from capjudge.serve.metrics import Metrics


class StreamJudge(Protocol):
    """What the batcher needs of a judge (:class:`~capjudge.judges.judge.Judge` provides it)."""

    def score_stream(self, samples: Any) -> Iterator[tuple[int, Any]]:
        """Score rows, yielding ``(index, record)`` as each is made."""
        ...

    def compare_stream(self, pairs: Any, *, mode: Any = None) -> Iterator[tuple[int, Any]]:
        """Compare pairs, yielding ``(index, record)`` as each is made."""
        ...


class QueueFull(Exception):
    """The queue holds too many rows to take this request; ``retry_after`` seconds is a guess of
    when it will have room."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the judge's queue is full: retry after {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The server is shutting down and takes no new work."""


@dataclass
class Job:
    """One request's rows and the future its records resolve."""

    kind: str  # "score" or "compare"
    mode: str | None
    rows: list[Any]
    future: Future[list[Any]] = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)
    results: list[Any] = field(default_factory=list)
    left: int = 0

    def __post_init__(self) -> None:
        self.results = [None] * len(self.rows)
        self.left = len(self.rows)


def image_of(job: Job) -> str | None:
    """The image of a request's first row, as text (what the judge groups rows by)."""
    row = job.rows[0] if job.rows else None
    image = row.get("image") if isinstance(row, dict) else None
    return str(image) if isinstance(image, str) else None


class Batcher:
    """The worker that judges the queued requests in batches (see the module's docstring)."""

    def __init__(self, judge: StreamJudge, *, max_batch: int = 64, max_wait_ms: float = 10.0, max_queue: int = 1024, metrics: Metrics | None = None) -> None:
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be 1 or more, max_wait_ms 0 or more")
        self.judge = judge
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.metrics = metrics or Metrics()
        self.batches = 0
        """Batches handed to the judge so far."""
        self._queue: deque[Job] = deque()
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._closing = False
        self._seconds_per_row = 0.0  # the last batches' pace, for Retry-After
        self._thread = threading.Thread(target=self._work, name="capjudge-batcher", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- the request side
    def submit(self, kind: str, rows: list[Any], mode: str | None = None) -> Future[list[Any]]:
        """Queue a request's rows; its future gives their records in order. Raises
        :class:`QueueFull` or :class:`Closed`."""
        job = Job(kind, mode, rows)
        if not rows:
            job.future.set_result([])
            return job.future
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if self._queued_rows and self._queued_rows + len(rows) > self.max_queue:
                raise QueueFull(self.retry_after())
            self._queue.append(job)
            self._queued_rows += len(rows)
            self.metrics.queue_depth.set(self._queued_rows)
            self._cond.notify_all()
        return job.future

    def retry_after(self) -> int:
        """Seconds until the queue is likely to have room (at least 1)."""
        return max(1, math.ceil(self._queued_rows * self._seconds_per_row))

    def close(self, timeout: float | None = None) -> None:
        """Take no new requests, judge those queued, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # -------------------------------------------------------------- the worker
    def _take(self) -> list[Job] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = self._queue[0].arrived + self.max_wait
            while not self._closing and self._queued_rows < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            first = self._queue[0]
            taken: list[Job] = []
            rows = 0
            # The first job's image first, whatever the order of arrival: a batch of one image
            # computes its prefix once (local backends). Every queued request of that image goes
            # in, past max_batch if need be: the judge keeps an image's group whole in one batch
            # (a larger group alone), as a local run of the same rows does. Then the other
            # requests in order of arrival, up to max_batch rows.
            image = image_of(first)
            candidates = [job for job in self._queue if (job.kind, job.mode) == (first.kind, first.mode)]
            for job in candidates:
                if image is not None and image_of(job) == image:
                    taken.append(job)
                    rows += len(job.rows)
            if not taken:
                taken.append(first)
                rows += len(first.rows)
            chosen = {id(job) for job in taken}
            for job in candidates:
                if id(job) in chosen:
                    continue
                if rows + len(job.rows) > self.max_batch:
                    break
                taken.append(job)
                rows += len(job.rows)
            chosen = {id(job) for job in taken}
            self._queue = deque(job for job in self._queue if id(job) not in chosen)
            self._queued_rows -= rows
            self.metrics.queue_depth.set(self._queued_rows)
            return taken

    def _work(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            now = time.monotonic()
            for job in jobs:
                self.metrics.queue_wait.observe(now - job.arrived)
            self._run(jobs)

    def _run(self, jobs: list[Job]) -> None:
        rows: list[Any] = []
        owners: list[tuple[Job, int]] = []
        for job in jobs:
            for k, row in enumerate(job.rows):
                rows.append(row)
                owners.append((job, k))
        self.metrics.batch_size.observe(len(rows))
        self.batches += 1
        first = jobs[0]
        t0 = time.perf_counter()
        failed: Exception | None = None
        try:
            stream = self.judge.score_stream(rows) if first.kind == "score" else self.judge.compare_stream(rows, mode=first.mode)
            for i, record in stream:
                job, k = owners[i]
                job.results[k] = record
                job.left -= 1
                if job.left == 0:
                    job.future.set_result(job.results)
        except Exception as exc:  # noqa: BLE001 - a bug in the judge: the requests say so, the server stays up
            failed = exc
        seconds = time.perf_counter() - t0
        self.metrics.batch_seconds.observe(seconds)
        self._seconds_per_row = seconds / max(1, len(rows))
        unanswered = [job for job in jobs if not job.future.done()]
        if failed is not None and len(jobs) > 1:
            # One client's row may have broken the batch: each request left unanswered is judged
            # again alone, so that the failure costs only the requests whose rows cause it.
            for job in unanswered:
                job.results, job.left = [None] * len(job.rows), len(job.rows)
                self._run([job])
            return
        for job in unanswered:  # the one request that failed alone, or a stream that ended early (never expected)
            job.future.set_exception(failed or RuntimeError(f"the judge returned {len(job.rows) - job.left} of {len(job.rows)} records"))


__all__ = ["Batcher", "Closed", "Job", "QueueFull", "StreamJudge"]
