"""What ``capjudge calibrate`` and ``capjudge cascade`` share: the ``--save`` check, bad rows on
stderr."""

from __future__ import annotations

import sys


def check_save(path: str | None, kind: str) -> None:
    """A usage error when ``--save`` would replace a file that is not a capjudge file of ``kind``."""
    if not path:
        return
    from capjudge.errors import UsageError
    from capjudge.outguard import replace_refusal

    why = replace_refusal(path, kind)
    if why:
        raise UsageError(f"--save {path}: will not replace it: {why}")


def print_problems(problems: list[str], limit: int = 20) -> None:
    """Each bad row of the inputs on stderr (the first ``limit``, then a count), scrubbed."""
    from capjudge.redact import scrub

    for p in problems[:limit]:
        print(f"capjudge: bad row: {scrub(p)}", file=sys.stderr)
    if len(problems) > limit:
        print(f"capjudge: ... and {len(problems) - limit} more bad rows", file=sys.stderr)
