"""A :mod:`diskcache` serializer that stores data, never code: values are JSON, and nothing read
back is ever unpickled.

diskcache's default :class:`diskcache.Disk` pickles any value that is not a string, bytes or a
number, and unpickles it when read: an object planted in a cache folder (a shared machine, a copied
cache) runs its code in the process that reads it. :class:`DataDisk` writes every value as UTF-8
JSON bytes and reads back only such bytes; a value stored any other way (pickled: an entry of an
older capjudge, or planted), a key stored pickled, or a value file outside the cache folder is
:class:`UnsafeEntry` (the callers treat it as a miss), and is never loaded. Open stores with
:func:`open_data_cache`.

This module imports :mod:`diskcache`: import it where the store is opened, not at start-up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import MODE_BINARY, MODE_PICKLE, MODE_RAW, MODE_TEXT, UNKNOWN

from capjudge.core.errors import CapjudgeError

_MODES = {MODE_RAW: "raw", MODE_BINARY: "binary", MODE_TEXT: "text", MODE_PICKLE: "pickle"}


class UnsafeEntry(CapjudgeError, ValueError):
    """A stored entry that is not a JSON value written by :class:`DataDisk` (never loaded)."""


class PickledKey:
    """Stands for a key stored pickled when keys are listed (it is never unpickled)."""

    def __repr__(self) -> str:
        return "PickledKey()"


class DataDisk(diskcache.Disk):  # type: ignore[misc]
    """Keys: strings, bytes or numbers, stored as they are. Values: JSON, stored as bytes (in the
    database, or in a value file when large). Reading never unpickles."""

    def put(self, key: Any) -> tuple[Any, bool]:
        """The database form of a key; a key that diskcache would pickle is refused."""
        if type(key) not in (str, bytes, int, float):
            raise TypeError(f"a cache key must be a string, bytes or a number, not {type(key).__name__}")
        return super().put(key)  # type: ignore[no-any-return]

    def get(self, key: Any, raw: bool) -> Any:
        """A stored key as Python; a pickled one (never written by this class) is not unpickled."""
        if not raw:
            return PickledKey()
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, str | None, Any]:
        """Store ``value`` as JSON bytes (the JSON of a value that has none is its ``str``)."""
        if read:
            raise TypeError("file-like values are not stored: values are JSON data")
        data = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")
        return super().store(data, False, key=key)  # type: ignore[no-any-return]

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        """The JSON value of an entry written by :meth:`store`; anything else is :class:`UnsafeEntry`."""
        if read:
            raise UnsafeEntry("entries are not read as files")
        if mode == MODE_RAW:
            data = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
            if data is None:
                raise UnsafeEntry(f"entry holds a bare {type(value).__name__}, not JSON bytes")
        elif mode == MODE_BINARY:
            with open(self._inside(filename), "rb") as fh:
                data = fh.read()
        else:
            raise UnsafeEntry(f"entry is stored as {_MODES.get(mode, f'mode {mode}')}, not as JSON data: it is not read")
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise UnsafeEntry(f"entry is not JSON: {exc}") from None

    def remove(self, file_path: str) -> None:
        """Remove a value file, only within the cache folder (a planted path is left alone)."""
        try:
            self._inside(file_path)
        except UnsafeEntry:
            return
        super().remove(file_path)

    def _inside(self, filename: str | None) -> str:
        """The full path of a value file, which must lie inside the cache folder."""
        if not filename:
            raise UnsafeEntry("entry names no value file")
        root = os.path.realpath(self._directory)
        full = os.path.realpath(os.path.join(root, filename))
        if os.path.commonpath([root, full]) != root or full == root:
            raise UnsafeEntry("entry's value file lies outside the cache folder: it is not read")
        return full


def open_data_cache(directory: str | Path, **settings: Any) -> diskcache.Cache:
    """A :class:`diskcache.Cache` at ``directory`` that stores JSON data with :class:`DataDisk`."""
    return diskcache.Cache(str(directory), disk=DataDisk, **settings)
