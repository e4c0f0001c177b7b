"""No ``--backend``: a method whose paper hard-wires a judge runs on that judge (``score``,
``compare``, ``arena``; ``Method.paper_judge``). Only the standard library at module level."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from capjudge.core.errors import UsageError

SERVER_HINT = "openai-compatible:http://127.0.0.1:8000/v1#{model}"
"""The spec of an open paper judge served by vLLM's OpenAI-compatible server (``vllm serve MODEL``)."""


def backend_given(args: argparse.Namespace) -> bool:
    """Whether the command line names its judge: ``--backend``, ``--panel`` or ``--remote``."""
    return any(getattr(args, flag, None) for flag in ("backend", "panel", "remote"))


def open_judge_specs(model: str) -> list[tuple[str, str]]:
    """The backend specs that run an open paper judge, each with how: ``vllm:MODEL`` where that
    kind is registered (capjudge starts the server), and vLLM's OpenAI-compatible server."""
    from capjudge.backends import kinds

    local = [(f"vllm:{model}", "capjudge starts vLLM")] if "vllm" in kinds.names() else []
    return [*local, (SERVER_HINT.format(model=model), f"a server started with `vllm serve {model}`")]


def use_paper_judge(args: argparse.Namespace, method: Any) -> bool:
    """With no judge on the command line, set ``args.backend`` to the judge behind ``method``'s
    published numbers and say so on stderr; ``False`` (nothing set) when the method has no paper
    judge, or the command line names one. A paper judge with no hosted spec (CaptionQA's
    Qwen2.5-72B on vLLM) is a usage error naming the specs that run it."""
    judge = getattr(method, "paper_judge", None)
    if backend_given(args) or judge is None:
        return False
    if judge.backend is None:
        specs = " or ".join(f"--backend {spec} ({how})" for spec, how in open_judge_specs(judge.model))
        raise UsageError(f"method {method.name!r} needs --backend: its paper's judge, {judge.describe()}, has no hosted default; run it with {specs}, or name another judge")
    args.backend = judge.backend
    if hasattr(args, "backends"):
        args.backends = [judge.backend]
    print(f"capjudge: no --backend given: {method.name} runs on its paper's judge, {judge.describe()}, as --backend {judge.backend}", file=sys.stderr)
    return True


__all__ = ["SERVER_HINT", "backend_given", "open_judge_specs", "use_paper_judge"]
