"""Names that moved out of a report module, still importable from the old place for one release.

A module sets ``__getattr__ = moved_names(__name__, {name: new module})``: the first use of each
old name warns :class:`DeprecationWarning` with the new path, and the name is imported from there
only then (the report kit never imports the features that own those pages until someone asks).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved_names(module: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``module`` for the names in ``table`` (name -> new module)."""
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{module}.{name} moved to {table[name]}.{name}; import it from there (the old path goes in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(table[name]), name)

    return __getattr__
