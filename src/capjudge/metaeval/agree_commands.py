"""Deprecated: moved to :mod:`capjudge.cli.agree` (this path keeps working for one release).

The command line lives in :mod:`capjudge.cli`; this shim imports it lazily, when a name is read.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_NEW = "capjudge.cli.agree"
_warned: list[bool] = []


def __getattr__(name: str) -> Any:
    module = importlib.import_module(_NEW)
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _warned:
        _warned.append(True)
        warnings.warn(f"capjudge.metaeval.agree_commands is deprecated: import {name} from {_NEW}", DeprecationWarning, stacklevel=2)
    return getattr(module, name)
