"""Where :class:`UsageError` lived before :mod:`capjudge.core.errors` (the old path works for one release)."""

from __future__ import annotations

from capjudge.core.lazyexport import moved_names

__getattr__ = moved_names(__name__, {"UsageError": "capjudge.core.errors"})
