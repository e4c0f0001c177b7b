"""The judge a method's paper published its numbers with (``Method.paper_judge``).

The official code of the detailed-caption benchmarks hard-wires one judge each; capjudge runs their
methods on any backend, defaults to that judge when no backend is given (``capjudge score``,
``compare``, ``arena``), and says so when another one runs: the paper's numbers came from its judge,
a run on another judge is not directly comparable with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def _key(model: str) -> str:
    """A model name compared loosely: its last path segment, lower case, letters and digits only
    (``Qwen/Qwen2.5-72B-Instruct`` = ``qwen2.5-72b-instruct``; CapMAS's Azure deployment
    ``gpt-4o-20240513`` = ``gpt-4o-2024-05-13``)."""
    return re.sub(r"[^0-9a-z]", "", model.strip().rstrip("/").rsplit("/", 1)[-1].lower())


@dataclass(frozen=True)
class PaperJudge:
    """The judge behind a method's published numbers: ``model`` as the official code names it,
    how it was ``served``, ``where`` the code names it, and ``backend``, the capjudge backend spec
    that runs the same judge (``None``: no hosted one, e.g. an open model the authors ran on their
    own GPUs). ``aliases``: other names of the same model (a dated snapshot of an alias)."""

    model: str
    served: str
    where: str
    backend: str | None
    aliases: tuple[str, ...] = ()

    def matches(self, model: str) -> bool:
        """Whether a run's ``model`` (a record's ``model``) is this judge."""
        return _key(model) in {_key(n) for n in (self.model, *self.aliases)}

    def describe(self) -> str:
        """The judge in words: ``gpt-4-turbo (OpenAI API; eval.py --eval_model default)``."""
        return f"{self.model} ({self.served}; {self.where})"

    def as_row(self) -> dict[str, Any]:
        """What ``capjudge methods --format json`` shows."""
        return {"model": self.model, "served": self.served, "where": self.where, "default_backend": self.backend}

    def others(self, models: Iterable[str]) -> list[str]:
        """The judges among ``models`` (records' ``model``; a panel's ``panel(a, b)`` counts as its
        members) that are not this one, sorted, each once."""
        out: set[str] = set()
        for m in models:
            text = str(m or "")
            members = text[len("panel(") : -1].split(", ") if text.startswith("panel(") and text.endswith(")") else [text]
            out.update(x for x in members if not self.matches(x))
        return sorted(out)

    def note(self, method: str, models: Iterable[str]) -> str | None:
        """The note a run or report of ``method`` prints when its judges (``models``) are not this
        one, else ``None``."""
        others = self.others(models)
        if not others:
            return None
        return (
            f"NOTE: the paper's numbers for {method} came from {self.describe()}; this run's judge is {', '.join(others)}: "
            "its numbers are not directly comparable with the paper's."
        )


# The judges of the official code (docs/methods.md, "The papers' judges").
CAPABILITY_JUDGE = PaperJudge("gpt-4-turbo", "OpenAI API", "CAPability evaluation/eval.py, --eval_model default", "openai:gpt-4-turbo", aliases=("gpt-4-turbo-2024-04-09",))
CAPTIONQA_JUDGE = PaperJudge("Qwen/Qwen2.5-72B-Instruct", "vLLM on the authors' GPUs", "CaptionQA qa.py, EVAL_MODEL", None)
DCSCORE_JUDGE = PaperJudge("gpt-4o-2024-05-13", "OpenAI API", "DeCapBench eval/evaluation_decapbench.py", "openai:gpt-4o-2024-05-13")
CAPARENA_JUDGE = PaperJudge("gpt-4o-2024-08-06", "OpenAI API", "CapArena vlm_as_a_judge.py, mllm_judge_pairs", "openai:gpt-4o-2024-08-06")
CAPMAS_JUDGE = PaperJudge("gpt-4o-2024-05-13", "OpenAI API or Azure OpenAI", "CapMAS conf/gpt4o, util/azureopenai_api_call_vision.py", "openai:gpt-4o-2024-05-13")

__all__ = ["CAPABILITY_JUDGE", "CAPARENA_JUDGE", "CAPMAS_JUDGE", "CAPTIONQA_JUDGE", "DCSCORE_JUDGE", "PaperJudge"]
