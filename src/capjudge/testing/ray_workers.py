"""Backend factories for testing distributed runs (:mod:`capjudge.distributed`): picklable by
reference, so that a Ray actor can import and call them.

- :class:`CountingLoads`: a backend from a spec, loaded lazily as usual, that appends the process
  id to a file each time its model is loaded (one line per load: one per actor is expected).
- :class:`DieOnce`: a scripted backend whose first request, in whichever process comes first,
  kills that process (``os._exit``): the actor dies once, and Ray must redo its work.
- :class:`DieOn`: a scripted backend that kills its process whenever it is asked about a caption
  containing a marker (the unit holding it fails on every retry).
- :class:`CannotLoad`: a model whose load fails (the run must stop, as in one process).
- :func:`caption_answer`: a deterministic scripted answer that depends on the request.
"""

from __future__ import annotations

import os
from pathlib import Path

from capjudge.backends.base import Backend, Request
from capjudge.backends.lazy import LazyBackend
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend


def caption_answer(request: Request) -> str:
    """A score that depends on the prompt (so that answers cannot be mixed up between samples)."""
    text = request.messages[-1].content if request.messages else ""
    digits = sum(map(ord, str(text))) % 90 + 10
    return f"Score: 0.{digits}"


class CountingLoads:
    """``spec`` loaded lazily; each load of the model appends ``<pid>`` to ``log``."""

    def __init__(self, spec: str, log: str | Path) -> None:
        self.spec = spec
        self.log = str(log)

    def __call__(self) -> Backend:
        probe = load_backend(self.spec, lazy=True)
        if not isinstance(probe, LazyBackend):
            raise TypeError(f"{self.spec} does not load lazily")

        def build() -> Backend:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
            return probe.load()

        return LazyBackend(build, kind=probe.kind, spec=probe.spec, model=probe.model, identity=probe.identity(), capabilities=probe.capabilities)


class DieOnce:
    """A scripted backend answering :func:`caption_answer`; the first request seen by any process
    (``marker`` does not exist yet: created atomically) kills that process."""

    def __init__(self, marker: str | Path) -> None:
        self.marker = str(marker)

    def __call__(self) -> Backend:
        marker = self.marker

        def respond(request: Request) -> str:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return caption_answer(request)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os._exit(17)  # the actor dies in the middle of its unit

        return ScriptedBackend(respond)


class DieOn:
    """A scripted backend answering :func:`caption_answer` that kills its process whenever a
    prompt contains ``poison``."""

    def __init__(self, poison: str) -> None:
        self.poison = poison

    def __call__(self) -> Backend:
        poison = self.poison

        def respond(request: Request) -> str:
            if poison in str(request.messages[-1].content):
                os._exit(17)
            return caption_answer(request)

        return ScriptedBackend(respond)


class CannotLoad:
    """A local-model backend whose model cannot be loaded (the load fails at the first request)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self) -> Backend:
        model = self.model

        def fail() -> Backend:
            raise OSError(f"{model}: weights not found")

        return LazyBackend(fail, kind="hf", spec=f"hf:{model}", model=model, identity={"kind": "hf", "model": model})


def scripted_caption_backend() -> Backend:
    """A scripted backend answering :func:`caption_answer` (the reference run of the tests)."""
    return ScriptedBackend(caption_answer)


__all__ = ["CannotLoad", "CountingLoads", "DieOn", "DieOnce", "caption_answer", "scripted_caption_backend"]
