"""A backend that answers from a script: for tests, dry runs of a pipeline, and replaying answers.

``scripted:<text>`` answers every request with ``<text>``; ``scripted:<text>?rules=FILE`` first
tries the rules of a JSON file, a list of ``[pattern, answer]``: the answer of the first pattern
(a Python regular expression) found in the request's text (every turn's text, joined by newlines)
is given, ``<text>`` when none matches; so a dry run of a method of several steps (decompose, then
verify) gets an answer of the right form at each step (examples/scripted_detailed.json). ``<text>``
is free text: a ``?`` starts the options only when every ``key=value`` after it is an option of
this kind (``rules``, ``text``), and the text is percent-decoded (``%3F`` is a ``?``), so any answer
can be written (:func:`capjudge.backends.registry.parse_spec`). In Python, pass a function of the
:class:`Request` that returns the answer text, a :class:`Completion`, or an exception to raise for
that request only.

A rules file is trusted like code (:data:`RULES_TRUST`): its patterns run with no time bound on
request text that holds the captions, and a pattern of nested repetition (``(a+)+$``) backtracks
for minutes on a 30-character caption. Python's ``re`` takes no time limit and cannot be stopped
from another thread (the judges of a panel, a server's workers run in threads); matching in a
child process per request would make this test backend slow and fragile; and no check can tell
every catastrophic pattern apart (refusing the obvious ones would promise what it cannot keep).
So none of these is done: the help and the docs say that a rules file is code.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capjudge.backends.base import Backend, Capabilities, Completion, Request
from capjudge.backends.registry import BackendSpec
from capjudge.core.errors import UsageError

Responder = Callable[[Request], "str | Completion | BaseException"]

RULES_TRUST = (
    "a rules file is trusted like code: its patterns (Python regular expressions) are matched with no time bound against "
    "the request text, captions included, and a pattern of nested repetition such as (a+)+$ can run for minutes on a "
    "short caption; use only rules files you wrote or would run as a script"
)
"""What the help and the docs say of ``?rules=FILE`` (module doc: why there is no time bound)."""


class ScriptedBackend(Backend):
    """Answers each request with ``responder(request)``; records every request in ``calls``."""

    kind = "scripted"

    def __init__(self, responder: Responder | str, *, model: str = "scripted", capabilities: Capabilities | None = None) -> None:
        if isinstance(responder, str):
            text = responder
            self._responder: Responder = lambda _req: text
            self.script_id = f"text:{text}"
        else:
            self._responder = responder
            self.script_id = f"function:{uuid.uuid4().hex}"  # never shared with another script
        self.model = model
        self.spec = f"scripted:{model}"
        self.capabilities = capabilities or Capabilities(batching=True)
        self.calls: list[Request] = []
        self.batches: list[int] = []

    def identity(self) -> dict[str, Any]:
        """The script is part of the identity: a fixed answer by its text, a function by its object
        (so two scripts never share cache entries; a function's entries last one process)."""
        return {"kind": self.kind, "model": self.model, "script": self.script_id}

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


def read_rules(path: str | Path) -> list[tuple[re.Pattern[str], str]]:
    """The ``[pattern, answer]`` rules of a JSON file (a usage error naming the file when it is
    not such a list or a pattern does not compile); trusted like code (:data:`RULES_TRUST`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, list) or not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in data):
            raise ValueError("not a JSON list of [pattern, answer] string pairs")
        return [(re.compile(p), a) for p, a in data]
    except (OSError, UnicodeDecodeError, ValueError, re.error) as exc:
        raise UsageError(f"scripted backend rules file {str(path)!r}: {type(exc).__name__}: {exc}") from None


def rule_responder(rules: list[tuple[re.Pattern[str], str]], default: str) -> Responder:
    """Answer with the first rule whose pattern is found in the request's text, else ``default``."""

    def respond(request: Request) -> str:
        text = "\n".join(m.content for m in request.messages)
        return next((answer for pattern, answer in rules if pattern.search(text)), default)

    return respond


def check_options(spec: BackendSpec, **options: Any) -> None:
    """``rules=FILE`` is the only option (read and checked here)."""
    unknown = set(options) - {"rules", "text"}
    if unknown:
        raise UsageError(f"the scripted backend takes no option {', '.join(sorted(unknown))} (only rules=FILE)")
    if options.get("rules"):
        read_rules(options["rules"])


def from_spec(spec: BackendSpec, **options: Any) -> ScriptedBackend:
    """``scripted:<answer text>``: every request is answered with that text; with
    ``?rules=FILE``, by the first matching rule of the file (see the module's docstring)."""
    text = options.pop("text", spec.target)
    rules_path = options.pop("rules", None)
    if rules_path:
        source = Path(rules_path).read_bytes() if Path(rules_path).is_file() else b""
        backend = ScriptedBackend(rule_responder(read_rules(rules_path), text), **options)
        backend.script_id = f"rules:{hashlib.sha256(source).hexdigest()[:16]}:{text}"
    else:
        backend = ScriptedBackend(text, **options)
    backend.spec = spec.raw
    return backend
