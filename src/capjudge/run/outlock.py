"""One run at a time on a ``--out`` file.

Two runs appending to and rewriting one results file lose each other's records. :func:`out_lock`
holds an exclusive :func:`fcntl.flock` on a sidecar file ``OUT.lock`` (which holds the holder's
process id, for the message) from before the old records are read until the file is final. A
second run finds the lock taken and stops with :class:`OutLocked` (a usage error: exit 2) naming
the holder's pid. The kernel drops a flock when its process dies, however it dies (``kill -9``
included), so a lock file left by a killed run holds nothing and the next run takes it over; the
pid written in it is only ever read for the message. The lock file is removed when the run ends.

On systems without :mod:`fcntl` (Windows) runs are not locked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from capjudge.run.preflight import PreflightError

_log = logging.getLogger(__name__)
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class OutLocked(PreflightError):
    """Another run holds the lock on this ``--out``."""


def lock_path(out: str | Path) -> Path:
    """The lock file of a results file: ``OUT.lock`` beside it."""
    p = Path(out)
    return p.with_name(p.name + ".lock")


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


@contextlib.contextmanager
def out_lock(out: str | Path, what: str = "--out") -> Iterator[Path]:
    """Hold the lock on ``out`` for the block (yields the lock file's path).

    Raises :class:`OutLocked` at once, without waiting, when another process holds it.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no flock
        yield lock_path(out)
        return
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise PreflightError(f"{what} {str(out)!r}: its lock file {str(path)!r} cannot be opened: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutLocked(
                f"{what} {str(out)!r} is in use by another capjudge run (pid {_holder(path)}; lock file {str(path)!r}): "
                "wait for it to finish, or write to another --out"
            ) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _NO_LOCKS:
                raise
            # A file system without locks (some network mounts): run, unlocked, and say so.
            _log.warning("%s %s cannot be locked (%s): make sure no other run writes to it meanwhile", what, out, exc.strerror or exc)
            fd = -1
            break
        except BaseException:
            os.close(fd)
            raise
        # The holder before us may have removed the file after we opened it: then our lock is on
        # a file nobody else will open, and a third run could lock a new one. Lock the file that
        # is at the path now.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    if fd < 0:
        with contextlib.suppress(OSError):
            os.unlink(path)
        yield path
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        # Removed while still held, so a run that opens it after this locks a new file.
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
