"""Concurrent async calls gathered into one judge batch.

Each call hands its items to :meth:`CallBatcher.submit` and awaits its own results. The first
call of a batch arms a timer of ``window`` seconds; every call that arrives before it fires joins
the batch, which is sent early once it holds ``max_items``. Batches run one at a time in one
worker thread (a judge and its model take one batch at a time); calls that arrive while a batch
runs form the next one. Calls may come from several event loops: each result is handed back on
the loop of its call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class CallBatcher(Generic[T, R]):
    """Gathers the items of concurrent calls and runs ``run(items) -> results`` (one result per
    item, in order) on each batch; every call gets the results of its own items back."""

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R]], *, window: float = 0.01, max_items: int = 256) -> None:
        if window < 0:
            raise ValueError(f"batch_window must be >= 0 seconds, got {window!r}")
        self.run = run
        self.window = float(window)
        self.max_items = max(1, int(max_items))
        self.batches: list[int] = []
        """The size of each batch sent (items), for tests and tuning."""
        self._lock = threading.Lock()
        self._pending: list[tuple[list[T], asyncio.Future[list[R]]]] = []
        self._armed = False
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="capjudge-reward")

    async def submit(self, items: Sequence[T]) -> list[R]:
        """The results of ``items``, judged with whatever other calls arrive meanwhile."""
        items = list(items)
        if not items:
            return []
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[R]] = loop.create_future()
        with self._lock:
            self._pending.append((items, future))
            full = sum(len(i) for i, _ in self._pending) >= self.max_items
            arm = not self._armed and not full
            if arm:
                self._armed = True
        if full:
            self._flush()
        elif arm:
            loop.call_later(self.window, self._flush)
        return await future

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending, self._armed = self._pending, [], False
        if batch:
            self._worker.submit(self._run_batch, batch)

    def _run_batch(self, batch: list[tuple[list[T], asyncio.Future[list[R]]]]) -> None:
        flat = [item for items, _ in batch for item in items]
        self.batches.append(len(flat))
        try:
            results = list(self.run(flat))
            if len(results) != len(flat):
                raise RuntimeError(f"the batch gave {len(results)} results for {len(flat)} items")
        except BaseException as exc:  # noqa: BLE001 - handed to every call of the batch
            for _, future in batch:
                _deliver(future, exc)
            return
        start = 0
        for items, future in batch:
            _deliver(future, results[start : start + len(items)])
            start += len(items)

    def close(self) -> None:
        """Stop the worker thread once the batches sent have run."""
        self._worker.shutdown(wait=True)


def _deliver(future: asyncio.Future[Any], outcome: Any) -> None:
    """Set a future's result (or exception) from the worker thread, on the future's own loop."""

    def settle() -> None:
        if future.done():  # the call was cancelled meanwhile
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is waiting any more
        future.get_loop().call_soon_threadsafe(settle)


__all__ = ["CallBatcher"]
