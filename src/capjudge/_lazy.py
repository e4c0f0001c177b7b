"""Moved to :mod:`capjudge.lazyexport` (kept for the import-linter layer that names this module)."""

from capjudge.lazyexport import lazy_attributes as lazy_attributes
