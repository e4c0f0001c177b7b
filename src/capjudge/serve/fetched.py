"""Image URLs fetched at the door: before a request joins the judge's queue.

A server that allows URL images (``capjudge serve --allow-url-images``) downloads those of a
request here, concurrently (at most :data:`~capjudge.data.images.FETCH_WORKERS` of one request at once,
:data:`POOL_WORKERS` of all requests), each within ``--image-timeout`` and all of a request's
within :data:`~capjudge.data.images.REQUEST_DEADLINE_FACTOR` (2) times it, under the server's
:class:`~capjudge.data.imagesources.ImageSources` (addresses checked, neutral errors). Each URL becomes
an :class:`~capjudge.serve.wire.InlineImage` of its bytes or its error, named by the URL: the
judge's worker never waits on a download, so a slow host delays only the request that named it.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capjudge.data.images import (
    DEFAULT_LIMITS,
    FETCH_WORKERS,
    REQUEST_DEADLINE_FACTOR,
    ImageError,
    ImageLimits,
    download,
    fetch_outcome,
)
from capjudge.data.imagesources import ImageSources
from capjudge.serve.wire import InlineImage

POOL_WORKERS = 32
"""Downloads the server runs at once, all requests together."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=POOL_WORKERS, thread_name_prefix="capjudge-serve-fetch")
        return _pool


def _is_url(image: Any) -> bool:
    # A plain string only: an InlineImage's text starts with "inline-".
    return type(image) is str and image.startswith(("http://", "https://"))


async def fetch_url_images(judge: Any, rows: list[Any]) -> list[Any]:
    """``rows`` (as :func:`~capjudge.serve.wire.row_from_wire` makes them) with each URL image
    fetched into an :class:`InlineImage`, when the judge's ``image_sources`` allows URLs; else
    ``rows`` as they are (the judge refuses their URLs, naming the option)."""
    sources = getattr(judge, "image_sources", None)
    if not isinstance(sources, ImageSources) or not sources.urls:
        return rows
    urls = list(dict.fromkeys(row["image"] for row in rows if isinstance(row, dict) and _is_url(row.get("image"))))
    if not urls:
        return rows
    limits = getattr(judge, "image_limits", DEFAULT_LIMITS)
    got = await fetch_all(urls, limits, sources, deadline=REQUEST_DEADLINE_FACTOR * limits.download_timeout)
    out = []
    for row in rows:
        image = row.get("image") if isinstance(row, dict) else None
        if isinstance(image, str) and _is_url(image):
            body = got[image]
            row = {**row, "image": InlineImage(image, data=body) if isinstance(body, bytes) else InlineImage(image, error=str(body))}
        out.append(row)
    return out


async def fetch_all(urls: list[str], limits: ImageLimits, sources: ImageSources, *, deadline: float) -> dict[str, bytes | ImageError]:
    """Each URL's bytes or error, at most :data:`FETCH_WORKERS` at once, all within ``deadline``
    seconds (one not done by then is its error; its download stops at its own deadline)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(FETCH_WORKERS)

    async def one(url: str) -> bytes:
        async with gate:
            return await loop.run_in_executor(_executor(), download, url, limits, sources)

    tasks = {url: asyncio.ensure_future(one(url)) for url in urls}
    await asyncio.wait(tasks.values(), timeout=deadline)
    return {url: fetch_outcome(url, task, sources, deadline) for url, task in tasks.items()}

__all__ = ["POOL_WORKERS", "fetch_all", "fetch_url_images"]
