"""The libraries' own noise, routed through capjudge's logging.

* huggingface_hub gives its logger a stderr handler of its own and lets records propagate too, so
  an application that logs to stderr (the capjudge CLI) printed each hub warning twice. Where the
  root logger has a handler, the hub's own stderr handler is removed: one line per warning, and
  it passes capjudge's secret scrubber.
* transformers' deprecation notices about its own internals (``past_key_values is deprecated``,
  raised inside ``generate`` on every run) say nothing a judge's user can act on: they are logged
  at INFO (``capjudge -v`` shows them) instead of printed as warnings.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from typing import Any, TextIO

log = logging.getLogger("capjudge.backends.hf")

_LIBRARIES = ("transformers", "huggingface_hub")
_lock = threading.Lock()
_MARK = "_capjudge_routes_library_deprecations"


def quiet_libraries() -> None:
    """Route the libraries' duplicate log lines and internal deprecation warnings (idempotent)."""
    _single_hub_handler()
    _route_library_deprecations()


def _single_hub_handler() -> None:
    root = logging.getLogger()
    if not root.handlers:
        return  # nothing else prints the hub's records: keep its handler
    try:  # the hub adds its handler when its logging module is first imported: import it now
        import huggingface_hub.utils.logging  # noqa: F401
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return
    hub = logging.getLogger("huggingface_hub")
    for handler in list(hub.handlers):
        if type(handler) is logging.StreamHandler:  # its default handler (a FileHandler is kept)
            hub.removeHandler(handler)


def _route_library_deprecations() -> None:
    with _lock:
        previous = warnings.showwarning
        if getattr(previous, _MARK, False):
            return  # installed; checked on the hook itself, since warnings.catch_warnings restores the old one

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
            if is_library_deprecation(category, filename):
                log.info("%s: %s (%s:%d)", category.__name__, message, os.path.basename(filename), lineno)
                return
            previous(message, category, filename, lineno, file, line)

        setattr(show, _MARK, True)
        warnings.showwarning = show


def is_library_deprecation(category: type[Warning], filename: Any) -> bool:
    """A ``FutureWarning`` / ``DeprecationWarning`` raised from inside transformers or huggingface_hub."""
    if not issubclass(category, (FutureWarning, DeprecationWarning)):
        return False
    parts = str(filename).replace("\\", "/").split("/")
    return any(name in parts for name in _LIBRARIES)
