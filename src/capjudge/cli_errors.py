"""Where :class:`UsageError` was defined before :mod:`capjudge.errors` (kept for old imports)."""

from __future__ import annotations

from capjudge.errors import UsageError

__all__ = ["UsageError"]
