"""capjudge: turn any vision-language model into a judge of image captions.

>>> from capjudge import Judge, Sample
>>> judge = Judge("fleur", "hf:llava-hf/llava-1.5-13b-hf")        # doctest: +SKIP
>>> judge.score(Sample("cat.jpg", "A cat sleeping on a sofa."))      # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capjudge._version import __version__
from capjudge.core.lazyexport import lazy_attributes

__all__ = [
    "Judge",
    "Sample",
    "ScoreResult",
    "PairResult",
    "load_backend",
    "list_methods",
    "get_method",
    "register_template",
    "list_presets",
    "get_preset",
    "results_frame",
    "agree",
    "Panel",
    "__version__",
]

# Imported lazily so that `import capjudge` stays light (no torch, no openai) until used.
_LAZY = {
    "Judge": "capjudge.judges.judge",
    "Sample": "capjudge.data.types",
    "ScoreResult": "capjudge.data.types",
    "PairResult": "capjudge.data.types",
    "load_backend": "capjudge.backends.registry",
    "list_methods": "capjudge.prompts.registry",
    "get_method": "capjudge.prompts.registry",
    "register_template": "capjudge.prompts.registry",
    "list_presets": "capjudge.backends.presets",
    "get_preset": "capjudge.backends.presets",
    "results_frame": "capjudge.data.frames",
    "agree": "capjudge.metaeval.agree",
    "Panel": "capjudge.judges.panel",
}

if TYPE_CHECKING:
    from capjudge.backends.presets import get_preset, list_presets
    from capjudge.backends.registry import load_backend
    from capjudge.data.frames import results_frame
    from capjudge.data.types import PairResult, Sample, ScoreResult
    from capjudge.judges.judge import Judge
    from capjudge.judges.panel import Panel
    from capjudge.metaeval.agree import agree
    from capjudge.prompts.registry import get_method, list_methods, register_template


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
