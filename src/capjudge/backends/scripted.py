"""A backend that answers from a script: for tests, dry runs of a pipeline, and replaying answers.

``scripted:<text>`` answers every request with ``<text>``; in Python, pass a function of the
:class:`Request` that returns the answer text, a :class:`Completion`, or an exception to raise for
that request only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from capjudge.backends.base import Backend, Capabilities, Completion, Request
from capjudge.backends.registry import BackendSpec

Responder = Callable[[Request], "str | Completion | BaseException"]


class ScriptedBackend(Backend):
    """Answers each request with ``responder(request)``; records every request in ``calls``."""

    kind = "scripted"

    def __init__(self, responder: Responder | str, *, model: str = "scripted", capabilities: Capabilities | None = None) -> None:
        if isinstance(responder, str):
            text = responder
            self._responder: Responder = lambda _req: text
            self._script_id = f"text:{text}"
        else:
            self._responder = responder
            self._script_id = f"function:{uuid.uuid4().hex}"  # never shared with another script
        self.model = model
        self.spec = f"scripted:{model}"
        self.capabilities = capabilities or Capabilities(batching=True)
        self.calls: list[Request] = []
        self.batches: list[int] = []

    def identity(self) -> dict[str, Any]:
        """The script is part of the identity: a fixed answer by its text, a function by its object
        (so two scripts never share cache entries; a function's entries last one process)."""
        return {"kind": self.kind, "model": self.model, "script": self._script_id}

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        """Answer every request from the script."""
        self.batches.append(len(requests))
        out: list[Completion | BaseException] = []
        for req in requests:
            self.calls.append(req)
            try:
                ans = self._responder(req)
            except Exception as exc:  # noqa: BLE001 - a raising script fails that request only
                ans = exc
            if isinstance(ans, BaseException | Completion):
                out.append(ans)
            else:
                out.append(Completion(text=str(ans), model=self.model))
        return out


def from_spec(spec: BackendSpec, **options: Any) -> ScriptedBackend:
    """``scripted:<answer text>``: every request is answered with that text."""
    backend = ScriptedBackend(options.pop("text", spec.target), **options)
    backend.spec = spec.raw
    return backend
