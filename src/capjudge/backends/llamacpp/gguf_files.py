"""GGUF files as the llama.cpp backend checks and identifies them: the magic number, and a cheap
content digest of a (possibly multi-GB) file."""

from __future__ import annotations

import hashlib
from pathlib import Path

from capjudge.backends.base import BackendError

_DIGEST_BYTES = 1 << 20


def file_digest(path: Path) -> str:
    """A cheap content fingerprint of a (possibly multi-GB) file: size, first and last MiB."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(_DIGEST_BYTES))
        if size > _DIGEST_BYTES:
            f.seek(max(_DIGEST_BYTES, size - _DIGEST_BYTES))
            h.update(f.read(_DIGEST_BYTES))
    return h.hexdigest()[:16]


def check_gguf(path: Path, what: str) -> None:
    """Raise unless ``path`` (the ``what`` file) exists and starts with the GGUF magic."""
    if not path.is_file():
        raise FileNotFoundError(f"llama.cpp {what} file not found: {str(path)!r}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise BackendError(f"llama.cpp {what} file {str(path)!r} is not a GGUF file (starts with {magic!r})")
