"""The old path of :mod:`capjudge.backends.usage` (works for one release, with a DeprecationWarning)."""

from capjudge.core.lazyexport import moved_module as _moved_module

__getattr__ = _moved_module(__name__, "capjudge.backends.usage")
