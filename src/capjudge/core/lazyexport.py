"""Names a module exports lazily, and names that moved: the one way capjudge writes a module
``__getattr__``.

A package that stays light until a name is used (``import capjudge`` imports neither torch nor
openai) keeps a ``{name: module}`` table::

    __getattr__, __dir__ = lazy_attributes(__name__, {"Judge": "capjudge.judges.judge"})

A name that moved to another module keeps working at its old path for one release, with a
:class:`DeprecationWarning` naming the new path, raised once (the value is then kept on the old
module)::

    __getattr__, __dir__ = lazy_attributes(__name__, table, moved={"OldName": "capjudge.new.place"})
    __getattr__ = moved_names(__name__, {"_old": "capjudge.new.place:new"})  # a module with no lazy table
    __getattr__ = moved_module(__name__, "capjudge.new.place")  # a module that moved whole: its old path

A target is ``"module"`` (the same name there) or ``"module:name"`` (renamed). The new module is
imported only when the old name is used, so a shim adds no import at load time (and none that
import-linter sees).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes", "moved_module", "moved_names"]


def _resolve(target: str, name: str) -> tuple[str, str]:
    """The module and attribute a table entry points at (``"module"`` or ``"module:attr"``)."""
    module, _, attr = target.partition(":")
    return module, attr or name


def _moved(package: str, name: str, target: str) -> Any:
    module, attr = _resolve(target, name)
    warnings.warn(
        f"{package}.{name} has moved: import {attr} from {module} ({package}.{name} goes in a future release)",
        DeprecationWarning,
        stacklevel=3,
    )
    value = getattr(importlib.import_module(module), attr)
    setattr(sys.modules[package], name, value)  # warned once: later look-ups find the value
    return value


def lazy_attributes(
    package: str, table: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: a name of ``table`` is
    imported from its module when first used (and kept on ``package``); a name of ``moved`` is
    imported from its new place with a :class:`DeprecationWarning`. ``__dir__`` lists the names
    of ``table``, not the moved ones."""
    old = dict(moved or {})

    def __getattr__(name: str) -> Any:
        if name in table:
            module, attr = _resolve(table[name], name)
            value = getattr(importlib.import_module(module), attr)
            setattr(sys.modules[package], name, value)  # later look-ups skip this function
            return value
        if name in old:
            return _moved(package, name, old[name])
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of a module some of whose names moved: each is imported
    from its new place (``"module"`` or ``"module:name"``) with a :class:`DeprecationWarning`."""
    return lazy_attributes(module, {}, moved)[0]


def moved_module(module: str, new: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of the old path of a module that moved whole to ``new``: each public name
    of ``new`` is the same object there, with a :class:`DeprecationWarning` naming the new path
    (``new`` is imported only when an old name is used)."""

    def __getattr__(name: str) -> Any:
        if not name.startswith("_") and hasattr(importlib.import_module(new), name):
            return _moved(module, name, new)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
