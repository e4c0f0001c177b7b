"""An HTTP answer's body read as it streams in, up to a cap: what the OpenAI-protocol backend and the
judge server's client both do, so that no server can make capjudge hold more than it allows."""

from __future__ import annotations

from typing import Any


class OverCap(Exception):
    """The body is larger than the cap; ``announced``: the length its header announced (refused
    before reading), else ``None`` (found while reading)."""

    def __init__(self, announced: int | None) -> None:
        super().__init__(announced)
        self.announced = announced


async def read_body_capped(response: Any, cap: int) -> bytes:
    """The (decoded) body of an ``httpx`` streaming ``response``, at most ``cap`` bytes:
    :class:`OverCap` at once when ``Content-Length`` announces more, or as soon as more arrives."""
    declared = str(response.headers.get("content-length", ""))
    if declared.isdigit() and int(declared) > cap:
        raise OverCap(int(declared))
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise OverCap(None)
        chunks.append(chunk)
    return b"".join(chunks)
